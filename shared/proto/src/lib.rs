//! Generated prost/tonic code for Snug Hub's gRPC packages (`snug.<capability>.v1`).
//!
//! The `.proto` files under `proto/` at the repository root are the API boundary: other hubs,
//! in any language, generate their clients from them. This crate only compiles them; it holds no
//! logic, and domain crates never depend on it.

#![allow(missing_docs, unreachable_pub)]

/// `snug.container.v1`: the SNUGENC1 container capability.
pub mod container {
    /// Version 1 of the package; stable.
    pub mod v1 {
        tonic::include_proto!("snug.container.v1");
    }
}

/// `snug.schema.v1`: the user database at storage version 6 (schema, migration, hub namespace).
pub mod schema {
    /// Version 1 of the package; stable.
    pub mod v1 {
        tonic::include_proto!("snug.schema.v1");
    }
}

/// `snug.materialize.v1`: per-app native tables (materialize, persist, DDL, export, sandboxed SQL).
pub mod materialize {
    /// Version 1 of the package; stable.
    pub mod v1 {
        tonic::include_proto!("snug.materialize.v1");
    }
}

/// `snug.sync.v1`: the hub as a user's sync origin (revisions with compare-and-swap, §9.3).
pub mod sync {
    /// Version 1 of the package; stable.
    pub mod v1 {
        tonic::include_proto!("snug.sync.v1");
    }
}

/// The encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/snug_descriptor.bin"));

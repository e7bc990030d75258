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

/// The encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/snug_descriptor.bin"));

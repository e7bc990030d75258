//! Generated prost/tonic code for Snug Hub's gRPC packages (`snug.<capability>.v1`).
//!
//! The `.proto` files under `proto/` at the repository root are the API boundary: other hubs,
//! in any language, generate their clients from them. This crate compiles them and adds one
//! trait, [`Chunked`], over the header-then-chunks streaming messages, and the [`codec`] the
//! generated code uses (prost's, with typed decode errors); it holds no other logic, and domain
//! crates never depend on it.

#![allow(missing_docs, unreachable_pub)]

mod chunked;
pub mod codec;

pub use chunked::{Chunked, Part};

/// `snug.container.v1`: the SNUGENC1 container capability.
pub mod container {
    /// Version 1 of the package; stable.
    pub mod v1 {
        tonic::include_proto!("snug.container.v1");

        /// The HTTP/2 path of `ContainerService.Unlock`, for the framed server and client.
        pub const UNLOCK_PATH: &str = "/snug.container.v1.ContainerService/Unlock";
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

        /// The HTTP/2 path of `SyncService.GetImage`, for the framed server and client.
        pub const GET_IMAGE_PATH: &str = "/snug.sync.v1.SyncService/GetImage";
    }
}

/// `snug.admin.v1`: the hub's administration API (users, tokens, quotas, usage, erasure).
pub mod admin {
    /// Version 1 of the package; stable.
    pub mod v1 {
        tonic::include_proto!("snug.admin.v1");
    }
}

/// The encoded `FileDescriptorSet` of every package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/snug_descriptor.bin"));

#[cfg(test)]
mod tests {
    use prost::Message as _;

    /// The path constants name methods that exist, spelled as gRPC routes them.
    #[test]
    fn method_paths_are_in_the_descriptor_set() {
        let set = prost_types::FileDescriptorSet::decode(super::FILE_DESCRIPTOR_SET).expect("set");
        let paths: Vec<String> = set
            .file
            .iter()
            .flat_map(|f| {
                f.service.iter().flat_map(move |s| {
                    s.method
                        .iter()
                        .map(move |m| format!("/{}.{}/{}", f.package(), s.name(), m.name()))
                })
            })
            .collect();
        for path in [
            super::container::v1::UNLOCK_PATH,
            super::sync::v1::GET_IMAGE_PATH,
        ] {
            assert!(paths.iter().any(|p| p == path), "{path} is not a method");
        }
    }
}

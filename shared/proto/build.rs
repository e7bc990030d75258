//! Compiles `proto/snug/**/*.proto` with the pure-Rust protox, so a machine without protoc builds.

use prost::Message as _;
use std::{env, path::PathBuf};

/// Every package this crate exposes, as paths under `proto/`.
const PROTOS: &[&str] = &[
    "snug/container/v1/container.proto",
    "snug/schema/v1/schema.proto",
    "snug/materialize/v1/materialize.proto",
    "snug/sync/v1/sync.proto",
    "snug/admin/v1/admin.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| root.join(p)).collect();
    let fds = protox::compile(&files, [&root])?;

    // tonic-reflection needs the encoded descriptor set; protox has no `-o`, so write it here.
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("snug_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Chunk payloads are `Bytes`, so a decoded 1 MiB chunk is a view into the frame, not a copy.
        .bytes(".")
        // Typed decode errors (src/codec.rs).
        .codec_path("crate::codec::Codec")
        .type_attribute(".", "#[allow(clippy::all)]")
        .compile_fds(fds)?;

    println!("cargo:rerun-if-changed={}", root.display());
    for p in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    Ok(())
}

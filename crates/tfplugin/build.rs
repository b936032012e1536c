//! Generates the gRPC code from `proto/` with pure-Rust tools: `protox` parses
//! the definitions (no system `protoc`), `tonic-prost-build` writes the code.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not baked in when it is compiled: a script binary built in
    // another checkout sharing this target directory must not read that checkout's protos.
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        "tfplugin6.proto",
        "grpc_controller.proto",
        "grpc_stdio.proto",
        "grpc_health.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={}", proto_dir.join(file).display());
    }
    let descriptors = protox::compile(files, [&proto_dir])?;
    tonic_prost_build::configure()
        // Clients are only used by this crate's tests and benchmarks.
        .build_client(true)
        .build_server(true)
        // Every RPC we do not implement answers `Unimplemented` instead of panicking.
        .generate_default_stubs(true)
        .compile_fds(descriptors)?;
    Ok(())
}

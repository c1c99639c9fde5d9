//! Compiles `proto/*.proto` with protox (pure Rust, no `protoc` needed) and generates the
//! tonic client and server.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for file in [
        "proto/collector.proto",
        "proto/pingmesh.proto",
        "proto/tuning.proto",
        "proto/bfruntime.proto",
        "proto/google/rpc/status.proto",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(
        [
            "proto/collector.proto",
            "proto/pingmesh.proto",
            "proto/tuning.proto",
            "proto/bfruntime.proto",
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}

//! Compiles `proto/*.proto` with protox (pure Rust, no `protoc` needed) and generates the
//! tonic client and server.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/collector.proto");
    let descriptors = protox::compile(["proto/collector.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}

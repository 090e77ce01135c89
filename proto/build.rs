//! Generates the gRPC code from `proto/shale.proto` with a vendored `protoc`, so a
//! fresh machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Batch payloads stay `bytes::Bytes` from socket to disk to socket.
    config.bytes(["."]);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["proto/shale.proto"],
        &["proto"],
    )?;
    println!("cargo:rerun-if-changed=proto/shale.proto");
    Ok(())
}

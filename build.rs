//! Compiles `proto/skade/v1/*.proto` with a vendored `protoc`, so the build needs only cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment here.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .compile_protos(&["proto/skade/v1/skade.proto"], &["proto"])?;
    Ok(())
}

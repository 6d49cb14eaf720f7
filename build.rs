//! Compiles `proto/skade/v1/*.proto` with a vendored `protoc`, so the build needs only
//! cargo; and hands the code the versions of the crates it links, as `Cargo.lock` pins
//! them (`SKADE_DEP_VERSION_<CRATE>`, e.g. `SKADE_DEP_VERSION_ARROW`), and of the
//! compiler (`SKADE_RUSTC_VERSION`): `GetSqlInfo` and `skade_build_info` report what was
//! built, never a literal that drifts from it.

use std::path::Path;

/// The crates whose linked version the server reports.
const REPORTED: [&str; 4] = ["arrow", "arrow-flight", "iceberg", "parquet"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment here.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .compile_protos(&["proto/skade/v1/skade.proto"], &["proto"])?;
    report_versions()
}

/// Emits `SKADE_DEP_VERSION_*` from `Cargo.lock` and `SKADE_RUSTC_VERSION` from
/// `$RUSTC --version`.
fn report_versions() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let lock_path = Path::new(&manifest_dir).join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock_path.display());
    let lock = std::fs::read_to_string(&lock_path)?;
    for name in REPORTED {
        let version = locked_version(&lock, name)
            .ok_or_else(|| format!("Cargo.lock has no package {name}"))?;
        let var = name.to_uppercase().replace('-', "_");
        println!("cargo:rustc-env=SKADE_DEP_VERSION_{var}={version}");
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SKADE_RUSTC_VERSION={version}");
    Ok(())
}

/// The version `Cargo.lock` pins for the package `name` (the highest, should there be
/// several).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut versions: Vec<Vec<u64>> = Vec::new();
    let mut raw: Vec<String> = Vec::new();
    for block in lock.split("[[package]]") {
        let mut lines = block.lines().map(str::trim);
        if !lines.any(|l| l == wanted) {
            continue;
        }
        if let Some(v) = block
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix("version = \""))
            .and_then(|v| v.strip_suffix('"'))
        {
            versions.push(v.split('.').filter_map(|p| p.parse().ok()).collect());
            raw.push(v.to_string());
        }
    }
    let best = (0..versions.len()).max_by(|&a, &b| versions[a].cmp(&versions[b]))?;
    Some(raw[best].clone())
}

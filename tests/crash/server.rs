//! Server process control: starting `skade serve` on a data dir (SIGKILLed when dropped),
//! waiting for it to be healthy, moto's S3 server for `SKADE_CRASH_S3=1`, opening a stopped
//! server's catalog, and the environment knobs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skade::catalog::RedbCatalog;

use crate::common;

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A server process, SIGKILLed when dropped so a failing test leaves none behind.
pub(crate) struct Server(pub(crate) Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `skade serve` on `dir` (its warehouse on `s3` when given) with small,
/// frequent commits and busy table maintenance, with `env` added to its environment;
/// its log goes to `log`.
pub(crate) fn spawn_server(
    dir: &Path,
    log: &Path,
    s3: Option<&S3Store>,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Server, SocketAddr, SocketAddr) {
    let flight: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .expect("server log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_skade"));
    command.args(["serve", "--data-dir"]).arg(dir);
    if let Some(s3) = s3 {
        command.args(["--warehouse", S3_WAREHOUSE, "--s3-endpoint", &s3.endpoint]);
        command.args([
            "--s3-path-style-access",
            "true",
            "--s3-vend-credentials",
            "true",
        ]);
    }
    let child = command
        .args(["--flight-addr", &flight.to_string()])
        .args(["--metrics-addr", &metrics.to_string()])
        .args(["--target-file-size", "1", "--files-per-commit", "2"])
        .args(["--commit-interval", "200ms", "--transaction-timeout", "30s"])
        // Maintenance as busy as it gets, so kills land in expiry, merges, compaction
        // and deletion: a pass every 200 ms, at most 8 snapshots a table, files removed
        // 3 s after they became unreferenced (and merges from 4 manifests, compaction
        // of small files: the table properties `precreate_tables` sets).
        .args(["--maintenance-interval", "200ms", "--max-snapshots", "8"])
        .args(["--cleanup-grace", "3s"])
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn skade");
    (Server(child), flight, metrics)
}

pub(crate) async fn wait_healthy(Server(child): &mut Server, metrics: SocketAddr) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("child status") {
            panic!("skade exited at start: {status} (see the server log)");
        }
        if tokio::net::TcpStream::connect(metrics).await.is_ok()
            && common::http_get(metrics, "/healthz").await.0 == 200
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "skade never became healthy"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// With `SKADE_CRASH_S3=1` the warehouse is on S3: moto's server (from `python()`'s
/// venv, `moto[server]`) on a free port, bucket `crash`. AWS credentials come from the
/// environment (moto takes any): `tests/run.sh` sets them.
pub(crate) struct S3Store {
    pub(crate) _moto: Server,
    /// `http://127.0.0.1:<port>`.
    pub(crate) endpoint: String,
}

pub(crate) const S3_WAREHOUSE: &str = "s3://crash/warehouse";

impl S3Store {
    /// The store as skade's object storage, to list what a killed server left.
    pub(crate) fn storage(&self) -> skade::storage::object_store::ObjectStorage {
        let props = HashMap::from([
            ("s3.endpoint".to_string(), self.endpoint.clone()),
            ("s3.region".to_string(), "us-east-1".to_string()),
            ("s3.path-style-access".to_string(), "true".to_string()),
        ]);
        skade::storage::object_store::ObjectStorage::new(&props, None)
    }
}

pub(crate) fn start_s3() -> Option<S3Store> {
    if std::env::var("SKADE_CRASH_S3").ok().as_deref() != Some("1") {
        return None;
    }
    let python = python().expect("SKADE_CRASH_S3=1 needs SKADE_PYTHON or .venv with moto[server]");
    let port = free_port();
    let moto = Server(
        Command::new(python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server"),
    );
    let addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
            use std::io::{Read, Write};
            write!(
                s,
                "PUT /crash HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
            )
            .expect("create bucket");
            let mut answer = String::new();
            s.read_to_string(&mut answer).expect("bucket answer");
            assert!(
                answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
                "{answer}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "moto_server never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(S3Store {
        _moto: moto,
        endpoint: format!("http://{addr}"),
    })
}

/// The catalog of a stopped server's data dir, with its warehouse where the server had it.
pub(crate) fn open_catalog(dir: &Path, s3: Option<&S3Store>) -> RedbCatalog {
    let catalog = dir.join("catalog.redb");
    match s3 {
        None => RedbCatalog::open(&catalog, &dir.join("warehouse")),
        Some(s3) => RedbCatalog::open_in(
            &catalog,
            skade::storage::Warehouse::parse(
                S3_WAREHOUSE,
                skade::storage::S3Options {
                    endpoint: Some(s3.endpoint.clone()),
                    region: Some("us-east-1".into()),
                    path_style_access: true,
                    vend_credentials: false,
                },
            )
            .expect("warehouse"),
        ),
    }
    .expect("open the catalog of the killed server")
}

pub(crate) fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SKADE_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    venv.exists().then_some(venv)
}

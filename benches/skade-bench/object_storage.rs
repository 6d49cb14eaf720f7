//! `object_storage`: the warehouse on S3 (moto's server behind a relay that adds a fixed
//! delay per request, standing in for a real object store) vs a local warehouse, in
//! the same run.
//!
//! Figures: ingest rows/s S3 / local (the overlapped committer on both); on S3 the
//! overlapped committer vs the serial one (issue #17's claim: ≥ 1.3, not met on local
//! disk); one-stream commit latency p50 on S3 beside the relay's requests per commit
//! times its delay (the round-trip floor), and on local disk; a compaction pass over the
//! small files written above on S3 beside its relay requests times the delay, one after
//! another (above 1 when compaction reads its inputs in turn).
//!
//! Needs Python with `moto[server]` (`SKADE_S3_PYTHON`, default `.venv/bin/python`, the
//! test venv `tests/run.sh` makes) and `tests/interop/s3_relay.py`. Knobs:
//! `SKADE_S3_DELAY_MS` (20), `SKADE_S3_FILES` (40), `SKADE_S3_ROWS` (20000),
//! `SKADE_S3_FPC` (2), `SKADE_S3_COMMITS` (40, tiny commits for the latency).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use skade::config::MaintenanceConfig;
use skade::maintenance::Maintainer;
use skade::metrics::Metrics;
use skade::storage::{S3Options, Warehouse};

use crate::common::*;

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends one HTTP/1.0 request to `addr` and returns the status line and body.
fn http(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
    )
    .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out.lines().next().unwrap_or_default().to_string();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// moto's S3 server on a free port with bucket `bench`; its `host:port`.
fn start_moto(python: &str) -> (Killed, String) {
    let port = free_port();
    let child = Command::new(python)
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
        .expect("start moto_server (is moto[server] installed in SKADE_S3_PYTHON?)");
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (status, _) = http(&addr, "PUT", "/bench");
    assert!(status.contains(" 200"), "create bucket: {status}");
    (Killed(child), addr)
}

/// The delay relay in front of `upstream`; its `host:port`.
fn start_relay(python: &str, upstream: &str, delay_ms: usize) -> (Killed, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/s3_relay.py");
    let mut child = Command::new(python)
        .args([
            script,
            "--upstream",
            &format!("http://{upstream}"),
            "--delay-ms",
            &delay_ms.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start s3_relay.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("relay port");
    let port = line
        .trim()
        .strip_prefix("listening ")
        .expect("relay banner");
    (Killed(child), format!("127.0.0.1:{port}"))
}

fn relay_requests(relay: &str) -> f64 {
    http(relay, "GET", "/__relay/requests")
        .1
        .trim()
        .parse()
        .expect("relay count")
}

pub(crate) async fn object_storage(runs: usize) {
    let python = std::env::var("SKADE_S3_PYTHON")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python").to_string());
    let delay_ms = env_usize("SKADE_S3_DELAY_MS", 20);
    let files = env_usize("SKADE_S3_FILES", 40);
    let rows = env_usize("SKADE_S3_ROWS", 20000);
    let fpc = env_usize("SKADE_S3_FPC", 2);
    let tiny = env_usize("SKADE_S3_COMMITS", 40);
    let (_moto, moto) = start_moto(&python);
    let (_relay, relay) = start_relay(&python, &moto, delay_ms);

    let dir = tempfile::tempdir().expect("temp dir");
    let local = Arc::new(
        RedbCatalog::open(&dir.path().join("local.redb"), &dir.path().join("wh"))
            .expect("local catalog"),
    );
    let options = S3Options {
        endpoint: Some(format!("http://{relay}")),
        region: Some("us-east-1".into()),
        path_style_access: true,
        vend_credentials: false,
    };
    let s3 = Arc::new(
        RedbCatalog::open_in(
            &dir.path().join("s3.redb"),
            Warehouse::parse("s3://bench/wh", options).expect("warehouse"),
        )
        .expect("s3 catalog"),
    );
    let props = WriteProps { channel_depth: 4 };

    // rates[(warehouse, lane)] = rows/s per run
    let mut rates: std::collections::BTreeMap<(&str, &str), Vec<f64>> = Default::default();
    for run in 0..runs {
        for (place, catalog) in [("local", &local), ("s3", &s3)] {
            for lane in ["serial", "overlap"] {
                let table = new_table(catalog, &format!("{lane}_{run}")).await;
                let groups = file_groups(&table, files, rows);
                let started = Instant::now();
                let (_, stats) = if lane == "serial" {
                    write::ingest_pipelined(catalog, &table, groups, fpc, &props).await
                } else {
                    write::ingest_pipelined_overlap(catalog, &table, groups, fpc, &props).await
                }
                .expect("ingest");
                let rate = stats.rows as f64 / started.elapsed().as_secs_f64();
                rates.entry((place, lane)).or_default().push(rate);
            }
        }
    }

    // One stream of tiny commits: latency per commit, and relay requests per commit.
    let mut latency: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut requests_per_commit = 0.0;
    for (place, catalog) in [("local", &local), ("s3", &s3)] {
        let mut table = new_table(catalog, "tiny").await;
        let arrow = write::table_arrow_schema(&table).expect("schema");
        let before = relay_requests(&relay);
        for i in 0..tiny {
            let b = batch((i * 10) as i64, 10);
            let groups = vec![vec![
                write::conform_batch("bench", &b, &arrow).expect("conform"),
            ]];
            let started = Instant::now();
            let (next, _) = write::ingest_pipelined(catalog, &table, groups, 1, &props)
                .await
                .expect("tiny commit");
            latency
                .entry(place)
                .or_default()
                .push(started.elapsed().as_secs_f64() * 1e3);
            table = next;
        }
        if place == "s3" {
            requests_per_commit = (relay_requests(&relay) - before) / tiny as f64;
        }
    }

    // Compaction of the small files written above: the pass's wall time beside the
    // relay's delay for its requests one after another (inputs read in turn: above 1).
    let mut compaction: std::collections::BTreeMap<&str, (f64, usize)> = Default::default();
    let mut compaction_requests = 0.0;
    for (place, catalog) in [("local", &local), ("s3", &s3)] {
        // A pass without compaction first: expiry and manifest merging are then done,
        // and the next pass's work is the compaction.
        maintainer(catalog, false).run_pass().await.expect("pass");
        let compactor = maintainer(catalog, true);
        let before = relay_requests(&relay);
        let started = Instant::now();
        let report = compactor.run_pass().await.expect("compaction pass");
        compaction.insert(
            place,
            (started.elapsed().as_secs_f64(), report.files_compacted),
        );
        if place == "s3" {
            compaction_requests = relay_requests(&relay) - before;
        }
    }

    println!(
        "object_storage: moto behind a relay adding {delay_ms} ms per request; {files} files x {rows} rows, files_per_commit={fpc}, {runs} runs; {tiny} tiny commits"
    );
    println!("| warehouse | lane | rows/s median | min | max |");
    println!("| --- | --- | --- | --- | --- |");
    for ((place, lane), xs) in &rates {
        let (m, lo, hi) = summary(xs);
        println!("| {place} | {lane} | {m:.0} | {lo:.0} | {hi:.0} |");
    }
    let med = |k: (&str, &str)| summary(&rates[&k]).0;
    let (s3_p50, local_p50) = (
        percentile(&latency["s3"], 0.5),
        percentile(&latency["local"], 0.5),
    );
    println!(
        "object_storage: ingest S3/local = {:.2} (overlap lane: S3 {:.0} rows/s, local {:.0} rows/s)",
        med(("s3", "overlap")) / med(("local", "overlap")),
        med(("s3", "overlap")),
        med(("local", "overlap"))
    );
    println!(
        "object_storage: committer_overlap on S3 overlap/serial = {:.2} (target >= 1.3; local: {:.2})",
        med(("s3", "overlap")) / med(("s3", "serial")),
        med(("local", "overlap")) / med(("local", "serial"))
    );
    println!(
        "object_storage: one-stream commit p50 = {s3_p50:.1} ms on S3 ({requests_per_commit:.1} relay requests per commit x {delay_ms} ms = {:.0} ms of delay), local {local_p50:.1} ms",
        requests_per_commit * delay_ms as f64
    );
    let ((s3_secs, inputs), (local_secs, _)) = (compaction["s3"], compaction["local"]);
    let serial = compaction_requests * delay_ms as f64 / 1e3;
    println!(
        "object_storage: compaction pass on S3 ({inputs} small files) = {:.2} x its relay requests' delay one after another ({s3_secs:.2} s vs {compaction_requests:.0} requests x {delay_ms} ms = {serial:.2} s; local {local_secs:.2} s)",
        s3_secs / serial
    );
}

/// A maintainer of `catalog` at the server's defaults, compacting when `compaction`.
fn maintainer(catalog: &Arc<RedbCatalog>, compaction: bool) -> Maintainer {
    Maintainer::new(
        catalog.clone(),
        MaintenanceConfig {
            enabled: true,
            maintenance_interval: Duration::from_secs(1),
            max_snapshots: 100,
            cleanup_grace: Duration::from_secs(600),
            metadata_cleanup_grace: Duration::from_secs(10),
            cleanup_max_waiting: u64::MAX,
            compaction,
        },
        Metrics::new(),
    )
}

//! `memory`: the server's peak RSS during a multi-GiB streaming put vs the memory budget.
//!
//! The server is the real `skade serve` binary (`target/release/skade`, which `cargo
//! bench` builds) in a child process, so its `VmHWM` (Linux's peak resident set,
//! `/proc/<pid>/status`) is the server's alone; the client is this process. Each case is
//! a fresh server on a fresh data dir at its defaults but `--memory-budget`: budgets 256
//! MiB, 512 MiB and 2 GiB, each into an unpartitioned table and into one partitioned by
//! `bucket(32, id)`, where every batch fans out to all 32 partitions. Each put streams
//! `SKADE_MEM_GIB` (3) GiB of the synthetic table in 65,536-row batches.
//!
//! Printed per case: the peak, peak/budget, the peak against the bound the README states
//! (`skade::memory::rss_bound`), and the resident set 1 s and 5 s after the put's last
//! ack (memory returned to the operating system).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// `key` (`VmHWM`, `VmRSS`) of process `pid` in bytes, 0 when it cannot be read.
pub(crate) fn proc_status_bytes(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// A free loopback port (bound and released; the child binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A `skade serve` child on `dir` with `--memory-budget <budget_mib>MiB`.
struct ServerProcess {
    child: Child,
    flight: SocketAddr,
}

impl ServerProcess {
    async fn start(dir: &std::path::Path, budget_mib: usize) -> ServerProcess {
        let flight = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = std::fs::File::create(dir.join("skade.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_skade"))
            .arg("serve")
            .arg("--data-dir")
            .arg(dir)
            .arg("--flight-addr")
            .arg(flight.to_string())
            .arg("--metrics-addr")
            .arg(metrics.to_string())
            .arg("--memory-budget")
            .arg(format!("{budget_mib}MiB"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn skade serve");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(flight).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "skade serve did not listen on {flight} within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ServerProcess { child, flight }
    }

    fn status(&self, key: &str) -> u64 {
        proc_status_bytes(self.child.id(), key)
    }

    /// SIGTERM, then waits for the exit.
    fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// Creates `bench.memory` partitioned by `bucket(32, id)` in the data dir `dir` (through
/// an in-process server that is stopped again before the child opens the dir).
async fn create_bucketed_table(dir: &std::path::Path, buckets: u32) {
    use iceberg::Catalog;
    use iceberg::spec::{Transform, UnboundPartitionSpec};
    let running = skade::start(skade::Config::for_tests(dir))
        .await
        .expect("server");
    let catalog = running.service.catalog.clone();
    let ns = NamespaceIdent::new("bench".into());
    catalog
        .create_namespace(&ns, Default::default())
        .await
        .expect("namespace");
    let schema = write::iceberg_schema_for("bench", &schema()).expect("schema");
    let id = schema.field_by_name("id").expect("id").id;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(id, "id_bucket", Transform::Bucket(buckets))
        .expect("spec")
        .build();
    let creation = iceberg::TableCreation::builder()
        .name("memory".into())
        .schema(schema)
        .partition_spec(spec)
        .build();
    catalog.create_table(&ns, creation).await.expect("table");
    drop(catalog);
    running.shutdown_and_wait().await.expect("shutdown");
}

/// One case's figures, in bytes.
struct Case {
    budget_mib: usize,
    partitions: u32,
    baseline: u64,
    peak: u64,
    after_1s: u64,
    after_5s: u64,
    secs: f64,
    sent: u64,
    /// Arrow bytes of one batch (one Flight message).
    batch_bytes: u64,
}

async fn run_case(budget_mib: usize, partitions: u32, gib: usize) -> Case {
    let dir = tempfile::tempdir().expect("temp dir");
    if partitions > 1 {
        create_bucketed_table(dir.path(), partitions).await;
    }
    let server = ServerProcess::start(dir.path(), budget_mib).await;
    let mut client = connect(server.flight).await;
    let rows_per_batch = 65_536;
    let batch_bytes = arrow_bytes(&[batch(0, rows_per_batch)]);
    let batches = (gib << 30).div_ceil(batch_bytes);
    let baseline = server.status("VmRSS");
    let started = Instant::now();
    let stream = futures::stream::iter(0..batches)
        .map(move |i| Ok(batch((i * rows_per_batch) as i64, rows_per_batch)));
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            "bench".into(),
            "memory".into(),
        ])))
        .build(stream);
    let acks: Vec<_> = client
        .do_put(data)
        .await
        .expect("put")
        .try_collect()
        .await
        .expect("acks");
    let secs = started.elapsed().as_secs_f64();
    assert!(!acks.is_empty(), "the put was not acked");
    let peak = server.status("VmHWM");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_1s = server.status("VmRSS");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after_5s = server.status("VmRSS");
    drop(client);
    server.stop();
    Case {
        budget_mib,
        partitions,
        baseline,
        peak,
        after_1s,
        after_5s,
        secs,
        sent: (batches * batch_bytes) as u64,
        batch_bytes: batch_bytes as u64,
    }
}

pub(crate) async fn memory() {
    let gib = env_usize("SKADE_MEM_GIB", 3).max(1);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut cases = Vec::new();
    for budget_mib in [256, 512, 2048] {
        for partitions in [1, 32] {
            cases.push(run_case(budget_mib, partitions, gib).await);
        }
    }
    println!(
        "memory: the server process alone (skade serve, a child), {gib} GiB streamed per case, 65,536-row batches"
    );
    println!(
        "| budget MiB | table | peak RSS MiB | peak/budget | bound MiB | peak/bound | MiB/s | RSS at start | 1 s after | 5 s after |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut all_within = true;
    for c in &cases {
        let budget = (c.budget_mib as u64) << 20;
        let bound = skade::memory::rss_bound(budget, 1, c.batch_bytes);
        all_within &= c.peak <= bound;
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
            c.budget_mib,
            if c.partitions > 1 {
                format!("bucket({}, id)", c.partitions)
            } else {
                "unpartitioned".to_string()
            },
            mib(c.peak),
            c.peak as f64 / budget as f64,
            mib(bound),
            c.peak as f64 / bound as f64,
            mib(c.sent) / c.secs,
            mib(c.baseline),
            mib(c.after_1s),
            mib(c.after_5s),
        );
    }
    for c in &cases {
        println!(
            "memory: budget {} MiB, {}: peak_rss/budget = {:.2} (server peak RSS {:.0} MiB)",
            c.budget_mib,
            if c.partitions > 1 {
                "32 partitions"
            } else {
                "unpartitioned"
            },
            c.peak as f64 / ((c.budget_mib as u64) << 20) as f64,
            mib(c.peak),
        );
    }
    println!(
        "memory: peak RSS <= budget + overhead (README) in every case: {}",
        if all_within { "met" } else { "NOT met" }
    );
}

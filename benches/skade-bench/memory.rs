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
//!
//! `memory_purge` (the second arm here): the same child server under the soak's put mix
//! with the forced allocator purge every second and off (`--memory-purge-interval`),
//! back to back, to price the purge.
//!
//! `live_files` (the third): the same child server's live heap per live data file of one
//! table, at N and at 4 N files, and the ratio of the two (1 when the heap follows the
//! files, 4 when it follows their square).

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

/// A `skade serve` child on `dir`, at its defaults but for `args`.
struct ServerProcess {
    child: Child,
    flight: SocketAddr,
    metrics: SocketAddr,
}

impl ServerProcess {
    async fn start(dir: &std::path::Path, args: &[String]) -> ServerProcess {
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
            .args(args)
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
        ServerProcess {
            child,
            flight,
            metrics,
        }
    }

    /// The sum of the samples of metric `name` on the server's `/metrics` (all label
    /// sets).
    async fn metric(&self, name: &str) -> f64 {
        crate::multi::Scrape::take(self.metrics)
            .await
            .value(name, &[])
    }

    fn status(&self, key: &str) -> u64 {
        proc_status_bytes(self.child.id(), key)
    }

    /// CPU time the server process has used so far (user + system, all threads), in
    /// seconds (`/proc/<pid>/stat` fields 14 and 15, in clock ticks); 0 when unreadable.
    fn cpu_seconds(&self) -> f64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())) else {
            return 0.0;
        };
        // The fields after the command name, which is in parentheses and may hold spaces:
        // field 3 (state) is the first, so utime (14) and stime (15) are the 12th and 13th.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // SAFETY: sysconf reads one constant.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        (ticks(11) + ticks(12)) as f64 / hz
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
    let server = ServerProcess::start(
        dir.path(),
        &["--memory-budget".into(), format!("{budget_mib}MiB")],
    )
    .await;
    let mut client = connect(server.flight).await;
    let rows_per_batch = 65_536;
    let batch_bytes = arrow_bytes(&[batch(0, rows_per_batch)]);
    let batches = (gib << 30).div_ceil(batch_bytes);
    let baseline = server.status("VmRSS");
    let started = Instant::now();
    let stream = futures::stream::iter(0..batches)
        .map(move |i| Ok(batch((i * rows_per_batch) as i64, rows_per_batch)));
    let acks = put_stream(&mut client, "memory", schema(), stream).await;
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

/// One case of [`memory_purge`]: what the server did under the mixed load.
struct PurgeCase {
    purge: bool,
    /// Rows per second of the large stream, from its first batch to its last ack.
    large_rows_per_s: f64,
    /// Seconds of every tiny put but each stream's first (which creates its table).
    tiny: Vec<f64>,
    /// `VmRSS` every 500 ms during the load, bytes.
    rss: Vec<u64>,
    /// `VmHWM` at the end, bytes.
    peak: u64,
    /// Server CPU seconds during the load.
    cpu: f64,
    /// Arrow bytes the large stream sent.
    large_bytes: u64,
}

/// Tiny-put streams beside the large one, as in the soak (`benches/soak/`).
const TINY_STREAMS: usize = 8;

/// One server at its defaults but `--memory-purge-interval` (`1s` or `0s`) under the
/// soak's mix for `secs`: one streaming put of 65,536-row batches as fast as the server
/// takes them, and [`TINY_STREAMS`] streams of 10-row puts, each on its own connection
/// into its own table, as fast as acks come.
async fn run_purge_case(purge: bool, secs: u64) -> PurgeCase {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().expect("temp dir");
    let interval = if purge { "1s" } else { "0s" };
    let server = ServerProcess::start(
        dir.path(),
        &["--memory-purge-interval".into(), interval.into()],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let cpu_before = server.cpu_seconds();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (pid, done) = (server.child.id(), done.clone());
        tokio::spawn(async move {
            let mut rss = Vec::new();
            while !done.load(Ordering::Relaxed) {
                rss.push(proc_status_bytes(pid, "VmRSS"));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            rss
        })
    };
    let tiny: Vec<_> = (0..TINY_STREAMS)
        .map(|k| {
            let flight = server.flight;
            tokio::spawn(async move {
                let mut client = connect(flight).await;
                let table = format!("tiny_{k}");
                let mut times = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let started = Instant::now();
                    put(&mut client, &table, schema(), vec![batch(i * 10, 10)]).await;
                    if i > 0 {
                        times.push(started.elapsed().as_secs_f64());
                    }
                    i += 1;
                }
                times
            })
        })
        .collect();
    let rows_per_batch = 65_536;
    let batch_bytes = arrow_bytes(&[batch(0, rows_per_batch)]) as u64;
    let sent = Arc::new(AtomicU64::new(0));
    let large_started = Instant::now();
    let stream = {
        let sent = sent.clone();
        futures::stream::iter(0..)
            .take_while(move |_| futures::future::ready(Instant::now() < deadline))
            .map(move |i: usize| {
                sent.fetch_add(1, Ordering::Relaxed);
                Ok(batch((i * rows_per_batch) as i64, rows_per_batch))
            })
    };
    let mut client = connect(server.flight).await;
    let acks = put_stream(&mut client, "large", schema(), stream).await;
    assert!(!acks.is_empty(), "the large put was not acked");
    let large_secs = large_started.elapsed().as_secs_f64();
    let mut times = Vec::new();
    for task in tiny {
        times.extend(task.await.expect("tiny stream"));
    }
    let cpu = server.cpu_seconds() - cpu_before;
    done.store(true, Ordering::Relaxed);
    let rss = sampler.await.expect("sampler");
    let peak = server.status("VmHWM");
    drop(client);
    let batches = sent.load(Ordering::Relaxed);
    server.stop();
    PurgeCase {
        purge,
        large_rows_per_s: (batches * rows_per_batch as u64) as f64 / large_secs,
        tiny: times,
        rss,
        peak,
        cpu,
        large_bytes: batches * batch_bytes,
    }
}

/// `memory_purge`: what the forced purge every second (`--memory-purge-interval`,
/// `skade::memory::PURGE_EVERY`) costs, against the same server with it off, in one
/// run: [`run_purge_case`] for `SKADE_PURGE_SECS` (45) seconds, off and on back to back
/// (off first in even rounds, on first in odd ones), `SKADE_PURGE_ROUNDS` (4: each order
/// twice) times. Printed per case, and each round's on/off ratio as the median over
/// rounds (min–max; the upper middle one for an even count) and their geometric mean
/// (which an even number of rounds makes free of the order's effect): the large
/// stream's rows/s, tiny put p50/p99, mean and peak RSS, and the server's CPU seconds
/// per GiB the large stream sent. The stuck purge the forced one guards against
/// shows only after tens of minutes (the soak), not here: this prices the guard.
pub(crate) async fn memory_purge() {
    let secs = env_usize("SKADE_PURGE_SECS", 45).max(5) as u64;
    let rounds = env_usize("SKADE_PURGE_ROUNDS", 4).max(1);
    // Each round is a pair (off, on) whatever order it ran in; odd rounds run the purge
    // first, so what the first case leaves behind (dirty pages written back during the
    // second) falls on each side equally often. Every case starts after a `sync`.
    let mut cases = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = Vec::new();
        for purge in order {
            settle().await;
            pair.push(run_purge_case(purge, secs).await);
        }
        pair.sort_by_key(|c| c.purge);
        cases.extend(pair);
    }
    let mib = |b: f64| b / (1u64 << 20) as f64;
    let mean = |xs: &[u64]| xs.iter().sum::<u64>() as f64 / xs.len().max(1) as f64;
    let cpu_per_gib = |c: &PurgeCase| c.cpu / (c.large_bytes as f64 / (1u64 << 30) as f64);
    println!(
        "memory_purge: one server per case at its defaults but --memory-purge-interval, {secs} s of 1 large stream + {TINY_STREAMS} tiny-put streams, {rounds} rounds"
    );
    println!(
        "| purge | large M rows/s | tiny puts | tiny p50 ms | tiny p99 ms | RSS mean MiB | peak RSS MiB | server CPU s/GiB |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    // Listed per round, off before on.
    for c in &cases {
        println!(
            "| {} | {:.2} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.1} |",
            if c.purge { "every 1 s" } else { "off" },
            c.large_rows_per_s / 1e6,
            c.tiny.len(),
            percentile(&c.tiny, 0.5) * 1e3,
            percentile(&c.tiny, 0.99) * 1e3,
            mib(mean(&c.rss)),
            mib(c.peak as f64),
            cpu_per_gib(c),
        );
    }
    // Each round's on/off ratio (the two cases ran back to back), then the median over
    // rounds with min–max: the machine drifts between rounds more than within one.
    let ratio = |f: &dyn Fn(&PurgeCase) -> f64| {
        let per_round: Vec<f64> = cases.chunks(2).map(|p| f(&p[1]) / f(&p[0])).collect();
        let (median, min, max) = summary(&per_round);
        // Over rounds of both orders, the geometric mean cancels an order effect that
        // scales the second case of a pair (the first runs 6–19 % faster either way).
        let geometric =
            (per_round.iter().map(|r| r.ln()).sum::<f64>() / per_round.len() as f64).exp();
        format!("{median:.2} ({min:.2}–{max:.2}; geometric mean {geometric:.2})")
    };
    println!(
        "memory_purge: purge every 1 s / off, median of {rounds} rounds (min–max; geometric mean): large rows/s = {}, tiny put p50 = {}, tiny put p99 = {}, mean RSS = {}, peak RSS = {}, server CPU per GiB = {}",
        ratio(&|c| c.large_rows_per_s),
        ratio(&|c| percentile(&c.tiny, 0.5)),
        ratio(&|c| percentile(&c.tiny, 0.99)),
        ratio(&|c| mean(&c.rss)),
        ratio(&|c| c.peak as f64),
        ratio(&cpu_per_gib),
    );
}

/// The server's live heap (`skade_heap_allocated_bytes`) and its live data files
/// (`skade_table_data_files`) once a put is over: after `SETTLE` (5 s) of maintenance
/// passes, the median heap of 5 samples a second apart.
async fn settled_heap(server: &ServerProcess) -> (f64, f64) {
    const SETTLE: Duration = Duration::from_secs(5);
    tokio::time::sleep(SETTLE).await;
    let mut heap = Vec::new();
    for _ in 0..5 {
        heap.push(server.metric("skade_heap_allocated_bytes").await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    heap.sort_by(f64::total_cmp);
    (heap[2], server.metric("skade_table_data_files").await)
}

/// `live_files`: what one table's live data files cost the server's heap. A `skade
/// serve` child at its defaults but `--target-file-size 128KiB`, so each 16,384-row
/// batch of the synthetic table is a data file of its own (its Parquet is over a quarter
/// of the target: compaction leaves it), takes `SKADE_LIVE_FILES` (1,000) batches in one
/// streaming put, then 3 times as many in another; after each, [`settled_heap`]. Printed:
/// the heap above the server's before the first put, per live data file, at both points,
/// and their ratio — 1 when the heap follows the live files, 4 when it follows their
/// square (the process-wide manifest cache before it was bounded by bytes kept every
/// merged copy of the table's file list: `docs/performance.md`, "Heap per live data
/// file").
pub(crate) async fn live_files() {
    let files = env_usize("SKADE_LIVE_FILES", 1_000).max(16);
    let rows = 16_384usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let server =
        ServerProcess::start(dir.path(), &["--target-file-size".into(), "128KiB".into()]).await;
    let (base, _) = settled_heap(&server).await;
    let mut client = connect(server.flight).await;
    let mut sent = 0usize;
    let mut points = Vec::new();
    for target in [files, 4 * files] {
        let stream =
            futures::stream::iter(sent..target).map(move |i| Ok(batch((i * rows) as i64, rows)));
        let acks = put_stream(&mut client, "live_files", schema(), stream).await;
        assert!(!acks.is_empty(), "the put was not acked");
        sent = target;
        let (heap, live) = settled_heap(&server).await;
        points.push((target, live, heap - base));
    }
    drop(client);
    let peak = server.status("VmHWM");
    server.stop();
    let kib = |b: f64| b / 1024.0;
    println!(
        "live_files: one table, {rows}-row batches of the synthetic table one data file each, heap above the idle server's ({:.1} MiB) after the put and 5 s of maintenance",
        base / (1u64 << 20) as f64
    );
    println!("| batches sent | live data files | heap MiB | heap per live file KiB |");
    println!("| --- | --- | --- | --- |");
    for (target, live, heap) in &points {
        println!(
            "| {target} | {live:.0} | {:.1} | {:.2} |",
            heap / (1u64 << 20) as f64,
            kib(heap / live.max(1.0))
        );
    }
    let per_file = |(_, live, heap): &(usize, f64, f64)| heap / live.max(1.0);
    println!(
        "live_files: heap per live data file at 4 N / at N = {:.2} (1: the heap follows the live files; 4: their square); peak RSS {:.0} MiB",
        per_file(&points[1]) / per_file(&points[0]),
        peak as f64 / (1u64 << 20) as f64
    );
}

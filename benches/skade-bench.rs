//! skade's benchmark binary: `cargo bench --bench skade-bench -- <arm>...`.
//!
//! Every figure is taken in one run against a baseline measured in the same run; each
//! arm prints a table of medians over `SKADE_BENCH_RUNS` (default 3) runs with min–max,
//! then one line per headline figure. Not a test: nothing here asserts a speed.
//!
//! Arms:
//! - `committer_overlap`: `ingest_pipelined` (serial committer) vs
//!   `ingest_pipelined_overlap` on a commit-bound shape (many small files, small
//!   files-per-commit). Sizes: `SKADE_OVL_FILES` (200), `SKADE_OVL_ROWS` (2000),
//!   `SKADE_OVL_FPC` (2), `SKADE_OVL_DEPTH` (4).
//! - `memory`: peak RSS of the process while a real server ingests a streaming put of
//!   `SKADE_MEM_GIB` (5) GiB of Arrow data over Flight loopback, vs the memory budget
//!   `SKADE_MEM_BUDGET_MIB` (512).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use futures::{StreamExt, TryStreamExt};
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};
use skade::catalog::RedbCatalog;
use skade::write::{self, IngestStats, WriteProps};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("score", DataType::Float64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("flag", DataType::Boolean, true),
    ]))
}

/// The synthetic table: id int64, ts timestamp[us, UTC], score float64, name utf8 of ~16
/// chars from 1,000 values, flag bool with 5% nulls.
fn batch(first_id: i64, rows: usize) -> RecordBatch {
    let ids: Vec<i64> = (first_id..first_id + rows as i64).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(
            TimestampMicrosecondArray::from(
                ids.iter()
                    .map(|i| 1_700_000_000_000_000 + i * 1_000)
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(Float64Array::from(
            ids.iter()
                .map(|i| ((i.wrapping_mul(2_654_435_761)) % 1_000_000) as f64 / 7.0)
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            ids.iter()
                .map(|i| format!("customer-{:07}", (i.wrapping_mul(7919)) % 1000))
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            ids.iter()
                .map(|i| (i % 20 != 0).then_some(i % 3 == 0))
                .collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(schema(), columns).expect("batch")
}

/// Median, min and max of `xs` (non-empty).
fn summary(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

async fn new_table(catalog: &RedbCatalog, name: &str) -> Table {
    let ident = TableIdent::new(NamespaceIdent::new("bench".into()), name.into());
    write::ensure_table(catalog, &ident, &schema())
        .await
        .expect("table")
}

async fn committer_overlap(runs: usize) {
    let files = env_usize("SKADE_OVL_FILES", 200);
    let rows = env_usize("SKADE_OVL_ROWS", 2000);
    let fpc = env_usize("SKADE_OVL_FPC", 2);
    let depth = env_usize("SKADE_OVL_DEPTH", 4);
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &dir.path().join("wh"))
        .expect("catalog");
    let props = WriteProps {
        channel_depth: depth,
    };
    let mut serial = Vec::new();
    let mut overlap = Vec::new();
    let mut commits = (0, 0);
    for run in 0..runs {
        for lane in ["serial", "overlap"] {
            let table = new_table(&catalog, &format!("{lane}_{run}")).await;
            let arrow = write::table_arrow_schema(&table).expect("schema");
            let groups: Vec<Vec<RecordBatch>> = (0..files)
                .map(|f| {
                    let b = batch((f * rows) as i64, rows);
                    vec![write::conform_batch("bench", &b, &arrow).expect("conform")]
                })
                .collect();
            let started = Instant::now();
            let (_, stats): (Table, IngestStats) = if lane == "serial" {
                write::ingest_pipelined(&catalog, &table, groups, fpc, &props).await
            } else {
                write::ingest_pipelined_overlap(&catalog, &table, groups, fpc, &props).await
            }
            .expect("ingest");
            let secs = started.elapsed().as_secs_f64();
            let rate = stats.rows as f64 / secs;
            if lane == "serial" {
                serial.push(rate);
                commits.0 = stats.commits;
            } else {
                overlap.push(rate);
                commits.1 = stats.commits;
            }
        }
    }
    let (s, s_min, s_max) = summary(&serial);
    let (o, o_min, o_max) = summary(&overlap);
    println!(
        "committer_overlap: {files} files x {rows} rows, files_per_commit={fpc}, channel_depth={depth}, {runs} runs"
    );
    println!("| lane | rows/s median | min | max | commits |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| serial (ingest_pipelined) | {s:.0} | {s_min:.0} | {s_max:.0} | {} |",
        commits.0
    );
    println!(
        "| overlap (ingest_pipelined_overlap) | {o:.0} | {o_min:.0} | {o_max:.0} | {} |",
        commits.1
    );
    println!(
        "committer_overlap: overlap/serial = {:.2} (overlap {:.0} rows/s, serial {:.0} rows/s, commits {} vs {})",
        o / s,
        o,
        s,
        commits.1,
        commits.0
    );
}

/// Peak resident set size of this process in bytes (`VmHWM`).
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

async fn memory() {
    let gib = env_usize("SKADE_MEM_GIB", 5);
    let budget_mib = env_usize("SKADE_MEM_BUDGET_MIB", 512);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = skade::Config::for_tests(dir.path());
    config.ingest.memory_budget = (budget_mib as u64) << 20;
    config.ingest.target_file_size = 64 << 20;
    let running = skade::start(config).await.expect("server");
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", running.flight_addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = FlightClient::new(channel);
    let rows_per_batch = 65_536;
    let batch_bytes: usize = batch(0, rows_per_batch)
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum();
    let batches = (gib << 30).div_ceil(batch_bytes);
    let baseline = peak_rss_bytes();
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
    let peak = peak_rss_bytes();
    running.shutdown_and_wait().await.expect("shutdown");
    let sent = (batches * batch_bytes) as f64;
    println!(
        "memory: streamed {:.2} GiB of Arrow ({} rows) in {:.1} s ({:.0} MiB/s), {} acks",
        sent / (1u64 << 30) as f64,
        batches * rows_per_batch,
        secs,
        sent / (1u64 << 20) as f64 / secs,
        acks.len()
    );
    println!(
        "memory: peak_rss/budget = {:.2} (peak RSS {} MiB incl. client and baseline {} MiB, budget {} MiB)",
        peak as f64 / ((budget_mib as u64) << 20) as f64,
        peak >> 20,
        baseline >> 20,
        budget_mib
    );
}

fn main() {
    let runs = env_usize("SKADE_BENCH_RUNS", 3).max(1);
    let arms: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let arms = if arms.is_empty() {
        vec!["committer_overlap".to_string()]
    } else {
        arms
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for arm in &arms {
            match arm.as_str() {
                "committer_overlap" => committer_overlap(runs).await,
                "memory" => memory().await,
                other => eprintln!("unknown arm {other:?}; arms: committer_overlap, memory"),
            }
        }
    });
}

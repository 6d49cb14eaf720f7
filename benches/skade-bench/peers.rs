//! `peers`: skade against what a user would otherwise pick, on the same synthetic batches
//! in the same run — pyiceberg 0.12 (`SqlCatalog` on sqlite, `benches/peers/`) and
//! iceberg-rust's own writer stack (`DataFileWriter` + `fast_append` on its
//! `MemoryCatalog`): rows/s of one bulk append and commits/s of tiny (10-row) appends.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

use iceberg::io::LocalFsStorageFactory;
use iceberg::memory::{MEMORY_CATALOG_WAREHOUSE, MemoryCatalogBuilder};
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, CatalogBuilder, MemoryCatalog};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::common::*;

/// Rows in one tiny append (one commit each).
const TINY_ROWS: usize = 10;
/// Rows in one batch of the bulk dataset.
const BATCH_ROWS: usize = 65_536;
/// Arrow bytes per data file for iceberg-rust's bulk append, as skade's put cuts them.
const GROUP_BYTES: usize = 128 << 20;

/// One run's tiny-append figures for one lane.
struct Tiny {
    /// Commits per second over the whole sequence (1/s).
    commits_per_s: f64,
    /// Median append latency (s).
    p50: f64,
    /// 99th-percentile append latency (s).
    p99: f64,
    /// Median latency of the first 10 appends (s).
    first10: f64,
    /// Median latency of the last 10 appends (s).
    last10: f64,
}

impl Tiny {
    /// Figures from per-append `latencies` (s) and the sequence's `wall` time (s).
    fn new(latencies: &[f64], wall: f64) -> Tiny {
        let window = latencies.len().min(10);
        Tiny {
            commits_per_s: latencies.len() as f64 / wall,
            p50: percentile(latencies, 0.5),
            p99: percentile(latencies, 0.99),
            first10: percentile(&latencies[..window], 0.5),
            last10: percentile(&latencies[latencies.len() - window..], 0.5),
        }
    }
}

/// Every run's figures for one lane.
#[derive(Default)]
struct Lane {
    /// Bulk append throughput per run (rows/s).
    rows_per_s: Vec<f64>,
    /// Tiny-append figures per run.
    tiny: Vec<Tiny>,
}

impl Lane {
    /// Median bulk rows/s, or `None` when the lane never ran.
    fn rows(&self) -> Option<f64> {
        (!self.rows_per_s.is_empty()).then(|| summary(&self.rows_per_s).0)
    }

    /// Median tiny commits/s, or `None` when the lane never ran.
    fn commits(&self) -> Option<f64> {
        self.tiny_median(|t| t.commits_per_s)
    }

    /// Median over runs of one tiny-append figure.
    fn tiny_median(&self, f: impl Fn(&Tiny) -> f64) -> Option<f64> {
        let xs: Vec<f64> = self.tiny.iter().map(f).collect();
        (!xs.is_empty()).then(|| summary(&xs).0)
    }

    /// `median (min–max)` of `xs` scaled by `scale`, or `-` when empty.
    fn cell(xs: &[f64], scale: f64, precision: usize) -> String {
        if xs.is_empty() {
            return "-".into();
        }
        let (m, lo, hi) = summary(xs);
        format!(
            "{:.p$} ({:.p$}–{:.p$})",
            m * scale,
            lo * scale,
            hi * scale,
            p = precision
        )
    }

    /// One markdown row of the arm's table.
    fn row(&self, name: &str) -> String {
        let tiny = |f: fn(&Tiny) -> f64| self.tiny.iter().map(f).collect::<Vec<f64>>();
        format!(
            "| {name} | {} | {} | {} | {} | {} → {} |",
            Self::cell(&self.rows_per_s, 1e-6, 2),
            Self::cell(&tiny(|t| t.commits_per_s), 1.0, 1),
            Self::cell(&tiny(|t| t.p50), 1e3, 1),
            Self::cell(&tiny(|t| t.p99), 1e3, 1),
            Self::cell(&tiny(|t| t.first10), 1e3, 1),
            Self::cell(&tiny(|t| t.last10), 1e3, 1),
        )
    }
}

/// Writes `batches` as one Arrow IPC file at `path`.
fn write_ipc(path: &Path, batches: &[RecordBatch]) {
    let file = std::fs::File::create(path).expect("create IPC file");
    let mut writer = arrow::ipc::writer::FileWriter::try_new(BufWriter::new(file), &schema())
        .expect("IPC writer");
    for b in batches {
        writer.write(b).expect("write IPC batch");
    }
    writer.finish().expect("finish IPC file");
}

/// The Python interpreter that has the pinned pyiceberg, or why there is none:
/// `SKADE_PEERS_PYTHON` as given, else `benches/peers/.venv` (created with
/// `python3 -m venv` and filled from `benches/peers/requirements.txt`).
pub(crate) fn python() -> Result<PathBuf, String> {
    if let Ok(python) = std::env::var("SKADE_PEERS_PYTHON") {
        return Ok(PathBuf::from(python));
    }
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
    let venv = peers.join(".venv");
    let python = venv.join("bin/python");
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        Err(format!(
            "{what}: {}: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    };
    if !python.exists() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "python3 -m venv benches/peers/.venv",
        )?;
    }
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("-r")
            .arg(peers.join("requirements.txt")),
        "pip install -r benches/peers/requirements.txt",
    )?;
    Ok(python)
}

/// Runs `benches/peers/pyiceberg_peer.py` once on the IPC file `ipc` with `tiny` tiny
/// appends, in a new work dir under `dir`. Returns (bulk rows/s, tiny figures, bulk data
/// files), or why the run failed.
fn pyiceberg_run(
    python: &Path,
    ipc: &Path,
    dir: &Path,
    tiny: usize,
) -> Result<(f64, Tiny, u64), String> {
    let work = tempfile::tempdir_in(dir).map_err(|e| format!("work dir: {e}"))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/pyiceberg_peer.py");
    let out = Command::new(python)
        .arg(script)
        .arg(ipc)
        .arg(work.path())
        .arg("--tiny")
        .arg(tiny.to_string())
        .output()
        .map_err(|e| format!("run {}: {e}", python.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "pyiceberg_peer.py: {}: {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("pyiceberg_peer.py printed no JSON: {e}"))?;
    let f = |key: &str| {
        json[key]
            .as_f64()
            .ok_or_else(|| format!("pyiceberg_peer.py: no number {key:?} in {json}"))
    };
    let tiny = Tiny {
        commits_per_s: f("commits_per_s")?,
        p50: f("p50_ms")? / 1e3,
        p99: f("p99_ms")? / 1e3,
        first10: f("first10_ms")? / 1e3,
        last10: f("last10_ms")? / 1e3,
    };
    Ok((f("rows_per_s")?, tiny, f("append_files")? as u64))
}

/// iceberg-rust's `MemoryCatalog` over a local-filesystem `FileIO`, warehouse in `dir`.
async fn memory_catalog(dir: &Path) -> MemoryCatalog {
    let warehouse = format!("file://{}", dir.join("warehouse").display());
    MemoryCatalogBuilder::default()
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load(
            "bench",
            std::collections::HashMap::from([(MEMORY_CATALOG_WAREHOUSE.to_string(), warehouse)]),
        )
        .await
        .expect("memory catalog")
}

/// Creates table `bench.<name>` with the synthetic schema (field ids assigned by
/// iceberg) in `catalog`.
async fn iceberg_rust_table(catalog: &MemoryCatalog, name: &str) -> Table {
    let ns = NamespaceIdent::new("bench".into());
    if !catalog.namespace_exists(&ns).await.expect("namespace") {
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .expect("create namespace");
    }
    let schema =
        iceberg::arrow::arrow_schema_to_schema_auto_assign_ids(&schema()).expect("iceberg schema");
    let creation = iceberg::TableCreation::builder()
        .name(name.to_string())
        .schema(schema)
        .build();
    catalog
        .create_table(&ns, creation)
        .await
        .expect("create table")
}

/// `batch` with the table's Arrow schema (field ids in the metadata, `+00:00` for UTC),
/// as the iceberg-rust writer wants it.
fn to_table_schema(batch: &RecordBatch, table_arrow: &SchemaRef) -> RecordBatch {
    let columns: Vec<ArrayRef> = table_arrow
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| {
            if column.data_type() == field.data_type() {
                column.clone()
            } else {
                arrow_cast::cast(column, field.data_type()).expect("cast to table type")
            }
        })
        .collect();
    RecordBatch::try_new(table_arrow.clone(), columns).expect("table batch")
}

/// Writes `batches` through one iceberg-rust `DataFileWriter` (Parquet, parquet-rs
/// default properties with zstd(1)) and returns its data files.
async fn iceberg_rust_write(
    table: &Table,
    names: &DefaultFileNameGenerator,
    batches: Vec<RecordBatch>,
) -> Vec<DataFile> {
    let table_arrow: SchemaRef = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
            .expect("arrow schema"),
    );
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(1).expect("zstd level"),
        ))
        .build();
    let parquet = ParquetWriterBuilder::new(props, table.metadata().current_schema().clone());
    let rolling = RollingFileWriterBuilder::new_with_default_file_size(
        parquet,
        table.file_io().clone(),
        DefaultLocationGenerator::new(table.metadata()).expect("location generator"),
        names.clone(),
    );
    let mut writer = DataFileWriterBuilder::new(rolling)
        .build(None)
        .await
        .expect("data file writer");
    for b in &batches {
        writer
            .write(to_table_schema(b, &table_arrow))
            .await
            .expect("write");
    }
    writer.close().await.expect("close writer")
}

/// One `fast_append` of `files` (duplicate check off) committed to `catalog`.
async fn iceberg_rust_commit(
    catalog: &MemoryCatalog,
    table: &Table,
    files: Vec<DataFile>,
) -> Table {
    let tx = Transaction::new(table);
    let tx = tx
        .fast_append()
        .with_check_duplicate(false)
        .add_data_files(files)
        .apply(tx)
        .expect("fast append");
    tx.commit(catalog).await.expect("commit")
}

/// iceberg-rust's writer stack on `batches`: one `DataFileWriter` per ~128 MiB group, the
/// groups written concurrently as tokio tasks (so encoding uses every runtime worker, one
/// per core), then one `fast_append`. Returns (rows/s, data files).
async fn iceberg_rust_bulk(dir: &Path, batches: &[RecordBatch]) -> (f64, usize) {
    let catalog = memory_catalog(dir).await;
    let table = iceberg_rust_table(&catalog, "bulk").await;
    let names = DefaultFileNameGenerator::new("bench".into(), None, DataFileFormat::Parquet);
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let started = Instant::now();
    let tasks: Vec<_> = cut(batches, GROUP_BYTES)
        .into_iter()
        .map(|group| {
            let (table, names) = (table.clone(), names.clone());
            tokio::spawn(async move { iceberg_rust_write(&table, &names, group).await })
        })
        .collect();
    let mut files = Vec::new();
    for task in tasks {
        files.extend(task.await.expect("writer task"));
    }
    let n_files = files.len();
    iceberg_rust_commit(&catalog, &table, files).await;
    (rows as f64 / started.elapsed().as_secs_f64(), n_files)
}

/// iceberg-rust's writer stack, `n` tiny appends on a fresh table: each writes one
/// 10-row data file and commits it with one `fast_append`.
async fn iceberg_rust_tiny(dir: &Path, n: usize) -> Tiny {
    let catalog = memory_catalog(dir).await;
    let mut table = iceberg_rust_table(&catalog, "tiny").await;
    let names = DefaultFileNameGenerator::new("tiny".into(), None, DataFileFormat::Parquet);
    let mut latencies = Vec::with_capacity(n);
    let wall = Instant::now();
    for i in 0..n {
        let b = batch((i * TINY_ROWS) as i64, TINY_ROWS);
        let started = Instant::now();
        let files = iceberg_rust_write(&table, &names, vec![b]).await;
        table = iceberg_rust_commit(&catalog, &table, files).await;
        latencies.push(started.elapsed().as_secs_f64());
    }
    Tiny::new(&latencies, wall.elapsed().as_secs_f64())
}

/// skade end to end: one DoPut of `batches` over Flight loopback (rows/s), then `n` tiny
/// puts of 10 rows on one stream into a fresh table, each one commit.
async fn skade_run(batches: &[RecordBatch], n: usize) -> (f64, Tiny) {
    let mut server = Server::start().await;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let started = Instant::now();
    let acks = put(&mut server.client, "bulk", schema(), batches.to_vec()).await;
    let rows_per_s = rows as f64 / started.elapsed().as_secs_f64();
    assert!(!acks.is_empty(), "bulk put acked");

    let mut latencies = Vec::with_capacity(n);
    let wall = Instant::now();
    for i in 0..n {
        let b = batch((i * TINY_ROWS) as i64, TINY_ROWS);
        let started = Instant::now();
        put(&mut server.client, "tiny", schema(), vec![b]).await;
        latencies.push(started.elapsed().as_secs_f64());
    }
    let tiny = Tiny::new(&latencies, wall.elapsed().as_secs_f64());
    server.stop().await;
    (rows_per_s, tiny)
}

/// `a/b = r (a …, b …)` for a headline line, or why there is no ratio.
fn ratio(
    a: Option<f64>,
    b: Option<f64>,
    scale: f64,
    unit: &str,
    a_name: &str,
    b_name: &str,
) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!(
            "{:.2} ({a_name} {:.2} {unit}, {b_name} {:.2} {unit})",
            a / b,
            a * scale,
            b * scale
        ),
        _ => format!("n/a ({b_name} did not run)"),
    }
}

/// The `peers` arm: `runs` runs of skade, iceberg-rust and pyiceberg on the same data.
/// Knobs: `SKADE_PEERS_ROWS` (10 M) rows in 65,536-row batches, `SKADE_PEERS_TINY` (200)
/// tiny appends per lane and run, `SKADE_PEERS_PYTHON` (else `benches/peers/.venv`).
pub(crate) async fn peers(runs: usize) {
    let rows = env_usize("SKADE_PEERS_ROWS", 10_000_000);
    let tiny = env_usize("SKADE_PEERS_TINY", 200).max(1);
    let batches: Vec<RecordBatch> = (0..rows.div_ceil(BATCH_ROWS))
        .map(|i| {
            batch(
                (i * BATCH_ROWS) as i64,
                BATCH_ROWS.min(rows - i * BATCH_ROWS),
            )
        })
        .collect();
    let arrow_mb = arrow_bytes(&batches) as f64 / 1e6;
    let dir = tempfile::tempdir().expect("temp dir");
    let ipc = dir.path().join("synthetic.arrow");
    {
        let (ipc, batches) = (ipc.clone(), batches.clone());
        tokio::task::spawn_blocking(move || write_ipc(&ipc, &batches))
            .await
            .expect("IPC writer task");
    }
    let python = tokio::task::spawn_blocking(python)
        .await
        .expect("python setup task");
    if let Err(why) = &python {
        println!("peers: pyiceberg lane skipped: {why}");
    }

    let (mut skade, mut rust, mut py) = (Lane::default(), Lane::default(), Lane::default());
    let (mut rust_files, mut py_files) = (0, 0);
    for run in 0..runs {
        // Each lane starts with no dirty pages left by the one before (the IPC file, the
        // peers' unsynced files): skade's `syncfs` would otherwise write them back on its
        // first commit and be charged for them.
        settle().await;
        let (r, t) = skade_run(&batches, tiny).await;
        skade.rows_per_s.push(r);
        skade.tiny.push(t);

        settle().await;
        let run_dir = tempfile::tempdir_in(dir.path()).expect("run dir");
        let (r, files) = iceberg_rust_bulk(&run_dir.path().join("bulk"), &batches).await;
        rust.rows_per_s.push(r);
        rust_files = files;
        rust.tiny
            .push(iceberg_rust_tiny(&run_dir.path().join("tiny"), tiny).await);
        drop(run_dir);

        if let Ok(python) = &python {
            settle().await;
            let (python, ipc, base) = (python.clone(), ipc.clone(), dir.path().to_path_buf());
            match tokio::task::spawn_blocking(move || pyiceberg_run(&python, &ipc, &base, tiny))
                .await
                .expect("pyiceberg task")
            {
                Ok((r, t, files)) => {
                    py.rows_per_s.push(r);
                    py.tiny.push(t);
                    py_files = files;
                }
                Err(why) => println!("peers: pyiceberg run {run} failed: {why}"),
            }
        }
    }

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "peers: synthetic table, {rows} rows ({arrow_mb:.0} MB of Arrow, {BATCH_ROWS}-row batches), \
         tiny appends of {TINY_ROWS} rows x {tiny}; {runs} runs, medians (min–max)"
    );
    println!(
        "| lane | bulk M rows/s | tiny commits/s | tiny p50 ms | tiny p99 ms | tiny latency first 10 → last 10 ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    println!("{}", skade.row("skade, Flight DoPut loopback, 1 stream"));
    println!(
        "{}",
        rust.row(&format!(
            "iceberg-rust 0.10.1 DataFileWriter + fast_append, MemoryCatalog ({rust_files} files, concurrent writers on {cores} cores)"
        ))
    );
    println!(
        "{}",
        py.row(&format!(
            "pyiceberg 0.12.0 append, SqlCatalog on sqlite ({py_files} files)"
        ))
    );
    println!(
        "peers: all write zstd(1) Parquet to local disk; skade acks after one syncfs (data, \
         manifests, metadata) and the redb fsync; iceberg-rust's local FileIO fsyncs each data \
         file, manifest and manifest list on close but not the metadata JSON, and its \
         MemoryCatalog keeps the pointer in memory only; pyiceberg syncs only its sqlite row"
    );
    println!(
        "peers: skade/pyiceberg rows/s = {}",
        ratio(
            skade.rows(),
            py.rows(),
            1e-6,
            "M rows/s",
            "skade",
            "pyiceberg"
        )
    );
    println!(
        "peers: skade/iceberg_rust rows/s = {}",
        ratio(
            skade.rows(),
            rust.rows(),
            1e-6,
            "M rows/s",
            "skade",
            "iceberg_rust"
        )
    );
    println!(
        "peers: skade/pyiceberg commits/s = {}",
        ratio(
            skade.commits(),
            py.commits(),
            1.0,
            "commits/s",
            "skade",
            "pyiceberg"
        )
    );
    println!(
        "peers: skade/iceberg_rust commits/s = {}",
        ratio(
            skade.commits(),
            rust.commits(),
            1.0,
            "commits/s",
            "skade",
            "iceberg_rust"
        )
    );
    for (name, lane) in [
        ("skade", &skade),
        ("iceberg_rust", &rust),
        ("pyiceberg", &py),
    ] {
        if let (Some(first), Some(last)) = (
            lane.tiny_median(|t| t.first10),
            lane.tiny_median(|t| t.last10),
        ) {
            println!(
                "peers: {name} tiny-commit latency {:.1} ms (first 10) → {:.1} ms (last 10 of {tiny}), {:.2}x",
                first * 1e3,
                last * 1e3,
                last / first
            );
        }
    }
}

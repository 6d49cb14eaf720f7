//! Crash safety with the REAL binary: several clients stream into skade while it is
//! SIGKILLed at random moments (mid-stream, mid-commit), restarted on the same data dir,
//! and everything is checked after every kill.
//!
//! Ignored by plain `cargo test`; `tests/run.sh` runs the short form (CI):
//!
//! ```sh
//! SKADE_CRASH_KILLS=3 cargo test --test crash -- --ignored --nocapture
//! SKADE_CRASH_KILLS=60 cargo test --release --test crash -- --ignored --nocapture  # long
//! ```
//!
//! Environment: `SKADE_CRASH_KILLS` (default 3), `SKADE_CRASH_SEED` (default: the clock;
//! printed), `SKADE_PYTHON` (a python with pyiceberg; default `<repo>/.venv/bin/python`
//! when present, else the pyiceberg check is skipped with a note).
//!
//! The workload, with every batch one data file and every 2 files one commit
//! (`--target-file-size 1 --files-per-commit 2 --commit-interval 200ms`):
//! - 5 streaming clients (`crash.s0`, `crash.s1`, two on `crash.shared`, one on
//!   `crash.txa`), each a run of DoPut streams of 3..25 batches of 1..40 rows. Ids are
//!   sequential per client (`(client + 1) << 40` + n), so the rows of one stream are one
//!   id range and what its acks promise is exactly known: a `CommitAck` with
//!   `committed_rows = r` promises the stream's first `r` ids.
//! - Two of them (`crash.s0` and one on `crash.shared`) are exactly-once producers: a
//!   writer id and numbered batches; after a kill they resend their unfinished stream
//!   whole on the next server (the committed prefix is skipped as replays), and an ack's
//!   `committed_sequence` says how much of the stream is durable.
//! - Table maintenance as busy as it gets: a pass every 200 ms, at most 8 snapshots per
//!   table, cleanup 3 s after a file became unreferenced; `crash.s0` and `crash.shared`
//!   are created first with manifest merging from 4 manifests, and `crash.s0` with a
//!   64 KiB `write.target-file-size-bytes` so its files are small enough to compact.
//!   Kills therefore also land in expiry, merge, compaction and cleanup.
//! - 1 Flight SQL client: transactions that ingest the same id range into `crash.txa`
//!   and `crash.txb`, then COMMIT (3 in 4) or ROLLBACK. It is an exactly-once producer
//!   (`x-skade-writer-id` and `x-skade-sequence` headers): a transaction to commit that
//!   failed is made again, same rows and sequence, on the next server until it commits.
//!
//! After every kill, with the server dead, the test opens the catalog itself and checks:
//! - every acked commit is there: each stream's acked rows are present (its acked
//!   snapshot ids may have been expired since, their rows not); a stream's present rows
//!   are a prefix of what it sent (no hole, nothing doubled, nothing that was never
//!   sent);
//! - every retained snapshot of every table reads back completely: for each snapshot
//!   (`table.scan().snapshot_id(..)`) the planned files exist with their recorded size
//!   and hold the summary's `total-records`, and its parent is retained unless it is the
//!   oldest; every data file of the current snapshot is read once and holds its
//!   manifest's row count of well-formed rows;
//! - transactions: a COMMIT that answered OK is in both tables; one never sent (or a
//!   ROLLBACK) left nothing visible; one cut off by the kill is in both tables or neither.
//!
//! At the end the clients finish their streams cleanly (final acks must then cover every
//! row sent, and every exactly-once stream must be complete: each of its rows present
//! once, whatever the kills cut), pyiceberg reads every table through the REST catalog of a restarted server
//! and must agree with the rows and id sums seen here, and the totals are printed: kills,
//! commits acked, acked commits found, rows lost (must be 0), and the kills that landed
//! mid-commit (a metadata JSON written whose pointer never flipped).
//!
//! RED once: with `RedbCatalog::release` committing its redb transaction at
//! `Durability::None` (acked, but not yet durable), the check after the first kill
//! reported "72 acked commits (0 found), 2843 rows acked, 2843 lost" ("acked snapshot ...
//! is missing", "acked rows missing"). What a SIGKILL cannot show: the page cache
//! survives a killed process, so a missing `syncfs` of the warehouse would only show
//! after a power loss or kernel crash (not simulated here).

#[path = "../integration/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandStatementIngest, EndTransaction, TableDefinitionOptions, TableExistsOption,
    TableNotExistOption,
};
use common::{synthetic_batch, synthetic_schema};
use futures::{StreamExt, TryStreamExt};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, NamespaceIdent};
use prost::Message;
use skade::catalog::RedbCatalog;
use skade::proto::CommitAck;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

const NS: &str = "crash";
/// The streaming clients' tables (index = client).
const STREAM_TABLES: [&str; 5] = ["s0", "s1", "shared", "shared", "txa"];
/// The streaming clients that are exactly-once producers (writer id `crash-<client>`,
/// batches numbered): after a kill they resend their unfinished stream whole, and every
/// row of it must land exactly once.
const KEYED_CLIENTS: [usize; 2] = [0, 2];
/// The table created before the first server with `write.target-file-size-bytes` set
/// (64 KiB), so its files are cut by the commit deadline and are small enough for
/// compaction to rewrite while the server is killed around it.
const COMPACTED_TABLE: &str = "s0";
/// The transaction client's id space, as a client number.
const TXN_CLIENT: i64 = 100;
/// Offset of a transaction's rows in `txb` from its rows in `txa`.
const TXB_OFFSET: i64 = 500;

fn client_base(client: i64) -> i64 {
    (client + 1) << 40
}

/// A tiny deterministic PRNG (xorshift64*), so a failing run can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// One server process's Flight address; `n` counts starts.
#[derive(Debug, Clone, Copy)]
struct Generation {
    n: u64,
    flight: SocketAddr,
}

/// What one DoPut stream sent and was promised.
#[derive(Debug, Clone)]
struct StreamRecord {
    table: String,
    /// First id of the stream.
    start: i64,
    /// One past the last id handed to the stream (some may never have left the client).
    sent_end: i64,
    /// `committed_rows` of the last ack received: the first `acked_rows` ids are durable.
    acked_rows: u64,
    /// Snapshot ids of the commit acks received.
    acked_snapshots: Vec<i64>,
    /// The final ack arrived: the server read and committed the whole stream.
    finished: bool,
    /// An exactly-once stream ([`KEYED_CLIENTS`]): resent after each failure until it
    /// finishes, so at the end all its rows must be present exactly once.
    keyed: bool,
}

/// One stream a client means to send: its batches `(first id, rows)`, numbered from
/// `first_sequence` when keyed.
#[derive(Debug, Clone)]
struct Plan {
    table: &'static str,
    /// Index of its [`StreamRecord`] in `Shared::streams`.
    record: usize,
    batches: Vec<(i64, i64)>,
    first_sequence: u64,
    writer: Option<String>,
}

impl Plan {
    /// Plans the next stream of `client` (3..25 batches of 1..40 rows) and records it.
    fn new(
        client: usize,
        next_id: &mut i64,
        next_sequence: &mut u64,
        rng: &mut Rng,
        shared: &Shared,
    ) -> Self {
        let table = STREAM_TABLES[client];
        let keyed = KEYED_CLIENTS.contains(&client);
        let start = *next_id;
        let batches: Vec<(i64, i64)> = (0..rng.range(3, 25))
            .map(|_| {
                let rows = rng.range(1, 40) as i64;
                *next_id += rows;
                (*next_id - rows, rows)
            })
            .collect();
        let first_sequence = *next_sequence;
        *next_sequence += batches.len() as u64;
        let mut streams = lock(&shared.streams);
        streams.push(StreamRecord {
            table: table.to_string(),
            start,
            sent_end: start,
            acked_rows: 0,
            acked_snapshots: Vec::new(),
            finished: false,
            keyed,
        });
        Self {
            table,
            record: streams.len() - 1,
            batches,
            first_sequence,
            writer: keyed.then(|| format!("crash-{client}")),
        }
    }

    /// Rows of the batches numbered at most `sequence`.
    fn rows_through(&self, sequence: u64) -> u64 {
        let n = sequence
            .saturating_add(1)
            .saturating_sub(self.first_sequence) as usize;
        self.batches.iter().take(n).map(|b| b.1 as u64).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnOutcome {
    /// COMMIT was never sent, or ROLLBACK was: nothing may be visible.
    NotCommitted,
    /// COMMIT answered OK: everything must be visible.
    Committed,
    /// COMMIT was sent and got no answer (the kill): all or nothing.
    Unknown,
}

#[derive(Debug, Clone)]
struct TxnRecord {
    /// First id in `txa`; `txb` gets the same rows at `+ TXB_OFFSET`.
    first: i64,
    rows: i64,
    outcome: TxnOutcome,
}

/// What the clients and the orchestrator share.
struct Shared {
    server: watch::Sender<Option<Generation>>,
    stop: AtomicBool,
    streams: Mutex<Vec<StreamRecord>>,
    txns: Mutex<Vec<TxnRecord>>,
    /// Clients report `(client, generation)` once they saw that generation's server die.
    parked: mpsc::UnboundedSender<(usize, u64)>,
    /// Client failures: `(client, generation, error)`.
    errors: Mutex<Vec<(usize, u64, String)>>,
    /// What each client is doing, for diagnosing a hang.
    status: Mutex<Vec<String>>,
}

fn status(shared: &Shared, client: usize, what: impl Into<String>) {
    let mut status = lock(&shared.status);
    if status.len() <= client {
        status.resize(client + 1, String::new());
    }
    status[client] = what.into();
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits for a server newer than `after`; `None` once stopping (no newer one comes).
async fn next_server(
    rx: &mut watch::Receiver<Option<Generation>>,
    after: u64,
    shared: &Shared,
) -> Option<Generation> {
    loop {
        if let Some(g) = *rx.borrow_and_update()
            && g.n > after
        {
            return Some(g);
        }
        if shared.stop.load(Ordering::SeqCst) || rx.changed().await.is_err() {
            return None;
        }
    }
}

/// Records a client's failure (expected when its server was killed).
fn failed(shared: &Shared, client: usize, generation: u64, error: String) {
    lock(&shared.errors).push((client, generation, error));
    let _ = shared.parked.send((client, generation));
}

/// How long a client waits for one RPC before it counts as failed. A killed server's
/// connections reset at once; this only bounds odd cases (e.g. the dead server's port
/// taken over by another process that never answers).
const RPC_TIMEOUT: Duration = Duration::from_secs(20);

async fn rpc<T, E: std::fmt::Display>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(RPC_TIMEOUT, call).await {
        Ok(result) => result.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer in {RPC_TIMEOUT:?}")),
    }
}

async fn channel(addr: SocketAddr) -> Result<Channel, String> {
    Channel::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// A streaming client: streams until stopped; after a failure waits for the next server.
/// A keyed client resends a failed stream whole on the next server.
async fn stream_client(client: usize, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed ^ (client as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut next_id = client_base(client as i64);
    let mut next_sequence = 1;
    let mut rx = shared.server.subscribe();
    let mut failed_gen = 0;
    let mut unfinished: Option<Plan> = None;
    while let Some(generation) = next_server(&mut rx, failed_gen, &shared).await {
        let plan = unfinished.take().unwrap_or_else(|| {
            Plan::new(client, &mut next_id, &mut next_sequence, &mut rng, &shared)
        });
        let result = stream_once(generation, client, &plan, &mut rng, &shared).await;
        match result {
            Ok(()) if shared.stop.load(Ordering::SeqCst) => return,
            Ok(()) => park_if_gone(&shared, &rx, client, generation, &mut failed_gen),
            Err(e) => {
                if plan.writer.is_some() {
                    unfinished = Some(plan);
                }
                failed_gen = generation.n;
                failed(&shared, client, generation.n, e);
            }
        }
    }
}

/// After a success: if `generation`'s server is gone meanwhile (killed while this client
/// was between RPCs), report the client parked for it, as a failure would.
fn park_if_gone(
    shared: &Shared,
    rx: &watch::Receiver<Option<Generation>>,
    client: usize,
    generation: Generation,
    failed_gen: &mut u64,
) {
    if rx.borrow().is_none_or(|g| g.n != generation.n) {
        *failed_gen = generation.n;
        let _ = shared.parked.send((client, generation.n));
    }
}

async fn stream_once(
    generation: Generation,
    client: usize,
    plan: &Plan,
    rng: &mut Rng,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    status(shared, client, format!("gen {}: connecting", generation.n));
    let channel = channel(generation.flight).await?;
    let mut flight = arrow_flight::FlightClient::new(channel);
    if let Some(writer) = &plan.writer {
        flight
            .add_header("x-skade-writer-id", writer)
            .map_err(|e| e.to_string())?;
    }
    let index = plan.record;
    let (batch_tx, batch_rx) = mpsc::channel::<RecordBatch>(2);
    let (keyed, first_sequence) = (plan.writer.is_some(), plan.first_sequence);
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            NS.to_string(),
            plan.table.to_string(),
        ])))
        .build(ReceiverStream::new(batch_rx).map(Ok))
        // Message 0 is the schema; message i carries batch i - 1, numbered when keyed.
        .enumerate()
        .map(move |(i, data)| {
            data.map(|mut data| {
                if keyed && i > 0 {
                    data.app_metadata = (first_sequence + i as u64 - 1).to_string().into();
                }
                data
            })
        });
    let acks_shared = shared.clone();
    let acks_plan = plan.clone();
    let acks = tokio::spawn(async move {
        let mut results = flight.do_put(data).await.map_err(|e| e.to_string())?;
        while let Some(result) = results.next().await {
            let result = result.map_err(|e| e.to_string())?;
            let ack = CommitAck::decode(result.app_metadata).map_err(|e| e.to_string())?;
            let mut streams = lock(&acks_shared.streams);
            let record = &mut streams[index];
            if acks_plan.writer.is_some() {
                // A resent stream's acks count only its new rows; the committed sequence
                // says how much of the whole stream is durable.
                let durable = acks_plan.rows_through(ack.committed_sequence);
                record.acked_rows = record.acked_rows.max(durable);
            } else {
                record.acked_rows = ack.committed_rows;
            }
            if ack.r#final {
                record.finished = true;
            } else {
                record.acked_snapshots.push(ack.snapshot_id);
            }
        }
        Ok::<(), String>(())
    });
    for &(first_id, rows) in &plan.batches {
        status(
            shared,
            client,
            format!("gen {}: sending {first_id:#x}", generation.n),
        );
        {
            let mut streams = lock(&shared.streams);
            let record = &mut streams[index];
            record.sent_end = record.sent_end.max(first_id + rows);
        }
        let send = batch_tx.send(synthetic_batch(first_id, rows as usize));
        if rpc("send", send).await.is_err() {
            break; // the put ended (the server died); its task reports why
        }
        tokio::time::sleep(Duration::from_millis(rng.range(0, 15))).await;
    }
    drop(batch_tx);
    status(
        shared,
        client,
        format!("gen {}: awaiting acks", generation.n),
    );
    let abort = acks.abort_handle();
    let outcome = rpc("acks", acks).await.and_then(|r| r);
    abort.abort();
    outcome?;
    if lock(&shared.streams)[index].finished {
        Ok(())
    } else {
        Err("the stream ended without a final ack".to_string())
    }
}

fn ingest_cmd(table: &str, txn: &bytes::Bytes) -> CommandStatementIngest {
    CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create as i32,
            if_exists: TableExistsOption::Append as i32,
        }),
        table: table.to_string(),
        schema: Some(NS.to_string()),
        catalog: None,
        temporary: false,
        transaction_id: Some(txn.clone()),
        options: Default::default(),
    }
}

/// One transaction the Flight SQL client means to make: `rows` rows into `txa` and
/// `txb`, committed (keyed: writer `crash-txn`, sequence `txn_no`) or rolled back.
#[derive(Debug, Clone, Copy)]
struct TxnPlan {
    txn_no: i64,
    rows: i64,
    rollback: bool,
    /// Index of its [`TxnRecord`] in `Shared::txns`.
    record: usize,
}

/// The Flight SQL client: transactions over `txa` and `txb` until stopped. It is an
/// exactly-once producer: a transaction to commit that failed (its COMMIT maybe landed)
/// is made again, same rows and sequence, on the next server until it commits.
async fn txn_client(client: usize, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed ^ 0x5151_5151);
    let mut rx = shared.server.subscribe();
    let mut failed_gen = 0;
    let mut txn_no = 0i64;
    let mut unfinished: Option<TxnPlan> = None;
    while let Some(generation) = next_server(&mut rx, failed_gen, &shared).await {
        let plan = unfinished.take().unwrap_or_else(|| {
            txn_no += 1;
            let (rows, rollback) = (rng.range(1, 300) as i64, rng.range(0, 4) == 0);
            let mut txns = lock(&shared.txns);
            txns.push(TxnRecord {
                first: client_base(TXN_CLIENT) + txn_no * 1000,
                rows,
                outcome: TxnOutcome::NotCommitted,
            });
            TxnPlan {
                txn_no,
                rows,
                rollback,
                record: txns.len() - 1,
            }
        });
        match txn_once(generation, client, plan, &shared).await {
            Ok(()) if shared.stop.load(Ordering::SeqCst) => return,
            Ok(()) => {
                tokio::time::sleep(Duration::from_millis(rng.range(0, 30))).await;
                park_if_gone(&shared, &rx, client, generation, &mut failed_gen);
            }
            Err(e) => {
                if !plan.rollback {
                    unfinished = Some(plan);
                }
                failed_gen = generation.n;
                failed(&shared, client, generation.n, e);
            }
        }
    }
}

async fn txn_once(
    generation: Generation,
    client: usize,
    plan: TxnPlan,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    let mut sql = FlightSqlServiceClient::new(channel(generation.flight).await?);
    sql.set_header("x-skade-writer-id", "crash-txn");
    sql.set_header("x-skade-sequence", plan.txn_no.to_string());
    let first = client_base(TXN_CLIENT) + plan.txn_no * 1000;
    let index = plan.record;
    status(
        shared,
        client,
        format!("gen {}: begin {first:#x}", generation.n),
    );
    let txn = rpc("begin", sql.begin_transaction()).await?;
    for (table, offset) in [("txa", 0), ("txb", TXB_OFFSET)] {
        status(
            shared,
            client,
            format!("gen {}: ingest {table}", generation.n),
        );
        let batch = synthetic_batch(first + offset, plan.rows as usize);
        rpc(
            "ingest",
            sql.execute_ingest(ingest_cmd(table, &txn), futures::stream::iter([Ok(batch)])),
        )
        .await?;
    }
    if plan.rollback {
        return rpc(
            "rollback",
            sql.end_transaction(txn, EndTransaction::Rollback),
        )
        .await;
    }
    {
        let mut txns = lock(&shared.txns);
        if txns[index].outcome == TxnOutcome::NotCommitted {
            txns[index].outcome = TxnOutcome::Unknown;
        }
    }
    status(shared, client, format!("gen {}: commit", generation.n));
    rpc("commit", sql.end_transaction(txn, EndTransaction::Commit)).await?;
    lock(&shared.txns)[index].outcome = TxnOutcome::Committed;
    Ok(())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Creates, before any server runs, the tables whose properties make maintenance busy:
/// [`COMPACTED_TABLE`] with `write.target-file-size-bytes` = 64 KiB (files cut by the
/// commit deadline, small enough to compact) and it and `shared` with
/// `commit.manifest.min-count-to-merge` = 4. The other tables are created by their first
/// put, as users do.
async fn precreate_tables(data_dir: &Path, s3: Option<&S3Store>) {
    std::fs::create_dir_all(data_dir).unwrap();
    let catalog = open_catalog(data_dir, s3);
    for (name, target) in [(COMPACTED_TABLE, Some("65536")), ("shared", None)] {
        let ident = iceberg::TableIdent::from_strs([NS, name]).unwrap();
        let table = skade::write::ensure_table(&catalog, &ident, &synthetic_schema())
            .await
            .expect("create table");
        let tx = Transaction::new(&table);
        let mut action = tx
            .update_table_properties()
            .set("commit.manifest.min-count-to-merge".into(), "4".into());
        if let Some(bytes) = target {
            action = action.set("write.target-file-size-bytes".into(), bytes.into());
        }
        action
            .apply(tx)
            .unwrap()
            .commit(&catalog)
            .await
            .expect("set table properties");
    }
}

/// A server process, SIGKILLed when dropped so a failing test leaves none behind.
struct Server(Child);

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
fn spawn_server(
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

async fn wait_healthy(Server(child): &mut Server, metrics: SocketAddr) {
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

/// What the checks accumulate across kills.
#[derive(Default)]
struct Verifier {
    /// Per data file path: the ids it holds (files are immutable: read once).
    file_ids: HashMap<String, Vec<i64>>,
}

/// The outcome of one check.
#[derive(Debug, Default)]
struct Check {
    violations: Vec<String>,
    acked_commits: usize,
    acked_commits_found: usize,
    acked_rows: u64,
    rows_lost: u64,
    snapshots: usize,
    rows: usize,
    /// Tables with a commit cut by the kill (metadata written, pointer not flipped).
    commits_cut: usize,
    /// Retained snapshots made by maintenance (a merge or compaction: not an append).
    maintenance_snapshots: usize,
    /// Per table: rows and the sum of their ids (compared with pyiceberg).
    tables: BTreeMap<String, (usize, i128)>,
}

impl Verifier {
    /// Checks the data dir of a stopped server against what the clients recorded.
    async fn check(
        &mut self,
        dir: &Path,
        streams: &[StreamRecord],
        txns: &[TxnRecord],
        finished: bool,
        s3: Option<&S3Store>,
    ) -> Check {
        let catalog = open_catalog(dir, s3);
        let mut check = Check::default();
        let ns = NamespaceIdent::new(NS.to_string());
        let idents = if catalog.namespace_exists(&ns).await.unwrap() {
            catalog.list_tables(&ns).await.unwrap()
        } else {
            Vec::new()
        };
        let mut ids_of: HashMap<String, Vec<i64>> = HashMap::new();
        let mut snapshots_of: HashMap<String, BTreeSet<i64>> = HashMap::new();
        for ident in idents {
            let name = ident.name().to_string();
            let table = catalog.load_table(&ident).await.unwrap();
            let (ids, snapshots) = self.check_table(&name, &table, finished, &mut check).await;
            check.commits_cut += usize::from(commit_cut_by_kill(&table, s3).await);
            check.tables.insert(
                name.clone(),
                (ids.len(), ids.iter().map(|&i| i as i128).sum()),
            );
            check.rows += ids.len();
            check.snapshots += snapshots.len();
            ids_of.insert(name.clone(), ids);
            snapshots_of.insert(name, snapshots);
        }
        drop(catalog);

        // Streams: acked rows present; present rows a prefix of what was sent.
        let mut owned: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        for s in streams {
            owned
                .entry(s.table.clone())
                .or_default()
                .push((s.start, s.sent_end));
            let ids = ids_of.get(&s.table).map(Vec::as_slice).unwrap_or(&[]);
            let present = in_range(ids, s.start, s.sent_end);
            let prefix = present
                .iter()
                .enumerate()
                .take_while(|(k, id)| **id == s.start + *k as i64)
                .count();
            if prefix != present.len() {
                check.violations.push(format!(
                    "{}: stream from {:#x}: {} rows present but only the first {prefix} form a prefix (hole or doubled row)",
                    s.table,
                    s.start,
                    present.len()
                ));
            }
            check.acked_rows += s.acked_rows;
            let rows_kept = present.len() as u64 >= s.acked_rows;
            if !rows_kept {
                check.rows_lost += s.acked_rows - present.len() as u64;
                check.violations.push(format!(
                    "{}: stream from {:#x}: {} rows acked, {} present: acked rows missing",
                    s.table,
                    s.start,
                    s.acked_rows,
                    present.len()
                ));
            }
            if finished && s.keyed && !s.finished {
                check.violations.push(format!(
                    "{}: exactly-once stream from {:#x} never finished: it was resent after every kill",
                    s.table, s.start
                ));
            }
            if finished && s.finished && present.len() as i64 != s.sent_end - s.start {
                check.violations.push(format!(
                    "{}: finished stream from {:#x}: {} rows sent, {} present",
                    s.table,
                    s.start,
                    s.sent_end - s.start,
                    present.len()
                ));
            }
            let snapshots = snapshots_of.get(&s.table);
            for id in &s.acked_snapshots {
                check.acked_commits += 1;
                // An acked snapshot may have been expired since; its rows must not.
                if rows_kept || snapshots.is_some_and(|set| set.contains(id)) {
                    check.acked_commits_found += 1;
                } else {
                    check
                        .violations
                        .push(format!("{}: acked snapshot {id} is missing", s.table));
                }
            }
        }

        // Transactions: committed → in both tables; not committed → in neither; unknown
        // → all or nothing.
        for t in txns {
            owned
                .entry("txa".into())
                .or_default()
                .push((t.first, t.first + t.rows));
            owned
                .entry("txb".into())
                .or_default()
                .push((t.first + TXB_OFFSET, t.first + TXB_OFFSET + t.rows));
            let count = |table: &str, from: i64| {
                let ids = ids_of.get(table).map(Vec::as_slice).unwrap_or(&[]);
                in_range(ids, from, from + t.rows).len() as i64
            };
            let seen = (count("txa", t.first), count("txb", t.first + TXB_OFFSET));
            let ok = match t.outcome {
                TxnOutcome::Committed => seen == (t.rows, t.rows),
                TxnOutcome::NotCommitted => seen == (0, 0),
                TxnOutcome::Unknown => seen == (0, 0) || seen == (t.rows, t.rows),
            };
            if finished && t.outcome == TxnOutcome::Unknown {
                check.violations.push(format!(
                    "transaction {:#x}: its COMMIT was never answered, though it was retried after every kill",
                    t.first
                ));
            }
            if t.outcome == TxnOutcome::Committed {
                check.acked_commits += 1;
                check.acked_rows += 2 * t.rows as u64;
                if ok {
                    check.acked_commits_found += 1;
                } else {
                    check.rows_lost += (2 * t.rows - seen.0 - seen.1).max(0) as u64;
                }
            }
            if !ok {
                check.violations.push(format!(
                    "transaction {:#x} ({:?}, {} rows a table): (txa, txb) rows present {seen:?}",
                    t.first, t.outcome, t.rows
                ));
            }
        }

        // Nothing present that no client sent, nothing doubled.
        for (table, ids) in &ids_of {
            let mut ranges = owned.remove(table).unwrap_or_default();
            ranges.sort_unstable();
            let mut covered = 0;
            for (from, to) in &ranges {
                covered += in_range(ids, *from, *to).len();
            }
            if covered != ids.len() {
                check.violations.push(format!(
                    "{table}: {} rows outside every range a client sent",
                    ids.len() - covered
                ));
            }
            if ids.windows(2).any(|w| w[0] == w[1]) {
                check
                    .violations
                    .push(format!("{table}: a row is present twice"));
            }
        }
        check
    }

    /// Checks one table; returns its ids (sorted) and snapshot ids.
    async fn check_table(
        &mut self,
        name: &str,
        table: &Table,
        finished: bool,
        check: &mut Check,
    ) -> (Vec<i64>, BTreeSet<i64>) {
        let metadata = table.metadata();
        let snapshots: BTreeSet<i64> = metadata.snapshots().map(|s| s.snapshot_id()).collect();
        let oldest = metadata.snapshots().map(|s| s.sequence_number()).min();

        // Every retained snapshot (expiry keeps few): its files exist with their
        // recorded size and hold the summary's row count, and its parent is retained
        // unless it is the oldest (expiry removes from the old end).
        for &id in &snapshots {
            let snapshot = metadata.snapshot_by_id(id).expect("listed snapshot");
            if snapshot.summary().operation != iceberg::spec::Operation::Append {
                check.maintenance_snapshots += 1;
            }
            if let Some(parent) = snapshot.parent_snapshot_id()
                && !snapshots.contains(&parent)
                && Some(snapshot.sequence_number()) != oldest
            {
                check.violations.push(format!(
                    "{name}: snapshot {id}'s parent {parent} is missing"
                ));
            }
            let tasks = match plan(table, id).await {
                Ok(tasks) => tasks,
                Err(e) => {
                    check
                        .violations
                        .push(format!("{name}: snapshot {id} cannot be planned: {e}"));
                    continue;
                }
            };
            let expected: u64 = snapshot
                .summary()
                .additional_properties
                .get("total-records")
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX);
            let planned: u64 = tasks.iter().filter_map(|t| t.record_count).sum();
            if planned != expected {
                check.violations.push(format!(
                    "{name}: snapshot {id} plans {planned} rows, its summary says {expected}"
                ));
            }
            for task in &tasks {
                // Through the table's FileIO: a local file or an S3 object alike.
                let size = match table.file_io().new_input(&task.data_file_path) {
                    Ok(input) => input.metadata().await.map(|m| m.size),
                    Err(e) => Err(e),
                };
                if size.as_ref().ok() != Some(&task.file_size_in_bytes) {
                    check.violations.push(format!(
                        "{name}: snapshot {id}: data file {} is missing or truncated ({size:?}, recorded {})",
                        task.data_file_path, task.file_size_in_bytes
                    ));
                }
            }
        }

        // The current snapshot holds every data file (fast appends only); each is read
        // once, and must hold its manifest's row count of well-formed rows.
        let Some(current) = metadata.current_snapshot_id() else {
            return (Vec::new(), snapshots);
        };
        let tasks = match plan(table, current).await {
            Ok(tasks) => tasks,
            Err(e) => {
                check
                    .violations
                    .push(format!("{name}: current snapshot cannot be planned: {e}"));
                return (Vec::new(), snapshots);
            }
        };
        let unread: Vec<_> = tasks
            .iter()
            .filter(|t| !self.file_ids.contains_key(&t.data_file_path))
            .cloned()
            .collect();
        let reader = table.reader_builder().build();
        let read = futures::stream::iter(unread)
            .map(|task| {
                let reader = reader.clone();
                async move {
                    let path = task.data_file_path.clone();
                    let rows = task.record_count;
                    let batches: Result<Vec<RecordBatch>, String> =
                        match reader.read(futures::stream::iter([Ok(task)]).boxed()) {
                            Ok(result) => result
                                .stream()
                                .try_collect()
                                .await
                                .map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        };
                    (path, rows, batches)
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        for (path, rows, batches) in read {
            match batches
                .map_err(|e| e.to_string())
                .and_then(|b| ids_of_batches(&b))
            {
                Ok(ids) if Some(ids.len() as u64) == rows => {
                    self.file_ids.insert(path, ids);
                }
                Ok(ids) => check.violations.push(format!(
                    "{name}: data file {path} holds {} rows, its manifest says {rows:?}",
                    ids.len()
                )),
                Err(e) => check
                    .violations
                    .push(format!("{name}: data file {path} does not read back: {e}")),
            }
        }
        let mut ids: Vec<i64> = tasks
            .iter()
            .filter_map(|t| self.file_ids.get(&t.data_file_path))
            .flatten()
            .copied()
            .collect();
        ids.sort_unstable();

        if finished {
            // The whole current snapshot through iceberg's own scan, once at the end.
            let rows: usize = match table.scan().snapshot_id(current).build() {
                Ok(scan) => match scan.to_arrow().await {
                    Ok(stream) => stream
                        .try_collect::<Vec<_>>()
                        .await
                        .map(|b| common::count(&b))
                        .unwrap_or(usize::MAX),
                    Err(_) => usize::MAX,
                },
                Err(_) => usize::MAX,
            };
            if rows != ids.len() {
                check.violations.push(format!(
                    "{name}: a full scan of the current snapshot reads {rows} rows, its files {}",
                    ids.len()
                ));
            }
        }
        (ids, snapshots)
    }
}

/// The file scan tasks of `snapshot_id` (`table.scan().snapshot_id(..)`).
async fn plan(
    table: &Table,
    snapshot_id: i64,
) -> iceberg::Result<Vec<iceberg::scan::FileScanTask>> {
    table
        .scan()
        .snapshot_id(snapshot_id)
        .build()?
        .plan_files()
        .await?
        .try_collect()
        .await
}

/// The ids of `batches`, after checking every row's other columns against its id (as
/// `synthetic_batch` makes them).
fn ids_of_batches(batches: &[RecordBatch]) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for batch in batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| format!("no column {name}"))
        };
        let ids = column("id")?;
        let ids = ids
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or("id is not int64")?;
        let scores = column("score")?;
        let scores = scores
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or("score is not float64")?;
        let names = column("name")?;
        let names = names
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or("name is not utf8")?;
        for row in 0..batch.num_rows() {
            let id = ids.value(row);
            if scores.value(row) != id as f64 * 0.5
                || names.value(row) != format!("name-{:04}", id % 1000)
            {
                return Err(format!("row {id:#x} does not match its id"));
            }
            out.push(id);
        }
    }
    Ok(out)
}

/// The ids of sorted `ids` in `from..to`.
fn in_range(ids: &[i64], from: i64, to: i64) -> &[i64] {
    let lo = ids.partition_point(|&i| i < from);
    let hi = ids.partition_point(|&i| i < to);
    &ids[lo..hi]
}

/// Whether a commit to `table` was cut by the kill: a metadata JSON newer than the
/// current pointer's (its version is higher) exists, so a commit wrote it and its pointer
/// flip never happened. (A later commit after the restart reuses that version, so only
/// the latest kill can leave one.)
async fn commit_cut_by_kill(table: &Table, s3: Option<&S3Store>) -> bool {
    let version = |name: &str| name.split('-').next().and_then(|v| v.parse::<u64>().ok());
    let Some(current) = table
        .metadata_location()
        .and_then(|l| Path::new(l).file_name())
        .and_then(|n| version(&n.to_string_lossy()))
    else {
        return false;
    };
    let dir = format!("{}/metadata", table.metadata().location());
    let names: Vec<String> = match s3 {
        None => std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default(),
        Some(s3) => s3
            .storage()
            .list(&dir)
            .await
            .expect("list metadata objects")
            .into_iter()
            .filter_map(|o| o.location.rsplit('/').next().map(str::to_string))
            .collect(),
    };
    names
        .iter()
        .any(|name| name.ends_with(".metadata.json") && version(name).is_some_and(|v| v > current))
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// pyiceberg's view of every table through the REST catalog at `metrics`: per table the
/// rows and id sum of the current snapshot, after checking its first and middle snapshot
/// against their `total-records` (every snapshot is checked in Rust).
const PYICEBERG_CHECK: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import load_catalog
cat = load_catalog("skade", type="rest", uri=sys.argv[1])
out = {}
for ident in cat.list_tables("crash"):
    t = cat.load_table(ident)
    snaps = t.metadata.snapshots
    for s in ([snaps[0], snaps[len(snaps) // 2]] if snaps else []):
        n = t.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows
        assert n == int(s.summary["total-records"]), (ident, s.snapshot_id, n)
    data = t.scan(selected_fields=("id",)).to_arrow()
    total = pc.sum(data["id"].cast(pa.decimal128(38, 0))).as_py() if data.num_rows else 0
    out[ident[-1]] = [data.num_rows, str(total)]
print(json.dumps(out))
"#;

/// With `SKADE_CRASH_S3=1` the warehouse is on S3: moto's server (from `python()`'s
/// venv, `moto[server]`) on a free port, bucket `crash`. AWS credentials come from the
/// environment (moto takes any): `tests/run.sh` sets them.
struct S3Store {
    _moto: Server,
    /// `http://127.0.0.1:<port>`.
    endpoint: String,
}

const S3_WAREHOUSE: &str = "s3://crash/warehouse";

impl S3Store {
    /// The store as skade's object storage, to list what a killed server left.
    fn storage(&self) -> skade::catalog::object_store::ObjectStorage {
        let props = HashMap::from([
            ("s3.endpoint".to_string(), self.endpoint.clone()),
            ("s3.region".to_string(), "us-east-1".to_string()),
            ("s3.path-style-access".to_string(), "true".to_string()),
        ]);
        skade::catalog::object_store::ObjectStorage::new(&props, None)
    }
}

fn start_s3() -> Option<S3Store> {
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
fn open_catalog(dir: &Path, s3: Option<&S3Store>) -> RedbCatalog {
    let catalog = dir.join("catalog.redb");
    match s3 {
        None => RedbCatalog::open(&catalog, &dir.join("warehouse")),
        Some(s3) => RedbCatalog::open_in(
            &catalog,
            skade::catalog::Warehouse::parse(
                S3_WAREHOUSE,
                skade::catalog::S3Options {
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

fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SKADE_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    venv.exists().then_some(venv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "crash test: run by tests/run.sh (SKADE_CRASH_KILLS=3) or by hand for long runs"]
async fn sigkill_at_random_moments_loses_no_acked_commit() {
    let kills = env_u64("SKADE_CRASH_KILLS").unwrap_or(3);
    let seed = env_u64("SKADE_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });
    let started = Instant::now();
    let mut dir = tempfile::Builder::new()
        .prefix("skade-crash-")
        .tempdir()
        .unwrap();
    // SKADE_CRASH_KEEP=1 keeps the data dir and the server log for inspection.
    dir.disable_cleanup(std::env::var_os("SKADE_CRASH_KEEP").is_some());
    let data_dir = dir.path().join("data");
    let log = dir.path().join("skade.log");
    let s3 = start_s3();
    println!(
        "crash test: {kills} kills, SKADE_CRASH_SEED={seed}, data in {}, warehouse {}",
        data_dir.display(),
        if s3.is_some() { S3_WAREHOUSE } else { "local" }
    );

    precreate_tables(&data_dir, s3.as_ref()).await;
    let (server_tx, _) = watch::channel(None);
    let (parked_tx, mut parked_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        server: server_tx,
        stop: AtomicBool::new(false),
        streams: Mutex::new(Vec::new()),
        txns: Mutex::new(Vec::new()),
        parked: parked_tx,
        errors: Mutex::new(Vec::new()),
        status: Mutex::new(Vec::new()),
    });
    let clients = STREAM_TABLES.len() + 1;
    let mut tasks = Vec::new();
    for client in 0..STREAM_TABLES.len() {
        tasks.push(tokio::spawn(stream_client(client, shared.clone(), seed)));
    }
    tasks.push(tokio::spawn(txn_client(
        STREAM_TABLES.len(),
        shared.clone(),
        seed,
    )));

    let mut tasks = tasks;
    let mut rng = Rng(seed);
    let mut verifier = Verifier::default();
    let mut mid_commit_kills = 0;
    let mut last = Check::default();
    for kill in 1..=kills {
        let (mut server, flight, metrics) = spawn_server(&data_dir, &log, s3.as_ref(), &[], &[]);
        wait_healthy(&mut server, metrics).await;
        shared
            .server
            .send_replace(Some(Generation { n: kill, flight }));
        let run = Duration::from_millis(rng.range(300, 1500));
        tokio::time::sleep(run).await;
        server.0.kill().expect("SIGKILL skade");
        server.0.wait().expect("reap skade");
        shared.server.send_replace(None);
        // Every client must have seen the kill before the data dir is checked.
        let mut seen = BTreeSet::new();
        while seen.len() < clients {
            let parked = tokio::time::timeout(Duration::from_secs(60), parked_rx.recv()).await;
            if let Some(i) = tasks.iter().position(|t| t.is_finished()) {
                let ended = tasks.remove(i).await;
                panic!("client task ended during generation {kill}: {ended:?}");
            }
            let Ok(Some((client, generation))) = parked else {
                panic!(
                    "clients {:?} did not notice kill {kill}; seen {seen:?}; status {:?}",
                    (0..clients)
                        .filter(|c| !seen.contains(c))
                        .collect::<Vec<_>>(),
                    lock(&shared.status)
                );
            };
            if generation == kill {
                seen.insert(client);
            }
        }
        let parked_at = Instant::now();
        let streams = lock(&shared.streams).clone();
        let txns = lock(&shared.txns).clone();
        let check = verifier
            .check(&data_dir, &streams, &txns, false, s3.as_ref())
            .await;
        let checked_in = parked_at.elapsed();
        if check.commits_cut > 0 {
            mid_commit_kills += 1;
        }
        println!(
            "kill {kill} after {run:?}: {} acked commits ({} found), {} rows acked, {} lost; {} snapshots ({} by maintenance), {} rows; {} kills mid-commit so far; checked in {checked_in:.1?}",
            check.acked_commits,
            check.acked_commits_found,
            check.acked_rows,
            check.rows_lost,
            check.snapshots,
            check.maintenance_snapshots,
            check.rows,
            mid_commit_kills
        );
        assert!(
            check.violations.is_empty(),
            "after kill {kill} (seed {seed}, log {}):\n{}",
            log.display(),
            check.violations.join("\n")
        );
        last = check;
    }

    // The end: a last server; the clients finish their streams cleanly and stop.
    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, s3.as_ref(), &[], &[]);
    wait_healthy(&mut server, metrics).await;
    shared.server.send_replace(Some(Generation {
        n: kills + 1,
        flight,
    }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    shared.stop.store(true, Ordering::SeqCst);
    shared.server.send_modify(|_| {}); // wake clients waiting for a server
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("clients finish")
            .expect("client task");
    }
    println!("clients finished at {:.1?}", started.elapsed());
    let errors = lock(&shared.errors).clone();
    let unexpected: Vec<_> = errors.iter().filter(|e| e.1 > kills).collect();
    assert!(
        unexpected.is_empty(),
        "client failures with no kill to blame: {unexpected:?}"
    );
    // pyiceberg reads every table through the REST catalog of the running server.
    let pyiceberg = match python() {
        Some(python) => {
            let out = Command::new(&python)
                .args(["-c", PYICEBERG_CHECK, &format!("http://{metrics}")])
                .output()
                .expect("run python");
            assert!(
                out.status.success(),
                "pyiceberg check failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let parsed: BTreeMap<String, (usize, String)> =
                serde_json::from_slice(&out.stdout).expect("pyiceberg's JSON");
            Some(parsed)
        }
        None => {
            println!("pyiceberg check skipped: no SKADE_PYTHON and no .venv/bin/python");
            None
        }
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let status = server.0.wait().expect("reap skade");
    assert!(status.success(), "skade exit after SIGTERM: {status}");

    println!("pyiceberg done at {:.1?}", started.elapsed());
    let streams = lock(&shared.streams).clone();
    let txns = lock(&shared.txns).clone();
    let check = verifier
        .check(&data_dir, &streams, &txns, true, s3.as_ref())
        .await;
    println!("final check done at {:.1?}", started.elapsed());
    assert!(
        check.violations.is_empty(),
        "at the end (seed {seed}, log {}):\n{}",
        log.display(),
        check.violations.join("\n")
    );
    if let Some(pyiceberg) = pyiceberg {
        let ours: BTreeMap<String, (usize, String)> = check
            .tables
            .iter()
            .map(|(t, (rows, sum))| (t.clone(), (*rows, sum.to_string())))
            .collect();
        assert_eq!(pyiceberg, ours, "pyiceberg and iceberg-rust disagree");
    }
    let finished_streams = streams.iter().filter(|s| s.finished).count();
    println!(
        "CRASH RESULT: kills {kills}, commits acked {}, acked commits found {}, rows acked {}, rows lost {}, snapshots {}, rows {}, streams {} ({finished_streams} finished), transactions {} ({} committed), kills mid-commit {mid_commit_kills}, seed {seed}, {:.0?}",
        check.acked_commits,
        check.acked_commits_found,
        check.acked_rows,
        check.rows_lost,
        check.snapshots,
        check.rows,
        streams.len(),
        txns.len(),
        txns.iter()
            .filter(|t| t.outcome == TxnOutcome::Committed)
            .count(),
        started.elapsed()
    );
    assert_eq!(check.rows_lost, 0);
    assert_eq!(check.acked_commits, check.acked_commits_found);
    assert!(check.acked_commits >= last.acked_commits);
    assert!(
        kills == 0 || last.acked_commits > 0,
        "the workload committed nothing"
    );
}

/// One keyed put of `batches` (`(first id, rows)`, numbered from 1) as `writer` into
/// `crash.<table>`: the acks received, and how the put ended.
async fn keyed_put(
    flight: SocketAddr,
    table: &str,
    writer: &str,
    batches: &[(i64, i64)],
) -> (Vec<CommitAck>, Result<(), String>) {
    let mut client = common::client_at(flight).await;
    client.add_header("x-skade-writer-id", writer).unwrap();
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            NS.to_string(),
            table.to_string(),
        ])))
        .build(futures::stream::iter(
            batches
                .iter()
                .map(|&(id, rows)| Ok(synthetic_batch(id, rows as usize)))
                .collect::<Vec<_>>(),
        ))
        .enumerate()
        .map(|(i, data)| {
            data.map(|mut data| {
                if i > 0 {
                    data.app_metadata = i.to_string().into();
                }
                data
            })
        });
    let mut acks = Vec::new();
    let mut results = match client.do_put(data).await {
        Ok(results) => results,
        Err(e) => return (acks, Err(e.to_string())),
    };
    while let Some(result) = results.next().await {
        match result {
            Ok(result) => acks.push(CommitAck::decode(result.app_metadata).expect("ack")),
            Err(e) => return (acks, Err(e.to_string())),
        }
    }
    (acks, Ok(()))
}

/// A keyed put whose server dies right after its second commit became durable and
/// before that commit's ack (the `SKADE_FAULT_KILL_AFTER_COMMITS` hook, a SIGKILL from
/// inside): after a restart the `skade.v1.WriterMarks` action reports the sequence the
/// unacked commit made durable, and a resend of the whole stream lands every row exactly
/// once — the durable part skipped as replays, the rest in one more snapshot. Catches a
/// retry doubling the rows of a commit whose ack was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "crash test: run by tests/run.sh"]
async fn a_kill_between_commit_and_ack_then_a_resend_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let (data_dir, log) = (dir.path().join("data"), dir.path().join("skade.log"));
    // 6 batches, 2 per commit: commits end at sequences 2, 4 and 6.
    let batches: Vec<(i64, i64)> = (0..6).map(|i| (i * 10, 10)).collect();
    let quiet = ["--maintenance", "false"];
    let fault = [(skade::catalog::fault::KILL_AFTER_COMMITS, "2")];
    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, None, &fault, &quiet);
    wait_healthy(&mut server, metrics).await;
    let (acks, ended) = keyed_put(flight, "acks", "w", &batches).await;
    assert!(ended.is_err(), "the server died mid-put");
    let status = server.0.wait().expect("reap skade");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "killed by the fault hook: {status}"
    );
    assert!(
        acks.iter().all(|a| a.committed_sequence <= 2),
        "the second commit's ack never left: {acks:?}"
    );
    drop(server);

    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, None, &[], &quiet);
    wait_healthy(&mut server, metrics).await;
    let mut client = common::client_at(flight).await;
    let reply: Vec<bytes::Bytes> = client
        .do_action(arrow_flight::Action::new("skade.v1.WriterMarks", "w"))
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&reply[0]).unwrap();
    assert_eq!(
        reply["marks"][0]["sequence"], 4,
        "the unacked commit is durable: {reply}"
    );
    let (acks, ended) = keyed_put(flight, "acks", "w", &batches).await;
    ended.expect("the resend succeeds");
    let last = acks.last().expect("a final ack");
    assert_eq!((last.committed_rows, last.committed_sequence), (20, 6));
    let read = common::get(&mut client, &[NS, "acks"]).await;
    let mut ids = ids_of_batches(&read).unwrap();
    ids.sort_unstable();
    assert_eq!(ids, (0..60).collect::<Vec<i64>>(), "every row exactly once");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    server.0.wait().expect("reap skade");
}

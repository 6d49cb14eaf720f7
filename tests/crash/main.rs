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
//! - 1 Flight SQL client: transactions that ingest the same id range into `crash.txa`
//!   and `crash.txb`, then COMMIT (3 in 4) or ROLLBACK.
//!
//! After every kill, with the server dead, the test opens the catalog itself and checks:
//! - every acked commit is there: each acked snapshot id is a snapshot of its table, and
//!   each stream's acked rows are present; a stream's present rows are a prefix of what
//!   it sent (no hole, nothing doubled, nothing that was never sent);
//! - every snapshot of every table reads back completely: for each snapshot
//!   (`table.scan().snapshot_id(..)`) the planned files exist with their recorded size
//!   and hold the summary's `total-records`; every data file (all are in the current
//!   snapshot: fast appends only) is read once and holds its manifest's row count of
//!   well-formed rows; no snapshot seen after an earlier kill is gone;
//! - transactions: a COMMIT that answered OK is in both tables; one never sent (or a
//!   ROLLBACK) left nothing visible; one cut off by the kill is in both tables or neither.
//!
//! At the end the clients finish their streams cleanly (final acks must then cover every
//! row sent), pyiceberg reads every table through the REST catalog of a restarted server
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
async fn stream_client(client: usize, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed ^ (client as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut next_id = client_base(client as i64);
    let mut rx = shared.server.subscribe();
    let mut failed_gen = 0;
    while let Some(generation) = next_server(&mut rx, failed_gen, &shared).await {
        let result = stream_once(generation, client, &mut next_id, &mut rng, &shared).await;
        match result {
            Ok(()) if shared.stop.load(Ordering::SeqCst) => return,
            Ok(()) => park_if_gone(&shared, &rx, client, generation, &mut failed_gen),
            Err(e) => {
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
    next_id: &mut i64,
    rng: &mut Rng,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    let table = STREAM_TABLES[client];
    status(shared, client, format!("gen {}: connecting", generation.n));
    let channel = channel(generation.flight).await?;
    let mut flight = arrow_flight::FlightClient::new(channel);
    let index = {
        let mut streams = lock(&shared.streams);
        streams.push(StreamRecord {
            table: table.to_string(),
            start: *next_id,
            sent_end: *next_id,
            acked_rows: 0,
            acked_snapshots: Vec::new(),
            finished: false,
        });
        streams.len() - 1
    };
    let (batch_tx, batch_rx) = mpsc::channel::<RecordBatch>(2);
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            NS.to_string(),
            table.to_string(),
        ])))
        .build(ReceiverStream::new(batch_rx).map(Ok));
    let acks_shared = shared.clone();
    let acks = tokio::spawn(async move {
        let mut results = flight.do_put(data).await.map_err(|e| e.to_string())?;
        while let Some(result) = results.next().await {
            let result = result.map_err(|e| e.to_string())?;
            let ack = CommitAck::decode(result.app_metadata).map_err(|e| e.to_string())?;
            let mut streams = lock(&acks_shared.streams);
            let record = &mut streams[index];
            record.acked_rows = ack.committed_rows;
            if ack.r#final {
                record.finished = true;
            } else {
                record.acked_snapshots.push(ack.snapshot_id);
            }
        }
        Ok::<(), String>(())
    });
    let batches = rng.range(3, 25);
    for _ in 0..batches {
        let rows = rng.range(1, 40) as i64;
        status(
            shared,
            client,
            format!("gen {}: sending {:#x}", generation.n, *next_id),
        );
        lock(&shared.streams)[index].sent_end = *next_id + rows;
        let send = batch_tx.send(synthetic_batch(*next_id, rows as usize));
        if rpc("send", send).await.is_err() {
            break; // the put ended (the server died); its task reports why
        }
        *next_id += rows;
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
    // Ids handed to this stream are never reused, even if they were not all sent.
    *next_id = lock(&shared.streams)[index].sent_end;
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

/// The Flight SQL client: transactions over `txa` and `txb` until stopped.
async fn txn_client(client: usize, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed ^ 0x5151_5151);
    let mut rx = shared.server.subscribe();
    let mut failed_gen = 0;
    let mut txn_no = 0i64;
    while let Some(generation) = next_server(&mut rx, failed_gen, &shared).await {
        txn_no += 1;
        match txn_once(generation, client, txn_no, &mut rng, &shared).await {
            Ok(()) if shared.stop.load(Ordering::SeqCst) => return,
            Ok(()) => {
                tokio::time::sleep(Duration::from_millis(rng.range(0, 30))).await;
                park_if_gone(&shared, &rx, client, generation, &mut failed_gen);
            }
            Err(e) => {
                failed_gen = generation.n;
                failed(&shared, client, generation.n, e);
            }
        }
    }
}

async fn txn_once(
    generation: Generation,
    client: usize,
    txn_no: i64,
    rng: &mut Rng,
    shared: &Arc<Shared>,
) -> Result<(), String> {
    let mut sql = FlightSqlServiceClient::new(channel(generation.flight).await?);
    let first = client_base(TXN_CLIENT) + txn_no * 1000;
    let rows = rng.range(1, 300) as i64;
    let index = {
        let mut txns = lock(&shared.txns);
        txns.push(TxnRecord {
            first,
            rows,
            outcome: TxnOutcome::NotCommitted,
        });
        txns.len() - 1
    };
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
        let batch = synthetic_batch(first + offset, rows as usize);
        rpc(
            "ingest",
            sql.execute_ingest(ingest_cmd(table, &txn), futures::stream::iter([Ok(batch)])),
        )
        .await?;
    }
    if rng.range(0, 4) == 0 {
        return rpc(
            "rollback",
            sql.end_transaction(txn, EndTransaction::Rollback),
        )
        .await;
    }
    lock(&shared.txns)[index].outcome = TxnOutcome::Unknown;
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

/// Starts `skade serve` on `dir` with small, frequent commits; its log goes to `log`.
fn spawn_server(dir: &Path, log: &Path, s3: Option<&S3Store>) -> (Server, SocketAddr, SocketAddr) {
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
        // Table maintenance runs (merging, compaction, cleanup), but snapshot expiry's
        // count bound is off: the checks follow every acked snapshot id, and an expired
        // one would read as lost. Expiry under kills is not covered here yet.
        .args(["--max-snapshots", "0"])
        .env("RUST_LOG", "warn")
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
    /// Per table: snapshot ids seen so far (none may disappear).
    snapshots: HashMap<String, BTreeSet<i64>>,
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
            if (present.len() as u64) < s.acked_rows {
                check.rows_lost += s.acked_rows - present.len() as u64;
                check.violations.push(format!(
                    "{}: stream from {:#x}: {} rows acked, {} present: acked rows missing",
                    s.table,
                    s.start,
                    s.acked_rows,
                    present.len()
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
                if snapshots.is_some_and(|set| set.contains(id)) {
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
        let known = self.snapshots.entry(name.to_string()).or_default();
        for lost in known.difference(&snapshots) {
            check.violations.push(format!(
                "{name}: snapshot {lost} seen after an earlier kill is gone"
            ));
        }
        let new: Vec<i64> = snapshots.difference(known).copied().collect();
        *known = snapshots.clone();

        // Every new snapshot: its files exist with their recorded size and hold the
        // summary's row count.
        let mut files_of_snapshots = BTreeSet::new();
        for id in new {
            let snapshot = metadata.snapshot_by_id(id).expect("listed snapshot");
            if let Some(parent) = snapshot.parent_snapshot_id()
                && !snapshots.contains(&parent)
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
                files_of_snapshots.insert(task.data_file_path.clone());
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
        let current_files: BTreeSet<&String> = tasks.iter().map(|t| &t.data_file_path).collect();
        for file in &files_of_snapshots {
            if !current_files.contains(file) {
                check.violations.push(format!(
                    "{name}: data file {file} of an older snapshot is not in the current one"
                ));
            }
        }
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
        let (mut server, flight, metrics) = spawn_server(&data_dir, &log, s3.as_ref());
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
            "kill {kill} after {run:?}: {} acked commits ({} found), {} rows acked, {} lost; {} snapshots, {} rows; {} kills mid-commit so far; checked in {checked_in:.1?}",
            check.acked_commits,
            check.acked_commits_found,
            check.acked_rows,
            check.rows_lost,
            check.snapshots,
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
    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, s3.as_ref());
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

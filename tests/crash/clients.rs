//! The workload of the random-kill scenario: streaming clients (some exactly-once), the
//! Flight SQL transaction client, what they record for the checks, and the tables created
//! before the first server.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::EndTransaction;
use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::StreamExt;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use prost::Message;
use skade::proto::CommitAck;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::common::{self, synthetic_batch, synthetic_schema};
use crate::server::*;

pub(crate) const NS: &str = "crash";
/// The streaming clients' tables (index = client).
pub(crate) const STREAM_TABLES: [&str; 5] = ["s0", "s1", "shared", "shared", "txa"];
/// The streaming clients that are exactly-once producers (writer id `crash-<client>`,
/// batches numbered): after a kill they resend their unfinished stream whole, and every
/// row of it must land exactly once.
pub(crate) const KEYED_CLIENTS: [usize; 2] = [0, 2];
/// The table created before the first server with `write.target-file-size-bytes` set
/// (64 KiB), so its files are cut by the commit deadline and are small enough for
/// compaction to rewrite while the server is killed around it.
pub(crate) const COMPACTED_TABLE: &str = "s0";
/// The transaction client's id space, as a client number.
pub(crate) const TXN_CLIENT: i64 = 100;
/// Offset of a transaction's rows in `txb` from its rows in `txa`.
pub(crate) const TXB_OFFSET: i64 = 500;

pub(crate) fn client_base(client: i64) -> i64 {
    (client + 1) << 40
}

/// A tiny deterministic PRNG (xorshift64*), so a failing run can be replayed by seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// One server process's Flight address; `n` counts starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Generation {
    pub(crate) n: u64,
    pub(crate) flight: SocketAddr,
}

/// What one DoPut stream sent and was promised.
#[derive(Debug, Clone)]
pub(crate) struct StreamRecord {
    pub(crate) table: String,
    /// First id of the stream.
    pub(crate) start: i64,
    /// One past the last id handed to the stream (some may never have left the client).
    pub(crate) sent_end: i64,
    /// `committed_rows` of the last ack received: the first `acked_rows` ids are durable.
    pub(crate) acked_rows: u64,
    /// Snapshot ids of the commit acks received.
    pub(crate) acked_snapshots: Vec<i64>,
    /// The final ack arrived: the server read and committed the whole stream.
    pub(crate) finished: bool,
    /// An exactly-once stream ([`KEYED_CLIENTS`]): resent after each failure until it
    /// finishes, so at the end all its rows must be present exactly once.
    pub(crate) keyed: bool,
}

/// One stream a client means to send: its batches `(first id, rows)`, numbered from
/// `first_sequence` when keyed.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) table: &'static str,
    /// Index of its [`StreamRecord`] in `Shared::streams`.
    pub(crate) record: usize,
    pub(crate) batches: Vec<(i64, i64)>,
    pub(crate) first_sequence: u64,
    pub(crate) writer: Option<String>,
}

impl Plan {
    /// Plans the next stream of `client` (3..25 batches of 1..40 rows) and records it.
    pub(crate) fn new(
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
    pub(crate) fn rows_through(&self, sequence: u64) -> u64 {
        let n = sequence
            .saturating_add(1)
            .saturating_sub(self.first_sequence) as usize;
        self.batches.iter().take(n).map(|b| b.1 as u64).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnOutcome {
    /// COMMIT was never sent, or ROLLBACK was: nothing may be visible.
    NotCommitted,
    /// COMMIT answered OK: everything must be visible.
    Committed,
    /// COMMIT was sent and got no answer (the kill): all or nothing.
    Unknown,
}

#[derive(Debug, Clone)]
pub(crate) struct TxnRecord {
    /// First id in `txa`; `txb` gets the same rows at `+ TXB_OFFSET`.
    pub(crate) first: i64,
    pub(crate) rows: i64,
    pub(crate) outcome: TxnOutcome,
}

/// What the clients and the orchestrator share.
pub(crate) struct Shared {
    pub(crate) server: watch::Sender<Option<Generation>>,
    pub(crate) stop: AtomicBool,
    pub(crate) streams: Mutex<Vec<StreamRecord>>,
    pub(crate) txns: Mutex<Vec<TxnRecord>>,
    /// Clients report `(client, generation)` once they saw that generation's server die.
    pub(crate) parked: mpsc::UnboundedSender<(usize, u64)>,
    /// Client failures: `(client, generation, error)`.
    pub(crate) errors: Mutex<Vec<(usize, u64, String)>>,
    /// What each client is doing, for diagnosing a hang.
    pub(crate) status: Mutex<Vec<String>>,
}

pub(crate) fn status(shared: &Shared, client: usize, what: impl Into<String>) {
    let mut status = lock(&shared.status);
    if status.len() <= client {
        status.resize(client + 1, String::new());
    }
    status[client] = what.into();
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits for a server newer than `after`; `None` once stopping (no newer one comes).
pub(crate) async fn next_server(
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
pub(crate) fn failed(shared: &Shared, client: usize, generation: u64, error: String) {
    lock(&shared.errors).push((client, generation, error));
    let _ = shared.parked.send((client, generation));
}

/// How long a client waits for one RPC before it counts as failed. A killed server's
/// connections reset at once; this only bounds odd cases (e.g. the dead server's port
/// taken over by another process that never answers).
pub(crate) const RPC_TIMEOUT: Duration = Duration::from_secs(20);

pub(crate) async fn rpc<T, E: std::fmt::Display>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(RPC_TIMEOUT, call).await {
        Ok(result) => result.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer in {RPC_TIMEOUT:?}")),
    }
}

pub(crate) async fn channel(addr: SocketAddr) -> Result<Channel, String> {
    Channel::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// A streaming client: streams until stopped; after a failure waits for the next server.
/// A keyed client resends a failed stream whole on the next server.
pub(crate) async fn stream_client(client: usize, shared: Arc<Shared>, seed: u64) {
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
pub(crate) fn park_if_gone(
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

pub(crate) async fn stream_once(
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

/// One transaction the Flight SQL client means to make: `rows` rows into `txa` and
/// `txb`, committed (keyed: writer `crash-txn`, sequence `txn_no`) or rolled back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxnPlan {
    pub(crate) txn_no: i64,
    pub(crate) rows: i64,
    pub(crate) rollback: bool,
    /// Index of its [`TxnRecord`] in `Shared::txns`.
    pub(crate) record: usize,
}

/// The Flight SQL client: transactions over `txa` and `txb` until stopped. It is an
/// exactly-once producer: a transaction to commit that failed (its COMMIT maybe landed)
/// is made again, same rows and sequence, on the next server until it commits.
pub(crate) async fn txn_client(client: usize, shared: Arc<Shared>, seed: u64) {
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

pub(crate) async fn txn_once(
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
            sql.execute_ingest(
                common::ingest_cmd(NS, table, Some(&txn)),
                futures::stream::iter([Ok(batch)]),
            ),
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

/// Creates, before any server runs, the tables whose properties make maintenance busy:
/// [`COMPACTED_TABLE`] with `write.target-file-size-bytes` = 64 KiB (files cut by the
/// commit deadline, small enough to compact) and it and `shared` with
/// `commit.manifest.min-count-to-merge` = 4. The other tables are created by their first
/// put, as users do.
pub(crate) async fn precreate_tables(data_dir: &Path, s3: Option<&S3Store>) {
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

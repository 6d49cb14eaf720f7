//! Flight SQL transactions (docs/SERVICE.md, Lane 2): the registry of open transactions, keyed
//! by id and by the caller's session, and what ends them.
//!
//! A transaction holds, per table, data files already encoded and written (so memory stays
//! bounded) and not yet visible. `EndTransaction(COMMIT)` makes every table's files ONE
//! snapshot of that table, all tables in ONE redb write transaction
//! ([`write::ingest_multi_commit`], which each table's `TxnTable::part` is handed to);
//! rollback, the idle timeout, a failed ingest or `CloseSession`
//! make nothing visible and delete the staged files (best effort).
//!
//! Ids are random UUIDv4 bytes. The ADBC driver never sends its transaction id with an
//! ingest, so each transaction is also registered under its session ([`SessionKey`]): an
//! ingest without an id joins its session's transaction. A session stays tied to a
//! transaction that failed or timed out until it rolls back, begins anew or closes, so an
//! ingest after such a failure is an error, never a silent autocommit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use iceberg::TableIdent;
use iceberg::table::Table;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::Service;
use super::exactly_once::TxnKey;
use crate::catalog::marks;
use crate::error::Error;
use crate::metrics::{self, Metrics};
use crate::storage::file_store::FileStore;
use crate::write::{self, FileNames, IngestStats, StagedTable};

/// The gRPC header a client may set to name its session explicitly (e.g. with ADBC's
/// `adbc.flight.sql.rpc.call_header.x-skade-session` database option). Without it the
/// session is the client's connection (its peer address).
pub const SESSION_HEADER: &str = "x-skade-session";

/// How finished transactions are remembered (to answer "already committed" rather than
/// "unknown"): at least this long, and at least the transaction timeout.
const FINISHED_RETENTION: Duration = Duration::from_secs(600);

/// What ties requests to one client session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionKey {
    /// The value of the [`SESSION_HEADER`] header.
    Header(String),
    /// The client's connection: its peer address.
    Peer(SocketAddr),
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionKey::Header(value) => write!(f, "header:{value}"),
            SessionKey::Peer(addr) => write!(f, "peer:{addr}"),
        }
    }
}

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnEnd {
    /// `EndTransaction` or a timeout is ending it right now.
    Ending,
    /// Committed: its tables are visible.
    Committed,
    /// Rolled back by the client (`EndTransaction(ROLLBACK)` or `CloseSession`).
    RolledBack,
    /// Rolled back after being idle longer than `--transaction-timeout`.
    TimedOut,
    /// An ingest or the commit failed; nothing of it is visible.
    Failed(String),
}

impl std::fmt::Display for TxnEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnEnd::Ending => write!(f, "is being ended"),
            TxnEnd::Committed => write!(f, "was committed"),
            TxnEnd::RolledBack => write!(f, "was rolled back"),
            TxnEnd::TimedOut => write!(f, "was rolled back after its idle timeout"),
            TxnEnd::Failed(reason) => write!(f, "failed and was rolled back ({reason})"),
        }
    }
}

/// One table's part of a transaction: what its commit takes, and what the transaction
/// needs of the table until then.
#[derive(Debug)]
pub(crate) struct TxnTable {
    /// What the commit takes ([`write::ingest_multi_commit`]): the table's base handle (its
    /// planned handle when the commit creates it), the files written and not yet visible
    /// in write order, and the schema this transaction's ingests evolved the table to
    /// (committed with the files), when the table opted in.
    pub(crate) part: StagedTable,
    /// Names the transaction's files of this table in write order.
    pub(crate) names: FileNames,
    /// Where the table's files are stored (what a discard removes them through).
    pub(crate) store: FileStore,
}

/// The staged contents of a transaction (or of one autocommit ingest).
#[derive(Debug, Default)]
pub(crate) struct TxnState {
    /// Tables in the order they were first ingested into.
    pub(crate) tables: Vec<TxnTable>,
    /// Set when an ingest failed or did not finish: the transaction can only roll back.
    pub(crate) failure: Option<String>,
}

impl TxnState {
    /// The staged entry of `ident`.
    pub(crate) fn table_mut(&mut self, ident: &TableIdent) -> Option<&mut TxnTable> {
        self.tables
            .iter_mut()
            .find(|s| s.part.table.identifier() == ident)
    }

    /// Deletes every staged data file (best effort, through the table's storage: the
    /// filesystem or the object store) and forgets them.
    pub(crate) async fn discard(&mut self) {
        for staged in self.tables.drain(..) {
            let (part, store) = (&staged.part, &staged.store);
            let paths: Vec<_> = part
                .data_files
                .iter()
                .filter_map(|file| store.path_of(file.file_path()))
                .collect();
            if let Err(e) = store.remove(paths).await {
                warn!(table = %part.table.identifier(), error = %e, "cannot delete staged data files");
            }
            if part.create {
                // A planned table owns its directories only while they are empty (an
                // object store has none).
                if let Some(location) = store.path_of(part.table.metadata().location()) {
                    store.remove_empty_dirs(vec![location]).await;
                }
            }
        }
    }

    /// Whether every staged table with files already holds `key`'s sequence.
    async fn is_replay(&self, svc: &Service, key: &TxnKey) -> Result<bool, Error> {
        let mut any = false;
        for staged in self.tables.iter().filter(|s| !s.part.data_files.is_empty()) {
            let ident = staged.part.table.identifier();
            let mark = svc
                .catalog
                .writer_mark(&key.writer, ident)
                .await
                .map_err(|e| Error::catalog(ident, e))?;
            if mark.is_none_or(|m| m.sequence < key.sequence) {
                return Ok(false);
            }
            any = true;
        }
        Ok(any)
    }

    /// Commits every staged table in ONE redb write transaction and records the commit
    /// on `lane`. A failed commit deletes the staged files when the catalog says nothing
    /// was committed (a conflict, a table created meanwhile, a rejected update).
    ///
    /// With `key` (exactly-once), a commit whose every table already holds the writer's
    /// sequence is a replay: it writes nothing, deletes the staged files and succeeds.
    /// Otherwise every new snapshot names the writer and sequence, and the catalog
    /// advances the writer's mark of each table in the same redb transaction (refusing
    /// the commit, `FailedPrecondition`, if a table already holds the sequence).
    pub(crate) async fn commit(
        &mut self,
        svc: &Service,
        lane: &str,
        key: Option<&TxnKey>,
    ) -> Result<(Vec<Table>, IngestStats), Error> {
        if let Some(reason) = &self.failure {
            return Err(Error::TransactionAborted {
                reason: reason.clone(),
            });
        }
        let mut mark = None;
        if let Some(key) = key {
            if self.is_replay(svc, key).await? {
                info!(writer = %key.writer, sequence = key.sequence, "replayed commit skipped");
                svc.metrics.record_commit_replayed(lane);
                self.discard().await;
                return Ok((Vec::new(), IngestStats::default()));
            }
            super::exactly_once::admit_writer(svc, &key.writer).await?;
            mark = Some(marks::WriterRange {
                writer: key.writer.clone(),
                first: key.sequence,
                last: key.sequence,
            });
        }
        // A copy: a failed commit's files are still the transaction's to discard.
        let staged: Vec<StagedTable> = self.tables.iter().map(|s| s.part.clone()).collect();
        let started = Instant::now();
        match write::ingest_multi_commit(&svc.catalog, staged, mark).await {
            Ok((tables, stats)) => {
                if stats.commits > 0 {
                    self.record_committed(svc, lane, &tables, &stats, started.elapsed());
                }
                self.tables.clear();
                Ok((tables, stats))
            }
            Err(e) => {
                if e.committed_nothing() {
                    self.discard().await;
                }
                Err(e.into())
            }
        }
    }

    /// Counts and logs a commit of this transaction's staged tables that made `tables`
    /// advance by `stats` in `elapsed`.
    fn record_committed(
        &self,
        svc: &Service,
        lane: &str,
        tables: &[Table],
        stats: &IngestStats,
        elapsed: std::time::Duration,
    ) {
        let seconds = elapsed.as_secs_f64();
        let per_table: Vec<(String, IngestStats)> = self
            .tables
            .iter()
            .map(|s| {
                let one = IngestStats::of_commit(&s.part.data_files);
                (s.part.table.identifier().to_string(), one)
            })
            .collect();
        svc.metrics.record_tables_commit(lane, &per_table, seconds);
        let join = |parts: Vec<String>| parts.join(",");
        info!(
            table = %join(tables.iter().map(|t| t.identifier().to_string()).collect()),
            snapshot_id = %join(
                tables
                    .iter()
                    .map(|t| {
                        t.metadata()
                            .current_snapshot_id()
                            .map(|id| id.to_string())
                            .unwrap_or_default()
                    })
                    .collect()
            ),
            rows = stats.rows,
            files = stats.files,
            bytes = stats.bytes,
            seconds,
            lane,
            "committed"
        );
    }
}

/// One open transaction.
#[derive(Debug)]
pub(crate) struct Txn {
    /// Its id (the bytes clients send back).
    pub(crate) id: Uuid,
    session: Option<SessionKey>,
    /// Its staged tables. An ingest holds the lock for its whole stream, so ingests into
    /// one transaction run one after the other and `EndTransaction` waits for them.
    pub(crate) state: tokio::sync::Mutex<TxnState>,
    last_active: Mutex<Instant>,
    /// Keeps online cleanup off the files this transaction stages until it ends.
    _pin: crate::catalog::WritePin,
}

impl Txn {
    /// Records activity (resets the idle timeout).
    pub(crate) fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_active).elapsed()
    }
}

#[derive(Debug, Default)]
struct Registry {
    open: HashMap<Uuid, Arc<Txn>>,
    finished: HashMap<Uuid, (TxnEnd, Instant)>,
    sessions: HashMap<SessionKey, Uuid>,
}

impl Registry {
    /// Takes the open transaction `id` out of the open set for ending it; later lookups
    /// see it as ending. `None` when it is not open.
    fn mark_ending(&mut self, id: Uuid) -> Option<Arc<Txn>> {
        let txn = self.open.remove(&id)?;
        self.finished.insert(id, (TxnEnd::Ending, Instant::now()));
        Some(txn)
    }

    /// [`Self::mark_ending`] for every open transaction `which` selects.
    fn take_open(&mut self, which: impl Fn(&Txn) -> bool) -> Vec<Arc<Txn>> {
        let ids: Vec<Uuid> = self
            .open
            .values()
            .filter(|t| which(t))
            .map(|t| t.id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.mark_ending(id))
            .collect()
    }
}

/// Every transaction of one server.
#[derive(Debug)]
pub struct Transactions {
    registry: Mutex<Registry>,
    timeout: Duration,
    max_open: usize,
    metrics: Metrics,
}

/// What an ingest runs in.
#[derive(Debug)]
pub(crate) enum Target {
    /// An open transaction.
    Txn(Arc<Txn>),
    /// No transaction: commit when the ingest ends.
    Autocommit,
}

impl Transactions {
    /// An empty registry of at most `max_open` open transactions, which roll back after
    /// `timeout` without activity, counted on `metrics`' `skade_transactions_active` gauge.
    pub fn new(timeout: Duration, max_open: usize, metrics: &Metrics) -> Self {
        Self {
            registry: Mutex::new(Registry::default()),
            timeout,
            max_open,
            metrics: metrics.clone(),
        }
    }

    /// The idle timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Open transactions right now.
    pub fn open_count(&self) -> usize {
        lock(&self.registry).open.len()
    }

    /// Opens a transaction and makes it `session`'s current one; returns its id.
    ///
    /// # Errors
    /// [`Error::LimitReached`] when `max_open` transactions are open already.
    pub(crate) fn begin(
        &self,
        session: Option<SessionKey>,
        pin: crate::catalog::WritePin,
    ) -> Result<Uuid, Error> {
        let id = Uuid::new_v4();
        let txn = Arc::new(Txn {
            id,
            session: session.clone(),
            state: tokio::sync::Mutex::new(TxnState::default()),
            last_active: Mutex::new(Instant::now()),
            _pin: pin,
        });
        let mut registry = lock(&self.registry);
        if registry.open.len() >= self.max_open {
            return Err(Error::LimitReached {
                what: "open Flight SQL transactions",
                limit: self.max_open,
                flag: "--max-transactions",
            });
        }
        registry.open.insert(id, txn);
        if let Some(session) = &session {
            registry.sessions.insert(session.clone(), id);
        }
        self.metrics.set_transactions_open(registry.open.len());
        // At debug: the ADBC driver begins one on every connect and after every end.
        debug!(
            transaction = %id,
            session = session.as_ref().map(tracing::field::display),
            "transaction begun"
        );
        Ok(id)
    }

    /// The open transaction `id`.
    ///
    /// # Errors
    /// [`Error::TransactionEnded`] for a finished one, [`Error::NoTransaction`] for an id
    /// this server never gave out (or forgot long ago).
    pub(crate) fn get(&self, id: &[u8]) -> Result<Arc<Txn>, Error> {
        let Ok(id) = Uuid::from_slice(id) else {
            return Err(Error::NoTransaction {
                id: format!("{id:02x?}"),
            });
        };
        let registry = lock(&self.registry);
        lookup(&registry, id)
    }

    /// What an ingest with `transaction_id` (if any) from `session` runs in: the given
    /// transaction, else the session's current one, else an autocommit.
    ///
    /// # Errors
    /// As [`Self::get`]; for an ingest without an id, [`Error::TransactionEnded`] when the
    /// session's transaction failed or timed out and was not rolled back yet.
    pub(crate) fn target(
        &self,
        transaction_id: Option<&[u8]>,
        session: Option<&SessionKey>,
    ) -> Result<Target, Error> {
        if let Some(id) = transaction_id {
            return self.get(id).map(Target::Txn);
        }
        let registry = lock(&self.registry);
        match session.and_then(|s| registry.sessions.get(s)) {
            Some(id) => lookup(&registry, *id).map(Target::Txn),
            None => Ok(Target::Autocommit),
        }
    }

    /// Takes `id` out of the open set for ending it; later lookups see it as ending.
    ///
    /// # Errors
    /// As [`Self::get`].
    fn take(&self, id: Uuid) -> Result<Arc<Txn>, Error> {
        let mut registry = lock(&self.registry);
        let txn = lookup(&registry, id)?;
        registry.mark_ending(id);
        self.metrics.set_transactions_open(registry.open.len());
        Ok(txn)
    }

    /// Records how `txn` ended. A commit or rollback frees its session for autocommit
    /// again; a failure or timeout keeps the session tied to it until the client rolls
    /// back, begins anew or closes the session.
    fn finish(&self, txn: &Txn, outcome: TxnEnd) {
        let mut registry = lock(&self.registry);
        if matches!(outcome, TxnEnd::Committed | TxnEnd::RolledBack) {
            release_session(&mut registry, txn.session.as_ref(), txn.id);
        }
        registry.finished.insert(txn.id, (outcome, Instant::now()));
    }

    /// `EndTransaction(COMMIT)`: every staged table becomes visible in ONE redb write
    /// transaction. Waits for ingests still running in the transaction.
    ///
    /// # Errors
    /// [`Error::NoTransaction`]/[`Error::TransactionEnded`] for an id that is not open;
    /// [`Error::TransactionAborted`] when an ingest of it failed; the commit's error (e.g.
    /// `Aborted` for a conflict that outlasted the re-stages). The transaction is over
    /// either way, and nothing of a failed one is visible.
    pub(crate) async fn commit(
        &self,
        svc: &Service,
        id: &[u8],
        key: Option<&TxnKey>,
    ) -> Result<IngestStats, Error> {
        let uuid = Uuid::from_slice(id).map_err(|_| Error::NoTransaction {
            id: format!("{id:02x?}"),
        })?;
        let txn = self.take(uuid)?;
        let mut state = txn.state.lock().await;
        match state.commit(svc, metrics::LANE_MULTI, key).await {
            Ok((_, stats)) => {
                self.finish(&txn, TxnEnd::Committed);
                Ok(stats)
            }
            Err(e) => {
                // Logged once, where it becomes the RPC's status.
                self.finish(&txn, TxnEnd::Failed(e.to_string()));
                Err(e)
            }
        }
    }

    /// `EndTransaction(ROLLBACK)`: nothing becomes visible; staged files are deleted.
    /// Rolling back a transaction that already failed or timed out succeeds (and frees its
    /// session).
    ///
    /// # Errors
    /// [`Error::NoTransaction`] for an unknown id; [`Error::TransactionEnded`] for one
    /// that was committed or rolled back already.
    pub(crate) async fn rollback(&self, id: &[u8]) -> Result<(), Error> {
        let uuid = Uuid::from_slice(id).map_err(|_| Error::NoTransaction {
            id: format!("{id:02x?}"),
        })?;
        {
            let mut registry = lock(&self.registry);
            if let Some((outcome, _)) = registry.finished.get(&uuid).cloned()
                && matches!(outcome, TxnEnd::Failed(_) | TxnEnd::TimedOut)
            {
                let session = registry
                    .sessions
                    .iter()
                    .find(|(_, v)| **v == uuid)
                    .map(|(k, _)| k.clone());
                release_session(&mut registry, session.as_ref(), uuid);
                return Ok(());
            }
        }
        let txn = self.take(uuid)?;
        self.roll_back(&txn, TxnEnd::RolledBack).await;
        Ok(())
    }

    /// Records `txn`'s outcome, discards its staged files and logs its end once: at
    /// `info` when it had staged something or timed out, at `debug` for the empty
    /// rollback every ADBC `conn.close()` (and `rollback()`) sends. The outcome is
    /// recorded before the files go, so a client that sees them gone also sees why.
    async fn roll_back(&self, txn: &Txn, outcome: TxnEnd) {
        let mut state = txn.state.lock().await;
        let tables = state.tables.len();
        let files: usize = state.tables.iter().map(|s| s.part.data_files.len()).sum();
        self.finish(txn, outcome.clone());
        state.discard().await;
        if tables > 0 || outcome == TxnEnd::TimedOut {
            info!(transaction = %txn.id, outcome = %outcome, tables, files, "transaction rolled back");
        } else {
            debug!(transaction = %txn.id, outcome = %outcome, "transaction rolled back");
        }
    }

    /// `CloseSession`: rolls back every open transaction of `session` and forgets it.
    pub(crate) async fn close_session(&self, session: &SessionKey) {
        let txns: Vec<Arc<Txn>> = {
            let mut registry = lock(&self.registry);
            registry.sessions.remove(session);
            registry.take_open(|t| t.session.as_ref() == Some(session))
        };
        self.metrics.set_transactions_open(self.open_count());
        for txn in txns {
            self.roll_back(&txn, TxnEnd::RolledBack).await;
            // Closed sessions are not tied to anything any more.
            release_session(&mut lock(&self.registry), Some(session), txn.id);
        }
    }

    /// Rolls back every transaction idle longer than the timeout (one running an ingest
    /// is not idle) and forgets old finished ones.
    async fn reap(&self) {
        let expired: Vec<Arc<Txn>> = {
            let mut registry = lock(&self.registry);
            let expired =
                registry.take_open(|t| t.idle_for() >= self.timeout && t.state.try_lock().is_ok());
            let keep = FINISHED_RETENTION.max(self.timeout);
            registry
                .finished
                .retain(|_, (outcome, at)| *outcome == TxnEnd::Ending || at.elapsed() < keep);
            let Registry {
                open,
                finished,
                sessions,
            } = &mut *registry;
            sessions.retain(|_, id| open.contains_key(id) || finished.contains_key(id));
            self.metrics.set_transactions_open(registry.open.len());
            expired
        };
        for txn in expired {
            // Logged once, by `roll_back`, with the outcome naming the idle timeout.
            self.roll_back(&txn, TxnEnd::TimedOut).await;
        }
    }

    /// Runs the idle-timeout reaper until the service is dropped: it checks every quarter
    /// of the timeout (between 10 ms and 1 s).
    pub fn spawn_reaper(svc: Weak<Service>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let tick = match svc.upgrade() {
                    Some(svc) => {
                        svc.transactions.reap().await;
                        (svc.transactions.timeout / 4)
                            .clamp(Duration::from_millis(10), Duration::from_secs(1))
                    }
                    None => return,
                };
                tokio::time::sleep(tick).await;
            }
        })
    }
}

fn lookup(registry: &Registry, id: Uuid) -> Result<Arc<Txn>, Error> {
    if let Some(txn) = registry.open.get(&id) {
        txn.touch();
        return Ok(txn.clone());
    }
    match registry.finished.get(&id) {
        Some((outcome, _)) => Err(Error::TransactionEnded {
            id: id.to_string(),
            outcome: outcome.to_string(),
        }),
        None => Err(Error::NoTransaction { id: id.to_string() }),
    }
}

fn release_session(registry: &mut Registry, session: Option<&SessionKey>, id: Uuid) {
    if let Some(session) = session
        && registry.sessions.get(session) == Some(&id)
    {
        registry.sessions.remove(session);
    }
}

/// Locks a std mutex; a poisoned one is still usable (the registry stays consistent
/// because every critical section is panic-free bookkeeping).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

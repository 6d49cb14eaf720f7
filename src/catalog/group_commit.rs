//! Group commit: concurrent pointer flips share one warehouse sync and one redb write
//! transaction.
//!
//! Every data commit of a [`super::RedbCatalog`] ends in [`Committer::submit`]: the
//! caller queues its *release* — the pointer flips of one table, or of N tables that
//! must move together — and waits. One committer (a blocking task, started when the
//! queue goes from idle to busy) takes **everything** queued, opens ONE redb write
//! transaction, checks each release's compare-and-swaps against the pointers as they
//! stand (earlier releases of the same batch included), applies the releases that pass,
//! syncs the warehouse ([`durable::sync_warehouse`], one `syncfs(2)`) and commits the
//! transaction at `Durability::Immediate` (one fsync). Only then is any caller answered.
//! Releases that queue while a batch is being made durable form the next batch, so under
//! contention N commits cost one `syncfs` and one fsync instead of N of each; a lone
//! commit goes out at once (the committer never waits to gather more).
//!
//! What each caller is promised is unchanged by sharing:
//! - **No ack before durability.** A release is answered `Ok` only after the `syncfs`
//!   that made its files durable and the redb commit that made its pointers durable both
//!   returned; a failure of either fails every release of the batch (none is visible).
//! - **A conflict fails only its own release.** A release whose base moved (or whose
//!   table was created or dropped meanwhile) gets its own error — `CatalogCommitConflicts`
//!   (retryable), `TableAlreadyExists` or `TableNotFound` — and writes nothing, while the
//!   rest of the batch commits.
//! - **A multi-table release stays all or nothing**: all of its compare-and-swaps are
//!   checked before any of its pointers is written (`docs/design/ingest_multi.md` §f1).
//!
//! Counting (`docs/design/ingest_multi.md` §f4): a batch that applied at least one release
//! is ONE redb write transaction and counts once ([`Counters::record_commit`]: the
//! process-global [`super::redb_commit_count`] and [`super::RedbCatalog::commit_count`],
//! which `skade_catalog_commits_total` reads; one fsync), and once in the sync count (one
//! `syncfs`); a batch in which every release conflicted is rolled back and counts nothing.

use std::mem;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use iceberg::{Error, ErrorKind, Result};
use redb::{Database, ReadableTable};

use super::Store;

/// The pointer table as the committer's transaction sees it.
type Pointers<'txn> = redb::Table<'txn, &'static str, &'static str>;
use tokio::sync::oneshot;

use super::counters::Counters;
use super::marks::{MarkAdvance, MarkTables};
use super::store::{NAMESPACES, TABLES};
use crate::storage::durable;

/// One pointer flip of a release.
#[derive(Debug, Clone)]
pub(super) struct Flip {
    /// The table's redb key.
    pub(super) key: String,
    /// The pointer the commit was built on; `None` for a table the release creates (the
    /// key must then still be absent).
    pub(super) base: Option<String>,
    /// The new metadata location.
    pub(super) new: String,
    /// The table's name, for errors (`ns.table`).
    pub(super) table: String,
    /// Namespace keys (every level) to insert when absent; only for creates.
    pub(super) namespaces: Vec<String>,
    /// The claim of the created table's location (key, table uuid), written with its
    /// pointer (`locations.rs`); only for creates.
    pub(super) claim: Option<(String, String)>,
    /// The producer's high-water mark this flip advances, in the same transaction.
    pub(super) mark: Option<MarkAdvance>,
}

/// The queue of releases waiting for the next batch, and the one committer draining it.
#[derive(Debug)]
pub(super) struct Committer {
    store: Store,
    /// The runtime a PostgreSQL batch runs on (the committer itself is a blocking task).
    runtime: tokio::runtime::Handle,
    /// The local warehouse to `syncfs` before each transaction; `None` for an object
    /// store, whose acknowledged uploads are durable already.
    warehouse: Option<PathBuf>,
    queue: Mutex<Queue>,
    pub(super) counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Queue {
    pending: Vec<Request>,
    /// A committer task is draining the queue; it clears this when it finds it empty.
    running: bool,
    /// Live [`Pause`] guards: while non-zero, releases queue and no batch starts.
    paused: usize,
}

#[derive(Debug)]
struct Request {
    flips: Vec<Flip>,
    reply: oneshot::Sender<Result<()>>,
}

/// Why a whole batch failed: nothing of it is visible.
#[derive(Debug, thiserror::Error)]
enum BatchError {
    #[error("sync warehouse {path}: {source}")]
    Sync {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("catalog storage: {0}")]
    Storage(#[from] redb::Error),
    /// The catalog database's transaction failed (or the sync inside it).
    #[error("{}", .0.message())]
    Database(Error),
    /// A bug in the committer or redb; the transaction is rolled back unless the panic
    /// came from inside its commit.
    #[error("the catalog committer panicked; its batch may not be committed")]
    Panicked,
}

impl BatchError {
    /// The error each release of a failed batch of `releases` gets (iceberg's errors are
    /// not `Clone`, so every caller gets its own, with the same message).
    /// A failed warehouse sync or redb transaction keeps its cause as an I/O error of the
    /// same kind (what [`super::is_storage_failure`] recognizes: the local storage
    /// failed, `Unavailable`); a panic has none (`Internal`).
    fn for_caller(&self, releases: usize) -> Error {
        let e = Error::new(ErrorKind::Unexpected, self.to_string())
            .with_context("releases_in_batch", releases.to_string());
        match self {
            Self::Sync { source, .. } => {
                e.with_source(std::io::Error::new(source.kind(), source.to_string()))
            }
            Self::Storage(redb::Error::Io(source)) => {
                e.with_source(std::io::Error::new(source.kind(), source.to_string()))
            }
            Self::Storage(other) => e.with_source(std::io::Error::other(other.to_string())),
            Self::Database(db) if db.kind() == ErrorKind::CatalogCommitConflicts => {
                Error::new(ErrorKind::CatalogCommitConflicts, db.message().to_string())
                    .with_retryable(true)
            }
            Self::Database(db) if super::is_storage_failure(db) => {
                e.with_source(std::io::Error::other(db.message().to_string()))
            }
            Self::Database(_) | Self::Panicked => e,
        }
    }
}

impl Committer {
    pub(super) fn new(
        store: Store,
        runtime: tokio::runtime::Handle,
        warehouse: Option<PathBuf>,
    ) -> Self {
        Self {
            store,
            runtime,
            warehouse,
            queue: Mutex::new(Queue::default()),
            counters: Arc::default(),
        }
    }

    /// Queues one release (the flips of one table, or of several that move together)
    /// and waits until the batch it joined is durable.
    ///
    /// # Errors
    /// The release's own `CatalogCommitConflicts` (retryable), `TableAlreadyExists` or
    /// `TableNotFound` when a compare-and-swap fails (nothing of this release is written;
    /// other releases of the batch may commit); `Unexpected` when the warehouse sync or
    /// the redb transaction failed (nothing of the batch is visible) or the committer
    /// task died.
    ///
    /// # Cancel safety
    /// Not cancel safe: once queued, the release is committed with its batch even if
    /// this future is dropped (the caller then does not learn the outcome).
    pub(super) async fn submit(self: &Arc<Self>, flips: Vec<Flip>) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = self.lock();
            queue.pending.push(Request { flips, reply });
            self.start_if_idle(&mut queue);
        }
        answer.await.map_err(|_| {
            Error::new(
                ErrorKind::Unexpected,
                "the catalog committer stopped before answering",
            )
        })?
    }

    /// Starts a committer task when releases wait, none runs and nothing pauses them.
    fn start_if_idle(self: &Arc<Self>, queue: &mut Queue) {
        if queue.running || queue.paused > 0 || queue.pending.is_empty() {
            return;
        }
        queue.running = true;
        let committer = Arc::clone(self);
        let drain = move || committer.drain();
        // redb and syncfs block: on the runtime's blocking pool when there is one (a
        // `Pause` may be dropped outside any runtime).
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(drain)),
            Err(_) => drop(std::thread::spawn(drain)),
        }
    }

    /// Releases queued and not yet taken by a batch.
    pub(super) fn queued(&self) -> usize {
        self.lock().pending.len()
    }

    /// Holds every release submitted from now on in the queue until the returned guard
    /// is dropped; then everything queued commits as one batch. A batch already running
    /// finishes first.
    pub(super) fn pause(self: &Arc<Self>) -> Pause {
        self.lock().paused += 1;
        Pause(Arc::clone(self))
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Commits batches until the queue is empty (or paused). Blocking.
    ///
    /// The last batch is answered only after this task let go of the committer, so a
    /// caller that drops the catalog once its commit returned also closes the redb file
    /// (a reopen right after must not find it still open).
    fn drain(self: Arc<Self>) {
        let Some(mut batch) = self.take_batch() else {
            return;
        };
        loop {
            let outcomes = self.run_batch(&batch);
            match self.take_batch() {
                Some(next) => {
                    answer(batch, outcomes);
                    batch = next;
                }
                None => {
                    drop(self);
                    answer(batch, outcomes);
                    return;
                }
            }
        }
    }

    /// Everything queued, or `None` (and the committer marked idle) when nothing is or
    /// the queue is paused.
    fn take_batch(&self) -> Option<Vec<Request>> {
        let mut queue = self.lock();
        if queue.pending.is_empty() || queue.paused > 0 {
            queue.running = false;
            return None;
        }
        Some(mem::take(&mut queue.pending))
    }

    /// [`Self::commit_batch`], with a failure of the whole batch (or a panic inside it)
    /// given to every release.
    fn run_batch(&self, batch: &[Request]) -> Vec<Result<()>> {
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.commit_batch(batch)));
        let failure = match run {
            Ok(Ok(outcomes)) => return outcomes,
            Ok(Err(e)) => e,
            Err(_) => BatchError::Panicked,
        };
        tracing::warn!(releases = batch.len(), error = %failure, "group commit failed");
        batch
            .iter()
            .map(|_| Err(failure.for_caller(batch.len())))
            .collect()
    }

    /// One write transaction for every release of `batch`; returns each release's
    /// outcome in order.
    fn commit_batch(&self, batch: &[Request]) -> std::result::Result<Vec<Result<()>>, BatchError> {
        match &self.store {
            Store::Redb(db) => self.commit_batch_redb(db, batch),
            Store::Postgres(pg) => self.commit_batch_pg(pg, batch),
        }
    }

    /// [`Self::commit_batch`] as ONE transaction of the catalog database
    /// (`postgres/batch.rs`), the warehouse synced inside it just before it commits.
    /// Counted in this catalog's commit count, not in [`super::redb_commit_count`].
    fn commit_batch_pg(
        &self,
        pg: &super::postgres::PgStore,
        batch: &[Request],
    ) -> std::result::Result<Vec<Result<()>>, BatchError> {
        let releases: Vec<&[Flip]> = batch.iter().map(|r| r.flips.as_slice()).collect();
        let mut synced = false;
        let warehouse = self.warehouse.as_deref();
        let outcomes = self
            .runtime
            .block_on(pg.commit_batch(&releases, || {
                if let Some(warehouse) = warehouse {
                    durable::sync_warehouse(warehouse)
                        .map_err(|e| super::error::io_error("sync warehouse", warehouse, e))?;
                    synced = true;
                }
                Ok(())
            }))
            .map_err(BatchError::Database)?;
        if synced {
            self.counters.record_sync();
        }
        if outcomes.iter().any(Result::is_ok) {
            let commits = self.counters.record_database_commit();
            super::fault::after_commit(commits);
        }
        Ok(outcomes)
    }

    /// [`Self::commit_batch`] as one redb write transaction.
    fn commit_batch_redb(
        &self,
        db: &Database,
        batch: &[Request],
    ) -> std::result::Result<Vec<Result<()>>, BatchError> {
        let txn = db.begin_write().map_err(redb::Error::from)?;
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut applied = 0usize;
        {
            let mut tables = txn.open_table(TABLES).map_err(redb::Error::from)?;
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb::Error::from)?;
            let mut marks = MarkTables::open(&txn)?;
            let mut claims = txn
                .open_table(super::locations::LOCATION_CLAIMS)
                .map_err(redb::Error::from)?;
            for request in batch {
                if let Err(e) = check(&tables, &marks.marks, &claims, &request.flips)? {
                    outcomes.push(Err(e));
                    continue;
                }
                for flip in &request.flips {
                    if let Some((location, uuid)) = &flip.claim {
                        super::locations::claim_in(&mut claims, (location, uuid))?;
                    }
                    if let Some(mark) = &flip.mark {
                        mark.apply(&mut marks)?;
                    }
                    for ns in &flip.namespaces {
                        if namespaces
                            .get(ns.as_str())
                            .map_err(redb::Error::from)?
                            .is_none()
                        {
                            namespaces
                                .insert(ns.as_str(), "{}")
                                .map_err(redb::Error::from)?;
                        }
                    }
                    tables
                        .insert(flip.key.as_str(), flip.new.as_str())
                        .map_err(redb::Error::from)?;
                }
                applied += 1;
                outcomes.push(Ok(()));
            }
        }
        if applied == 0 {
            txn.abort().map_err(redb::Error::from)?;
            return Ok(outcomes);
        }
        // Every release's files were written before it was queued: one syncfs makes
        // them all durable before any pointer that references them is.
        // On an object store every upload returned only once durable: nothing to sync.
        if let Some(warehouse) = &self.warehouse {
            durable::sync_warehouse(warehouse).map_err(|source| BatchError::Sync {
                path: warehouse.clone(),
                source,
            })?;
            self.counters.record_sync();
        }
        txn.commit().map_err(redb::Error::from)?;
        let commits = self.counters.record_commit();
        super::fault::after_commit(commits);
        tracing::debug!(releases = batch.len(), applied, "group commit");
        Ok(outcomes)
    }
}

/// Checks every compare-and-swap of one release against the pointers as they stand in
/// the open transaction, that every writer mark it advances starts after the stored
/// one, and that no other table holds the location a create claims. The outer error is
/// storage; the inner one is this release's own failure (the first flip that does not
/// hold).
fn check(
    tables: &Pointers<'_>,
    marks: &redb::Table<'_, &'static str, &'static [u8]>,
    claims: &Pointers<'_>,
    flips: &[Flip],
) -> std::result::Result<Result<()>, redb::Error> {
    for flip in flips {
        if let Some((location, uuid)) = &flip.claim
            && let Some(held) = claims.get(location.as_str())?
            && held.value() != uuid
        {
            return Ok(Err(location_taken(&flip.table, location)));
        }
        if let Some(mark) = &flip.mark
            && let Err(e) = mark.check(marks)?
        {
            return Ok(Err(e));
        }
        let current = tables
            .get(flip.key.as_str())?
            .map(|v| v.value().to_string());
        if let Err(failure) = cas_outcome(flip, current) {
            return Ok(Err(failure));
        }
    }
    Ok(Ok(()))
}

/// The failure of a create whose location another table claimed since it was planned.
pub(super) fn location_taken(table: &str, location: &str) -> Error {
    Error::new(
        ErrorKind::DataInvalid,
        format!(
            "table {table}: location {location} was taken by another table while the create was prepared; create it again"
        ),
    )
}

/// One flip's compare-and-swap against `current`, the table's pointer as the committing
/// transaction sees it (`None`: no such table).
///
/// # Errors
/// `TableAlreadyExists` for a create whose table exists, `TableNotFound` for an advance
/// whose table is gone, `CatalogCommitConflicts` (retryable, with the expected and found
/// locations) for an advance whose base moved.
pub(super) fn cas_outcome(flip: &Flip, current: Option<String>) -> Result<()> {
    let failure = match (&flip.base, current) {
        (None, None) => return Ok(()),
        (None, Some(_)) => Error::new(
            ErrorKind::TableAlreadyExists,
            format!("table {} was created concurrently", flip.table),
        ),
        (Some(_), None) => Error::new(
            ErrorKind::TableNotFound,
            format!("table {} was dropped during the commit", flip.table),
        ),
        (Some(base), Some(current)) if current == *base => return Ok(()),
        (Some(base), Some(current)) => Error::new(
            ErrorKind::CatalogCommitConflicts,
            format!("table {} was committed concurrently", flip.table),
        )
        .with_context("expected", base.clone())
        .with_context("found", current)
        .with_retryable(true),
    };
    Err(failure)
}

/// A pause of the committer (see [`Committer::pause`]); dropping it resumes.
#[derive(Debug)]
pub(super) struct Pause(Arc<Committer>);

impl Drop for Pause {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.paused -= 1;
        self.0.start_if_idle(&mut queue);
    }
}

/// Gives each release of a batch its outcome. A caller that went away is not waiting.
fn answer(batch: Vec<Request>, outcomes: Vec<Result<()>>) {
    for (request, outcome) in batch.into_iter().zip(outcomes) {
        let _ = request.reply.send(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches a failed sync or redb transaction reaching callers without its cause (then
    // answered Internal instead of Unavailable).
    #[test]
    fn a_failed_batch_keeps_its_storage_cause() {
        let sync = BatchError::Sync {
            path: PathBuf::from("/w"),
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left"),
        };
        let e = sync.for_caller(2);
        assert!(super::super::is_storage_failure(&e));
        let cause = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("an I/O cause");
        assert_eq!(cause.kind(), std::io::ErrorKind::StorageFull);
        assert!(!super::super::is_storage_failure(
            &BatchError::Panicked.for_caller(1)
        ));
    }
}

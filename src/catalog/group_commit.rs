//! Group commit: concurrent pointer flips share one warehouse sync and one transaction of
//! the catalog's store.
//!
//! Every data commit of a [`super::RedbCatalog`] ends in [`Committer::submit`]: the
//! caller queues its *release* — the pointer flips of one table, or of N tables that
//! must move together — and waits. One committer (a task, started when the queue goes
//! from idle to busy) takes **everything** queued and hands it to the store as ONE batch
//! ([`Store::commit_batch`]: one transaction that checks each release's
//! compare-and-swaps against the pointers as they stand, earlier releases of the same
//! batch included, applies the releases that pass, syncs the warehouse with one
//! `syncfs(2)` and commits durably). Only then is any caller answered. Releases that
//! queue while a batch is being made durable form the next batch, so under contention N
//! commits cost one `syncfs` and one durable commit instead of N of each; a lone commit
//! goes out at once (the committer never waits to gather more).
//!
//! What each caller is promised is unchanged by sharing:
//! - **No ack before durability.** A release is answered `Ok` only after the `syncfs`
//!   that made its files durable and the commit that made its pointers durable both
//!   returned; a failure of either fails every release of the batch (none is visible).
//! - **A conflict fails only its own release.** A release whose base moved (or whose
//!   table was created or dropped meanwhile) gets its own error — `CatalogCommitConflicts`
//!   (retryable), `TableAlreadyExists` or `TableNotFound` — and writes nothing, while the
//!   rest of the batch commits.
//! - **A multi-table release stays all or nothing**: all of its compare-and-swaps are
//!   checked before any of its pointers is written (`docs/design/ingest_multi.md` §f1).
//!
//! Counting (`docs/design/ingest_multi.md` §f4): a batch that applied at least one release
//! is ONE transaction and counts once (the store records it: on redb in the process-wide
//! [`super::redb_commit_count`] too; [`super::RedbCatalog::commit_count`], which
//! `skade_catalog_commits_total` reads), and once in the sync count (one `syncfs`); a
//! batch in which every release conflicted is rolled back and counts nothing.

use std::mem;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use iceberg::{Error, ErrorKind, Result};
use tokio::sync::oneshot;

use super::counters::Counters;
use super::store::{BatchError, Flip, Store};

/// The queue of releases waiting for the next batch, and the one committer draining it.
#[derive(Debug)]
pub(super) struct Committer {
    store: Arc<dyn Store>,
    /// The runtime the committer task runs on (a [`Pause`] may be dropped outside any).
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

impl BatchError {
    /// The error each release of a failed batch of `releases` gets (iceberg's errors are
    /// not `Clone`, so every caller gets its own, with the same message).
    /// A failed warehouse sync or store transaction keeps its cause as an I/O error of
    /// the same kind (what [`super::is_storage_failure`] recognizes: the storage failed,
    /// `Unavailable`); a panic has none (`Internal`).
    fn for_caller(&self, releases: usize) -> Error {
        let e = Error::new(ErrorKind::Unexpected, self.to_string())
            .with_context("releases_in_batch", releases.to_string());
        match self {
            Self::Sync { source, .. } => {
                e.with_source(std::io::Error::new(source.kind(), source.to_string()))
            }
            Self::Store(store) if store.kind() == ErrorKind::CatalogCommitConflicts => Error::new(
                ErrorKind::CatalogCommitConflicts,
                store.message().to_string(),
            )
            .with_retryable(true),
            Self::Store(store) if super::is_storage_failure(store) => {
                let kind = super::error::io_kind(store).unwrap_or(std::io::ErrorKind::Other);
                e.with_source(std::io::Error::new(kind, store.message().to_string()))
            }
            Self::Store(_) | Self::Panicked => e,
        }
    }
}

impl Committer {
    pub(super) fn new(
        store: Arc<dyn Store>,
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
    /// The release's own `CatalogCommitConflicts` (retryable), `TableAlreadyExists`,
    /// `TableNotFound`, `PreconditionFailed` or `DataInvalid` ([`Store::commit_batch`]:
    /// nothing of this release is written; other releases of the batch may commit);
    /// `Unexpected` when the warehouse sync or the transaction failed (nothing of the
    /// batch is visible) or the committer task died.
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
        drop(self.runtime.spawn(committer.drain()));
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

    /// Commits batches until the queue is empty (or paused).
    ///
    /// The last batch is answered only after this task let go of the committer, so a
    /// caller that drops the catalog once its commit returned also closes the store (a
    /// reopen of a redb file right after must not find it still open).
    async fn drain(self: Arc<Self>) {
        let Some(mut batch) = self.take_batch() else {
            return;
        };
        loop {
            let outcomes = self.run_batch(&batch).await;
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

    /// One transaction for every release of `batch` ([`Store::commit_batch`]), with a
    /// failure of the whole batch (or a panic inside it) given to every release.
    async fn run_batch(&self, batch: &[Request]) -> Vec<Result<()>> {
        let releases: Vec<&[Flip]> = batch.iter().map(|r| r.flips.as_slice()).collect();
        let run = std::panic::AssertUnwindSafe(self.store.commit_batch(
            &releases,
            self.warehouse.as_deref(),
            &self.counters,
        ))
        .catch_unwind()
        .await;
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

    // Catches a failed sync or store transaction reaching callers without its cause (then
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
        let store = BatchError::Store(super::super::error::redb_error(redb::Error::Io(
            std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left"),
        )));
        let cause = std::error::Error::source(&store.for_caller(1))
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind);
        assert_eq!(cause, Some(std::io::ErrorKind::StorageFull));
        assert!(!super::super::is_storage_failure(
            &BatchError::Panicked.for_caller(1)
        ));
    }
}

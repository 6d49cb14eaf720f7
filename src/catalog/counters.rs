//! Counting data commits: the process-global commit-fsync count and each catalog's own,
//! both recorded at one place ([`Counters::record_commit`], called once per durable
//! group-commit transaction). The metrics `skade_catalog_commits_total` and
//! `skade_file_syncs_total` read a catalog's counts at scrape time ([`CommitCounts`],
//! `crate::metrics::Metrics::count_catalog`); nothing else keeps them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::RedbCatalog;

static REDB_COMMITS: AtomicU64 = AtomicU64::new(0);

/// Process-global count of durable redb write transactions on the data paths. Each is
/// one fsync at `Durability::Immediate`, so this is the write path's commit-fsync count
/// (`docs/design/ingest_multi.md` §f4): a lone single-table commit
/// ([`iceberg::Catalog::update_table`]) or a non-empty [`RedbCatalog::atomic_release_raw`] counts
/// one; commits that ran concurrently and shared one transaction (group commit)
/// count one together, so under contention this is less than the number of commits.
/// DDL through [`iceberg::Catalog`]'s own methods (namespace/table create, drop, rename,
/// register) does not count; the REST catalog's table creates and metadata commits go
/// through [`RedbCatalog::atomic_release_raw`] and count as commits.
pub fn redb_commit_count() -> u64 {
    REDB_COMMITS.load(Ordering::Relaxed)
}

/// The data-commit counters of one catalog instance.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Durable redb write transactions (one fsync each).
    commits: AtomicU64,
    /// Warehouse syncs made before those transactions committed.
    syncs: AtomicU64,
    /// Commits the driver staged again after a compare-and-swap conflict.
    conflicts: AtomicU64,
    /// Commit turns on a shared catalog taken without their turn across instances.
    turns_skipped: AtomicU64,
}

impl Counters {
    /// Records one durable data-commit transaction, in this catalog's count and the
    /// process-global [`redb_commit_count`]; returns this catalog's count after it.
    pub(super) fn record_commit(&self) -> u64 {
        REDB_COMMITS.fetch_add(1, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records one durable data-commit transaction of a PostgreSQL catalog, in this
    /// catalog's count only ([`redb_commit_count`] counts redb transactions); returns
    /// this catalog's count after it.
    pub(super) fn record_database_commit(&self) -> u64 {
        self.commits.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records one warehouse sync made for a data commit.
    pub(super) fn record_sync(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one conflict the commit driver resolved by staging again.
    pub(super) fn record_conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one commit turn on a shared catalog taken without the database turn.
    pub(super) fn record_turn_skipped(&self) {
        self.turns_skipped.fetch_add(1, Ordering::Relaxed);
    }
}

/// A shared read handle of one catalog's data-commit counts ([`RedbCatalog::commit_counts`]);
/// holding it does not keep the catalog (or its redb file) open.
#[derive(Debug, Clone)]
pub struct CommitCounts(pub(super) Arc<Counters>);

impl CommitCounts {
    /// As [`RedbCatalog::commit_count`].
    pub fn commits(&self) -> u64 {
        self.0.commits.load(Ordering::Relaxed)
    }

    /// As [`RedbCatalog::sync_count`].
    pub fn syncs(&self) -> u64 {
        self.0.syncs.load(Ordering::Relaxed)
    }

    /// Commits this catalog's driver staged again after a compare-and-swap conflict (the
    /// table moved under them: another commit of this process that did not share its
    /// turn, or of another instance or JDBC-catalog writer sharing the database).
    pub fn conflicts(&self) -> u64 {
        self.0.conflicts.load(Ordering::Relaxed)
    }

    /// Commit turns on a shared catalog (`--catalog-commit-turn database`) that went
    /// ahead without their turn across instances: no turn connection was free or the
    /// database failed ([`RedbCatalog::commit_turns`]). Always 0 on the redb catalog.
    pub fn turns_skipped(&self) -> u64 {
        self.0.turns_skipped.load(Ordering::Relaxed)
    }
}

impl RedbCatalog {
    /// A handle that reads this catalog's [`Self::commit_count`] and [`Self::sync_count`]
    /// (what the metrics `skade_catalog_commits_total` and `skade_file_syncs_total` show).
    pub fn commit_counts(&self) -> CommitCounts {
        CommitCounts(self.committer.counters.clone())
    }

    /// Durable data-path redb write transactions made through this catalog instance =
    /// commit fsyncs (see [`redb_commit_count`] for the process-global count). Commits
    /// that ran concurrently and shared one transaction (group commit) count once
    /// together; a transaction in which every commit conflicted is rolled back and does
    /// not count.
    pub fn commit_count(&self) -> u64 {
        self.commit_counts().commits()
    }

    /// Warehouse syncs ([`crate::storage::durable::sync_warehouse`], one `syncfs(2)` each) made for this
    /// instance's data commits: one per counted redb transaction of
    /// [`Self::commit_count`], made after the transaction's compare-and-swaps passed and
    /// before it commits (a commit that loses a race no longer syncs). Table creation
    /// (DDL) syncs too but is not counted, as for [`Self::commit_count`].
    pub fn sync_count(&self) -> u64 {
        self.commit_counts().syncs()
    }
}

//! Counting data commits: the process-global commit-fsync count and each catalog's own.

use std::sync::atomic::{AtomicU64, Ordering};

use super::RedbCatalog;

pub(super) static REDB_COMMITS: AtomicU64 = AtomicU64::new(0);

/// Process-global count of durable redb write transactions on the data paths. Each is
/// one fsync at `Durability::Immediate`, so this is the write path's commit-fsync count
/// (`docs/design/ingest_multi.md` §f4): a lone single-table commit
/// ([`iceberg::Catalog::update_table`]) or a non-empty [`RedbCatalog::atomic_release_raw`] counts
/// one; commits that ran concurrently and shared one transaction (group commit)
/// count one together, so under contention this is less than the number of commits.
/// DDL through [`iceberg::Catalog`]'s own methods (namespace/table create, drop, rename,
/// register) does not count; the REST catalog's table creates and metadata commits go
/// through [`RedbCatalog::atomic_release`] and count as commits.
pub fn redb_commit_count() -> u64 {
    REDB_COMMITS.load(Ordering::Relaxed)
}

impl RedbCatalog {
    /// Also counts every data commit transaction of this catalog on `counter` (the
    /// `skade_catalog_commits_total` metric; see [`Self::commit_count`]). Only the first
    /// counter given is used.
    pub fn with_commit_counter(self, counter: prometheus::IntCounter) -> Self {
        let _ = self.committer.counters.on_commit.set(counter);
        self
    }

    /// Also counts every warehouse sync of this catalog's data commits on `counter` (the
    /// `skade_file_syncs_total` metric; see [`Self::sync_count`]). Only the first counter
    /// given is used.
    pub fn with_sync_counter(self, counter: prometheus::IntCounter) -> Self {
        let _ = self.committer.counters.on_sync.set(counter);
        self
    }

    /// Durable data-path redb write transactions made through this catalog instance =
    /// commit fsyncs (see [`redb_commit_count`] for the process-global count). Commits
    /// that ran concurrently and shared one transaction (group commit) count once
    /// together; a transaction in which every commit conflicted is rolled back and does
    /// not count.
    pub fn commit_count(&self) -> u64 {
        self.committer.counters.commits.load(Ordering::Relaxed)
    }

    /// Warehouse syncs ([`super::durable::sync_warehouse`], one `syncfs(2)` each) made for this
    /// instance's data commits: one per counted redb transaction of
    /// [`Self::commit_count`], made after the transaction's compare-and-swaps passed and
    /// before it commits (a commit that loses a race no longer syncs). Table creation
    /// (DDL) syncs too but is not counted, as for [`Self::commit_count`].
    pub fn sync_count(&self) -> u64 {
        self.committer.counters.syncs.load(Ordering::Relaxed)
    }
}

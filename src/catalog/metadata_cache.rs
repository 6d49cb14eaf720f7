//! The latest parsed metadata of each table, keyed by its metadata location.
//!
//! A commit loads its table twice (iceberg's `Transaction::commit` refreshes the base,
//! then the catalog checks the requirements against the current metadata) and each load
//! used to read and parse the whole `*.metadata.json` — which grows with the snapshot
//! count (17 ms per load at 2,000 snapshots on the development VM). The catalog keeps
//! the metadata it last wrote or read per table instead, and uses it only when the
//! table's redb pointer still names the same location. The pointer stays the truth: it
//! is read on every load, and a metadata file is written once under a fresh name
//! (`<version>-<uuid>.metadata.json`, Iceberg's table spec) and never rewritten, so a
//! location names one content forever and an entry can only be stale by naming an old
//! location — which is then a miss, never a wrong answer.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use iceberg::spec::TableMetadataRef;

/// Tables whose metadata is kept at most; beyond it an arbitrary entry is evicted (a
/// later load of that table reads its file again).
const MAX_TABLES: usize = 1024;

/// Per table key: the metadata location and its parsed metadata.
#[derive(Debug, Default)]
pub(super) struct MetadataCache {
    entries: Mutex<HashMap<String, (String, TableMetadataRef)>>,
}

impl MetadataCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (String, TableMetadataRef)>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The metadata of table `key` if the cached entry is at `location`.
    pub(super) fn get(&self, key: &str, location: &str) -> Option<TableMetadataRef> {
        self.lock()
            .get(key)
            .filter(|(cached, _)| cached == location)
            .map(|(_, metadata)| metadata.clone())
    }

    /// Remembers `metadata` as table `key`'s metadata at `location`.
    pub(super) fn put(&self, key: &str, location: &str, metadata: TableMetadataRef) {
        let mut entries = self.lock();
        if entries.len() >= MAX_TABLES
            && !entries.contains_key(key)
            && let Some(evict) = entries.keys().next().cloned()
        {
            entries.remove(&evict);
        }
        entries.insert(key.to_string(), (location.to_string(), metadata));
    }

    /// Forgets table `key` (dropped or renamed).
    pub(super) fn remove(&self, key: &str) {
        self.lock().remove(key);
    }
}

//! The latest parsed metadata of each table, keyed by its metadata location.
//!
//! A commit loads its table twice (iceberg's `Transaction::commit` refreshes the base,
//! then the catalog checks the requirements against the current metadata), and without
//! a cache each load reads and parses the whole `*.metadata.json`, which grows with the
//! snapshot count. The catalog keeps the metadata it last wrote or read per table
//! instead, and uses it only when the table's redb pointer still names the same
//! location. The pointer stays the truth: it is read on every load, and a metadata file
//! is written once under a fresh name (`<version>-<uuid>.metadata.json`, Iceberg's table
//! spec) and never rewritten, so a location names one content forever and an entry can
//! only be stale by naming an old location — which is then a miss, never a wrong answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use iceberg::spec::TableMetadataRef;

use super::metadata_json::Written;

/// Tables whose metadata is kept at most; beyond it an arbitrary entry is evicted (a
/// later load of that table reads its file again).
const MAX_TABLES: usize = 1024;

/// One table's entry: where its metadata is, the parsed metadata, and what was carried
/// beside it when this process wrote it (`metadata_json.rs`; not for metadata read from a
/// file).
#[derive(Debug)]
struct Entry {
    location: String,
    metadata: TableMetadataRef,
    written: Option<Arc<Written>>,
}

/// Per table key: the metadata location, its parsed metadata and what was carried.
#[derive(Debug, Default)]
pub(super) struct MetadataCache {
    entries: Mutex<HashMap<String, Entry>>,
}

impl MetadataCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The metadata of table `key` if the cached entry is at `location`.
    pub(super) fn get(&self, key: &str, location: &str) -> Option<TableMetadataRef> {
        self.lock()
            .get(key)
            .filter(|entry| entry.location == location)
            .map(|entry| entry.metadata.clone())
    }

    /// What was carried beside table `key`'s metadata at `location` (its refs, its
    /// snapshots' JSON), when the entry is at `location` and this process wrote it.
    pub(super) fn written(&self, key: &str, location: &str) -> Option<Arc<Written>> {
        self.lock()
            .get(key)
            .filter(|entry| entry.location == location)
            .and_then(|entry| entry.written.clone())
    }

    /// Remembers `metadata` (with what was carried beside it, when written here) as table
    /// `key`'s metadata at `location`.
    pub(super) fn put(
        &self,
        key: &str,
        location: &str,
        metadata: TableMetadataRef,
        written: Option<Arc<Written>>,
    ) {
        let mut entries = self.lock();
        if entries.len() >= MAX_TABLES
            && !entries.contains_key(key)
            && let Some(evict) = entries.keys().next().cloned()
        {
            entries.remove(&evict);
        }
        let entry = Entry {
            location: location.to_string(),
            metadata,
            written,
        };
        entries.insert(key.to_string(), entry);
    }

    /// Forgets table `key` (dropped or renamed).
    pub(super) fn remove(&self, key: &str) {
        self.lock().remove(key);
    }
}
/// The key a table's entries are kept under: its name elements joined by U+001F (which
/// no name holds: the stores refuse it), so `a.b`.`c` and `a`.`b.c` stay apart.
pub(super) fn cache_key(ident: &iceberg::TableIdent) -> String {
    let mut key = ident.namespace().join("\u{1f}");
    key.push('\u{1f}');
    key.push_str(ident.name());
    key
}

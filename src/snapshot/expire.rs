//! Snapshot expiry: which snapshots a maintenance commit removes.
//!
//! The selection is iceberg 0.10.1's `ExpireSnapshotsAction`, which follows Java's
//! `RemoveSnapshots` (Iceberg table spec, "Snapshot Retention Policy"): per branch, the
//! newest `history.expire.min-snapshots-to-keep` ancestors and every ancestor newer than
//! the age cutoff (`history.expire.max-snapshot-age-ms`) are kept; a non-`main` ref older
//! than `history.expire.max-ref-age-ms` is dropped first; the current snapshot and the
//! head of every retained branch or tag are never expired; `gc.enabled=false` expires
//! nothing. skade adds a count bound: when `main`'s ancestry holds more than
//! [`MAX_SNAPSHOTS_PROPERTY`] (or `--max-snapshots`) snapshots, the age cutoff moves up
//! to the timestamp of the newest of those to keep, so at most that many (plus any with
//! the same millisecond, plus what `min-snapshots-to-keep` demands) remain.

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use iceberg::spec::{MAIN_BRANCH, TableMetadata};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};

use crate::catalog::{Stage, Staged, TableChange};

/// Table property: the most snapshots `main`'s ancestry keeps (a count bound on top of
/// Iceberg's age rules); `0` means no count bound. Unset: `--max-snapshots`.
pub const MAX_SNAPSHOTS_PROPERTY: &str = "skade.history.expire.max-snapshots";

/// What an expiry commit does to one table.
#[derive(Debug)]
pub(crate) struct Expiry {
    /// The requirements the table's current metadata must still meet (its uuid, and
    /// `main` still at the snapshot the plan was made on).
    pub(crate) requirements: Vec<TableRequirement>,
    /// The `RemoveSnapshotRef`/`RemoveSnapshots`/statistics updates.
    pub(crate) updates: Vec<TableUpdate>,
    /// Snapshots removed.
    pub(crate) snapshots: usize,
}

/// The snapshots and refs of `table` that expire now, or `None` when nothing does (or
/// the table sets `gc.enabled=false`). `default_max_snapshots` is `--max-snapshots`
/// (`0`: no count bound) for a table without [`MAX_SNAPSHOTS_PROPERTY`].
///
/// # Errors
/// iceberg's error for table properties that do not parse.
pub(crate) async fn plan(table: &Table, default_max_snapshots: usize) -> Result<Option<Expiry>> {
    let metadata = table.metadata();
    let properties = metadata.table_properties()?;
    if !properties.gc_enabled || metadata.snapshots().len() <= 1 {
        return Ok(None);
    }
    let max_snapshots = metadata
        .properties()
        .get(MAX_SNAPSHOTS_PROPERTY)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(default_max_snapshots);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let age_cutoff = now_ms.saturating_sub(properties.max_snapshot_age_ms);
    let cutoff = match count_cutoff(metadata, max_snapshots) {
        Some(count) => age_cutoff.max(count),
        None => age_cutoff,
    };
    let tx = Transaction::new(table);
    let tx = tx
        .expire_snapshots()
        .expire_older_than_ms(cutoff)
        .apply(tx)?;
    let (requirements, updates) = super::fast_append::stage_transaction(table, tx).await?;
    if updates.is_empty() {
        return Ok(None);
    }
    let snapshots = updates
        .iter()
        .map(|u| match u {
            TableUpdate::RemoveSnapshots { snapshot_ids } => snapshot_ids.len(),
            _ => 0,
        })
        .sum();
    Ok(Some(Expiry {
        requirements,
        updates,
        snapshots,
    }))
}

/// Snapshot expiry of one table as a commit: planned again on the table as it stands at
/// each attempt ([`plan`]), giving way when nothing expires. Its value is the number of
/// snapshots removed.
#[derive(Debug, Clone, Copy)]
pub struct Expire {
    /// `--max-snapshots` (`0`: no count bound) for a table without
    /// [`MAX_SNAPSHOTS_PROPERTY`].
    pub default_max_snapshots: usize,
}

#[async_trait]
impl Stage for Expire {
    type Out = usize;
    type Error = Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<usize>>> {
        let [table] = current else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "an expiry commits one table",
            ));
        };
        Ok(plan(table, self.default_max_snapshots).await?.map(|e| {
            Staged::new(
                vec![TableChange::new(e.requirements, e.updates)],
                e.snapshots,
            )
        }))
    }
}

/// The timestamp (ms) of the `max`-th newest snapshot of `main`'s ancestry when it holds
/// more than `max` (`0`: never): snapshots strictly older expire.
fn count_cutoff(metadata: &TableMetadata, max: usize) -> Option<i64> {
    if max == 0 {
        return None;
    }
    let mut next = metadata
        .snapshot_for_ref(MAIN_BRANCH)
        .map(|s| s.snapshot_id())
        .or(metadata.current_snapshot_id());
    let mut kept = 0usize;
    let mut last_kept = None;
    while let Some(id) = next {
        let snapshot = metadata.snapshot_by_id(id)?;
        if kept == max {
            return last_kept;
        }
        kept += 1;
        last_kept = Some(snapshot.timestamp_ms());
        next = snapshot.parent_snapshot_id();
    }
    None
}

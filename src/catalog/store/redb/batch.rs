//! One group-commit batch as ONE redb write transaction at `Durability::Immediate`: each
//! release's compare-and-swaps and marks checked against the pointers as earlier
//! releases of the batch left them, the releases that pass applied, the warehouse synced,
//! the transaction committed (`catalog/group_commit.rs` states the promises). Blocking.

use std::path::Path;

use iceberg::Result;
use redb::{Database, ReadableTable};

use super::marks::MarkTables;
use super::{LOCATION_CLAIMS, NAMESPACES, TABLES, claim_in, key_of, table_key};
use crate::catalog::store::{BatchError, Flip, cas_outcome, location_taken};
use crate::storage::durable;

/// The pointer table as the batch's transaction sees it.
type Pointers<'txn> = redb::Table<'txn, &'static str, &'static str>;

/// Commits `releases` in one write transaction, syncing `sync` (a local warehouse) just
/// before it commits. Returns each release's outcome, and `Some(whether it synced)` when
/// the transaction committed (`None`: every release failed, nothing was written).
///
/// # Errors
/// [`BatchError`] when the sync or the transaction failed: nothing of the batch is
/// visible.
pub(super) fn commit(
    db: &Database,
    releases: &[Vec<Flip>],
    sync: Option<&Path>,
) -> std::result::Result<(Vec<Result<()>>, Option<bool>), BatchError> {
    let storage = |e: redb::Error| BatchError::Store(crate::catalog::error::redb_error(e));
    let txn = db.begin_write().map_err(|e| storage(e.into()))?;
    let mut outcomes = Vec::with_capacity(releases.len());
    let mut applied = 0usize;
    {
        let mut tables = txn.open_table(TABLES).map_err(|e| storage(e.into()))?;
        let mut namespaces = txn.open_table(NAMESPACES).map_err(|e| storage(e.into()))?;
        let mut claims = txn
            .open_table(LOCATION_CLAIMS)
            .map_err(|e| storage(e.into()))?;
        let mut marks = MarkTables::open(&txn).map_err(storage)?;
        for release in releases {
            if let Err(e) = check(&tables, &marks, &claims, release).map_err(storage)? {
                outcomes.push(Err(e));
                continue;
            }
            apply(
                &mut tables,
                &mut namespaces,
                &mut claims,
                &mut marks,
                release,
            )
            .map_err(storage)?;
            applied += 1;
            outcomes.push(Ok(()));
        }
    }
    if applied == 0 {
        txn.abort().map_err(|e| storage(e.into()))?;
        return Ok((outcomes, None));
    }
    // Every release's files were written before it was queued: one syncfs makes them
    // all durable before any pointer that references them is. On an object store every
    // upload returned only once durable: nothing to sync.
    if let Some(warehouse) = sync {
        durable::sync_warehouse(warehouse).map_err(|source| BatchError::Sync {
            path: warehouse.to_path_buf(),
            source,
        })?;
    }
    txn.commit().map_err(|e| storage(e.into()))?;
    tracing::debug!(releases = releases.len(), applied, "group commit");
    Ok((outcomes, Some(sync.is_some())))
}

/// Checks every compare-and-swap of one release against the pointers as they stand in
/// the open transaction, that every writer mark it advances starts after the stored one,
/// and that no other table holds a location it claims. The outer error is storage; the
/// inner one this release's own failure (the first flip that does not hold).
fn check(
    tables: &Pointers<'_>,
    marks: &MarkTables<'_>,
    claims: &Pointers<'_>,
    flips: &[Flip],
) -> std::result::Result<Result<()>, redb::Error> {
    for flip in flips {
        if let Some(mark) = &flip.mark
            && let Err(e) = marks.check(mark)?
        {
            return Ok(Err(e));
        }
        if let Some((location, uuid)) = &flip.claim
            && let Some(held) = claims.get(location.as_str())?
            && held.value() != uuid
        {
            return Ok(Err(location_taken(&flip.ident, location)));
        }
        let key = match table_key(&flip.ident) {
            Ok(key) => key,
            Err(e) => return Ok(Err(e)),
        };
        let current = tables.get(key.as_str())?.map(|v| v.value().to_string());
        if let Err(failure) = cas_outcome(flip, current.as_deref()) {
            return Ok(Err(failure));
        }
    }
    Ok(Ok(()))
}

/// Writes one checked release: its marks, its creates' namespaces and claims, its
/// pointers.
fn apply(
    tables: &mut Pointers<'_>,
    namespaces: &mut Pointers<'_>,
    claims: &mut Pointers<'_>,
    marks: &mut MarkTables<'_>,
    flips: &[Flip],
) -> std::result::Result<(), redb::Error> {
    for flip in flips {
        if let Some(mark) = &flip.mark {
            marks.apply(mark)?;
        }
        if let Some((location, uuid)) = &flip.claim {
            claim_in(claims, (location, uuid))?;
        }
        for ns in &flip.namespaces {
            // Checked names: a key that cannot be made was refused by `check`.
            let Ok(key) = key_of(ns.as_ref()) else {
                continue;
            };
            if namespaces.get(key.as_str())?.is_none() {
                namespaces.insert(key.as_str(), "{}")?;
            }
        }
        let Ok(key) = table_key(&flip.ident) else {
            continue;
        };
        tables.insert(key.as_str(), flip.new.as_str())?;
    }
    Ok(())
}

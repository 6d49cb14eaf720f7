//! One group-commit batch as ONE PostgreSQL transaction: the same promises as the redb
//! batch (`store/redb/batch.rs`) — a conflict fails only its own release, a multi-table
//! release is all or nothing, nothing is answered before the transaction is durable —
//! with the pointers' compare-and-swap made against rows locked in this transaction.
//!
//! The transaction (READ COMMITTED):
//! 1. locks every pointer row and every mark row the batch touches, in key order
//!    (`SELECT ... ORDER BY ... FOR UPDATE`), so two instances' batches over the same
//!    tables queue on the rows instead of deadlocking, and a JDBC-catalog writer's
//!    `UPDATE ... WHERE metadata_location = ?` either committed before (skade sees its
//!    pointer and the release conflicts) or waits and then finds skade's pointer (its own
//!    compare-and-swap fails): never a lost update;
//! 2. checks each release in order against the locked values as earlier releases of the
//!    batch left them (the redb batch's rules, [`crate::catalog::store::cas_outcome`]
//!    and [`crate::catalog::marks::MarkAdvance::check_against`]);
//! 3. inserts the rows of created tables (a release with creates under a savepoint: a
//!    table another instance created meanwhile fails that release only), then writes
//!    every advanced pointer in one `UPDATE ... FROM unnest(...)`, whose own
//!    `metadata_location = base` condition must hold for every row, and the marks;
//! 4. confirms this instance's registration ([`super::cluster`]), runs the caller's
//!    `before_commit` (the local warehouse's `syncfs`) and commits.

use std::collections::HashMap;

use deadpool_postgres::Transaction;
use iceberg::{Error, ErrorKind, Result, TableIdent};

use super::{PgStore, namespace_string};
use crate::catalog::marks::WriterMark;
use crate::catalog::store::{Flip, cas_outcome, location_taken};

/// A table's row key: namespace string and name.
type RowKey = (String, String);

/// A mark's row key: writer id, namespace string, table name.
type MarkKey = (String, String, String);

/// The row key of `ident`.
///
/// # Errors
/// `DataInvalid` for a namespace level the JDBC catalog cannot hold.
fn row_key(ident: &TableIdent) -> Result<RowKey> {
    Ok((
        namespace_string(ident.namespace().as_ref())?,
        ident.name().to_string(),
    ))
}

/// A pointer write not yet sent: the new location and the one it replaces.
struct Advance {
    new: String,
    previous: String,
}

/// What the batch's transaction sees and will write (module docs, 1–3).
struct BatchView {
    /// Each touched table's pointer in this transaction (after the inserts sent so far).
    stored: HashMap<RowKey, Option<String>>,
    /// Each touched mark as locked.
    marks: HashMap<MarkKey, Option<WriterMark>>,
    /// Pointer writes of the releases admitted so far.
    advances: HashMap<RowKey, Advance>,
    /// Mark writes of the releases admitted so far.
    mark_rows: HashMap<MarkKey, WriterMark>,
    /// Releases admitted.
    applied: usize,
}

impl PgStore {
    /// Commits `releases` in one transaction; returns each release's own outcome, in
    /// order. The local warehouse `sync` (when given) is synced once the checks passed
    /// and the rows are written, just before the commit (not at all when every release
    /// failed).
    ///
    /// # Errors
    /// The outer error fails the whole batch (nothing of it is visible): the database's
    /// error (`Unavailable` when unreachable, a retryable conflict on a deadlock), a lost
    /// registration, or the sync's. The inner ones are the releases' own (as the redb
    /// batch's).
    pub(super) async fn commit_batch(
        &self,
        releases: &[&[Flip]],
        sync: Option<&std::path::Path>,
    ) -> Result<Vec<Result<()>>> {
        let mut client = self.client().await?;
        let mut txn = client.transaction().await.map_err(|e| self.error(e))?;
        let mut view = self.lock_rows(&txn, releases).await?;
        let mut outcomes = Vec::with_capacity(releases.len());
        for release in releases {
            let outcome = match view.check(release) {
                Ok(()) => self.admit(&mut txn, &mut view, release).await?,
                Err(e) => Err(e),
            };
            outcomes.push(outcome);
        }
        if view.applied == 0 {
            txn.rollback().await.map_err(|e| self.error(e))?;
            return Ok(outcomes);
        }
        self.write_pointers(&txn, &view).await?;
        self.write_marks(&txn, &view).await?;
        self.instance.confirm(&txn, self).await?;
        if let Some(warehouse) = sync {
            super::store::sync_off_runtime(warehouse).await?;
        }
        txn.commit().await.map_err(|e| self.error(e))?;
        Ok(outcomes)
    }

    /// Step 1: Locks every pointer row and every mark row the batch touches, in key order,
    /// and returns them as the batch's view.
    async fn lock_rows(&self, txn: &Transaction<'_>, releases: &[&[Flip]]) -> Result<BatchView> {
        let mut keys: Vec<RowKey> = Vec::new();
        let mut mark_keys: Vec<MarkKey> = Vec::new();
        for flip in releases.iter().flat_map(|r| r.iter()) {
            let (ns, name) = row_key(&flip.ident)?;
            if let Some(mark) = &flip.mark {
                mark_keys.push((mark.writer().to_string(), ns.clone(), name.clone()));
            }
            keys.push((ns, name));
        }
        keys.sort();
        keys.dedup();
        mark_keys.sort();
        mark_keys.dedup();
        let mut stored: HashMap<RowKey, Option<String>> =
            keys.iter().map(|k| (k.clone(), None)).collect();
        let (lock_ns, lock_names): (Vec<&str>, Vec<&str>) = keys
            .iter()
            .map(|(ns, name)| (ns.as_str(), name.as_str()))
            .unzip();
        let lock_pointers = txn
            .prepare_cached(
                "SELECT t.table_namespace, t.table_name, t.metadata_location
                 FROM iceberg_tables t JOIN unnest($2::text[], $3::text[]) AS k(ns, name)
                   ON t.table_namespace = k.ns AND t.table_name = k.name
                 WHERE t.catalog_name = $1
                 ORDER BY t.table_namespace, t.table_name FOR UPDATE OF t",
            )
            .await
            .map_err(|e| self.error(e))?;
        let rows = txn
            .query(&lock_pointers, &[&self.catalog(), &lock_ns, &lock_names])
            .await
            .map_err(|e| self.error(e))?;
        for row in &rows {
            stored.insert((row.get(0), row.get(1)), row.get(2));
        }
        let marks = self.lock_marks(txn, &mark_keys).await?;
        Ok(BatchView {
            stored,
            marks,
            advances: HashMap::new(),
            mark_rows: HashMap::new(),
            applied: 0,
        })
    }

    /// The mark rows of `keys`, locked in key order.
    async fn lock_marks(
        &self,
        txn: &Transaction<'_>,
        keys: &[MarkKey],
    ) -> Result<HashMap<MarkKey, Option<WriterMark>>> {
        let mut marks: HashMap<MarkKey, Option<WriterMark>> =
            keys.iter().map(|k| (k.clone(), None)).collect();
        if keys.is_empty() {
            return Ok(marks);
        }
        let writers: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        let namespaces: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
        let names: Vec<&str> = keys.iter().map(|k| k.2.as_str()).collect();
        let lock_marks = txn
            .prepare_cached(
                "SELECT m.writer_id, m.table_namespace, m.table_name, m.sequence::text,
                   m.snapshot_id, m.committed_at_ms
                 FROM skade_writer_marks m
                 JOIN unnest($2::text[], $3::text[], $4::text[]) AS k(w, ns, name)
                   ON m.writer_id = k.w AND m.table_namespace = k.ns AND m.table_name = k.name
                 WHERE m.catalog_name = $1
                 ORDER BY m.writer_id, m.table_namespace, m.table_name FOR UPDATE OF m",
            )
            .await
            .map_err(|e| self.error(e))?;
        let rows = txn
            .query(
                &lock_marks,
                &[&self.catalog(), &writers, &namespaces, &names],
            )
            .await
            .map_err(|e| self.error(e))?;
        for row in &rows {
            marks.insert(
                (row.get(0), row.get(1), row.get(2)),
                super::rows::mark_of(row, 3),
            );
        }
        Ok(marks)
    }

    /// Step 3: Sends a checked release's creates (under a savepoint: a table or location
    /// another instance took meanwhile fails this release only) and records its pointer
    /// and mark writes in `view`. The outer error fails the batch; the inner one is the
    /// release's own.
    async fn admit(
        &self,
        txn: &mut Transaction<'_>,
        view: &mut BatchView,
        release: &[Flip],
    ) -> Result<Result<()>> {
        let creates: Vec<&Flip> = release.iter().filter(|f| f.base.is_none()).collect();
        if !creates.is_empty() {
            let savepoint = txn.savepoint("creates").await.map_err(|e| self.error(e))?;
            let mut refused = None;
            for flip in &creates {
                if let Err(e) = self.insert_created(&savepoint, flip).await? {
                    refused = Some(e);
                    break;
                }
            }
            if let Some(e) = refused {
                savepoint.rollback().await.map_err(|e| self.error(e))?;
                return Ok(Err(e));
            }
            savepoint.commit().await.map_err(|e| self.error(e))?;
            for flip in &creates {
                view.stored
                    .insert(row_key(&flip.ident)?, Some(flip.new.clone()));
            }
        }
        for flip in release {
            let key = row_key(&flip.ident)?;
            if let Some(base) = &flip.base {
                view.advances.insert(
                    key.clone(),
                    Advance {
                        new: flip.new.clone(),
                        previous: base.clone(),
                    },
                );
            }
            if let Some(mark) = &flip.mark {
                view.mark_rows
                    .insert((mark.writer().to_string(), key.0, key.1), mark.mark());
            }
        }
        view.applied += 1;
        Ok(Ok(()))
    }

    /// Inserts a created table's row, its location claim and its namespaces' rows. The
    /// inner error: the table or the location was taken meanwhile.
    async fn insert_created(&self, txn: &Transaction<'_>, flip: &Flip) -> Result<Result<()>> {
        let catalog = self.catalog();
        let (ns, name) = row_key(&flip.ident)?;
        let inserted = txn
            .execute(
                super::rows::INSERT_TABLE,
                &[&catalog, &ns, &name, &flip.new],
            )
            .await
            .map_err(|e| self.error(e))?;
        if inserted == 0 {
            return Ok(Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {} was created concurrently", flip.ident),
            )));
        }
        if let Some((location, uuid)) = &flip.claim {
            let claimed = txn
                .execute(super::locations::INSERT_CLAIM, &[location, &catalog, uuid])
                .await
                .map_err(|e| self.error(e))?;
            if claimed == 0 {
                return Ok(Err(location_taken(&flip.ident, location)));
            }
        }
        for level in &flip.namespaces {
            let level = namespace_string(level.as_ref())?;
            txn.execute(
                "INSERT INTO iceberg_namespace_properties (catalog_name,
                   namespace, property_key, property_value)
                 VALUES ($1, $2, 'exists', 'true') ON CONFLICT DO NOTHING",
                &[&catalog, &level],
            )
            .await
            .map_err(|e| self.error(e))?;
        }
        Ok(Ok(()))
    }

    /// Writes every advanced pointer in one statement, each still at the value this
    /// transaction locked (or inserted).
    ///
    /// # Errors
    /// `Unexpected` when a locked row moved (the database broke its own locks).
    async fn write_pointers(&self, txn: &Transaction<'_>, view: &BatchView) -> Result<()> {
        if view.advances.is_empty() {
            return Ok(());
        }
        let mut cols: [Vec<&str>; 5] = Default::default();
        for (key, advance) in &view.advances {
            let base = view
                .stored
                .get(key)
                .and_then(Option::as_deref)
                .unwrap_or("");
            cols[0].push(&key.0);
            cols[1].push(&key.1);
            cols[2].push(base);
            cols[3].push(&advance.new);
            cols[4].push(&advance.previous);
        }
        let advance = txn
            .prepare_cached(
                "UPDATE iceberg_tables t
                 SET metadata_location = u.new, previous_metadata_location = u.previous
                 FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
                   AS u(ns, name, base, new, previous)
                 WHERE t.catalog_name = $1 AND t.table_namespace = u.ns
                   AND t.table_name = u.name AND t.metadata_location = u.base",
            )
            .await
            .map_err(|e| self.error(e))?;
        let catalog = self.catalog();
        let updated = txn
            .execute(
                &advance,
                &[&catalog, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4]],
            )
            .await
            .map_err(|e| self.error(e))?;
        let missed = view.advances.len() - usize::try_from(updated).unwrap_or(0);
        if missed != 0 {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "the catalog database changed {missed} locked table pointers during a commit"
                ),
            ));
        }
        Ok(())
    }

    /// Writes the advanced marks and their writers' last commit times.
    async fn write_marks(&self, txn: &Transaction<'_>, view: &BatchView) -> Result<()> {
        if view.mark_rows.is_empty() {
            return Ok(());
        }
        let rows: Vec<(&MarkKey, &WriterMark)> = view.mark_rows.iter().collect();
        let writers: Vec<&str> = rows.iter().map(|(k, _)| k.0.as_str()).collect();
        let ns: Vec<&str> = rows.iter().map(|(k, _)| k.1.as_str()).collect();
        let names: Vec<&str> = rows.iter().map(|(k, _)| k.2.as_str()).collect();
        let sequences: Vec<String> = rows.iter().map(|(_, m)| m.sequence.to_string()).collect();
        let snapshots: Vec<i64> = rows.iter().map(|(_, m)| m.snapshot_id).collect();
        let at: Vec<i64> = rows
            .iter()
            .map(|(_, m)| i64::try_from(m.committed_at_ms).unwrap_or(i64::MAX))
            .collect();
        let write_marks = txn
            .prepare_cached(
                "INSERT INTO skade_writer_marks (catalog_name, writer_id, table_namespace,
                   table_name, sequence, snapshot_id, committed_at_ms)
                 SELECT $1, w, ns, name, seq::numeric, snap, at
                 FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int8[])
                   AS m(w, ns, name, seq, snap, at)
                 ON CONFLICT (catalog_name, writer_id, table_namespace, table_name) DO UPDATE
                 SET sequence = EXCLUDED.sequence, snapshot_id = EXCLUDED.snapshot_id,
                     committed_at_ms = EXCLUDED.committed_at_ms",
            )
            .await
            .map_err(|e| self.error(e))?;
        let catalog = self.catalog();
        txn.execute(
            &write_marks,
            &[&catalog, &writers, &ns, &names, &sequences, &snapshots, &at],
        )
        .await
        .map_err(|e| self.error(e))?;
        let write_writers = txn
            .prepare_cached(
                "INSERT INTO skade_writers (catalog_name, writer_id, last_commit_ms)
                 SELECT $1, w, MAX(at) FROM unnest($2::text[], $3::int8[]) AS m(w, at) GROUP BY w
                 ON CONFLICT (catalog_name, writer_id) DO UPDATE
                 SET last_commit_ms = GREATEST(skade_writers.last_commit_ms, EXCLUDED.last_commit_ms)",
            )
            .await
            .map_err(|e| self.error(e))?;
        txn.execute(&write_writers, &[&catalog, &writers, &at])
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }
}

impl BatchView {
    /// Step 2: Checks one release against the view as earlier releases of the batch left it:
    /// its marks start after the stored ones, its compare-and-swaps hold. The release's
    /// own failure (the first flip that does not hold).
    fn check(&self, release: &[Flip]) -> Result<()> {
        for flip in release {
            let key = row_key(&flip.ident)?;
            if let Some(mark) = &flip.mark {
                let mk = (mark.writer().to_string(), key.0.clone(), key.1.clone());
                let current = self
                    .mark_rows
                    .get(&mk)
                    .copied()
                    .or_else(|| self.marks.get(&mk).copied().flatten());
                mark.check_against(current)?;
            }
            let current = self
                .advances
                .get(&key)
                .map(|a| a.new.as_str())
                .or_else(|| self.stored.get(&key).and_then(Option::as_deref));
            cas_outcome(flip, current)?;
        }
        Ok(())
    }
}

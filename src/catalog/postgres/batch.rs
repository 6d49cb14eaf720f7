//! One group-commit batch as ONE PostgreSQL transaction: the same promises as the redb
//! batch (`group_commit.rs`) — a conflict fails only its own release, a multi-table
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
//!    batch left them (the redb batch's rules, [`super::super::group_commit::cas_outcome`]
//!    and [`crate::catalog::marks::MarkAdvance::check_against`]);
//! 3. inserts the rows of created tables (a release with creates under a savepoint: a
//!    table another instance created meanwhile fails that release only), then writes
//!    every advanced pointer in one `UPDATE ... FROM unnest(...)`, whose own
//!    `metadata_location = base` condition must hold for every row, and the marks;
//! 4. confirms this instance's registration ([`super::cluster`]), runs the caller's
//!    `before_commit` (the local warehouse's `syncfs`) and commits.

use std::collections::HashMap;

use iceberg::{Error, ErrorKind, Result};

use super::{PgStore, namespace_string};
use crate::catalog::group_commit::{Flip, cas_outcome};
use crate::catalog::marks::WriterMark;
use crate::catalog::store::split_key;

/// One release of a batch: its flips.
pub(in crate::catalog) type Release<'a> = &'a [Flip];

/// A table's namespace string and name, from its catalog key.
fn split_table(key: &str) -> Result<(String, String)> {
    let mut parts = split_key(key);
    let name = parts.pop().unwrap_or_default();
    Ok((namespace_string(&parts)?, name))
}

/// A pointer write not yet sent: the new location and the one it replaces.
struct Advance {
    new: String,
    previous: String,
}

/// A mark row of the batch: writer, table and the mark.
struct MarkRow {
    writer: String,
    ns: String,
    name: String,
    mark: WriterMark,
}

impl PgStore {
    /// Commits `releases` in one transaction; returns each release's own outcome, in
    /// order. `before_commit` runs once the checks passed and the rows are written, just
    /// before the commit (not at all when every release failed); its error fails the
    /// whole batch.
    ///
    /// # Errors
    /// The outer error fails the whole batch (nothing of it is visible): the database's
    /// error (`Unavailable` when unreachable, a retryable conflict on a deadlock), a lost
    /// registration, or `before_commit`'s. The inner ones are the releases' own (as the
    /// redb batch's).
    pub(in crate::catalog) async fn commit_batch(
        &self,
        releases: &[Release<'_>],
        before_commit: impl FnOnce() -> Result<()>,
    ) -> Result<Vec<Result<()>>> {
        let mut client = self.client().await?;
        let mut txn = client.transaction().await.map_err(|e| self.error(e))?;
        let catalog = self.catalog();

        // 1. Lock what the batch touches, in key order.
        let mut keys: Vec<(String, String)> = Vec::new();
        let mut mark_keys: Vec<(String, String, String)> = Vec::new();
        for flip in releases.iter().flat_map(|r| r.iter()) {
            let (ns, name) = split_table(&flip.key)?;
            if let Some(mark) = &flip.mark {
                mark_keys.push((mark.writer().to_string(), ns.clone(), name.clone()));
            }
            keys.push((ns, name));
        }
        keys.sort();
        keys.dedup();
        mark_keys.sort();
        mark_keys.dedup();
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
            .query(&lock_pointers, &[&catalog, &lock_ns, &lock_names])
            .await
            .map_err(|e| self.error(e))?;
        // What each row holds in this transaction (after the inserts sent so far).
        let mut stored: HashMap<(String, String), Option<String>> =
            keys.iter().map(|k| (k.clone(), None)).collect();
        for row in &rows {
            stored.insert((row.get(0), row.get(1)), row.get(2));
        }
        let mut marks: HashMap<(String, String, String), Option<WriterMark>> =
            mark_keys.iter().map(|k| (k.clone(), None)).collect();
        if !mark_keys.is_empty() {
            let (w, n, t): (Vec<&str>, Vec<&str>, Vec<&str>) = mark_keys.iter().fold(
                (Vec::new(), Vec::new(), Vec::new()),
                |(mut w, mut n, mut t), (a, b, c)| {
                    w.push(a.as_str());
                    n.push(b.as_str());
                    t.push(c.as_str());
                    (w, n, t)
                },
            );
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
                .query(&lock_marks, &[&catalog, &w, &n, &t])
                .await
                .map_err(|e| self.error(e))?;
            for row in &rows {
                marks.insert(
                    (row.get(0), row.get(1), row.get(2)),
                    super::rows::mark_of(row, 3),
                );
            }
        }

        // 2. and 3. Check each release against the batch's view; send its creates.
        let mut advances: HashMap<(String, String), Advance> = HashMap::new();
        let mut mark_rows: HashMap<(String, String, String), MarkRow> = HashMap::new();
        let mut outcomes = Vec::with_capacity(releases.len());
        let mut applied = 0usize;
        for release in releases {
            let view = |key: &(String, String)| -> Option<String> {
                advances
                    .get(key)
                    .map(|a| a.new.clone())
                    .or_else(|| stored.get(key).cloned().flatten())
            };
            let mut failure = None;
            for flip in release.iter() {
                let key = split_table(&flip.key)?;
                if let Some(mark) = &flip.mark {
                    let mk = (mark.writer().to_string(), key.0.clone(), key.1.clone());
                    let current = mark_rows
                        .get(&mk)
                        .map(|m| m.mark)
                        .or_else(|| marks.get(&mk).copied().flatten());
                    if let Err(e) = mark.check_against(current) {
                        failure = Some(e);
                        break;
                    }
                }
                if let Err(e) = cas_outcome(flip, view(&key)) {
                    failure = Some(e);
                    break;
                }
            }
            if let Some(e) = failure {
                outcomes.push(Err(e));
                continue;
            }
            let creates: Vec<&Flip> = release.iter().filter(|f| f.base.is_none()).collect();
            if !creates.is_empty() {
                let savepoint = txn.savepoint("creates").await.map_err(|e| self.error(e))?;
                let mut refused = None;
                for flip in &creates {
                    let (ns, name) = split_table(&flip.key)?;
                    let inserted = savepoint
                        .execute(
                            super::rows::INSERT_TABLE,
                            &[&catalog, &ns, &name, &flip.new],
                        )
                        .await
                        .map_err(|e| self.error(e))?;
                    if inserted == 0 {
                        refused = Some(Error::new(
                            ErrorKind::TableAlreadyExists,
                            format!("table {} was created concurrently", flip.table),
                        ));
                        break;
                    }
                    if let Some((location, uuid)) = &flip.claim {
                        let claimed = savepoint
                            .execute(super::locations::INSERT_CLAIM, &[location, &catalog, uuid])
                            .await
                            .map_err(|e| self.error(e))?;
                        if claimed == 0 {
                            refused = Some(crate::catalog::group_commit::location_taken(
                                &flip.table,
                                location,
                            ));
                            break;
                        }
                    }
                    for level in &flip.namespaces {
                        let level = namespace_string(&split_key(level))?;
                        savepoint
                            .execute(
                                "INSERT INTO iceberg_namespace_properties (catalog_name,
                                   namespace, property_key, property_value)
                                 VALUES ($1, $2, 'exists', 'true') ON CONFLICT DO NOTHING",
                                &[&catalog, &level],
                            )
                            .await
                            .map_err(|e| self.error(e))?;
                    }
                }
                match refused {
                    Some(e) => {
                        savepoint.rollback().await.map_err(|e| self.error(e))?;
                        outcomes.push(Err(e));
                        continue;
                    }
                    None => savepoint.commit().await.map_err(|e| self.error(e))?,
                }
                for flip in &creates {
                    stored.insert(split_table(&flip.key)?, Some(flip.new.clone()));
                }
            }
            for flip in release.iter() {
                let key = split_table(&flip.key)?;
                if let Some(base) = &flip.base {
                    advances.insert(
                        key.clone(),
                        Advance {
                            new: flip.new.clone(),
                            previous: base.clone(),
                        },
                    );
                }
                if let Some(mark) = &flip.mark {
                    mark_rows.insert(
                        (mark.writer().to_string(), key.0.clone(), key.1.clone()),
                        MarkRow {
                            writer: mark.writer().to_string(),
                            ns: key.0.clone(),
                            name: key.1.clone(),
                            mark: mark.mark(),
                        },
                    );
                }
            }
            applied += 1;
            outcomes.push(Ok(()));
        }
        if applied == 0 {
            txn.rollback().await.map_err(|e| self.error(e))?;
            return Ok(outcomes);
        }

        // The pointers, each still at the value this transaction locked (or inserted).
        if !advances.is_empty() {
            let mut cols: [Vec<&str>; 5] = Default::default();
            for (key, advance) in &advances {
                let base = stored.get(key).and_then(Option::as_deref).unwrap_or("");
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
            let updated = txn
                .execute(
                    &advance,
                    &[&catalog, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4]],
                )
                .await
                .map_err(|e| self.error(e))?;
            if usize::try_from(updated).unwrap_or(0) != advances.len() {
                // Rows locked above cannot move: the database broke its own locks.
                return Err(Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "the catalog database changed {} locked table pointers during a commit",
                        advances.len() - usize::try_from(updated).unwrap_or(0)
                    ),
                ));
            }
        }
        if !mark_rows.is_empty() {
            let rows: Vec<&MarkRow> = mark_rows.values().collect();
            let writers: Vec<&str> = rows.iter().map(|m| m.writer.as_str()).collect();
            let ns: Vec<&str> = rows.iter().map(|m| m.ns.as_str()).collect();
            let names: Vec<&str> = rows.iter().map(|m| m.name.as_str()).collect();
            let sequences: Vec<String> = rows.iter().map(|m| m.mark.sequence.to_string()).collect();
            let snapshots: Vec<i64> = rows.iter().map(|m| m.mark.snapshot_id).collect();
            let at: Vec<i64> = rows
                .iter()
                .map(|m| i64::try_from(m.mark.committed_at_ms).unwrap_or(i64::MAX))
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
        }
        self.instance.confirm(&txn, self).await?;
        before_commit()?;
        txn.commit().await.map_err(|e| self.error(e))?;
        Ok(outcomes)
    }
}

//! Lane 2, the atomic multi-table flush (`docs/design/ingest_multi.md`).
//!
//! [`encode_and_write_files`] is the encode + write half of `ingest_parallel` (the same
//! [`encode`] and [`write_files`], so the files are byte-identical); [`ingest_multi_commit`]
//! stages one merge append per table and releases them all through ONE run of the
//! catalog's commit driver ([`RedbCatalog::commit`]) — one redb write transaction, one
//! fsync, every table advanced by exactly one snapshot or none. [`ingest_multi`] puts the two together.

use std::collections::{HashMap, HashSet};

use arrow_array::RecordBatch;
use iceberg::spec::DataFile;
use iceberg::table::Table;

use super::WriteError;
use super::conform::ConformOptions;
use super::encode::WriteProps;
use super::ingest::{FileNames, IngestStats, encode, write_files};
use super::schema::{conform_batch_with, table_arrow_schema};
use crate::catalog::WriterRange;
use crate::catalog::{CommitTarget, RedbCatalog};
use crate::snapshot::append::{Append, AppendPart};
use crate::snapshot::schema_change::SchemaChange;
use crate::sql::Predicate;

/// Conforms every batch of `groups` to `table`'s schema, encodes each group into one
/// Parquet file on all cores and writes the files under the table's `data/` — exactly
/// `ingest_parallel`'s [`encode`] + [`write_files`], so for the same input the bytes are
/// identical. Nothing is committed. Groups with no rows produce no file.
///
/// # Errors
/// [`WriteError::Schema`] naming the column of a batch that does not fit the table (e.g.
/// a wrong column count); [`WriteError::Encode`]/[`WriteError::Task`] from the encode;
/// [`WriteError::Storage`] naming the file that failed (files already written stay as
/// orphans).
///
/// # Cancel safety
/// Dropping the future may leave some files written (orphans, never referenced).
pub async fn encode_and_write_files(
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
    names: &mut FileNames,
    props: &WriteProps,
) -> Result<Vec<DataFile>, WriteError> {
    let target = table_arrow_schema(table)?;
    let options = ConformOptions::for_table(table);
    let name = table.identifier().to_string();
    let conformed = crate::storage::blocking::run_blocking(move || {
        groups
            .into_iter()
            .map(|group| {
                group
                    .iter()
                    .map(|batch| conform_batch_with(&name, batch, &target, &options))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| WriteError::Task {
        table: table.identifier().to_string(),
        reason: e.to_string(),
    })??;
    let encoded = encode(table, conformed).await?;
    write_files(table, encoded, names, props).await
}

/// One table's part of a multi-table commit: data files already written (by
/// [`encode_and_write_files`]) and the table they go into.
#[derive(Debug, Clone)]
pub struct StagedTable {
    /// The table the files were written for: a handle from the catalog, or a planned
    /// table from [`RedbCatalog::plan_table`] when `create` is set.
    pub table: Table,
    /// Whether the commit creates the table (it is not in the catalog yet).
    pub create: bool,
    /// The files, in write order; they become ONE snapshot.
    pub data_files: Vec<DataFile>,
    /// A schema the files were written with, made the table's current schema in the
    /// same commit (schema evolution on ingest, [`super::evolve`]); `None` keeps it.
    pub schema_change: Option<SchemaChange>,
    /// Filters whose rows the same commit deletes from the table (a transaction's
    /// `DELETE`s): with them the table's change is one row delta
    /// ([`crate::snapshot::row_delta`]) of these deletes and the files.
    pub deletes: Vec<Predicate>,
    /// Whether the commit replaces the table's schema and rows with `schema_change`'s
    /// schema and the files (ADBC's `mode="replace"`, [`crate::snapshot::replace_table`]).
    pub replace: bool,
}

/// The commit half of [`ingest_multi`], and what Lane 2's COMMIT runs: commits every
/// staged table in ONE transaction of the catalog's store
/// ([`RedbCatalog::atomic_release_raw`] under the commit driver): one merge append (one
/// new snapshot) per table that has files, and the pointer of every table created,
/// advancing `mark` (a Flight SQL transaction's writer id and sequence, `catalog::marks`)
/// in every table it appends to. A table that is neither created nor given files is
/// skipped; when all are skipped nothing is written at all and `commits` is 0, else
/// `commits` is 1.
///
/// Runs the catalog's commit driver ([`RedbCatalog::commit`]) over every table at once:
/// this process's commit turn on each, the appends staged on the tables as they stand
/// (a table committed while the transaction was open is built on as it now is), and on
/// a retryable conflict (a commit from outside this process) every append staged again
/// under the driver's one policy — appends commute, so no row is lost or doubled.
/// Returns the tables in input order (unchanged handles for skipped ones) and what
/// became visible.
///
/// # Errors
/// [`WriteError::RepeatedTable`] when a table appears twice (before anything is written);
/// [`WriteError::Catalog`] for a failed stage, a conflict that outlasted the retries
/// (`CatalogCommitConflicts`), a table to create that now exists (`TableAlreadyExists`),
/// the writer having committed that sequence to one of the tables already
/// (`PreconditionFailed`), or a storage failure. Nothing is committed then.
///
/// # Cancel safety
/// Dropping the future before the transaction commits commits nothing.
pub async fn ingest_multi_commit(
    catalog: &RedbCatalog,
    staged: Vec<StagedTable>,
    mark: Option<WriterRange>,
) -> Result<(Vec<Table>, IngestStats), WriteError> {
    reject_repeats(staged.iter().map(|s| &s.table))?;
    let live: Vec<usize> = (0..staged.len())
        .filter(|&i| {
            staged[i].create || !staged[i].data_files.is_empty() || !staged[i].deletes.is_empty()
        })
        .collect();
    let mut out: Vec<Table> = staged.iter().map(|s| s.table.clone()).collect();
    if live.is_empty() {
        return Ok((out, IngestStats::default()));
    }
    let parts: Vec<&StagedTable> = live.iter().map(|&i| &staged[i]).collect();
    let targets: Vec<CommitTarget> = parts
        .iter()
        .map(|part| {
            if part.create {
                CommitTarget::Create(part.table.clone())
            } else {
                CommitTarget::data(&part.table)
            }
        })
        .collect();
    let append_parts = parts
        .iter()
        .map(|part| AppendPart {
            files: part.data_files.clone(),
            change: part.schema_change.clone(),
            deletes: part.deletes.clone(),
            replace: part.replace,
        })
        .collect();
    let mut append = Append::new(catalog, append_parts, HashMap::new()).with_mark(mark);
    let outcome = catalog
        .commit(&targets, &mut append)
        .await
        .map_err(|e| WriteError::catalog(&names_of(&targets), e))?;
    let (released, ()) = outcome.committed().ok_or_else(|| {
        WriteError::catalog(
            &names_of(&targets),
            iceberg::Error::new(iceberg::ErrorKind::Unexpected, "the commit gave way"),
        )
    })?;
    let mut stats = IngestStats::default();
    for (table, &i) in released.into_iter().zip(&live) {
        stats.add_files(&staged[i].data_files);
        out[i] = table;
    }
    stats.commits = 1;
    Ok((out, stats))
}

/// Encodes and writes every table's groups (in input order, each on all cores), then
/// commits them all in ONE redb write transaction (`docs/design/ingest_multi.md` §f1): each
/// table with rows gains exactly one snapshot, tables with no rows are skipped, and
/// `commits` is 1 — or 0, with no redb write at all, when every table is empty.
///
/// Batches are conformed to their table's schema first (see [`super::conform_batch`]).
///
/// # Errors
/// [`WriteError::RepeatedTable`] when a table appears twice, before any encode; otherwise
/// the first failure of encode, write, stage or release (see [`ingest_multi_commit`], which
/// re-stages under the catalog's commit policy on a conflict). Any failure commits nothing:
/// no table advances; files already written are orphans.
///
/// # Cancel safety
/// Dropping the future before the redb transaction commits commits nothing.
pub async fn ingest_multi(
    catalog: &RedbCatalog,
    tables: Vec<(Table, Vec<Vec<RecordBatch>>)>,
    props: &WriteProps,
) -> Result<(Vec<Table>, IngestStats), WriteError> {
    reject_repeats(tables.iter().map(|(t, _)| t))?;
    let mut staged = Vec::with_capacity(tables.len());
    for (table, groups) in tables {
        let data_files =
            encode_and_write_files(&table, groups, &mut FileNames::new(), props).await?;
        staged.push(StagedTable {
            table,
            create: false,
            data_files,
            schema_change: None,
            deletes: Vec::new(),
            replace: false,
        });
    }
    ingest_multi_commit(catalog, staged, None).await
}

/// [`WriteError::RepeatedTable`] for the first table that appears twice.
fn reject_repeats<'a>(tables: impl Iterator<Item = &'a Table>) -> Result<(), WriteError> {
    let mut seen = HashSet::new();
    for table in tables {
        if !seen.insert(table.identifier().clone()) {
            return Err(WriteError::RepeatedTable {
                table: table.identifier().to_string(),
            });
        }
    }
    Ok(())
}

fn names_of(targets: &[CommitTarget]) -> String {
    targets
        .iter()
        .map(|t| t.table().identifier().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

//! Lane 2, the atomic multi-table flush (`docs/design/ingest_multi.md`).
//!
//! [`encode_and_write_files`] is the encode + write half of `ingest_parallel` (the same
//! [`encode`] and [`write_files`], so the files are byte-identical); [`commit_staged`]
//! stages one fast append per table and releases them all through ONE
//! [`RedbCatalog::atomic_release`] — one redb write transaction, one fsync, every table
//! advanced by exactly one snapshot or none. [`ingest_multi`] puts the two together.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arrow_array::RecordBatch;
use futures::future::try_join_all;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind};

use super::WriteError;
use super::append::stage_append;
use super::conform::ConformOptions;
use super::encode::WriteProps;
use super::evolve::{SchemaChange, evolved_handle, stage_evolving_append};
use super::ingest::{
    FileNames, IngestStats, encode, same_spec, same_table, table_commit_lock, write_files,
};
use super::schema::{conform_batch_with, table_arrow_schema};
use crate::catalog::{RedbCatalog, Release, run_blocking_io};

/// Times a multi-table commit is re-staged on the tables' new state after a conflicting
/// concurrent commit, before it fails with the conflict — the same count as iceberg's
/// `commit.retry.num-retries` default for a single-table commit.
pub const COMMIT_RETRIES: u32 = 4;

/// First wait before a re-stage; doubles on every further conflict.
const RETRY_BASE_WAIT: Duration = Duration::from_millis(20);

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
    let conformed = tokio::task::spawn_blocking(move || {
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
}

/// The commit half of [`ingest_multi`], and what Lane 2's COMMIT runs: commits every
/// staged table in ONE redb write transaction: one fast append (one new
/// snapshot) per table that has files, and the pointer of every table created. A table
/// that is neither created nor given files is skipped; when all are skipped nothing is
/// written at all and `commits` is 0, else `commits` is 1.
///
/// Each fast append is staged on the handle given, while holding this process's commit
/// turn ([`table_commit_lock`]) on every table, so in-process writers of the same tables
/// wait instead of racing. When another commit moved a table in between (a retryable
/// conflict: a commit made before the turns were taken, or from outside this process),
/// every existing table is reloaded and the appends are re-staged on the new state, up
/// to `retries` times — appends commute, so no row is lost or doubled. Returns the tables in input order (unchanged handles for skipped ones) and
/// what became visible.
///
/// # Errors
/// [`WriteError::RepeatedTable`] when a table appears twice (before anything is written);
/// [`WriteError::Catalog`] for a failed stage, a conflict that outlasted the retries
/// (`CatalogCommitConflicts`), a table to create that now exists (`TableAlreadyExists`),
/// or a storage failure. Nothing is committed then.
///
/// # Cancel safety
/// Dropping the future before the redb transaction commits commits nothing.
pub async fn commit_staged(
    catalog: &RedbCatalog,
    staged: Vec<StagedTable>,
    retries: u32,
) -> Result<(Vec<Table>, IngestStats), WriteError> {
    commit_staged_with(catalog, staged, retries, HashMap::new()).await
}

/// [`commit_staged`] whose every new snapshot's summary also carries `properties` (a
/// Flight SQL transaction's writer id and sequence: the catalog then advances that
/// writer's high-water mark of every table in the same redb transaction,
/// `catalog::marks`).
///
/// # Errors
/// As [`commit_staged`]; `PreconditionFailed` (not retryable, nothing committed) when the
/// writer already committed that sequence to one of the tables.
///
/// # Cancel safety
/// As [`commit_staged`].
pub async fn commit_staged_with(
    catalog: &RedbCatalog,
    staged: Vec<StagedTable>,
    retries: u32,
    properties: HashMap<String, String>,
) -> Result<(Vec<Table>, IngestStats), WriteError> {
    reject_repeats(staged.iter().map(|s| &s.table))?;
    let mut stats = IngestStats::default();
    let live: Vec<usize> = (0..staged.len())
        .filter(|&i| staged[i].create || !staged[i].data_files.is_empty())
        .collect();
    let mut out: Vec<Table> = staged.iter().map(|s| s.table.clone()).collect();
    if live.is_empty() {
        return Ok((out, stats));
    }
    let parts: Vec<&StagedTable> = live.iter().map(|&i| &staged[i]).collect();
    let mut bases: Vec<Table> = parts.iter().map(|part| part.table.clone()).collect();
    // Take this process's commit turn on every table (in uuid order, so two multi-table
    // commits cannot deadlock; single-table commits hold one turn at a time). Held until
    // the release, so an in-process writer cannot move a pointer between re-stages.
    let mut uuids: Vec<uuid::Uuid> = bases.iter().map(|t| t.metadata().uuid()).collect();
    uuids.sort_unstable();
    uuids.dedup();
    let locks: Vec<_> = uuids.into_iter().map(table_commit_lock).collect();
    let mut _turns = Vec::with_capacity(locks.len());
    for lock in &locks {
        _turns.push(lock.lock().await);
    }
    // A table committed while the transaction was open is re-based before the first
    // stage, instead of after a conflict.
    rebase(catalog, &parts, &mut bases, true).await?;
    let mut attempt = 0;
    let released = loop {
        // Every table at once (here and in `rebase`): a flush of N tables waits for its
        // slowest table, not for the sum (the multi-table latency target).
        let batch = try_join_all(
            parts
                .iter()
                .zip(&bases)
                .map(|(part, base)| stage_release(catalog, part, base, &properties)),
        )
        .await?;
        match catalog.atomic_release(batch).await {
            Ok(tables) => break tables,
            Err(e)
                if e.kind() == ErrorKind::CatalogCommitConflicts
                    && e.retryable()
                    && attempt < retries =>
            {
                attempt += 1;
                tracing::debug!(attempt, error = %e, "multi-table commit conflict, re-staging");
                tokio::time::sleep(RETRY_BASE_WAIT * 2u32.pow(attempt - 1)).await;
                rebase(catalog, &parts, &mut bases, false).await?;
            }
            Err(e) => return Err(WriteError::catalog(&names_of(&bases), e)),
        }
    };
    for (table, &i) in released.into_iter().zip(&live) {
        let files = &staged[i].data_files;
        if !files.is_empty() {
            let mut one = IngestStats::default();
            one.add_commit(files);
            stats.rows += one.rows;
            stats.files += one.files;
            stats.bytes += one.bytes;
        }
        out[i] = table;
    }
    stats.commits = 1;
    Ok((out, stats))
}

/// Reloads the base of every table `parts` does not create, all at once: only those
/// whose pointer moved when `only_moved` (a cheap pointer read first), else all of them
/// (after a conflict).
///
/// # Errors
/// [`WriteError::Catalog`] for a table that cannot be read (e.g. dropped).
async fn rebase(
    catalog: &RedbCatalog,
    parts: &[&StagedTable],
    bases: &mut [Table],
    only_moved: bool,
) -> Result<(), WriteError> {
    try_join_all(bases.iter_mut().zip(parts).map(|(base, part)| async move {
        if part.create {
            return Ok(());
        }
        let ident = base.identifier().clone();
        if only_moved {
            let current = catalog
                .metadata_location(&ident)
                .await
                .map_err(|e| WriteError::catalog(&ident, e))?;
            if base.metadata_location() == Some(current.as_str()) {
                return Ok(());
            }
        }
        *base = catalog
            .load_table(&ident)
            .await
            .map_err(|e| WriteError::catalog(&ident, e))?;
        Ok::<_, WriteError>(())
    }))
    .await
    .map(drop)
}

/// One table's part of the release: its fast append (when it has files) staged on
/// `base` — on the blocking pool, since iceberg's local storage blocks and fsyncs
/// inside its futures — as an advance of an existing table or the create of a new one.
///
/// # Errors
/// [`WriteError::Catalog`] when `base` is no longer the staged table or its spec
/// changed, or the stage failed.
async fn stage_release(
    catalog: &RedbCatalog,
    part: &StagedTable,
    base: &Table,
    properties: &HashMap<String, String>,
) -> Result<Release, WriteError> {
    if !part.data_files.is_empty() && !part.create {
        same_table(&part.table, base)?;
        same_spec(&part.table, base)?;
    }
    let (requirements, updates) = if part.data_files.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let (table, files) = (base.clone(), part.data_files.clone());
        let properties = properties.clone();
        let change = match &part.schema_change {
            Some(change) => Some((
                evolved_handle(catalog, &table, change)
                    .map_err(|e| WriteError::catalog(base.identifier(), e))?,
                change.clone(),
            )),
            None => None,
        };
        run_blocking_io(async move {
            match change {
                Some((evolved, change)) => {
                    stage_evolving_append(evolved, &change, files, properties).await
                }
                None => stage_append(&table, files, properties).await,
            }
        })
        .await
        .map_err(|e| WriteError::catalog(base.identifier(), e))?
    };
    Ok(if part.create {
        Release::Create {
            table: base.clone(),
            requirements,
            updates,
        }
    } else {
        Release::Advance((base.identifier().clone(), requirements, updates))
    })
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
/// the first failure of encode, write, stage or release (see [`commit_staged`], which
/// re-stages up to [`COMMIT_RETRIES`] times on a conflict). Any failure commits nothing:
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
        });
    }
    commit_staged(catalog, staged, COMMIT_RETRIES).await
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

fn names_of(tables: &[Table]) -> String {
    tables
        .iter()
        .map(|t| t.identifier().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

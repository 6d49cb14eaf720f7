//! The primitives every lane shares (the ingest counts [`IngestStats`], encode off the
//! runtime, file names and writes, the one-table append commit [`commit_files`], which
//! runs `evolve::commit_append` through the catalog's commit driver) and the
//! single-commit lanes ([`ingest_parallel`], [`append`]).

use crate::storage::blocking::run_blocking_io;
use std::collections::HashMap;

use arrow_array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::DataFile;
use iceberg::table::Table;

use super::WriteError;
use super::encode::{EncodedFile, WriteProps, encode_groups};
use crate::catalog::CommitTarget;
use crate::catalog::RedbCatalog;
use crate::catalog::WriterRange;
use crate::snapshot::append::{Append, AppendPart};

/// What an ingest made visible.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestStats {
    /// Rows committed.
    pub rows: u64,
    /// Data files committed.
    pub files: u64,
    /// Parquet bytes committed (sum of the data files' sizes).
    pub bytes: u64,
    /// Catalog commits made (= snapshots added = redb write transactions).
    pub commits: u64,
}

impl IngestStats {
    /// What one commit of `files` (one snapshot) makes visible; nothing for no files,
    /// which no commit adds a snapshot for.
    pub fn of_commit(files: &[DataFile]) -> Self {
        let mut stats = Self::default();
        if !files.is_empty() {
            stats.add_commit(files);
        }
        stats
    }

    /// Adds `files` committed by one commit.
    pub fn add_commit(&mut self, files: &[DataFile]) {
        self.add_files(files);
        self.commits += 1;
    }

    /// Adds the rows, bytes and count of `files` (no commit: several tables' files
    /// committed together are one commit).
    pub fn add_files(&mut self, files: &[DataFile]) {
        self.rows += files.iter().map(DataFile::record_count).sum::<u64>();
        self.bytes += files.iter().map(DataFile::file_size_in_bytes).sum::<u64>();
        self.files += files.len() as u64;
    }

    /// Adds everything `other` counted.
    pub fn add(&mut self, other: &IngestStats) {
        self.rows += other.rows;
        self.files += other.files;
        self.bytes += other.bytes;
        self.commits += other.commits;
    }
}

/// Encodes `groups` into Parquet files on all cores (see [`encode_groups`]), off the async
/// runtime.
///
/// # Errors
/// [`WriteError::Encode`], or [`WriteError::Task`] if the encode task panicked.
///
/// # Cancel safety
/// Dropping the future does not stop an encode already running; its result is discarded.
pub async fn encode(
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
) -> Result<Vec<EncodedFile>, WriteError> {
    let owned = table.clone();
    crate::storage::blocking::run_blocking(move || encode_groups(&owned, groups))
        .await
        .map_err(|e| WriteError::Task {
            table: table.identifier().to_string(),
            reason: e.to_string(),
        })?
}

/// Names the data files of one ingest: `<write_id>-<seq:08>.parquet`, where `write_id`
/// is a time-ordered UUID (v7) and `seq` counts the ingest's files from 0. Sorting a
/// table's data file paths therefore gives the order sequential ingests wrote them in,
/// which is the order `DoGet` reads them back in.
#[derive(Debug, Clone)]
pub struct FileNames {
    write_id: uuid::Uuid,
    next_seq: u64,
}

impl FileNames {
    /// A fresh sequence for one ingest.
    pub fn new() -> Self {
        Self {
            write_id: uuid::Uuid::now_v7(),
            next_seq: 0,
        }
    }

    /// The path of the next data file of `table`.
    pub fn next_path(&mut self, table: &Table) -> String {
        let location = table.metadata().location().trim_end_matches('/');
        let path = format!(
            "{location}/data/{}-{:08}.parquet",
            self.write_id, self.next_seq
        );
        self.next_seq += 1;
        path
    }
}

impl Default for FileNames {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes `encoded` files under `<table location>/data/`, named by `names` in input
/// order, at most `props.channel_depth` at once, and returns their `DataFile`s in input
/// order.
///
/// The bytes are not fsynced here: the commit that references them syncs the warehouse
/// before its pointer flip (see `storage::durable`).
///
/// # Errors
/// [`WriteError::Storage`] naming the file that failed; files already written stay as
/// orphans.
///
/// # Cancel safety
/// Dropping the future may leave some files written (orphans, never referenced).
pub async fn write_files(
    table: &Table,
    encoded: Vec<EncodedFile>,
    names: &mut FileNames,
    props: &WriteProps,
) -> Result<Vec<DataFile>, WriteError> {
    let named: Vec<(String, EncodedFile)> = encoded
        .into_iter()
        .map(|file| (names.next_path(table), file))
        .collect();
    futures::stream::iter(named)
        .map(|(path, file)| write_file(table, path, file))
        .buffered(props.channel_depth.max(1))
        .try_collect()
        .await
}

/// Writes one encoded file to `path` through the table's `FileIO` and returns its
/// `DataFile` (path, partition spec id and partition tuple set).
///
/// # Errors
/// [`WriteError::Storage`] naming the file.
///
/// # Cancel safety
/// Dropping the future may leave the file written (an orphan, never referenced).
pub async fn write_file(
    table: &Table,
    path: String,
    file: EncodedFile,
) -> Result<DataFile, WriteError> {
    let storage = |source: iceberg::Error| WriteError::Storage {
        table: table.identifier().to_string(),
        path: path.clone(),
        source: Box::new(source),
    };
    let output = table.file_io().new_output(&path).map_err(storage)?;
    let bytes = file.bytes;
    let partition = file.partition;
    // Local storage writes with blocking std::fs calls: keep them off the runtime.
    run_blocking_io(async move { output.write(bytes).await })
        .await
        .map_err(storage)?;
    let mut builder = file.data_file;
    builder
        .file_path(path.clone())
        .partition(partition.values)
        .partition_spec_id(partition.spec_id);
    builder.build().map_err(|e| {
        storage(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("incomplete data file: {e}"),
        ))
    })
}

/// Commits `data_files` to `table` as one append (one snapshot, one catalog commit): a
/// merge append ([`crate::snapshot::append::Append`]) through the catalog's commit driver
/// ([`RedbCatalog::commit`]: the table's commit turn, the table as it stands, its
/// conflict policy). Commits to *other* tables running at the same time share the
/// catalog's warehouse sync and redb transaction (group commit); this returns only once
/// that transaction is durable.
///
/// # Errors
/// [`WriteError::Catalog`]: `TableNotFound` when the table was dropped (or another table
/// took its name), a non-retryable conflict when its partition spec changed, a conflict
/// that outlasted the driver's retries, or a storage failure of the manifest/metadata
/// writes, the warehouse sync or the redb transaction.
///
/// # Cancel safety
/// Dropping the future before the commit reaches the catalog's committer commits
/// nothing; once it has been queued there (the last step) it commits with its batch
/// even if dropped, and the new snapshot is visible without this caller learning it.
pub async fn commit_files(
    catalog: &RedbCatalog,
    table: &Table,
    data_files: Vec<DataFile>,
) -> Result<Table, WriteError> {
    commit_files_with(catalog, table, data_files, None).await
}

/// [`commit_files`] advancing a producer's high-water mark (`mark`: its writer id and
/// sequence range, `catalog::marks`) in the same commit — what Lane 1's committer runs
/// for every commit of a stream that does not evolve the schema.
///
/// # Errors
/// As [`commit_files`]; `PreconditionFailed` when the writer already committed a
/// sequence of this range.
///
/// # Cancel safety
/// As [`commit_files`].
pub async fn commit_files_with(
    catalog: &RedbCatalog,
    table: &Table,
    data_files: Vec<DataFile>,
    mark: Option<WriterRange>,
) -> Result<Table, WriteError> {
    let part = AppendPart {
        files: data_files,
        change: None,
        deletes: Vec::new(),
        replace: false,
    };
    commit_append(catalog, table, part, mark).await
}

/// The one-table append Lane 1 commits: `part`'s files (and its schema change, when it
/// has one) as one merge append through the catalog's commit driver, advancing `mark`.
///
/// # Errors
/// As [`commit_files_with`]; with a schema change, `CatalogCommitConflicts` (not
/// retryable) when the table's schema moved in a way the change cannot be rebased onto.
///
/// # Cancel safety
/// As [`commit_files`].
pub(crate) async fn commit_append(
    catalog: &RedbCatalog,
    table: &Table,
    part: AppendPart,
    mark: Option<WriterRange>,
) -> Result<Table, WriteError> {
    let target = CommitTarget::data(table);
    let mut append = Append::new(catalog, vec![part], HashMap::new()).with_mark(mark);
    catalog
        .commit_one(&target, &mut append)
        .await
        .map_err(|e| WriteError::catalog(table.identifier(), e))
}

/// Encodes every group on all cores, writes the files, and commits them all as ONE
/// snapshot. Input with no rows commits nothing (`commits == 0`).
///
/// # Errors
/// The first [`WriteError`] of encode, write or commit; nothing is committed then.
pub async fn ingest_parallel(
    catalog: &RedbCatalog,
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
    props: &WriteProps,
) -> Result<(Table, IngestStats), WriteError> {
    let encoded = encode(table, groups).await?;
    let files = write_files(table, encoded, &mut FileNames::new(), props).await?;
    let stats = IngestStats::of_commit(&files);
    if files.is_empty() {
        return Ok((table.clone(), stats));
    }
    let table = commit_files(catalog, table, files).await?;
    Ok((table, stats))
}

/// Appends `batches` as one data file in one snapshot (`ingest_parallel` with one group).
///
/// # Errors
/// As [`ingest_parallel`].
pub async fn append(
    catalog: &RedbCatalog,
    table: &Table,
    batches: Vec<RecordBatch>,
    props: &WriteProps,
) -> Result<(Table, IngestStats), WriteError> {
    ingest_parallel(catalog, table, vec![batches], props).await
}

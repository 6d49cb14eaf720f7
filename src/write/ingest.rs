//! The single-table ingest lanes: encode on all cores, write, commit one snapshot.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use arrow_array::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use iceberg::Catalog;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};

use super::WriteError;
use super::append::stage_append;
use super::encode::{EncodedFile, WriteProps, encode_groups};
use crate::catalog::RedbCatalog;

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
    /// Adds `files` committed by one commit.
    pub fn add_commit(&mut self, files: &[DataFile]) {
        self.rows += files.iter().map(DataFile::record_count).sum::<u64>();
        self.bytes += files.iter().map(DataFile::file_size_in_bytes).sum::<u64>();
        self.files += files.len() as u64;
        self.commits += 1;
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
    tokio::task::spawn_blocking(move || encode_groups(&owned, groups))
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
/// before its pointer flip (see `catalog::durable`).
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
    tokio::task::spawn_blocking(move || futures::executor::block_on(output.write(bytes)))
        .await
        .map_err(|e| {
            storage(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("write task failed: {e}"),
            ))
        })?
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

/// The lock that serializes this process's commits to the table with `uuid`.
///
/// Snapshot history is linear, so commits to one table cannot run in parallel anyway;
/// taking turns in-process means concurrent streams into one table never race on the
/// catalog's compare-and-swap (and never exhaust iceberg's retries or write manifests
/// that a lost race throws away). Commits from elsewhere are still caught by the
/// catalog's compare-and-swap and retried.
pub fn table_commit_lock(uuid: uuid::Uuid) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: LazyLock<Mutex<HashMap<uuid::Uuid, Weak<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Default::default);
    let mut locks = LOCKS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(lock) = locks.get(&uuid).and_then(Weak::upgrade) {
        return lock;
    }
    if locks.len() >= 1024 {
        locks.retain(|_, lock| lock.strong_count() > 0);
    }
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(uuid, Arc::downgrade(&lock));
    lock
}

/// Commits `data_files` to `table` as one fast append (one snapshot, one catalog commit).
/// Commits to one table from this process take turns ([`table_commit_lock`]); a
/// concurrent commit from elsewhere makes iceberg rebase and retry (the catalog's
/// conflicts are retryable). Commits to *other* tables running at the same time share
/// the catalog's warehouse sync and redb transaction (group commit); this returns only
/// once that transaction is durable.
///
/// # Errors
/// [`WriteError::Catalog`]: a conflict that outlasted iceberg's retries, or a storage
/// failure of the manifest/metadata writes, the warehouse sync or the redb transaction.
///
/// # Cancel safety
/// Dropping the future before the commit reaches the catalog's committer commits
/// nothing; once it has been queued there (the last step) it commits with its batch
/// even if dropped, and the new snapshot is visible without this caller learning it.
pub async fn commit_files(
    catalog: &dyn Catalog,
    table: &Table,
    data_files: Vec<DataFile>,
) -> Result<Table, WriteError> {
    commit_files_with(catalog, table, data_files, HashMap::new()).await
}

/// [`commit_files`] with extra snapshot summary `properties` (e.g. a producer's writer
/// id and sequence range, `catalog::marks`).
///
/// # Errors
/// As [`commit_files`]; `PreconditionFailed` when the summary's writer already committed
/// a sequence of this range.
///
/// # Cancel safety
/// As [`commit_files`].
pub async fn commit_files_with(
    catalog: &dyn Catalog,
    table: &Table,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<Table, WriteError> {
    let lock = table_commit_lock(table.metadata().uuid());
    let _turn = lock.lock().await;
    // Under the turn, build on the table as it stands: another commit of this process
    // (a stream, a transaction, table maintenance) may have moved it since `table` was
    // loaded, and an old base's manifest list may be expired and deleted by now.
    let current = catalog
        .load_table(table.identifier())
        .await
        .map_err(|e| WriteError::catalog(table.identifier(), e))?;
    same_table(table, &current)?;
    same_spec(table, &current)?;
    let base = if current.metadata_location() == table.metadata_location() {
        table
    } else {
        &current
    };
    let tx = Transaction::new(base);
    let tx = tx
        .fast_append()
        .with_check_duplicate(false)
        .set_snapshot_properties(properties)
        .add_data_files(data_files)
        .apply(tx)
        .map_err(|e| WriteError::catalog(table.identifier(), e))?;
    tx.commit(catalog)
        .await
        .map_err(|e| WriteError::catalog(table.identifier(), e))
}

/// Commits `data_files` to `table` as one append (a merge append,
/// [`super::append::stage_append`]) through `catalog`'s commit path, a one-table
/// [`RedbCatalog::atomic_release_raw`], under this process's commit turn on the table
/// (Lane 1's commits; [`commit_files_with`] is the same over any [`Catalog`] with
/// iceberg's fast append). `properties` go into the snapshot summary. Returns the table
/// once the commit is durable.
///
/// # Errors
/// As [`commit_files_with`]; a conflict is staged again up to
/// [`super::multi::COMMIT_RETRIES`] times.
///
/// # Cancel safety
/// As [`commit_files`].
pub async fn commit_append(
    catalog: &RedbCatalog,
    table: &Table,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<Table, WriteError> {
    let ident = table.identifier();
    let lock = table_commit_lock(table.metadata().uuid());
    let _turn = lock.lock().await;
    let mut attempt = 0;
    loop {
        let current = catalog
            .load_table(ident)
            .await
            .map_err(|e| WriteError::catalog(ident, e))?;
        same_table(table, &current)?;
        same_spec(table, &current)?;
        let (requirements, updates) =
            stage_append(&current, data_files.clone(), properties.clone())
                .await
                .map_err(|e| WriteError::catalog(ident, e))?;
        match catalog
            .atomic_release_raw(vec![(ident.clone(), requirements, updates)])
            .await
        {
            Ok(mut tables) => {
                return tables.pop().ok_or_else(|| {
                    WriteError::catalog(
                        ident,
                        iceberg::Error::new(
                            iceberg::ErrorKind::Unexpected,
                            "the release returned no table",
                        ),
                    )
                });
            }
            // Moved by a writer outside this process's commit turn: stage again on the
            // table as it now stands, as iceberg's transaction retries a fast append.
            Err(e)
                if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts
                    && e.retryable()
                    && attempt < super::multi::COMMIT_RETRIES =>
            {
                attempt += 1;
            }
            Err(e) => return Err(WriteError::catalog(ident, e)),
        }
    }
}

/// Checks that `current` (the table as it stands under this name) is the table the data
/// files were written for: a table dropped and created again under the same name while
/// a write was open is another table (another uuid), and the write must not land in it.
///
/// # Errors
/// [`WriteError::Catalog`] with `TableNotFound` (`NotFound`) naming the table.
pub fn same_table(written: &Table, current: &Table) -> Result<(), WriteError> {
    if written.metadata().uuid() == current.metadata().uuid() {
        return Ok(());
    }
    Err(WriteError::catalog(
        written.identifier(),
        iceberg::Error::new(
            iceberg::ErrorKind::TableNotFound,
            format!(
                "table {} was dropped (and another table created under its name) while \
                 these rows were being written; nothing of them is committed",
                written.identifier()
            ),
        ),
    ))
}

/// Checks that `current` (the table as it stands) still has the default partition spec
/// of `written` (the handle the data files were written for): a data file carries the
/// spec it was split by, and a fast append takes files of the default spec only.
///
/// # Errors
/// [`WriteError::Catalog`] with `CatalogCommitConflicts` (not retryable: `Aborted`)
/// naming both spec ids when the spec changed (partition evolution) since.
pub fn same_spec(written: &Table, current: &Table) -> Result<(), WriteError> {
    let (was, now) = (
        written.metadata().default_partition_spec_id(),
        current.metadata().default_partition_spec_id(),
    );
    if was == now {
        return Ok(());
    }
    Err(WriteError::catalog(
        written.identifier(),
        iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!(
                "the table's partition spec changed (id {was} → {now}) after these rows were \
                 split by the old one; nothing of them is committed: retry the write"
            ),
        ),
    ))
}

/// Encodes every group on all cores, writes the files, and commits them all as ONE
/// snapshot. Input with no rows commits nothing (`commits == 0`).
///
/// # Errors
/// The first [`WriteError`] of encode, write or commit; nothing is committed then.
pub async fn ingest_parallel(
    catalog: &dyn Catalog,
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
    props: &WriteProps,
) -> Result<(Table, IngestStats), WriteError> {
    let encoded = encode(table, groups).await?;
    let files = write_files(table, encoded, &mut FileNames::new(), props).await?;
    let mut stats = IngestStats::default();
    if files.is_empty() {
        return Ok((table.clone(), stats));
    }
    stats.add_commit(&files);
    let table = commit_files(catalog, table, files).await?;
    Ok((table, stats))
}

/// Appends `batches` as one data file in one snapshot (`ingest_parallel` with one group).
///
/// # Errors
/// As [`ingest_parallel`].
pub async fn append(
    catalog: &dyn Catalog,
    table: &Table,
    batches: Vec<RecordBatch>,
    props: &WriteProps,
) -> Result<(Table, IngestStats), WriteError> {
    ingest_parallel(catalog, table, vec![batches], props).await
}

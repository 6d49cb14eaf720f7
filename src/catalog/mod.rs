//! The redb-backed Iceberg catalog: skade's single durability point.
//!
//! [`RedbCatalog`] implements [`iceberg::Catalog`] over one redb file. Each table's
//! current metadata location is a row in redb; a commit writes the new metadata JSON,
//! makes the warehouse durable ([`durable::sync_warehouse`]) and flips the pointer in ONE
//! redb write transaction at `Durability::Immediate` — a compare-and-swap against the
//! location the commit was built on. A moved pointer is a *retryable*
//! `CatalogCommitConflicts`, so iceberg's `Transaction::commit` rebases and retries (the
//! same contract as iceberg-rust's SQL catalog).
//!
//! [`RedbCatalog::atomic_release_raw`] is the multi-table form: N tables, one write
//! transaction, one fsync, all or nothing (`docs/design/ingest_multi.md` §f0, §f4).
//! Concurrent commits (of different tables, or several multi-table releases) share one
//! warehouse sync and one write transaction ([`group_commit`]), each still acked only
//! after that transaction is durable. The latest metadata of each table is kept parsed
//! ([`metadata_cache`]), so a commit does not re-read the JSON it just wrote.
//! [`gc`] removes the files no table's metadata references (`skade gc`).

pub mod durable;
#[doc(hidden)]
pub mod fault;
pub(crate) mod file_store;
pub mod gc;
mod group_commit;
pub mod marks;
mod metadata_cache;
pub mod object_store;
mod pins;
mod purge;
pub mod storage;
pub mod uploads;
pub mod warehouse;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use iceberg::Runtime;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder, TableMetadataRef};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent, TableRequirement, TableUpdate,
};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use group_commit::{Committer, Flip};
use metadata_cache::MetadataCache;
pub use pins::WritePin;
pub(crate) use purge::is_plain_absolute;
pub use warehouse::{S3Options, Warehouse};

/// Namespace key → JSON object of the namespace's properties.
const NAMESPACES: TableDefinition<&str, &str> = TableDefinition::new("namespaces");
/// Table key → current metadata location (absolute path of a `*.metadata.json`).
const TABLES: TableDefinition<&str, &str> = TableDefinition::new("tables");

/// Separates name elements inside a redb key. Names cannot contain it (see [`key_of`]).
const KEY_SEP: char = '\u{1f}';

static REDB_COMMITS: AtomicU64 = AtomicU64::new(0);

/// Process-global count of durable redb write transactions on the data paths. Each is
/// one fsync at `Durability::Immediate`, so this is the write path's commit-fsync count
/// (`docs/design/ingest_multi.md` §f4): a lone single-table commit
/// ([`Catalog::update_table`]) or a non-empty [`RedbCatalog::atomic_release_raw`] counts
/// one; commits that ran concurrently and shared one transaction ([`group_commit`])
/// count one together, so under contention this is less than the number of commits.
/// DDL through [`Catalog`]'s own methods (namespace/table create, drop, rename,
/// register) does not count; the REST catalog's table creates and metadata commits go
/// through [`RedbCatalog::atomic_release`] and count as commits.
pub fn redb_commit_count() -> u64 {
    REDB_COMMITS.load(Ordering::Relaxed)
}

/// A pause of a catalog's commits ([`RedbCatalog::pause_commits`]); dropping it resumes
/// them, committing everything queued meanwhile as one batch.
#[doc(hidden)]
#[derive(Debug)]
#[must_use = "dropping the pause resumes commits at once"]
pub struct CommitPause {
    _held: group_commit::Pause,
}

/// One table's entry in [`RedbCatalog::atomic_release_raw`]: the table, the requirements
/// its base must still meet, and the updates to apply.
pub type ReleaseEntry = (TableIdent, Vec<TableRequirement>, Vec<TableUpdate>);

/// One table's part in [`RedbCatalog::atomic_release`].
#[derive(Debug)]
pub enum Release {
    /// Advance an existing table: its identifier, the requirements its current metadata
    /// must meet, and the updates to apply (as [`ReleaseEntry`]).
    Advance(ReleaseEntry),
    /// Create a table that does not exist yet, with its first updates applied: `table`
    /// comes from [`RedbCatalog::plan_table`] (nothing of it is in the catalog), and the
    /// requirements are checked against its planned metadata.
    Create {
        /// The planned table.
        table: Table,
        /// Requirements on the planned metadata (e.g. a staged fast append's).
        requirements: Vec<TableRequirement>,
        /// Updates to apply on top of the planned metadata (may be empty).
        updates: Vec<TableUpdate>,
    },
}

/// An [`iceberg::Catalog`] stored in one redb file, with tables under a warehouse (a local
/// directory or an S3 prefix, [`Warehouse`]) laid out as
/// `<warehouse>/<namespace...>/<table>/{data,metadata}/`.
///
/// Cheap to share behind an `Arc`; every method may be called concurrently.
#[derive(Debug)]
pub struct RedbCatalog {
    db: Arc<Database>,
    warehouse: Warehouse,
    file_io: FileIO,
    runtime: Runtime,
    /// Every data commit's pointer flips go through it (group commit).
    committer: Arc<Committer>,
    metadata: MetadataCache,
    /// Writers in flight whose files no snapshot references yet ([`Self::pin_writes`]).
    pins: Arc<pins::Pins>,
}

/// A table commit whose metadata JSON is written and whose pointer has not moved yet.
struct PreparedCommit {
    key: String,
    /// The pointer the commit was built on; `None` for a table the commit creates (the
    /// key must then still be absent).
    base_location: Option<String>,
    new_location: String,
    /// Namespace keys (every level) to insert when absent; only for creates.
    namespaces: Vec<String>,
    /// The producer's high-water mark the commit advances ([`marks`]).
    mark: Option<marks::MarkAdvance>,
    table: Table,
}

impl RedbCatalog {
    /// Opens (or creates) the catalog file `catalog_path` with tables under the local
    /// directory `warehouse` (created if absent, made absolute): [`Self::open_in`] with
    /// [`Warehouse::Local`].
    ///
    /// # Errors
    /// As [`Self::open_in`].
    pub fn open(catalog_path: &Path, warehouse: &Path) -> Result<Self> {
        Self::open_in(catalog_path, Warehouse::Local(warehouse.to_path_buf()))
    }

    /// Opens (or creates) the catalog file `catalog_path` with tables under `warehouse`
    /// (a local directory is created if absent and made absolute; an S3 prefix is used as
    /// it is).
    ///
    /// Must be called inside a tokio runtime with timers enabled: tables capture it for
    /// iceberg's scans and commit retries.
    ///
    /// # Errors
    /// `Unexpected` carrying redb's `DatabaseAlreadyOpen` ("Database already open. Cannot
    /// acquire lock.") when another process holds the file, or any I/O error of creating
    /// the warehouse or the file.
    pub fn open_in(catalog_path: &Path, warehouse: Warehouse) -> Result<Self> {
        let warehouse = match warehouse {
            Warehouse::Local(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| io_error("create warehouse", &dir, e))?;
                Warehouse::Local(
                    std::fs::canonicalize(&dir)
                        .map_err(|e| io_error("resolve warehouse", &dir, e))?,
                )
            }
            s3 @ Warehouse::S3(_) => s3,
        };
        let file_io = warehouse.file_io()?;
        let db = Arc::new(Database::create(catalog_path).map_err(|e| {
            redb_error(e).with_context("catalog", catalog_path.display().to_string())
        })?);
        let txn = db.begin_write().map_err(redb_error)?;
        txn.open_table(NAMESPACES).map_err(redb_error)?;
        txn.open_table(TABLES).map_err(redb_error)?;
        marks::init(&txn).map_err(redb_error)?;
        txn.commit().map_err(redb_error)?;
        Ok(Self {
            committer: Arc::new(Committer::new(
                db.clone(),
                warehouse.local_path().map(Path::to_path_buf),
            )),
            db,
            warehouse,
            file_io,
            runtime: Runtime::try_current()?,
            metadata: MetadataCache::default(),
            pins: Arc::default(),
        })
    }

    /// Also counts every data commit transaction of this catalog on `counter` (the
    /// `skade_catalog_commits_total` metric; see [`Self::commit_count`]). Only the first
    /// counter given is used.
    pub fn with_commit_counter(self, counter: prometheus::IntCounter) -> Self {
        let _ = self.committer.counters.on_commit.set(counter);
        self
    }

    /// Also counts every warehouse sync of this catalog's data commits on `counter` (the
    /// `skade_file_syncs_total` metric; see [`Self::sync_count`]). Only the first counter
    /// given is used.
    pub fn with_sync_counter(self, counter: prometheus::IntCounter) -> Self {
        let _ = self.committer.counters.on_sync.set(counter);
        self
    }

    /// Durable data-path redb write transactions made through this catalog instance =
    /// commit fsyncs (see [`redb_commit_count`] for the process-global count). Commits
    /// that ran concurrently and shared one transaction ([`group_commit`]) count once
    /// together; a transaction in which every commit conflicted is rolled back and does
    /// not count.
    pub fn commit_count(&self) -> u64 {
        self.committer.counters.commits.load(Ordering::Relaxed)
    }

    /// Warehouse syncs ([`durable::sync_warehouse`], one `syncfs(2)` each) made for this
    /// instance's data commits: one per counted redb transaction of
    /// [`Self::commit_count`], made after the transaction's compare-and-swaps passed and
    /// before it commits (a commit that loses a race no longer syncs). Table creation
    /// (DDL) syncs too but is not counted, as for [`Self::commit_count`].
    pub fn sync_count(&self) -> u64 {
        self.committer.counters.syncs.load(Ordering::Relaxed)
    }

    /// Testing aid for group commit: while the returned guard lives, data commits of this
    /// catalog queue and none reaches redb; dropping it commits everything queued as ONE
    /// batch (one warehouse sync, one write transaction). A batch already running when
    /// the pause starts finishes first. Never needed in production: holding it stalls
    /// every commit.
    #[doc(hidden)]
    pub fn pause_commits(&self) -> CommitPause {
        CommitPause {
            _held: self.committer.pause(),
        }
    }

    /// Testing aid: data commits queued for the next group-commit batch (see
    /// [`Self::pause_commits`]).
    #[doc(hidden)]
    pub fn queued_commits(&self) -> usize {
        self.committer.queued()
    }

    /// The warehouse: a local directory (absolute) or an S3 prefix.
    pub fn warehouse(&self) -> &Warehouse {
        &self.warehouse
    }

    /// The `FileIO` every table of this catalog reads and writes through.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// Pins the files a writer is about to create until the returned guard drops: online
    /// cleanup ([`crate::maintenance`]) never removes a file modified at or after the
    /// oldest live pin was taken, even when no snapshot references it yet. Every writer
    /// whose files wait for a later commit holds one (a streaming put for its whole
    /// stream, a Flight SQL transaction from begin to end).
    pub fn pin_writes(&self) -> WritePin {
        pins::Pins::pin(&self.pins)
    }

    /// When the oldest live [`WritePin`] was taken (wall clock), or `None` when none is.
    pub fn oldest_write_pin(&self) -> Option<std::time::SystemTime> {
        self.pins.oldest()
    }

    /// Every table of the catalog, namespace by namespace (parents before children).
    ///
    /// # Errors
    /// `Unexpected` for redb failures.
    pub async fn all_tables(&self) -> Result<Vec<TableIdent>> {
        let mut tables = Vec::new();
        let mut pending: Vec<Option<NamespaceIdent>> = vec![None];
        while let Some(parent) = pending.pop() {
            for ns in self.list_namespaces(parent.as_ref()).await? {
                tables.extend(self.list_tables(&ns).await?);
                pending.push(Some(ns));
            }
        }
        Ok(tables)
    }

    /// The table's current metadata location, as stored in redb.
    ///
    /// # Errors
    /// `TableNotFound` when the table does not exist; `Unexpected` for redb failures.
    pub async fn metadata_location(&self, ident: &TableIdent) -> Result<String> {
        self.pointer(ident, table_key(ident)?).await
    }

    /// The stored pointer of table `key` (`ident`'s key, named in errors).
    async fn pointer(&self, ident: &TableIdent, key: String) -> Result<String> {
        let db = self.db.clone();
        let found = blocking(move || {
            let txn = db.begin_read().map_err(redb_error)?;
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let value = tables.get(key.as_str()).map_err(redb_error)?;
            Ok(value.map(|v| v.value().to_string()))
        })
        .await?;
        found.ok_or_else(|| table_not_found(ident))
    }

    /// Commits N tables' updates in ONE redb write transaction (one fsync): every table
    /// advances or none does.
    ///
    /// Each entry's requirements are checked against its table's current metadata and its
    /// updates applied; the new metadata JSON files are written (all tables at once), the
    /// warehouse synced, then one write transaction compare-and-swaps every pointer —
    /// shared with concurrent commits ([`group_commit`]), which cannot make this release
    /// partial. Returns the advanced tables in input order. An empty batch does no redb
    /// write and returns `[]`.
    ///
    /// # Errors
    /// - `DataInvalid` when an identifier appears twice — rejected before anything is
    ///   written, since both entries would build on the same base and one would be lost
    ///   (`docs/design/ingest_multi.md` §f1, "Distinct idents per batch").
    /// - `TableNotFound` for an unknown table; `CatalogCommitConflicts` (retryable) when a
    ///   requirement fails or a pointer moved after it was read. Nothing is committed; the
    ///   metadata files already written are orphans.
    pub async fn atomic_release_raw(&self, batch: Vec<ReleaseEntry>) -> Result<Vec<Table>> {
        self.atomic_release(batch.into_iter().map(Release::Advance).collect())
            .await
    }

    /// [`Self::atomic_release_raw`] that may also create tables: every [`Release::Create`]
    /// inserts its table's pointer (and any missing namespace level) in the same redb
    /// write transaction that advances the others, so a multi-table flush into new tables
    /// is all or nothing too — a rolled back or failed flush leaves no empty table behind.
    ///
    /// # Errors
    /// As [`Self::atomic_release_raw`]; in addition `TableAlreadyExists` (not retryable)
    /// when a table to create exists by the time the pointers flip. Nothing is committed.
    pub async fn atomic_release(&self, batch: Vec<Release>) -> Result<Vec<Table>> {
        let mut seen = HashSet::new();
        for entry in &batch {
            let ident = match entry {
                Release::Advance((ident, _, _)) => ident,
                Release::Create { table, .. } => table.identifier(),
            };
            if !seen.insert(ident.clone()) {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!("table {ident} appears more than once in one atomic release"),
                ));
            }
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // Every table's metadata is built and written at once: a flush of N tables waits
        // for the slowest write, not for the sum of N.
        let prepared = futures::future::try_join_all(batch.into_iter().map(|entry| async {
            match entry {
                Release::Advance((ident, requirements, updates)) => {
                    self.prepare_commit(&ident, requirements, updates).await
                }
                Release::Create {
                    table,
                    requirements,
                    updates,
                } => self.prepare_create(table, requirements, updates).await,
            }
        }))
        .await?;
        self.release(prepared).await
    }

    /// A handle for a table that does not exist yet: its metadata as `create_table` would
    /// write it (location `<warehouse>/<namespace...>/<table>` unless the creation names
    /// one), with nothing written and nothing in the catalog. Data files can be written
    /// under its location and staged against it; [`Release::Create`] makes it real.
    ///
    /// # Errors
    /// iceberg's error for an invalid creation (e.g. a bad schema or partition spec).
    pub fn plan_table(&self, ident: &TableIdent, creation: TableCreation) -> Result<Table> {
        let location = match &creation.location {
            Some(location) => location.clone(),
            None => self
                .warehouse
                .table_location(ident.namespace().as_ref(), ident.name()),
        };
        let creation = TableCreation {
            name: ident.name().to_string(),
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        self.table_handle(ident.clone(), metadata_location.to_string(), metadata)
    }

    /// Sets `updates` and removes `removals` from a namespace's properties in one redb
    /// write transaction (a concurrent update is never lost). Returns the keys set, the
    /// keys removed and the keys asked to be removed that were absent, each sorted (the
    /// REST spec's `UpdateNamespacePropertiesResponse`).
    ///
    /// # Errors
    /// `NamespaceNotFound`; `DataInvalid` when a key is both set and removed; redb's
    /// error.
    pub async fn update_namespace_properties(
        &self,
        namespace: &NamespaceIdent,
        removals: Vec<String>,
        updates: HashMap<String, String>,
    ) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
        if let Some(both) = removals.iter().find(|k| updates.contains_key(*k)) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("property {both:?} is both set and removed"),
            ));
        }
        let key = key_of(namespace.as_ref())?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let json = namespaces
                .get(key.as_str())
                .map_err(redb_error)?
                .map(|v| v.value().to_string())
                .ok_or_else(|| namespace_not_found(&ns))?;
            let mut properties: HashMap<String, String> = serde_json::from_str(&json)?;
            let (mut removed, mut missing) = (Vec::new(), Vec::new());
            for k in removals {
                match properties.remove(&k) {
                    Some(_) => removed.push(k),
                    None => missing.push(k),
                }
            }
            let mut updated: Vec<String> = updates.keys().cloned().collect();
            properties.extend(updates);
            let json = serde_json::to_string(&properties)?;
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            updated.sort();
            removed.sort();
            removed.dedup();
            missing.sort();
            missing.dedup();
            Ok((updated, removed, missing))
        })
        .await
    }

    /// A handle of `table` (same identifier and metadata location) over `metadata`, with
    /// nothing written: the base a change is staged on before it is committed (e.g. a
    /// schema evolved on ingest, whose fast append must be written with it,
    /// `write::evolve`).
    ///
    /// # Errors
    /// iceberg's error building the handle.
    pub fn handle_with_metadata(&self, table: &Table, metadata: TableMetadata) -> Result<Table> {
        self.table_handle(
            table.identifier().clone(),
            table.metadata_location().unwrap_or_default().to_string(),
            metadata,
        )
    }

    /// Every table `writer` has committed to, with its high-water mark there ([`marks`]),
    /// in table-name order. Empty for a writer never seen (or forgotten).
    ///
    /// # Errors
    /// redb's error reading the catalog.
    pub async fn writer_marks(&self, writer: &str) -> Result<Vec<(TableIdent, marks::WriterMark)>> {
        let prefix = format!("{writer}{KEY_SEP}");
        self.read(move |txn| {
            let table = txn.open_table(marks::WRITER_MARKS).map_err(redb_error)?;
            let mut out = Vec::new();
            for row in table.range(prefix.as_str()..).map_err(redb_error)? {
                let (key, value) = row.map_err(redb_error)?;
                let Some(table_key) = key.value().strip_prefix(prefix.as_str()) else {
                    break;
                };
                let parts = split_key(table_key);
                let Some((name, namespace)) = parts.split_last() else {
                    continue;
                };
                let (Ok(namespace), Some(mark)) = (
                    NamespaceIdent::from_vec(namespace.to_vec()),
                    marks::WriterMark::decode(value.value()),
                ) else {
                    continue;
                };
                out.push((TableIdent::new(namespace, name.clone()), mark));
            }
            Ok(out)
        })
        .await
    }

    /// `writer`'s high-water mark in `ident`, if it committed there.
    ///
    /// # Errors
    /// redb's error reading the catalog.
    pub async fn writer_mark(
        &self,
        writer: &str,
        ident: &TableIdent,
    ) -> Result<Option<marks::WriterMark>> {
        let key = marks::mark_key(writer, &table_key(ident)?);
        self.read(move |txn| {
            let table = txn.open_table(marks::WRITER_MARKS).map_err(redb_error)?;
            Ok(table
                .get(key.as_str())
                .map_err(redb_error)?
                .and_then(|v| marks::WriterMark::decode(v.value())))
        })
        .await
    }

    /// The number of writer ids with a committed high-water mark ([`marks`]), and whether
    /// `writer` (when given) is one of them. The count is what `--max-writers` bounds.
    ///
    /// # Errors
    /// redb's error reading the catalog.
    pub async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)> {
        let writer = writer.map(str::to_string);
        self.read(move |txn| marks::writers(txn, writer.as_deref()).map_err(redb_error))
            .await
    }

    /// Forgets every writer id whose last commit is older than `idle` (its high-water
    /// marks in every table), in one redb write transaction; returns the ids forgotten.
    /// A forgotten producer that comes back is a new one: its sequences start afresh,
    /// and a replay of batches committed before it was forgotten lands again (README,
    /// "Exactly-once").
    ///
    /// # Errors
    /// redb's error writing the catalog; nothing is forgotten then.
    pub async fn forget_idle_writers(&self, idle: std::time::Duration) -> Result<Vec<String>> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let cutoff_ms = u64::try_from(now_ms.saturating_sub(idle.as_millis())).unwrap_or(0);
        self.ddl(move |txn| marks::forget_idle(txn, cutoff_ms).map_err(redb_error))
            .await
    }

    /// Writes a planned table's first metadata and the metadata with `updates` applied;
    /// does not insert its pointer.
    async fn prepare_create(
        &self,
        planned: Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<PreparedCommit> {
        let ident = planned.identifier().clone();
        for requirement in &requirements {
            requirement.check(Some(planned.metadata()))?;
        }
        let key = table_key(&ident)?;
        let mark = marks::MarkAdvance::from_updates(&key, &ident.to_string(), &updates)?;
        let first_location = planned.metadata_location_result()?.to_string();
        let (file_io, first) = (self.file_io.clone(), planned.metadata_ref());
        let at = MetadataLocation::from_str(&first_location)?;
        run_blocking_io(async move { first.write_to(&file_io, &at).await }).await?;
        let (new_location, metadata) = if updates.is_empty() {
            (first_location, planned.metadata_ref())
        } else {
            self.write_next_metadata(planned.metadata(), &first_location, updates)
                .await?
        };
        let parts = ident.namespace().as_ref();
        let namespaces = (1..=parts.len())
            .map(|depth| key_of(&parts[..depth]))
            .collect::<Result<Vec<_>>>()?;
        let table = self.table_handle(ident.clone(), new_location.clone(), metadata)?;
        Ok(PreparedCommit {
            key,
            base_location: None,
            new_location,
            namespaces,
            mark,
            table,
        })
    }

    /// Applies `updates` to `base` (stored at `base_location`), writes the result as the
    /// next metadata version, and returns its location and metadata.
    ///
    /// # Errors
    /// iceberg's error for an update that does not apply, or the write's storage error.
    async fn write_next_metadata(
        &self,
        base: &TableMetadata,
        base_location: &str,
        updates: Vec<TableUpdate>,
    ) -> Result<(String, TableMetadataRef)> {
        let mut builder = base.clone().into_builder(Some(base_location.to_string()));
        for update in updates {
            builder = update.apply(builder)?;
        }
        let metadata = builder.build()?.metadata;
        let location = MetadataLocation::from_str(base_location)?
            .with_next_version()
            .with_new_metadata(&metadata);
        let metadata = Arc::new(metadata);
        let (file_io, written) = (self.file_io.clone(), metadata.clone());
        let at = location.clone();
        run_blocking_io(async move { written.write_to(&file_io, &at).await }).await?;
        Ok((location.to_string(), metadata))
    }

    /// Builds and writes the new metadata for one table; does not move its pointer.
    async fn prepare_commit(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<PreparedCommit> {
        let base = self.load_table(ident).await?;
        for requirement in &requirements {
            requirement.check(Some(base.metadata()))?;
        }
        let key = table_key(ident)?;
        let mark = marks::MarkAdvance::from_updates(&key, &ident.to_string(), &updates)?;
        let base_location = base.metadata_location_result()?.to_string();
        let (new_location, metadata) = self
            .write_next_metadata(base.metadata(), &base_location, updates)
            .await?;
        let table = self.table_handle(ident.clone(), new_location.clone(), metadata)?;
        Ok(PreparedCommit {
            key,
            base_location: Some(base_location),
            new_location,
            namespaces: Vec::new(),
            mark,
            table,
        })
    }

    /// Flips every prepared pointer in one redb write transaction — shared with any
    /// concurrent release ([`group_commit`]) — after the warehouse sync that makes the
    /// prepared files durable; returns once that transaction is durable. Remembers each
    /// table's new metadata ([`metadata_cache`]).
    ///
    /// # Errors
    /// As [`Committer::submit`], or a failed write-behind upload on S3
    /// ([`uploads::PendingUploads::wait_under`]); nothing of `prepared` is visible then.
    async fn release(&self, prepared: Vec<PreparedCommit>) -> Result<Vec<Table>> {
        // On S3 a commit's manifests upload behind their writers: stored before queued.
        if let Some(uploads) = self.warehouse.pending_uploads() {
            for p in &prepared {
                uploads.wait_under(p.table.metadata().location()).await?;
            }
        }
        let flips = prepared
            .iter()
            .map(|p| Flip {
                key: p.key.clone(),
                base: p.base_location.clone(),
                new: p.new_location.clone(),
                table: p.table.identifier().to_string(),
                namespaces: p.namespaces.clone(),
                mark: p.mark.clone(),
            })
            .collect();
        self.committer.submit(flips).await?;
        for p in &prepared {
            self.metadata
                .put(&p.key, &p.new_location, p.table.metadata_ref());
        }
        Ok(prepared.into_iter().map(|p| p.table).collect())
    }

    fn table_handle(
        &self,
        ident: TableIdent,
        location: String,
        metadata: impl Into<TableMetadataRef>,
    ) -> Result<Table> {
        Table::builder()
            .file_io(self.file_io.clone())
            .metadata_location(location)
            .metadata(metadata)
            .identifier(ident)
            .runtime(self.runtime.clone())
            .build()
    }

    /// Runs a DDL write transaction (not counted as a data commit).
    async fn ddl<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        blocking(move || {
            let txn = db.begin_write().map_err(redb_error)?;
            let out = f(&txn)?;
            txn.commit().map_err(redb_error)?;
            Ok(out)
        })
        .await
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        blocking(move || {
            let txn = db.begin_read().map_err(redb_error)?;
            f(&txn)
        })
        .await
    }
}

#[async_trait]
impl Catalog for RedbCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        if let Some(parent) = parent
            && !self.namespace_exists(parent).await?
        {
            return Err(namespace_not_found(parent));
        }
        let parent: Vec<String> = parent.map(|p| p.as_ref().clone()).unwrap_or_default();
        self.read(move |txn| {
            let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let mut out = Vec::new();
            for entry in namespaces.iter().map_err(redb_error)? {
                let (key, _) = entry.map_err(redb_error)?;
                let parts = split_key(key.value());
                if parts.len() == parent.len() + 1 && parts.starts_with(&parent) {
                    out.push(NamespaceIdent::from_vec(parts)?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let key = key_of(namespace.as_ref())?;
        let parent = namespace.parent().map(|p| key_of(p.as_ref())).transpose()?;
        let json = serde_json::to_string(&properties)?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            if namespaces.get(key.as_str()).map_err(redb_error)?.is_some() {
                return Err(Error::new(
                    ErrorKind::NamespaceAlreadyExists,
                    format!("namespace {} already exists", ns.join(".")),
                ));
            }
            if let Some(parent) = parent
                && namespaces
                    .get(parent.as_str())
                    .map_err(redb_error)?
                    .is_none()
            {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("parent of namespace {} does not exist", ns.join(".")),
                ));
            }
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let key = key_of(namespace.as_ref())?;
        let json = self
            .read(move |txn| {
                let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
                let value = namespaces.get(key.as_str()).map_err(redb_error)?;
                Ok(value.map(|v| v.value().to_string()))
            })
            .await?
            .ok_or_else(|| namespace_not_found(namespace))?;
        let properties: HashMap<String, String> = serde_json::from_str(&json)?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let key = key_of(namespace.as_ref())?;
        self.read(move |txn| {
            let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            Ok(namespaces.get(key.as_str()).map_err(redb_error)?.is_some())
        })
        .await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let key = key_of(namespace.as_ref())?;
        let json = serde_json::to_string(&properties)?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            if namespaces.get(key.as_str()).map_err(redb_error)?.is_none() {
                return Err(namespace_not_found(&ns));
            }
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    /// Drops an empty namespace.
    ///
    /// # Errors
    /// `NamespaceNotFound`; `PreconditionFailed` when it still holds tables or child
    /// namespaces (skade never drops data implicitly).
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let parts = namespace.as_ref().clone();
        let key = key_of(&parts)?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            if namespaces.get(key.as_str()).map_err(redb_error)?.is_none() {
                return Err(namespace_not_found(&ns));
            }
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let holds_table = tables.iter().map_err(redb_error)?.any(|e| {
                e.map(|(k, _)| split_key(k.value()).starts_with(&parts))
                    .unwrap_or(true)
            });
            let holds_child = namespaces.iter().map_err(redb_error)?.any(|e| {
                e.map(|(k, _)| {
                    let p = split_key(k.value());
                    p.len() > parts.len() && p.starts_with(&parts)
                })
                .unwrap_or(true)
            });
            if holds_table || holds_child {
                return Err(Error::new(
                    ErrorKind::PreconditionFailed,
                    format!("namespace {} is not empty", ns.join(".")),
                ));
            }
            namespaces.remove(key.as_str()).map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        if !self.namespace_exists(namespace).await? {
            return Err(namespace_not_found(namespace));
        }
        let parts = namespace.as_ref().clone();
        let ns = namespace.clone();
        self.read(move |txn| {
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let mut out = Vec::new();
            for entry in tables.iter().map_err(redb_error)? {
                let (key, _) = entry.map_err(redb_error)?;
                let mut p = split_key(key.value());
                if p.len() == parts.len() + 1 && p.starts_with(&parts) {
                    let name = p.pop().unwrap_or_default();
                    out.push(TableIdent::new(ns.clone(), name));
                }
            }
            Ok(out)
        })
        .await
    }

    /// Creates an empty table at `<warehouse>/<namespace...>/<table>` (or the creation's
    /// own location) and writes its first metadata JSON, synced before the pointer exists.
    ///
    /// # Errors
    /// `NamespaceNotFound`, `TableAlreadyExists`, or iceberg's error for an invalid
    /// creation.
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        if !self.namespace_exists(namespace).await? {
            return Err(namespace_not_found(namespace));
        }
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if self.table_exists(&ident).await? {
            return Err(table_exists(&ident));
        }
        let location = match &creation.location {
            Some(location) => location.clone(),
            None => self
                .warehouse
                .table_location(namespace.as_ref(), &creation.name),
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let metadata_location = metadata_location.to_string();
        self.insert_pointer(&ident, metadata_location.clone())
            .await?;
        let metadata = Arc::new(metadata);
        self.metadata
            .put(&table_key(&ident)?, &metadata_location, metadata.clone());
        self.table_handle(ident, metadata_location, metadata)
    }

    /// Loads the table at its current pointer (read from redb every time); the metadata
    /// JSON is read and parsed only when it is not the one last seen at that location
    /// ([`metadata_cache`]).
    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let key = table_key(ident)?;
        let location = self.pointer(ident, key.clone()).await?;
        let metadata = match self.metadata.get(&key, &location) {
            Some(metadata) => metadata,
            None => {
                let metadata = Arc::new(TableMetadata::read_from(&self.file_io, &location).await?);
                self.metadata.put(&key, &location, metadata.clone());
                metadata
            }
        };
        self.table_handle(ident.clone(), location, metadata)
    }

    /// Removes the table from the catalog; its files stay on disk.
    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let key = table_key(ident)?;
        self.metadata.remove(&key);
        let id = ident.clone();
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.remove(key.as_str()).map_err(redb_error)?.is_none() {
                return Err(table_not_found(&id));
            }
            Ok(())
        })
        .await
    }

    /// Drops the table, then removes its files under its location (never elsewhere:
    /// [`purge`]).
    ///
    /// # Errors
    /// `TableNotFound`; after the drop, a manifest that cannot be read or a file that
    /// cannot be removed (the table is gone from the catalog either way).
    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        self.drop_table(ident).await?;
        purge::purge_files(self, &table).await.map(drop)
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        match self.metadata_location(ident).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves the catalog entry; files stay where they are (the metadata keeps its
    /// location), as Iceberg catalogs do.
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        if !self.namespace_exists(dest.namespace()).await? {
            return Err(namespace_not_found(dest.namespace()));
        }
        let src_key = table_key(src)?;
        let dest_key = table_key(dest)?;
        self.metadata.remove(&src_key);
        let (s, d) = (src.clone(), dest.clone());
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.get(dest_key.as_str()).map_err(redb_error)?.is_some() {
                return Err(table_exists(&d));
            }
            let location = tables
                .remove(src_key.as_str())
                .map_err(redb_error)?
                .map(|v| v.value().to_string())
                .ok_or_else(|| table_not_found(&s))?;
            tables
                .insert(dest_key.as_str(), location.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> Result<Table> {
        if !self.namespace_exists(ident.namespace()).await? {
            return Err(namespace_not_found(ident.namespace()));
        }
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        self.insert_pointer(ident, metadata_location.clone())
            .await?;
        self.table_handle(ident.clone(), metadata_location, metadata)
    }

    /// Commits one table: checks the requirements against the current metadata, applies
    /// the updates, writes the new metadata JSON, syncs the warehouse and flips the pointer
    /// in ONE redb write transaction (compare-and-swap on the base location), which
    /// concurrent commits may share ([`group_commit`]); returns once it is durable.
    ///
    /// # Errors
    /// `CatalogCommitConflicts`, retryable, when a requirement fails or the pointer moved
    /// (only this commit fails, not others sharing its transaction); `Unexpected` when the
    /// warehouse sync or the redb transaction failed.
    /// One table's commit (iceberg's transactions, so Lane 1's fast appends, end here):
    /// an [`RedbCatalog::atomic_release_raw`] of that one table.
    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let entry = (ident, commit.take_requirements(), commit.take_updates());
        let mut tables = self.atomic_release_raw(vec![entry]).await?;
        tables
            .pop()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "release returned no table"))
    }
}

impl RedbCatalog {
    /// Inserts a new table pointer (DDL: not a data commit).
    async fn insert_pointer(&self, ident: &TableIdent, location: String) -> Result<()> {
        let key = table_key(ident)?;
        let id = ident.clone();
        let local = self.warehouse.local_path().map(Path::to_path_buf);
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.get(key.as_str()).map_err(redb_error)?.is_some() {
                return Err(table_exists(&id));
            }
            // An object store's acknowledged PUT is durable: only a local warehouse syncs.
            if let Some(warehouse) = &local {
                durable::sync_warehouse(warehouse)
                    .map_err(|e| io_error("sync warehouse", warehouse, e))?;
            }
            tables
                .insert(key.as_str(), location.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }
}

/// Runs `io` — a future over iceberg's local `FileIO` — on the blocking pool, and waits
/// for it.
///
/// iceberg 0.10.1's local storage makes blocking `std::fs` calls inside its async
/// functions, and its manifest and manifest-list writers `fsync` each file on close.
/// Awaited on a runtime worker, such a future blocks that worker (2 on the development
/// machine) for the whole write; several of them joined on one task run one after the
/// other. On the blocking pool they overlap — the N tables of one release write their
/// files at once — and the workers stay free for the streams.
///
/// # Errors
/// `io`'s error, or `Unexpected` when the task panicked.
///
/// # Cancel safety
/// Dropping the future does not stop `io`; it runs to its end and its result is
/// dropped (files it wrote are orphans, never referenced).
pub async fn run_blocking_io<T, F>(io: F) -> Result<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T>> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(io))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "file task failed").with_source(e))?
}

/// Runs blocking redb work off the async runtime.
async fn blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "catalog task failed").with_source(e))?
}

/// The redb key of a list of name elements.
///
/// # Errors
/// `DataInvalid` for an empty list or an element that is empty or holds the separator.
fn key_of(parts: &[String]) -> Result<String> {
    if parts.is_empty() || parts.iter().any(|p| p.is_empty() || p.contains(KEY_SEP)) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("invalid catalog name {parts:?}"),
        ));
    }
    Ok(parts.join(&KEY_SEP.to_string()))
}

fn table_key(ident: &TableIdent) -> Result<String> {
    let mut parts = ident.namespace().as_ref().clone();
    parts.push(ident.name().to_string());
    key_of(&parts)
}

fn split_key(key: &str) -> Vec<String> {
    key.split(KEY_SEP).map(str::to_string).collect()
}

/// Whether `e` is redb's "Database already open. Cannot acquire lock." — another process
/// (a running skade, `skade gc`) holds the catalog file.
pub fn is_lock_error(e: &Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(redb::Error::DatabaseAlreadyOpen) = s.downcast_ref::<redb::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

fn redb_error(e: impl Into<redb::Error>) -> Error {
    let e: redb::Error = e.into();
    Error::new(ErrorKind::Unexpected, format!("catalog storage: {e}")).with_source(e)
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} {}: {e}", path.display()),
    )
    .with_source(e)
}

fn namespace_not_found(ns: &NamespaceIdent) -> Error {
    Error::new(
        ErrorKind::NamespaceNotFound,
        format!("namespace {} does not exist", ns.join(".")),
    )
}

fn table_not_found(ident: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableNotFound,
        format!("table {ident} does not exist"),
    )
}

fn table_exists(ident: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableAlreadyExists,
        format!("table {ident} already exists"),
    )
}

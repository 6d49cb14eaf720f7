//! The Iceberg catalog skade serves and commits through, over a durable store of its
//! state (a redb file, or a PostgreSQL database shared by several instances).
//!
//! [`RedbCatalog`] implements [`iceberg::Catalog`]. Each table's current metadata
//! location is a pointer in its [`store`]; a commit writes the new metadata JSON, makes the
//! warehouse durable ([`crate::storage::durable::sync_warehouse`]) and flips the pointer
//! in ONE transaction of the store — a compare-and-swap against the location the commit
//! was built on. A moved pointer is a *retryable* `CatalogCommitConflicts`, so iceberg's
//! `Transaction::commit` rebases and retries (the same contract as iceberg-rust's SQL
//! catalog).
//!
//! [`RedbCatalog::atomic_release_raw`] is the multi-table form: N tables, one
//! transaction, one fsync, all or nothing (`docs/design/ingest_multi.md` §f0, §f4).
//! Concurrent commits (of different tables, or several multi-table releases) share one
//! warehouse sync and one transaction (`group_commit.rs`), each still acked only after
//! that transaction is durable. The latest metadata of each table is kept parsed
//! (`metadata_cache.rs`), so a commit does not re-read the JSON it just wrote.
//! [`gc`] removes the files no table's metadata references (`skade gc`).
//!
//! One job per module: this file holds [`RedbCatalog`] and opens it; [`store`] the
//! durable state behind one trait, a room per backend; `iceberg_catalog.rs` is the
//! `impl iceberg::Catalog`; `tables.rs` the catalog's own reads and DDL beyond it
//! (every table, pointers, marks); `commit.rs` the one commit driver every commit of
//! this process runs ([`RedbCatalog::commit`]: the table's commit turn, the table as it
//! stands, the caller's stage, the release, the conflict policy); `release.rs` the
//! release under it ([`RedbCatalog::atomic_release_raw`]); `group_commit.rs` the shared
//! transaction; `locations.rs` where a new table goes and which locations cleanup may
//! sweep; `shared.rs` what instances sharing a store ask of each other; `counters.rs`
//! the commit counts; `error.rs` the catalog's errors; `blocking.rs` running blocking
//! I/O off the runtime.
pub mod commit;
mod counters;
mod error;
#[doc(hidden)]
pub mod fault;
pub mod gc;
mod group_commit;
mod iceberg_catalog;
mod locations;
pub mod manifest_cache;
pub mod marks;
mod metadata_cache;
mod metadata_json;
pub mod names;
mod pins;
mod purge;
mod release;
mod shared;
mod stage;
pub mod store;
mod tables;

use std::path::Path;
use std::sync::Arc;

use iceberg::Runtime;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataRef};
use iceberg::table::Table;
use iceberg::{Result, TableIdent};

use crate::storage::Warehouse;
use crate::storage::file_store::FileStore;
pub use commit::{
    COMMIT_POLICY, COMMIT_RETRIES, CommitPolicy, CommitTarget, CommitTurns, Outcome,
    SHARED_COMMIT_POLICY,
};
pub use counters::{CommitCounts, redb_commit_count};
use error::io_error;
pub use error::{is_lock_error, is_storage_failure};
use group_commit::Committer;
pub use locations::{OBJECT_STORAGE_PROPERTY, Ownership, PATH_PROPERTIES, check_file_paths};
use metadata_cache::MetadataCache;
pub use pins::WritePin;
pub(crate) use purge::is_plain_absolute;
pub use release::{CommitPause, Release, ReleaseEntry};
pub use stage::{MetadataUpdate, Stage, Staged, TableChange, WriterRange};
use store::Store;
pub use store::StoreKind;
use store::postgres::PgStore;
use store::redb::RedbStore;

/// An [`iceberg::Catalog`] whose durable state — namespaces, table pointers, producers'
/// marks, location claims — is kept in a [`Store`]: one redb file
/// ([`RedbCatalog::open`]), or a PostgreSQL database shared by several instances
/// ([`RedbCatalog::open_postgres`]); with tables under a warehouse (a local directory or
/// an S3 prefix, [`Warehouse`]) laid out as `<warehouse>/<namespace...>/<table>/{data,metadata}/`.
/// Everything above the store (the commit driver, the release protocol, the metadata
/// JSON, the caches, group commit) is the same for both. (The name is the design notes'
/// `RedbCatalog`, from when redb was its only store.)
///
/// Cheap to share behind an `Arc`; every method may be called concurrently.
#[derive(Debug)]
pub struct RedbCatalog {
    /// Where the catalog's durable state lives.
    store: Arc<dyn Store>,
    warehouse: Warehouse,
    file_io: FileIO,
    runtime: Runtime,
    /// Every data commit's pointer flips go through it (group commit).
    committer: Arc<Committer>,
    metadata: MetadataCache,
    /// The manifest lists and manifests this catalog wrote lately ([`Self::written_manifests`]).
    manifests: Arc<manifest_cache::WrittenManifests>,
    /// Writers in flight whose files no snapshot references yet ([`Self::pin_writes`]).
    pins: Arc<pins::Pins>,
    /// This process's commit turns, one per table ([`Self::commit_turns`]).
    turns: commit::Turns,
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
        let warehouse = local_absolute(warehouse)?;
        let file_io = warehouse.file_io()?;
        let store = RedbStore::open(catalog_path, &FileStore::of(&warehouse))?;
        Self::over(Arc::new(store), warehouse, file_io, Arc::default())
    }

    /// Opens the catalog kept in the PostgreSQL database at `url` (`postgres://user:
    /// password@host:port/database`) under the JDBC catalog name `catalog_name`, with at
    /// most `pool_size` connections (and as many more for commit turns when `turn` is
    /// [`store::postgres::turns::CommitTurn::Database`]), tables under `warehouse` — which every instance
    /// sharing the database must reach the same way (one S3 prefix, or one directory
    /// they all mount). Creates or upgrades the catalog's tables (safe from several
    /// instances at once) and registers this instance ([`store::postgres`],
    /// `docs/several-instances.md`); renews the registration every
    /// [`store::postgres::cluster::HEARTBEAT_EVERY`] while the catalog lives.
    ///
    /// Must be called inside a tokio runtime with timers enabled.
    ///
    /// # Errors
    /// [`OpenError::Database`] naming `--catalog` for a bad URL, a database that refuses
    /// or does not answer, or a schema that cannot be created; [`OpenError::Warehouse`]
    /// for a local warehouse that cannot be created or storage that cannot be set up.
    pub async fn open_postgres(
        url: &str,
        catalog_name: &str,
        pool_size: usize,
        turn: store::postgres::turns::CommitTurn,
        warehouse: Warehouse,
    ) -> std::result::Result<Arc<Self>, OpenError> {
        // The database first: a start refused by it creates nothing on disk.
        let pins: Arc<pins::Pins> = Arc::default();
        let store = PgStore::connect(url, catalog_name, pool_size, turn, pins.clone())
            .await
            .map_err(OpenError::Database)?;
        let warehouse = local_absolute(warehouse).map_err(OpenError::Warehouse)?;
        let file_io = warehouse.file_io().map_err(OpenError::Warehouse)?;
        let store = Arc::new(store);
        let catalog = Arc::new(
            Self::over(store.clone(), warehouse, file_io, pins).map_err(OpenError::Warehouse)?,
        );
        store::postgres::cluster::spawn_heartbeat(Arc::downgrade(&store));
        Ok(catalog)
    }

    fn over(
        store: Arc<dyn Store>,
        warehouse: Warehouse,
        file_io: FileIO,
        pins: Arc<pins::Pins>,
    ) -> Result<Self> {
        Ok(Self {
            committer: Arc::new(Committer::new(
                store.clone(),
                tokio::runtime::Handle::try_current().map_err(|e| {
                    iceberg::Error::new(
                        iceberg::ErrorKind::Unexpected,
                        "the catalog must be opened inside a tokio runtime",
                    )
                    .with_source(e)
                })?,
                warehouse.local_path().map(Path::to_path_buf),
            )),
            store,
            warehouse,
            file_io,
            runtime: Runtime::try_current()?,
            metadata: MetadataCache::default(),
            manifests: Arc::default(),
            pins,
            turns: commit::Turns::default(),
        })
    }

    /// Where the catalog's durable state lives (for the start-up log and messages).
    pub fn store_kind(&self) -> StoreKind {
        self.store.kind()
    }

    /// The warehouse: a local directory (absolute) or an S3 prefix.
    pub fn warehouse(&self) -> &Warehouse {
        &self.warehouse
    }

    /// The `FileIO` every table of this catalog reads and writes through.
    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    /// The manifest lists and manifests this catalog's snapshot producers wrote lately,
    /// kept parsed so no reader of this catalog reads them back, and their paths for the
    /// next reference walk (`manifest_cache.rs`). One per catalog instance.
    pub fn written_manifests(&self) -> &Arc<manifest_cache::WrittenManifests> {
        &self.manifests
    }

    /// An empty [`manifest_cache::ManifestCache`] in front of this catalog's
    /// [`Self::written_manifests`].
    pub fn manifest_cache(&self) -> manifest_cache::ManifestCache {
        manifest_cache::ManifestCache::new(self.manifests.clone())
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

    /// A handle of `table` (same identifier and metadata location) over `metadata`, with
    /// nothing written: the base a change is staged on before it is committed (e.g. a
    /// schema evolved on ingest, whose append must be written with it,
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

    pub(super) fn table_handle(
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
}

/// A local warehouse created if absent and made absolute; an S3 prefix as it is.
fn local_absolute(warehouse: Warehouse) -> Result<Warehouse> {
    Ok(match warehouse {
        Warehouse::Local(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| io_error("create warehouse", &dir, e))?;
            Warehouse::Local(
                std::fs::canonicalize(&dir).map_err(|e| io_error("resolve warehouse", &dir, e))?,
            )
        }
        s3 @ Warehouse::S3(_) => s3,
    })
}

/// Why [`RedbCatalog::open_postgres`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The catalog database: a bad URL, unreachable, refused, or its schema.
    #[error(transparent)]
    Database(#[from] store::postgres::PgOpenError),
    /// The warehouse could not be created or its storage configured.
    #[error("{}", .0.message())]
    Warehouse(iceberg::Error),
}

//! `skade gc`: removing orphan files — files under a table's `data/` and `metadata/` that
//! nothing of the table's current metadata references.
//!
//! Orphans are what a crash, a failed or rolled back commit, or a lost commit race leaves
//! behind: data files written but never committed, manifests and manifest lists staged
//! for a snapshot that never landed, metadata JSON written for a pointer flip that never
//! happened, and metadata JSON that fell out of the metadata log.
//!
//! Referenced, and never removed: the current metadata JSON and every one in its metadata
//! log; every snapshot's manifest list, every manifest those list (data and delete
//! manifests), every file those manifests name whatever the entry's status (data files,
//! position and equality delete files, the Puffin files of deletion vectors); statistics
//! and partition statistics files. References are gathered over *every* table before
//! anything is removed, and a table whose metadata cannot be read stops the run with
//! nothing removed.
//!
//! A file is removed only when it is unreferenced AND older (by modification time) than
//! the grace period, and lies under the location of a table that owns it
//! ([`super::Ownership`]: skade created the table there and no other table, of this or
//! another catalog name, or one dropped without purge, lies at, inside or around it).
//! Only regular files directly or deeper under `<location>/data/` and
//! `<location>/metadata/` of such a table are considered (objects under those
//! prefixes on an S3 warehouse, aged by their `Last-Modified`; listing and removing go
//! through `storage::file_store::FileStore`); anything else under the warehouse is left
//! alone.
//!
//! On the embedded redb catalog gc holds the catalog open for the whole run, so it
//! cannot run beside a live server: redb's file lock makes the open fail
//! ([`GcError::InUse`]), and a server started meanwhile fails to start.
//!
//! On a shared PostgreSQL catalog ([`collect_garbage_shared`]) gc runs beside the
//! instances serving it, as one more member of the cluster
//! ([`super::store::postgres::cluster`]): before it reads any table it asks the database for the
//! oldest write pin of every live instance ([`RedbCatalog::oldest_write_pin_anywhere`]),
//! and it keeps every file modified at or after that instant, so a put or transaction
//! still open on any instance — whose files no table references yet — keeps its files.
//! A writer that opens after that read writes only files newer than the pin.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use iceberg::Catalog;
use iceberg::spec::SnapshotRef;
use iceberg::table::Table;
use tracing::{debug, info};

use super::manifest_cache::{ManifestCache, WrittenManifests};
use super::{Ownership, RedbCatalog};
use crate::storage::StorageError;
use crate::storage::Warehouse;
use crate::storage::file_store::{FileStore, NamedFile};
use crate::storage::warehouse::local_path;

/// What [`collect_garbage`] should do.
#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    /// Unreferenced files modified less than this long ago are kept.
    pub grace: Duration,
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
}

/// What a gc run found and did.
#[derive(Debug, Clone, Default)]
pub struct GcReport {
    /// Catalog tables inspected.
    pub tables: usize,
    /// Distinct files their metadata references.
    pub referenced_files: usize,
    /// Unreferenced files older than the grace period: removed (or, on a dry run, to be
    /// removed), in the order they were found.
    pub removed: Vec<PathBuf>,
    /// Bytes of [`Self::removed`].
    pub removed_bytes: u64,
    /// Unreferenced files kept because they are younger than the grace period.
    pub young_orphans: usize,
    /// Tables whose locations were not looked at: not created there by skade, or shared
    /// with another table (`docs/maintenance.md`, "What cleanup may delete").
    pub left_alone: Vec<String>,
    /// The options of the run.
    pub options: Option<GcOptions>,
}

impl std::fmt::Display for GcReport {
    /// One line: tables, referenced files, orphans removed and kept.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (verb, grace) = match self.options {
            Some(o) if o.dry_run => ("would remove", o.grace),
            Some(o) => ("removed", o.grace),
            None => ("removed", Duration::ZERO),
        };
        write!(
            f,
            "{} tables, {} referenced files; {verb} {} orphan files ({} bytes); kept {} orphans younger than {}",
            self.tables,
            self.referenced_files,
            self.removed.len(),
            self.removed_bytes,
            self.young_orphans,
            humantime::format_duration(grace),
        )?;
        if !self.left_alone.is_empty() {
            write!(
                f,
                "; left alone the locations of {} tables not their own ({})",
                self.left_alone.len(),
                self.left_alone.join(", ")
            )?;
        }
        Ok(())
    }
}

/// Why a gc run failed. Nothing is removed by a run that fails before its first removal;
/// a failure while removing leaves the files not yet removed in place.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The shared catalog database (`--catalog`) could not be opened: a bad URL, a
    /// database that refuses or does not answer, or a warehouse that cannot be set up.
    #[error(transparent)]
    Open(#[from] super::OpenError),
    /// The shared catalog database failed while gc read it (its tables or the live
    /// instances' write pins); nothing was removed.
    #[error("the catalog database: {0}")]
    Database(#[source] Box<iceberg::Error>),
    /// The data dir holds no catalog.
    #[error("no catalog at {path}: is this a skade data dir?")]
    NoCatalog {
        /// The `catalog.redb` path looked for.
        path: PathBuf,
    },
    /// Another process (a running skade) holds the catalog's lock.
    #[error(
        "the catalog {path} is in use (Database already open. Cannot acquire lock.): stop the skade server on this data dir before running gc"
    )]
    InUse {
        /// The `catalog.redb` path.
        path: PathBuf,
    },
    /// The catalog could not be opened or read.
    #[error("catalog {path}: {source}")]
    Catalog {
        /// The `catalog.redb` path.
        path: PathBuf,
        /// The catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// A table's metadata, manifest list or manifest could not be read; nothing was
    /// removed.
    #[error("table {table}: cannot read its metadata, nothing removed: {source}")]
    Table {
        /// Table identifier, `ns.table`.
        table: String,
        /// iceberg's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// Listing, inspecting or removing a file or object of the warehouse failed (the
    /// storage layer's error, its message unchanged).
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Removes the orphan files of every table of the catalog in `data_dir`, whose warehouse
/// is `<data_dir>/warehouse`, that are older than `options.grace`: see
/// [`collect_garbage_in`].
///
/// # Errors
/// As [`collect_garbage_in`].
pub async fn collect_garbage(data_dir: &Path, options: GcOptions) -> Result<GcReport, GcError> {
    collect_garbage_in(
        data_dir,
        Warehouse::Local(data_dir.join("warehouse")),
        options,
    )
    .await
}

/// Removes the orphan files (or objects) of every table of the catalog in `data_dir`,
/// whose tables live in `warehouse` (a local directory or an S3 prefix, as the server's
/// `--warehouse`), that are older than `options.grace` (see the module docs for what
/// counts as referenced). On S3 the age is the object's `Last-Modified`.
///
/// Must run inside a tokio runtime (the catalog reads through iceberg's `FileIO`).
///
/// # Errors
/// [`GcError::NoCatalog`] when `data_dir` has no `catalog.redb`; [`GcError::InUse`] when a
/// running server holds it; [`GcError::Table`] when any table's metadata cannot be read
/// (then nothing is removed); [`GcError::Storage`] for a listing or
/// removal that failed.
pub async fn collect_garbage_in(
    data_dir: &Path,
    warehouse: Warehouse,
    options: GcOptions,
) -> Result<GcReport, GcError> {
    let path = data_dir.join("catalog.redb");
    if !path.is_file() {
        return Err(GcError::NoCatalog { path });
    }
    let store = FileStore::of(&warehouse);
    let catalog = RedbCatalog::open_in(&path, warehouse).map_err(|e| {
        if super::is_lock_error(&e) {
            GcError::InUse { path: path.clone() }
        } else {
            GcError::Catalog {
                path: path.clone(),
                source: Box::new(e),
            }
        }
    })?;
    let catalog_error = |e| GcError::Catalog {
        path: path.clone(),
        source: Box::new(e),
    };
    collect_from(&catalog, &store, None, options, catalog_error).await
}

/// Removes the orphan files (or objects) of every table of the shared PostgreSQL catalog
/// at `url` (`--catalog`, under the JDBC catalog name `catalog_name`, with at most
/// `pool_size` connections), whose tables live in `warehouse`, that are older than
/// `options.grace` — and older than the oldest write pin of every live instance on the
/// catalog, read before any table is: files an open put or transaction on any instance
/// will still commit stay (module docs). Safe beside running instances.
///
/// Must run inside a tokio runtime.
///
/// # Errors
/// [`GcError::Open`] when the database or the warehouse cannot be opened;
/// [`GcError::Database`] when the database fails while gc reads it (nothing removed);
/// [`GcError::Table`] and [`GcError::Storage`] as [`collect_garbage_in`].
pub async fn collect_garbage_shared(
    url: &str,
    catalog_name: &str,
    pool_size: usize,
    warehouse: Warehouse,
    options: GcOptions,
) -> Result<GcReport, GcError> {
    let store = FileStore::of(&warehouse);
    // gc commits nothing: no commit turns.
    let catalog = RedbCatalog::open_postgres(
        url,
        catalog_name,
        pool_size,
        crate::catalog::store::postgres::turns::CommitTurn::Instance,
        warehouse,
    )
    .await?;
    let database_error = |e| GcError::Database(Box::new(e));
    // First the pins, then the tables: a writer pinned after this read writes only files
    // newer than the pin, and one pinned before it is in it.
    let oldest_pin = catalog
        .oldest_write_pin_anywhere()
        .await
        .map_err(database_error)?;
    collect_from(&catalog, &store, oldest_pin, options, database_error).await
}

/// The run of [`collect_garbage_in`] and [`collect_garbage_shared`] on an open catalog:
/// gathers every table's references, then removes what is unreferenced, older than the
/// grace and (when `oldest_pin` is given) modified before it. `catalog_error` maps a
/// failure to list the catalog's tables.
async fn collect_from(
    catalog: &RedbCatalog,
    store: &FileStore,
    oldest_pin: Option<SystemTime>,
    options: GcOptions,
    catalog_error: impl Fn(iceberg::Error) -> GcError,
) -> Result<GcReport, GcError> {
    let tables = catalog.all_tables().await.map_err(catalog_error)?;

    let mut referenced = HashSet::new();
    let mut walker = ReferenceWalker::new(catalog.written_manifests().clone());
    let mut loaded = Vec::with_capacity(tables.len());
    for ident in &tables {
        let table_error = |e| GcError::Table {
            table: ident.to_string(),
            source: Box::new(e),
        };
        let table = catalog.load_table(ident).await.map_err(table_error)?;
        walker
            .references(&table, &mut referenced)
            .await
            .map_err(table_error)?;
        loaded.push(table);
    }
    let (locations, left_alone) = owned_locations(catalog, store, &loaded)
        .await
        .map_err(|e| GcError::Database(Box::new(e)))?;

    let mut report = GcReport {
        tables: tables.len(),
        referenced_files: referenced.len(),
        left_alone,
        options: Some(options),
        ..GcReport::default()
    };
    remove_orphans(
        store,
        &locations,
        &referenced,
        oldest_pin,
        options,
        &mut report,
    )
    .await?;
    // One line for both: on a dry run `removed` is what would have been removed.
    info!(
        tables = report.tables,
        referenced = report.referenced_files,
        removed = report.removed.len(),
        removed_bytes = report.removed_bytes,
        young_orphans = report.young_orphans,
        dry_run = options.dry_run,
        "{}",
        if options.dry_run {
            "gc dry run done: nothing removed"
        } else {
            "gc done"
        }
    );
    Ok(report)
}

/// The locations of `tables` that gc may list ([`Ownership::Owned`], distinct), and the
/// names of the tables whose locations it leaves alone (each logged).
///
/// # Errors
/// The catalog store's error reading the claims.
async fn owned_locations(
    catalog: &RedbCatalog,
    store: &FileStore,
    tables: &[Table],
) -> iceberg::Result<(Vec<PathBuf>, Vec<String>)> {
    let ownership = catalog.ownership(tables).await?;
    let mut locations = Vec::new();
    let mut left_alone = Vec::new();
    for (table, ownership) in tables.iter().zip(ownership) {
        if ownership != Ownership::Owned {
            info!(
                table = %table.identifier(),
                location = table.metadata().location(),
                reason = ownership.skipped_reason().unwrap_or_default(),
                "gc leaves this table's location alone: it is not the table's own"
            );
            left_alone.push(table.identifier().to_string());
            continue;
        }
        if let Some(location) = store.path_of(table.metadata().location())
            && !locations.contains(&location)
        {
            locations.push(location);
        }
    }
    Ok((locations, left_alone))
}

/// Gathers the files a table's metadata references, remembering what it read: manifest
/// lists and manifests are written once and never changed (Iceberg's table spec), so a
/// walker kept across runs (online cleanup, [`crate::maintenance`]) reads each of them
/// once, and a run costs only the files new since the last. What its catalog wrote
/// itself it never reads back: the writers hand each list's manifest paths and each
/// manifest's file paths over ([`WrittenManifests::take_written_list`],
/// [`WrittenManifests::take_written_manifest`]).
#[derive(Debug)]
pub struct ReferenceWalker {
    cache: ManifestCache,
    /// The manifest paths each manifest list walked names, by list path: all a walk
    /// needs of a list (a parsed list keeps every manifest's counts and partition
    /// summaries, for every retained snapshot).
    lists: HashMap<String, Arc<[Arc<str>]>>,
    /// One copy of each manifest path the kept lists name (consecutive lists share
    /// nearly all of theirs).
    names: HashSet<Arc<str>>,
    /// The files each manifest walked names, by manifest path: all a walk needs of a
    /// manifest, kept instead of the parsed manifest. A sweep after a long maintenance
    /// pass walks every manifest written during it; kept parsed, those would take
    /// gigabytes (`docs/performance.md`, "What the soak measured behind maintenance's
    /// shape").
    files: HashMap<Arc<str>, Arc<[PathBuf]>>,
    /// Lists and manifests walked since [`Self::forget_unused`] last ran.
    walked: HashSet<Arc<str>>,
    /// Manifest lists and manifests not handed over by their writer in this process:
    /// read from the storage, or from the catalog's caches of parsed ones.
    read_back: usize,
}

impl ReferenceWalker {
    /// A walker that has read nothing yet, taking what `written` (its catalog's
    /// [`crate::catalog::RedbCatalog::written_manifests`]) holds for it.
    pub fn new(written: Arc<WrittenManifests>) -> Self {
        Self {
            cache: ManifestCache::new(written),
            lists: HashMap::new(),
            names: HashSet::new(),
            files: HashMap::new(),
            walked: HashSet::new(),
            read_back: 0,
        }
    }

    /// Adds every file `table`'s current metadata references to `out`: the current
    /// metadata JSON and every one in its metadata log; every snapshot's manifest list,
    /// every manifest those list, every file those manifests name (whatever the entry's
    /// status); statistics files.
    ///
    /// # Errors
    /// iceberg's error for a manifest list or manifest that cannot be read.
    pub async fn references(
        &mut self,
        table: &Table,
        out: &mut HashSet<PathBuf>,
    ) -> iceberg::Result<()> {
        let metadata = table.metadata();
        if let Some(current) = table.metadata_location() {
            out.insert(local_path(current));
        }
        for entry in metadata.metadata_log() {
            out.insert(local_path(&entry.metadata_file));
        }
        for statistics in metadata.statistics_iter() {
            out.insert(local_path(&statistics.statistics_path));
        }
        for statistics in metadata.partition_statistics_iter() {
            out.insert(local_path(&statistics.statistics_path));
        }
        // Snapshots share manifests (a fast append carries the earlier ones on): each
        // manifest's files are added once.
        let mut visited: HashSet<Arc<str>> = HashSet::new();
        for snapshot in metadata.snapshots() {
            out.insert(local_path(snapshot.manifest_list()));
            let manifests = self.list(table, snapshot).await?;
            for manifest in manifests.iter() {
                if !visited.insert(manifest.clone()) {
                    continue;
                }
                out.insert(local_path(manifest));
                let files = self.manifest(table, manifest).await?;
                out.extend(files.iter().cloned());
            }
        }
        Ok(())
    }

    /// The manifest paths of `snapshot`'s list: kept, handed over by its writer, or read.
    async fn list(
        &mut self,
        table: &Table,
        snapshot: &SnapshotRef,
    ) -> iceberg::Result<Arc<[Arc<str>]>> {
        let path = snapshot.manifest_list();
        let names = match self.lists.get(path) {
            Some(names) => names.clone(),
            None => {
                let names: Vec<Arc<str>> = match self.cache.written().take_written_list(path) {
                    Some(names) => names.iter().map(|n| self.name(n)).collect(),
                    None => {
                        self.read_back += 1;
                        let list = self.cache.written().read_list(table, snapshot).await?;
                        list.iter().map(|m| self.name(&m.manifest_path)).collect()
                    }
                };
                let names: Arc<[Arc<str>]> = names.into();
                self.lists.insert(path.to_string(), names.clone());
                names
            }
        };
        let name = self.name(path);
        self.walked.insert(name);
        Ok(names)
    }

    /// The file paths the manifest at `path` names: kept, handed over by its writer, or
    /// read.
    async fn manifest(
        &mut self,
        table: &Table,
        path: &Arc<str>,
    ) -> iceberg::Result<Arc<[PathBuf]>> {
        self.walked.insert(path.clone());
        if let Some(files) = self.files.get(path) {
            return Ok(files.clone());
        }
        let files = match self.cache.written().take_written_manifest(path) {
            Some(files) => files,
            None => {
                self.read_back += 1;
                let parsed = self.cache.manifest_unkept(table.file_io(), path).await?;
                parsed
                    .entries()
                    .iter()
                    .map(|e| local_path(e.file_path()))
                    .collect()
            }
        };
        self.files.insert(path.clone(), files.clone());
        Ok(files)
    }

    /// `path` as the one kept copy.
    fn name(&mut self, path: &str) -> Arc<str> {
        if let Some(name) = self.names.get(path) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(path);
        self.names.insert(name.clone());
        name
    }

    /// The walker's parsed manifest lists and manifests, for other readers of the same
    /// tables (table maintenance).
    pub fn cache(&mut self) -> &mut ManifestCache {
        &mut self.cache
    }

    /// Manifest lists and manifests this walker read back so far (from the storage, or
    /// from the catalog's caches of parsed ones): those another catalog or process wrote,
    /// those another walker took, or those its catalog wrote longer ago than its registry
    /// of written files reaches (`catalog::manifest_cache`).
    pub fn read_back(&self) -> usize {
        self.read_back
    }

    /// How many manifest lists, manifest names and manifests it keeps (for the
    /// maintenance log).
    pub fn kept(&self) -> (usize, usize, usize) {
        (self.lists.len(), self.names.len(), self.files.len())
    }

    /// Drops what was remembered and not used since the last call (files of expired
    /// snapshots), so the walker's memory follows the tables' live metadata.
    pub fn forget_unused(&mut self) {
        self.cache.forget_unused();
        let walked = std::mem::take(&mut self.walked);
        self.lists.retain(|path, _| walked.contains(path.as_str()));
        self.files.retain(|path, _| walked.contains(path));
        drop(walked);
        // A name only this set holds is no kept list's or manifest's any more.
        self.names.retain(|name| Arc::strong_count(name) > 1);
    }
}

/// Removes (or, on a dry run, lists) every file under the `data/` and `metadata/` of
/// `locations` in `store` that is not `referenced`, older than `options.grace` and
/// modified before `oldest_pin` (when given), recording it in `report`; the others
/// count as young orphans.
///
/// # Errors
/// [`GcError::Storage`] for a listing or removal that failed; files
/// removed before it stay removed.
async fn remove_orphans(
    store: &FileStore,
    locations: &[PathBuf],
    referenced: &HashSet<PathBuf>,
    oldest_pin: Option<SystemTime>,
    options: GcOptions,
    report: &mut GcReport,
) -> Result<(), GcError> {
    let now = SystemTime::now();
    let mut doomed = Vec::new();
    for location in locations {
        for dir in ["data", "metadata"] {
            // Only the files no metadata references are looked at (sizes and times).
            let mut unreferenced = Vec::new();
            let mut to_inspect = Vec::new();
            for file in store.list_names(&location.join(dir)).await? {
                if referenced.contains(file.path()) {
                    continue;
                }
                match file {
                    NamedFile::Stored(file) => unreferenced.push(file),
                    NamedFile::Path(path) => to_inspect.push(path),
                }
            }
            unreferenced.extend(store.stat(to_inspect).await?);
            for file in unreferenced {
                // An unknown or future modification time counts as age 0: kept.
                let age = file
                    .modified
                    .and_then(|modified| now.duration_since(modified).ok())
                    .unwrap_or_default();
                // A file an open write may still commit: modified at or after the
                // oldest pin (an unknown time counts as now).
                let pinned = oldest_pin
                    .is_some_and(|pin| file.modified.is_none_or(|modified| modified >= pin));
                if age < options.grace || pinned {
                    report.young_orphans += 1;
                    continue;
                }
                let verb = if options.dry_run {
                    "orphan would be removed"
                } else {
                    "orphan removed"
                };
                debug!(path = %file.path.display(), bytes = file.size_bytes, "{verb}");
                report.removed_bytes += file.size_bytes;
                doomed.push(file.path);
            }
        }
    }
    if !options.dry_run {
        store.remove(doomed.clone()).await?;
    }
    report.removed.extend(doomed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::local_path;
    use std::path::PathBuf;

    #[test]
    fn local_path_strips_the_file_scheme() {
        assert_eq!(
            local_path("/w/t/data/a.parquet"),
            PathBuf::from("/w/t/data/a.parquet")
        );
        assert_eq!(local_path("file:///w/t/x"), PathBuf::from("/w/t/x"));
        assert_eq!(local_path("file:/w/t/x"), PathBuf::from("/w/t/x"));
    }
}

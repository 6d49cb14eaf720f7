//! Online file cleanup: removing files no retained snapshot or metadata log references,
//! while the server runs.
//!
//! The rules below hold on a local warehouse and on S3 alike: only how files are listed,
//! inspected and removed differs (`catalog::file_store::FileStore`; on S3 a file's
//! modification time is its `Last-Modified`).
//!
//! Each sweep gathers the references of every table at once (the same walk as
//! `skade gc`, [`ReferenceWalker`], kept across sweeps so each manifest list and
//! manifest is read once). Every `LISTING_EVERY` it lists each table's `data/` and
//! `metadata/` (to find files no metadata ever referenced: leftovers of failed
//! commits); the sweeps in between take as candidates the files referenced at the last
//! sweep and not now, and look on disk only at files whose grace period has passed. A
//! file is removed only when all of these hold:
//! - no table's current metadata references it (the pointer read from redb, so the
//!   commit that dropped the reference is durable);
//! - a sweep first found it unreferenced at least the grace period ago, so a reader that
//!   loaded the table before that commit has the grace period to finish its scan;
//! - it was modified at least the grace period ago, and before the oldest live write pin
//!   ([`crate::catalog::WritePin`]), so the files of a commit still being built (a
//!   stream's data files, a transaction's staged files, a manifest being written) are
//!   never taken for leftovers.
//!
//! What it removes is therefore what snapshot expiry, manifest merging and the metadata
//! log's trimming (`write.metadata.previous-versions-max`) dropped, and the leftovers of
//! failed and rolled back commits. A table with `gc.enabled=false` is not swept; with
//! `write.metadata.delete-after-commit.enabled=false` its metadata JSON files are kept.
//! The "first found" times live in memory: after a restart the grace period starts
//! again, which only delays removals.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use iceberg::table::Table;

use crate::catalog::gc::{GcError, ReferenceWalker, local_path};
use crate::catalog::manifest_cache::ManifestCache;
use crate::storage::file_store::{FileStore, StoredFile};

/// Table property: remove metadata JSON files that fall out of the metadata log
/// (Iceberg's; skade's default is `true`, Iceberg Java's `false`).
pub const DELETE_AFTER_COMMIT_PROPERTY: &str = "write.metadata.delete-after-commit.enabled";

/// The kind of a removed file (the `kind` label of `skade_files_deleted_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A file under the table's `data/`.
    Data,
    /// A manifest (`*.avro` under `metadata/` other than a manifest list).
    Manifest,
    /// A manifest list (`metadata/snap-*.avro`).
    ManifestList,
    /// A table metadata JSON (`*.metadata.json`).
    Metadata,
    /// Anything else under `metadata/` (e.g. a statistics file).
    Other,
}

impl FileKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Data => "data",
            Self::Manifest => "manifest",
            Self::ManifestList => "manifest_list",
            Self::Metadata => "metadata",
            Self::Other => "other",
        }
    }

    fn of(path: &Path, in_data_dir: bool) -> Self {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        if in_data_dir {
            Self::Data
        } else if name.ends_with(".metadata.json") {
            Self::Metadata
        } else if name.starts_with("snap-") && name.ends_with(".avro") {
            Self::ManifestList
        } else if name.ends_with(".avro") {
            Self::Manifest
        } else {
            Self::Other
        }
    }
}

/// One removed file.
#[derive(Debug, Clone)]
pub struct Removed {
    /// Its path.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// What it was.
    pub kind: FileKind,
}

/// One table's part in a sweep.
#[derive(Debug)]
pub(crate) struct SweptTable {
    pub(crate) table: Table,
    /// `gc.enabled`: sweep its location at all.
    pub(crate) sweep: bool,
    /// `write.metadata.delete-after-commit.enabled`.
    pub(crate) delete_metadata: bool,
}

/// The cleanup state kept across sweeps.
#[derive(Debug, Default)]
pub(crate) struct Sweeper {
    walker: ReferenceWalker,
    /// Unreferenced file → when a sweep first found it unreferenced.
    unreferenced: HashMap<PathBuf, Instant>,
    /// Every file referenced at the last sweep, and since by a table version a pass
    /// observed ([`Self::observe`]).
    referenced: HashSet<PathBuf>,
    /// When the last sweep listed the tables' directories.
    listed_at: Option<Instant>,
}

/// How often a sweep lists the tables' directories, to find files no metadata ever
/// referenced (the leftovers of failed and rolled back commits). The sweeps in between
/// take their candidates from the references alone — the files referenced at the last
/// sweep and not now — so their cost follows the table's live files and the files that
/// just lost their reference, not every file still waiting out its grace period.
const LISTING_EVERY: Duration = Duration::from_secs(30);

impl Sweeper {
    /// Unreferenced files the last sweep kept (waiting for their grace period, pinned, or
    /// young).
    pub(crate) fn waiting(&self) -> usize {
        self.unreferenced.len()
    }

    /// Notes every file `table` references as it stands now (before a maintenance commit
    /// changes it), so the next sweep that does not list directories still finds what
    /// the table referenced only between two sweeps — a snapshot appended and expired
    /// in the same pass.
    ///
    /// # Errors
    /// iceberg's error for a manifest list or manifest that cannot be read.
    pub(crate) async fn observe(&mut self, table: &Table) -> iceberg::Result<()> {
        self.walker.references(table, &mut self.referenced).await
    }

    /// The parsed manifest lists and manifests the sweeps read, for the other jobs of a
    /// pass (merge, compaction) to read through too.
    pub(crate) fn manifests(&mut self) -> &mut ManifestCache {
        self.walker.cache()
    }

    /// One sweep over `tables` (every table of the catalog: their references protect
    /// each other's files), listing and removing through `store` (the catalog's
    /// warehouse: a local directory or an object store). Returns the files removed.
    ///
    /// # Errors
    /// [`GcError::Table`] when a table's manifest list or manifest cannot be read (then
    /// nothing is removed); [`GcError::Io`] or [`GcError::Store`] when listing or
    /// removing failed (files not yet removed stay, and keep waiting).
    pub(crate) async fn sweep(
        &mut self,
        store: &FileStore,
        tables: &[SweptTable],
        grace: Duration,
        oldest_pin: Option<SystemTime>,
    ) -> Result<Vec<Removed>, GcError> {
        let mut referenced = HashSet::new();
        for swept in tables {
            self.walker
                .references(&swept.table, &mut referenced)
                .await
                .map_err(|e| GcError::Table {
                    table: swept.table.identifier().to_string(),
                    source: Box::new(e),
                })?;
        }
        self.walker.forget_unused();
        let locations = swept_locations(store, tables);
        let list = self
            .listed_at
            .is_none_or(|at| at.elapsed() >= LISTING_EVERY);
        let rules = Rules {
            locations: &locations,
            referenced: &referenced,
            grace,
            oldest_pin,
        };
        let mut seen = std::mem::take(&mut self.unreferenced);
        let now = Instant::now();
        // The files to judge: every file of the swept locations on a listing sweep;
        // between listings, the waiting files whose grace period has passed (the others
        // wait on, unchecked: the location rules are applied when a file is due).
        let found = if list {
            listed(store, &locations, &mut seen).await
        } else {
            let lost = self.referenced.difference(&referenced);
            due_between_listings(store, &mut seen, lost, &referenced, grace, now).await
        };
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                self.unreferenced = seen;
                return Err(e);
            }
        };
        if list {
            self.listed_at = Some(Instant::now());
        }
        let mut doomed = Vec::new();
        for file in found {
            let Some(kind) = rules.candidate(&file.path) else {
                seen.remove(&file.path);
                continue;
            };
            let first = *seen.entry(file.path.clone()).or_insert(now);
            if rules.due(&file, first) {
                seen.remove(&file.path);
                doomed.push((file, kind));
            }
        }
        self.referenced = referenced;
        let paths = doomed.iter().map(|(file, _)| file.path.clone()).collect();
        if let Err(e) = store.remove(paths).await {
            // Kept waiting: the next sweep tries again.
            for (file, _) in doomed {
                seen.insert(file.path, now);
            }
            self.unreferenced = seen;
            return Err(e.into());
        }
        self.unreferenced = seen;
        Ok(doomed
            .into_iter()
            .map(|(file, kind)| {
                tracing::debug!(path = %file.path.display(), kind = kind.as_str(), "unreferenced file removed");
                Removed {
                    path: file.path,
                    bytes: file.size_bytes,
                    kind,
                }
            })
            .collect())
    }
}

/// Every file under the `data/` and `metadata/` of `locations` in `store`; `seen` then
/// keeps only the waiting files still there.
///
/// # Errors
/// The store's error listing (then `seen` is unchanged).
async fn listed(
    store: &FileStore,
    locations: &[(PathBuf, bool)],
    seen: &mut HashMap<PathBuf, Instant>,
) -> Result<Vec<StoredFile>, GcError> {
    let mut found = Vec::new();
    for (location, _) in locations {
        for dir in ["data", "metadata"] {
            found.extend(store.list(&location.join(dir)).await?);
        }
    }
    let mut still = HashMap::with_capacity(seen.len());
    for file in &found {
        if let Some(first) = seen.remove(&file.path) {
            still.insert(file.path.clone(), first);
        }
    }
    *seen = still;
    Ok(found)
}

/// Between listings: the files that lost their reference since the last sweep (`lost`)
/// start waiting in `seen`, referenced ones leave it, and the waiting files whose grace
/// period has passed are looked up in `store` (those gone leave `seen`). Returns those
/// found.
///
/// # Errors
/// The store's error inspecting a file.
async fn due_between_listings(
    store: &FileStore,
    seen: &mut HashMap<PathBuf, Instant>,
    lost: impl Iterator<Item = &PathBuf>,
    referenced: &HashSet<PathBuf>,
    grace: Duration,
    now: Instant,
) -> Result<Vec<StoredFile>, GcError> {
    for file in lost {
        seen.entry(file.clone()).or_insert(now);
    }
    seen.retain(|file, _| !referenced.contains(file));
    let due: Vec<PathBuf> = seen
        .iter()
        .filter(|(_, first)| now.duration_since(**first) >= grace)
        .map(|(file, _)| file.clone())
        .collect();
    let found = store.stat(due.clone()).await?;
    let there: HashSet<&PathBuf> = found.iter().map(|f| &f.path).collect();
    for file in due.iter().filter(|f| !there.contains(f)) {
        seen.remove(file);
    }
    Ok(found)
}

/// The locations a sweep may remove files under, each with whether its metadata JSON
/// files may go: the plain locations of the warehouse's storage of the swept tables
/// (a location shared with a table that keeps its metadata keeps it too), minus every
/// location of a table not swept (`gc.enabled=false` protects its location from the
/// other tables).
fn swept_locations(store: &FileStore, tables: &[SweptTable]) -> Vec<(PathBuf, bool)> {
    let mut locations: Vec<(PathBuf, bool)> = Vec::new();
    for swept in tables.iter().filter(|t| t.sweep) {
        let Some(location) = store.path_of(swept.table.metadata().location()) else {
            continue;
        };
        match locations.iter_mut().find(|(l, _)| *l == location) {
            Some((_, delete_metadata)) => *delete_metadata &= swept.delete_metadata,
            None => locations.push((location, swept.delete_metadata)),
        }
    }
    let protected: HashSet<PathBuf> = tables
        .iter()
        .filter(|t| !t.sweep)
        .map(|t| local_path(t.table.metadata().location()))
        .collect();
    locations.retain(|(l, _)| !protected.contains(l));
    locations
}

/// What a sweep may remove (module docs): under which locations, given which
/// references, grace period and write pins.
struct Rules<'a> {
    /// Swept locations, each with whether its metadata JSON files may go.
    locations: &'a [(PathBuf, bool)],
    referenced: &'a HashSet<PathBuf>,
    grace: Duration,
    oldest_pin: Option<SystemTime>,
}

impl Rules<'_> {
    /// The kind of `file` if a sweep may consider it at all: under a swept location's
    /// `data/` or `metadata/`, not referenced, and not a metadata JSON file its
    /// location keeps.
    fn candidate(&self, file: &Path) -> Option<FileKind> {
        if self.referenced.contains(file) {
            return None;
        }
        self.locations
            .iter()
            .find_map(|(location, delete_metadata)| {
                let in_data = file.starts_with(location.join("data"));
                if !in_data && !file.starts_with(location.join("metadata")) {
                    return None;
                }
                let kind = FileKind::of(file, in_data);
                Some((kind != FileKind::Metadata || *delete_metadata).then_some(kind))
            })
            .flatten()
    }

    /// Whether `file`, a candidate a sweep first found unreferenced at `first`, may be
    /// removed now: its grace period has passed, and it is neither young nor pinned.
    fn due(&self, file: &StoredFile, first: Instant) -> bool {
        let wall = SystemTime::now();
        // An unknown or future modification time counts as age 0: kept.
        let modified = file.modified.unwrap_or(wall);
        let young = wall.duration_since(modified).unwrap_or_default() < self.grace;
        let pinned = self.oldest_pin.is_some_and(|pin| modified >= pin);
        !young && !pinned && first.elapsed() >= self.grace
    }
}

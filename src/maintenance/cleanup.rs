//! Online file cleanup: removing files no retained snapshot or metadata log references,
//! while the server runs.
//!
//! Each sweep gathers the references of every table at once (the same walk as
//! `skade gc`, [`ReferenceWalker`], kept across sweeps so each manifest list and
//! manifest is read once) and lists each table's `data/` and `metadata/`. A file is
//! removed only when all of these hold:
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

use crate::catalog::gc::{GcError, ReferenceWalker, files_under, local_path};

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
}

impl Sweeper {
    /// Unreferenced files the last sweep kept (waiting for their grace period, pinned, or
    /// young).
    pub(crate) fn waiting(&self) -> usize {
        self.unreferenced.len()
    }

    /// One sweep over `tables` (every table of the catalog: their references protect
    /// each other's files). Returns the files removed.
    ///
    /// # Errors
    /// [`GcError::Table`] when a table's manifest list or manifest cannot be read (then
    /// nothing is removed); [`GcError::Io`] when listing or removing failed (files not
    /// yet removed stay).
    pub(crate) async fn sweep(
        &mut self,
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
        let mut locations: Vec<(PathBuf, bool)> = Vec::new();
        // Only local locations are swept: orphans on an object store are left (README,
        // "Object storage").
        for swept in tables.iter().filter(|t| t.sweep && is_local(t)) {
            let location = local_path(swept.table.metadata().location());
            // A location shared with a table that keeps its metadata keeps it too.
            match locations.iter_mut().find(|(l, _)| *l == location) {
                Some((_, delete_metadata)) => *delete_metadata &= swept.delete_metadata,
                None => locations.push((location, swept.delete_metadata)),
            }
        }
        // Tables not swept (gc.enabled=false) protect their location from other tables.
        let protected: HashSet<PathBuf> = tables
            .iter()
            .filter(|t| !t.sweep)
            .map(|t| local_path(t.table.metadata().location()))
            .collect();
        locations.retain(|(l, _)| !protected.contains(l));

        let unreferenced = std::mem::take(&mut self.unreferenced);
        let (unreferenced, outcome) = tokio::task::spawn_blocking(move || {
            remove_unreferenced(&locations, &referenced, unreferenced, grace, oldest_pin)
        })
        .await
        .map_err(|e| GcError::Io {
            what: "sweep",
            path: PathBuf::new(),
            source: std::io::Error::other(e.to_string()),
        })?;
        self.unreferenced = unreferenced;
        outcome
    }
}

/// Whether `swept`'s table lives on the local filesystem (not `s3://...`).
fn is_local(swept: &SweptTable) -> bool {
    let location = swept.table.metadata().location();
    location.starts_with("file:") || !location.contains("://")
}

/// Lists every location's `data/` and `metadata/` and removes what the module docs
/// allow; returns the new "first found unreferenced" map and the files removed.
fn remove_unreferenced(
    locations: &[(PathBuf, bool)],
    referenced: &HashSet<PathBuf>,
    mut seen: HashMap<PathBuf, Instant>,
    grace: Duration,
    oldest_pin: Option<SystemTime>,
) -> (HashMap<PathBuf, Instant>, Result<Vec<Removed>, GcError>) {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let mut still = HashMap::new();
    let mut removed = Vec::new();
    for (location, delete_metadata) in locations {
        for dir in ["data", "metadata"] {
            let listed = match files_under(&location.join(dir)) {
                Ok(listed) => listed,
                Err(e) => return (still, Err(e)),
            };
            for (file, meta) in listed {
                if referenced.contains(&file) {
                    continue;
                }
                let kind = FileKind::of(&file, dir == "data");
                if kind == FileKind::Metadata && !delete_metadata {
                    continue;
                }
                let first = seen.remove(&file).unwrap_or(now);
                // A modification time in the future counts as age 0: kept.
                let modified = meta.modified().unwrap_or(wall);
                let young = wall.duration_since(modified).unwrap_or_default() < grace;
                let pinned = oldest_pin.is_some_and(|pin| modified >= pin);
                if young || pinned || now.duration_since(first) < grace {
                    still.insert(file, first);
                    continue;
                }
                match std::fs::remove_file(&file) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(source) => {
                        return (
                            still,
                            Err(GcError::Io {
                                what: "remove",
                                path: file,
                                source,
                            }),
                        );
                    }
                }
                tracing::debug!(path = %file.display(), kind = kind.as_str(), "unreferenced file removed");
                removed.push(Removed {
                    path: file,
                    bytes: meta.len(),
                    kind,
                });
            }
        }
    }
    (still, Ok(removed))
}

//! Online file cleanup: removing files no retained snapshot or metadata log references,
//! while the server runs.
//!
//! The rules below hold on a local warehouse and on S3 alike: only how files are listed,
//! inspected and removed differs (`storage::file_store::FileStore`; on S3 a file's
//! modification time is its `Last-Modified`).
//!
//! Each sweep gathers the references of every table at once (the same walk as
//! `skade gc`, [`ReferenceWalker`], kept across sweeps so each manifest list and
//! manifest is read once). Every `LISTING_EVERY` (or quarter of `--cleanup-grace`,
//! whichever is longer) it lists each table's `data/` and
//! `metadata/` (to find files no metadata ever referenced: leftovers of failed
//! commits); the sweeps in between take as candidates the files referenced at the last
//! sweep and not now, and look each of those up on disk once (its size and
//! modification time). A file is removed only when all of these hold:
//! - no table's current metadata references it (the pointer read from redb, so the
//!   commit that dropped the reference is durable);
//! - a sweep first found it unreferenced at least its grace period ago, so a reader that
//!   loaded the table before that commit has the grace period to finish its scan. The
//!   grace period is `--cleanup-grace`, and for metadata JSON files the smaller of it
//!   and `--metadata-cleanup-grace`: a reader reads a metadata JSON only right after a
//!   load-table answer named it, never during a scan;
//! - it was modified at least its grace period ago;
//! - no write in progress may need it: it was modified before the oldest live write pin
//!   ([`crate::catalog::WritePin`]), so the files of a commit still being built (a
//!   stream's data files, a transaction's staged files, a manifest being written) are
//!   never taken for leftovers — unless a table's metadata once referenced it (a sweep
//!   or a pass saw it referenced, or it is a metadata JSON of a version older than
//!   every one its table's metadata log names), which makes it part of a commit that
//!   landed: a put that stays open for hours does not hold what its own and other
//!   commits unreferenced.
//!
//! What waits is bounded in bytes as well as time: when the unreferenced files kept
//! (those no write in progress may need) add up to more than `--cleanup-max-waiting`,
//! the sweep removes the ones that have waited longest, before their grace period ends,
//! until the rest fit (`skade_files_deleted_early_total`).
//!
//! The removals run in a task of their own, beside the maintenance passes: a pass never
//! waits for unlinks (on ext4 under the soak's load ≈ 0.35 ms each, and a sweep can
//! find 100,000 files due at once), and the next sweep starts once they are done.
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

use super::file_map::{FileKey, FileMap};
use crate::catalog::gc::{GcError, ReferenceWalker, local_path};
use crate::catalog::manifest_cache::ManifestCache;
use crate::storage::file_store::FileStore;

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
    /// Removed before its grace period ended, because the files waiting out a grace
    /// passed `--cleanup-max-waiting` bytes.
    pub early: bool,
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

/// How long and how much a sweep keeps (README, "Table maintenance").
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `--cleanup-grace`: how long an unreferenced file is kept, and how old a leftover
    /// must be.
    pub(crate) grace: Duration,
    /// `--metadata-cleanup-grace`: the same for metadata JSON files (the smaller of the
    /// two applies to them).
    pub(crate) metadata_grace: Duration,
    /// `--cleanup-max-waiting`: most bytes kept waiting out a grace period.
    pub(crate) max_waiting_bytes: u64,
}

impl Limits {
    /// The grace period of a file of `kind`.
    fn grace_of(&self, kind: FileKind) -> Duration {
        match kind {
            FileKind::Metadata => self.metadata_grace.min(self.grace),
            _ => self.grace,
        }
    }

    /// The shortest grace period of any file.
    pub(crate) fn shortest_grace(&self) -> Duration {
        self.metadata_grace.min(self.grace)
    }
}

/// One unreferenced file a sweep keeps waiting.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// When a sweep first found it unreferenced.
    since: Instant,
    bytes: u64,
    /// Its modification time (`None`: unknown, taken as now).
    modified: Option<SystemTime>,
    kind: FileKind,
    /// A table's metadata referenced it once (a sweep or [`Sweeper::observe`] saw it
    /// referenced, or it is a metadata JSON of a version older than its table's metadata
    /// log): it belongs to a commit that landed, so no write in progress can need it and
    /// write pins do not hold it.
    committed: bool,
}

impl Waiting {
    /// Whether a write in progress may still need it: it was never referenced and was
    /// modified at or after the oldest live write pin.
    fn pinned(&self, oldest_pin: Option<SystemTime>, wall: SystemTime) -> bool {
        !self.committed && oldest_pin.is_some_and(|pin| self.modified.unwrap_or(wall) >= pin)
    }
}

/// What a sweep left waiting: unreferenced files not held by a write in progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitingFiles {
    /// How many.
    pub files: usize,
    /// Their bytes; at most `--cleanup-max-waiting` after a sweep.
    pub bytes: u64,
}

/// Files a sweep decided to remove, being removed in a task of their own so the pass
/// does not wait for the unlinks (at ≈ 0.3 ms each on ext4 under load, the 100,000
/// files a sweep can remove when what waits passes `--cleanup-max-waiting` took the
/// pass half a minute: `docs/performance.md`, "Soak").
#[derive(Debug)]
struct Removal {
    task: tokio::task::JoinHandle<Result<(), crate::storage::StorageError>>,
    /// The files, each with what it was when it waited and whether it goes early.
    doomed: Vec<(PathBuf, Waiting, bool)>,
}

/// The cleanup state kept across sweeps.
#[derive(Debug, Default)]
pub(crate) struct Sweeper {
    walker: ReferenceWalker,
    /// Unreferenced files a sweep keeps, with when it first found each (each
    /// directory's path kept once: ≈ 300,000 files wait at the soak's load).
    unreferenced: FileMap<Waiting>,
    /// Every file referenced at the last sweep, and since by a table version a pass
    /// observed ([`Self::observe`]).
    referenced: HashSet<PathBuf>,
    /// When the last sweep listed the tables' directories.
    listed_at: Option<Instant>,
    /// What the last sweep left waiting.
    waiting: WaitingFiles,
    /// The last sweep's removals, while not yet collected ([`Self::finish_removal`]).
    removal: Option<Removal>,
}

/// How often a sweep lists the tables' directories at most, to find files no metadata
/// ever referenced (the leftovers of failed and rolled back commits): every quarter of
/// `--cleanup-grace`, and at least this long apart. The sweeps in between take their
/// candidates from the references alone — the files referenced at the last sweep and
/// not now — so their cost follows the table's live files and the files that just lost
/// their reference, not every file still waiting out its grace period (a listing reads
/// all of those: 3.3 s of a 12 s pass with 90,000 waiting, `docs/performance.md`,
/// "Soak"). A leftover is therefore removed at most a quarter of the grace late.
const LISTING_EVERY: Duration = Duration::from_secs(30);

/// Files one removal request takes (S3's `DeleteObjects` takes at most 1,000 keys).
const REMOVE_CHUNK: usize = 1000;

impl Sweeper {
    /// Unreferenced files the last sweep kept (waiting for their grace period, pinned, or
    /// young).
    pub(crate) fn kept(&self) -> usize {
        self.unreferenced.len()
    }

    /// What the last sweep left waiting out a grace period (files of writes in progress
    /// not counted).
    pub(crate) fn waiting(&self) -> WaitingFiles {
        self.waiting
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

    /// How many files it keeps waiting and referenced, and what its walker keeps
    /// ([`ReferenceWalker::kept`]), for the maintenance log.
    pub(crate) fn kept_sizes(&self) -> (usize, usize, (usize, usize, usize)) {
        (
            self.unreferenced.len(),
            self.referenced.len(),
            self.walker.kept(),
        )
    }

    /// Whether the last sweep's removals are still running.
    pub(crate) fn removing(&self) -> bool {
        self.removal.as_ref().is_some_and(|r| !r.task.is_finished())
    }

    /// Waits for the last sweep's removals, if any not yet collected, and returns the
    /// files removed.
    ///
    /// # Errors
    /// [`GcError::Storage`] when removing failed: then every file of that sweep's
    /// removals waits again (with when it first waited), and the next sweep tries again.
    pub(crate) async fn finish_removal(&mut self) -> Result<Vec<Removed>, GcError> {
        let Some(Removal { task, doomed }) = self.removal.take() else {
            return Ok(Vec::new());
        };
        let failed = match task.await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(GcError::from(e)),
            Err(e) => Some(GcError::Storage(crate::storage::StorageError::Io {
                what: "run the removal task for",
                path: PathBuf::new(),
                source: std::io::Error::other(e.to_string()),
            })),
        };
        if let Some(e) = failed {
            for (path, waiting, _) in doomed {
                self.unreferenced.insert_if_absent(&path, waiting);
            }
            return Err(e);
        }
        Ok(doomed
            .into_iter()
            .map(|(path, waiting, early)| {
                tracing::debug!(path = %path.display(), kind = waiting.kind.as_str(), early, "unreferenced file removed");
                Removed {
                    path,
                    bytes: waiting.bytes,
                    kind: waiting.kind,
                    early,
                }
            })
            .collect())
    }

    /// The parsed manifest lists and manifests the sweeps read, for the other jobs of a
    /// pass (merge, compaction) to read through too.
    pub(crate) fn manifests(&mut self) -> &mut ManifestCache {
        self.walker.cache()
    }

    /// One sweep over `tables` (every table of the catalog: their references protect
    /// each other's files), listing and removing through `store` (the catalog's
    /// warehouse: a local directory or an object store), keeping what `limits` say.
    /// The files it finds due are removed in a task of their own, which the sweep does
    /// not wait for: [`Self::finish_removal`] collects it. While the last sweep's
    /// removals are not collected, a sweep does nothing (its candidates would include
    /// the files being removed).
    ///
    /// Needs a tokio runtime (the removal task is spawned on it).
    ///
    /// # Errors
    /// [`GcError::Table`] when a table's manifest list or manifest cannot be read (then
    /// nothing is removed); [`GcError::Storage`] when listing failed.
    pub(crate) async fn sweep(
        &mut self,
        store: &FileStore,
        tables: &[SweptTable],
        limits: Limits,
        oldest_pin: Option<SystemTime>,
    ) -> Result<(), GcError> {
        if self.removal.is_some() {
            return Ok(());
        }
        let started = Instant::now();
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
        let floors = metadata_floors(store, tables);
        let list = self
            .listed_at
            .is_none_or(|at| at.elapsed() >= LISTING_EVERY.max(limits.grace / 4));
        let rules = Rules {
            locations: &locations,
            referenced: &referenced,
            was_referenced: &self.referenced,
            metadata_floors: &floors,
            limits,
            oldest_pin,
        };
        let mut seen = std::mem::take(&mut self.unreferenced);
        let now = Instant::now();
        // On a listing sweep every file of the swept locations is judged; between
        // listings, the files that lost their reference since the last sweep join the
        // waiting ones (the location rules are applied again when a file is removed).
        let found = if list {
            listed(store, &rules, &mut seen, now).await
        } else {
            let lost = self.referenced.difference(&referenced);
            between_listings(store, &rules, &mut seen, lost, now).await
        };
        if let Err(e) = found {
            self.unreferenced = seen;
            return Err(e);
        }
        if list {
            self.listed_at = Some(now);
        }
        let found_at = started.elapsed();
        let wall = SystemTime::now();
        let due: Vec<FileKey> = seen
            .entries()
            .filter(|(_, waiting)| rules.due(waiting, wall))
            .map(|(key, _)| key.clone())
            .collect();
        let mut doomed = Vec::with_capacity(due.len());
        for key in due {
            if let Some((path, waiting)) = seen.take(&key)
                && rules.candidate(&path).is_some()
            {
                doomed.push((path, waiting, false));
            }
        }
        doomed.extend(over_cap(&mut seen, &rules, wall));
        self.referenced = referenced;
        self.waiting = waiting_in(&seen, oldest_pin, wall);
        tracing::debug!(
            walk_ms = (now - started).as_millis() as u64,
            find_ms = (found_at - (now - started)).as_millis() as u64,
            decide_ms = (started.elapsed() - found_at).as_millis() as u64,
            waiting = seen.len(),
            listed = list,
            removing = doomed.len(),
            "sweep timed"
        );
        self.unreferenced = seen;
        if !doomed.is_empty() {
            let paths: Vec<PathBuf> = doomed.iter().map(|(path, ..)| path.clone()).collect();
            let store = store.clone();
            let task = tokio::spawn(async move {
                // In chunks: a runtime shutting down stops the task between two (each
                // chunk is one blocking task or one multi-object delete).
                for chunk in paths.chunks(REMOVE_CHUNK) {
                    store.remove(chunk.to_vec()).await?;
                }
                Ok(())
            });
            self.removal = Some(Removal { task, doomed });
        }
        Ok(())
    }
}

/// The files of `seen` not held by a write in progress, counted.
fn waiting_in(
    seen: &FileMap<Waiting>,
    oldest_pin: Option<SystemTime>,
    wall: SystemTime,
) -> WaitingFiles {
    seen.values()
        .filter(|w| !w.pinned(oldest_pin, wall))
        .fold(WaitingFiles::default(), |acc, w| WaitingFiles {
            files: acc.files + 1,
            bytes: acc.bytes + w.bytes,
        })
}

/// When the files of `seen` not held by a write in progress add up to more than
/// `--cleanup-max-waiting` bytes, takes the longest-waiting of them out of `seen` (the
/// oldest modification first among those found at once; then by directory and name)
/// until the rest fit, and returns
/// them, marked early. One that is no longer a candidate (its location stopped being
/// swept since the last listing) leaves `seen` without being returned.
fn over_cap(
    seen: &mut FileMap<Waiting>,
    rules: &Rules<'_>,
    wall: SystemTime,
) -> Vec<(PathBuf, Waiting, bool)> {
    let pin = rules.oldest_pin;
    let mut total = waiting_in(seen, pin, wall).bytes;
    let cap = rules.limits.max_waiting_bytes;
    if total <= cap {
        return Vec::new();
    }
    let mut order: Vec<(&FileKey, &Waiting)> = seen
        .entries()
        .filter(|(_, w)| !w.pinned(pin, wall))
        .collect();
    order.sort_by(|(a, x), (b, y)| (x.since, x.modified, a).cmp(&(y.since, y.modified, b)));
    let mut out = Vec::new();
    for (key, waiting) in order {
        if total <= cap {
            break;
        }
        total -= waiting.bytes;
        out.push(key.clone());
    }
    out.into_iter()
        .filter_map(|key| {
            let (path, waiting) = seen.take(&key)?;
            rules.candidate(&path).map(|_| (path, waiting, true))
        })
        .collect()
}

/// A listing sweep: every file under the `data/` and `metadata/` of the swept locations
/// in `store` that may be a candidate ([`Rules::candidate`]) waits in `seen` (since when
/// it first waited, or `now`); files no longer there or referenced leave it, and so do
/// the directories no waiting file is in.
///
/// # Errors
/// The store's error listing (then `seen` is unchanged).
async fn listed(
    store: &FileStore,
    rules: &Rules<'_>,
    seen: &mut FileMap<Waiting>,
    now: Instant,
) -> Result<(), GcError> {
    let mut found = Vec::new();
    for (location, _) in rules.locations {
        for dir in ["data", "metadata"] {
            found.extend(store.list(&location.join(dir)).await?);
        }
    }
    let mut still = FileMap::default();
    for file in found {
        let Some(kind) = rules.candidate(&file.path) else {
            continue;
        };
        let before = seen.remove(&file.path);
        let committed = before.is_some_and(|w| w.committed) || rules.committed(&file.path, kind);
        still.insert(
            &file.path,
            Waiting {
                since: before.map_or(now, |w| w.since),
                bytes: file.size_bytes,
                modified: file.modified,
                kind,
                committed,
            },
        );
    }
    *seen = still;
    Ok(())
}

/// Between listings: the files that lost their reference since the last sweep (`lost`)
/// and may be candidates start waiting in `seen` (looked up in `store` once, for their
/// size and modification time; those gone are left out), and referenced ones leave it.
///
/// # Errors
/// The store's error inspecting a file (then no lost file joins `seen`).
async fn between_listings(
    store: &FileStore,
    rules: &Rules<'_>,
    seen: &mut FileMap<Waiting>,
    lost: impl Iterator<Item = &PathBuf>,
    now: Instant,
) -> Result<(), GcError> {
    // Whichever side is smaller is walked: the waiting files at a high commit rate,
    // the referenced ones in a large warehouse that commits little.
    if rules.referenced.len() < seen.len() {
        for file in rules.referenced {
            seen.remove(file);
        }
    } else {
        seen.retain(|file| !rules.referenced.contains(file));
    }
    let new: Vec<PathBuf> = lost
        .filter(|file| !seen.contains(file) && rules.candidate(file).is_some())
        .cloned()
        .collect();
    for file in store.stat(new).await? {
        let Some(kind) = rules.candidate(&file.path) else {
            continue;
        };
        seen.insert(
            &file.path,
            Waiting {
                since: now,
                bytes: file.size_bytes,
                modified: file.modified,
                kind,
                committed: true,
            },
        );
    }
    Ok(())
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

/// The version number of a metadata JSON file named as Iceberg writers name them:
/// `<version>-<uuid>.metadata.json` (Java, iceberg-rust, pyiceberg) or
/// `v<version>.metadata.json` (Hadoop tables).
fn metadata_version(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?.strip_suffix(".metadata.json")?;
    let name = name.strip_prefix('v').unwrap_or(name);
    let digits = name.split('-').next()?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Location → the oldest metadata version that the metadata logs (and current metadata
/// files) of the tables at that location name, for the tables whose every such file
/// carries a version ([`metadata_version`]); a location with a table that does not is
/// left out.
fn metadata_floors(store: &FileStore, tables: &[SweptTable]) -> HashMap<PathBuf, u64> {
    let mut floors: HashMap<PathBuf, Option<u64>> = HashMap::new();
    for swept in tables {
        let metadata = swept.table.metadata();
        let Some(location) = store.path_of(metadata.location()) else {
            continue;
        };
        if swept.table.metadata_location().is_none() {
            floors.insert(location, None);
            continue;
        }
        let files = metadata
            .metadata_log()
            .iter()
            .map(|entry| entry.metadata_file.as_str())
            .chain(swept.table.metadata_location());
        let oldest = files
            .map(|file| metadata_version(Path::new(file)))
            .try_fold(u64::MAX, |min, v| v.map(|v| min.min(v)));
        let floor = floors.entry(location).or_insert(Some(u64::MAX));
        *floor = match (*floor, oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }
    floors
        .into_iter()
        .filter_map(|(location, floor)| Some((location, floor?)))
        .collect()
}

/// What a sweep may remove (module docs): under which locations, given which
/// references, grace periods and write pins.
struct Rules<'a> {
    /// Swept locations, each with whether its metadata JSON files may go.
    locations: &'a [(PathBuf, bool)],
    referenced: &'a HashSet<PathBuf>,
    /// What the last sweep and the pass's observations found referenced.
    was_referenced: &'a HashSet<PathBuf>,
    /// Location → the oldest metadata version its tables' metadata logs still name.
    metadata_floors: &'a HashMap<PathBuf, u64>,
    limits: Limits,
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

    /// Whether `file` (of `kind`) belongs to a commit that landed or can no longer
    /// land: referenced at the last sweep or by a version a pass observed, or a metadata
    /// JSON whose version is older than every one its table's metadata log names (a
    /// commit in progress writes the version after its base, which the log holds, and
    /// a commit on an older base fails its compare-and-swap).
    fn committed(&self, file: &Path, kind: FileKind) -> bool {
        if self.was_referenced.contains(file) {
            return true;
        }
        if kind != FileKind::Metadata {
            return false;
        }
        let (Some(version), Some(location)) =
            (metadata_version(file), file.parent().and_then(Path::parent))
        else {
            return false;
        };
        self.metadata_floors
            .get(location)
            .is_some_and(|floor| version < *floor)
    }

    /// Whether a waiting file may be removed now (at wall-clock time `wall`): its grace
    /// period has passed since a sweep first found it unreferenced, and it is neither
    /// young (modified within its grace period) nor held by a write in progress.
    fn due(&self, waiting: &Waiting, wall: SystemTime) -> bool {
        let grace = self.limits.grace_of(waiting.kind);
        // An unknown or future modification time counts as age 0: kept.
        let modified = waiting.modified.unwrap_or(wall);
        let young = wall.duration_since(modified).unwrap_or_default() < grace;
        !young && !waiting.pinned(self.oldest_pin, wall) && waiting.since.elapsed() >= grace
    }
}

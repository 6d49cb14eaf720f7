//! Online file cleanup: removing files no retained snapshot or metadata log references,
//! while the server runs.
//!
//! The rules below hold on a local warehouse and on S3 alike: only how files are listed,
//! inspected and removed differs (`storage::file_store::FileStore`; on S3 a file's
//! modification time is its `Last-Modified`).
//!
//! Each sweep gathers the references of every table at once (the same walk as
//! `skade gc`, [`ReferenceWalker`], kept across sweeps so each manifest list and
//! manifest is read once). Every sweep takes as candidates the files referenced at the
//! last sweep and not now, and looks each of those up on disk once (its size and
//! modification time). Every `LISTING_EVERY` (or quarter of `--cleanup-grace`,
//! whichever is longer) a listing of each table's `data/` and `metadata/` also runs, to
//! find files no metadata ever referenced (leftovers of failed commits): in a task of
//! its own, beside the passes, and the first sweep after it ends judges what it found.
//! A file's size and modification time are looked up once, when a sweep first finds it
//! waiting: a listing of a local warehouse reads directories only and looks up just the
//! files no sweep found before.
//! A file is removed only when all of these hold:
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
//! find 100,000 files due at once), and the next sweep starts once they are done. So do
//! the listings: an object store that lists slowly (s3s-fs: 5.7 s for 8,860 keys) held
//! every pass's expiry and metadata cleanup for as long (`docs/performance.md`, "Ten
//! minutes on S3").
//!
//! What it removes is therefore what snapshot expiry, manifest merging and the metadata
//! log's trimming (`write.metadata.previous-versions-max`) dropped, and the leftovers of
//! failed and rolled back commits. A table with `gc.enabled=false` is not swept; with
//! `write.metadata.delete-after-commit.enabled=false` its metadata JSON files are kept.
//! The "first found" times live in memory: after a restart the grace period starts
//! again, which only delays removals.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use iceberg::table::Table;

use super::file_map::{FileKey, FileMap};
use crate::catalog::gc::{GcError, ReferenceWalker};
use crate::catalog::manifest_cache::ManifestCache;
use crate::storage::StorageError;
use crate::storage::file_store::{FileStore, NamedFile, StoredFile};
use crate::storage::warehouse::local_path;

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

/// How long and how much a sweep keeps (`docs/maintenance.md`, "Table maintenance").
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
    /// Found by the listing being judged (false between listings).
    listed: bool,
}

/// What the store says of one file: its size and modification time.
#[derive(Debug, Clone, Copy)]
struct Listed {
    /// Its size in bytes.
    bytes: u64,
    /// Its modification time (`None`: the store does not say).
    modified: Option<SystemTime>,
}

impl From<&StoredFile> for Listed {
    fn from(file: &StoredFile) -> Self {
        Self {
            bytes: file.size_bytes,
            modified: file.modified,
        }
    }
}

/// What a listing found: every file by path, each with its size and modification time
/// when the listing gave them (an object store's does, a local directory's read does
/// not: [`inspect_new`] looks up the ones a sweep needs).
type Found = FileMap<Option<Listed>>;

/// A listing of the swept locations' `data/` and `metadata/`, running in a task of its
/// own beside the passes; the first sweep after it ends judges what it found
/// ([`judge_listing`]).
#[derive(Debug)]
struct Listing {
    /// The files found (each directory's path kept once, as in the sweeper's own map)
    /// and how long the listing took.
    task: tokio::task::JoinHandle<Result<(Found, Duration), StorageError>>,
    /// When it started: a file already waiting then and not found by it is gone.
    started: Instant,
    /// Files a sweep's removals removed while it ran: it may have found them before they
    /// went, and they must not wait again.
    removed: HashSet<PathBuf>,
}

impl Listing {
    /// Starts listing every location of `locations` in `store`, one directory at a
    /// time.
    fn start(store: &FileStore, locations: &[SweptDirs]) -> Self {
        let dirs: Vec<PathBuf> = locations
            .iter()
            .flat_map(|l| [l.data.clone(), l.metadata.clone()])
            .collect();
        let store = store.clone();
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut found = FileMap::default();
            for dir in dirs {
                for file in store.list_names(&dir).await? {
                    let listed = match &file {
                        NamedFile::Path(_) => None,
                        NamedFile::Stored(stored) => Some(Listed::from(stored)),
                    };
                    found.insert(file.path(), listed);
                }
            }
            Ok((found, started.elapsed()))
        });
        Self {
            task,
            started,
            removed: HashSet::new(),
        }
    }

    /// Waits for the listing's task and returns what it found and how long it took.
    async fn finish(&mut self) -> Result<(Found, Duration), GcError> {
        match (&mut self.task).await {
            Ok(found) => Ok(found?),
            Err(e) => Err(task_failed("run the listing task for", e)),
        }
    }

    /// Judges what it `found` into `seen` at `now` under `rules`: the files new to the
    /// sweeper looked up in `store` first ([`inspect_new`]), then [`judge_listing`].
    ///
    /// # Errors
    /// The store's error looking a file up; then `seen` is as it was.
    async fn judge(
        &self,
        store: &FileStore,
        found: &Found,
        rules: &Rules<'_>,
        seen: &mut FileMap<Waiting>,
        now: Instant,
    ) -> Result<(), GcError> {
        let inspected = inspect_new(store, found, &self.removed, rules, seen).await?;
        judge_listing(
            found,
            inspected,
            self.started,
            &self.removed,
            rules,
            seen,
            now,
        );
        Ok(())
    }
}

/// The error of a cleanup task (`what` it was doing) that panicked or was cancelled.
fn task_failed(what: &'static str, e: tokio::task::JoinError) -> GcError {
    GcError::Storage(StorageError::Io {
        what,
        path: PathBuf::new(),
        source: std::io::Error::other(e.to_string()),
    })
}

impl Waiting {
    /// `file` (of `kind`) as a sweep first finds it waiting at `since`.
    fn found(file: Listed, kind: FileKind, since: Instant, committed: bool, listed: bool) -> Self {
        Self {
            since,
            bytes: file.bytes,
            modified: file.modified,
            kind,
            committed,
            listed,
        }
    }

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
    /// When the last listing judged started.
    listed_at: Option<Instant>,
    /// The listing running beside the passes, while not yet judged.
    listing: Option<Listing>,
    /// What the last sweep left waiting.
    waiting: WaitingFiles,
    /// The last sweep's removals, while not yet collected ([`Self::finish_removal`]).
    removal: Option<Removal>,
}

/// How often the tables' directories are listed at most, to find files no metadata
/// ever referenced (the leftovers of failed and rolled back commits): every quarter of
/// `--cleanup-grace`, and at least this long apart. Sweeps take their other candidates
/// from the references alone — the files referenced at the last sweep and not now — so
/// their cost follows the table's live files and the files that just lost their
/// reference, not every file still waiting out its grace period (a listing reads all of
/// those: 3.3 s of a 12 s pass with 90,000 waiting, `docs/performance.md`, "Soak"). A
/// leftover is therefore removed at most a quarter of the grace, plus one listing,
/// late.
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

    /// Whether a directory listing is running, not yet judged.
    pub(crate) fn listing(&self) -> bool {
        self.listing.is_some()
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
            Err(e) => Some(task_failed("run the removal task for", e)),
        };
        if let Some(e) = failed {
            for (path, waiting, _) in doomed {
                self.unreferenced.insert_if_absent(&path, waiting);
            }
            return Err(e);
        }
        if let Some(listing) = &mut self.listing {
            listing
                .removed
                .extend(doomed.iter().map(|(path, ..)| path.clone()));
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
    /// each other's files), listing, inspecting and removing through `store` (the
    /// catalog's warehouse: a local directory or an object store), keeping what
    /// `limits` say. When a listing is due ([`LISTING_EVERY`]) it starts one in a task
    /// of its own; a sweep that finds it ended judges what it found, and with
    /// `wait_for_listing` the sweep waits for it (a pass called on its own). The files
    /// it finds due are removed in a task of their own, which the sweep does not wait
    /// for: [`Self::finish_removal`] collects it. While the last sweep's removals are
    /// not collected, a sweep does nothing (its candidates would include the files
    /// being removed).
    ///
    /// Needs a tokio runtime (the listing and removal tasks are spawned on it).
    ///
    /// # Errors
    /// [`GcError::Table`] when a table's manifest list or manifest cannot be read (then
    /// nothing is removed); [`GcError::Storage`] when listing or inspecting failed (then
    /// nothing is removed, and the next sweep lists again).
    pub(crate) async fn sweep(
        &mut self,
        store: &FileStore,
        tables: &[SweptTable],
        limits: Limits,
        oldest_pin: Option<SystemTime>,
        wait_for_listing: bool,
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
        let locations = SweptDirs::of(swept_locations(store, tables));
        let floors = metadata_floors(store, tables);
        let listing_due = self.listing.is_none()
            && self
                .listed_at
                .is_none_or(|at| at.elapsed() >= LISTING_EVERY.max(limits.grace / 4));
        if listing_due {
            self.listing = Some(Listing::start(store, &locations));
        }
        let mut listing = self
            .listing
            .take_if(|l| wait_for_listing || l.task.is_finished());
        let rules = Rules::new(
            &locations,
            &referenced,
            &self.referenced,
            &floors,
            limits,
            oldest_pin,
        );
        let mut seen = std::mem::take(&mut self.unreferenced);
        let now = Instant::now();
        // A listing that ended has every file of the locations it listed judged; then
        // the files that lost their reference since the last sweep join the waiting ones
        // (the location rules are applied again when a file is removed).
        let mut listed_ms = None;
        if let Some(listing) = &mut listing {
            let judged = match listing.finish().await {
                Ok((found, took)) => listing
                    .judge(store, &found, &rules, &mut seen, now)
                    .await
                    .map(|()| took),
                Err(e) => Err(e),
            };
            match judged {
                Ok(took) => {
                    self.listed_at = Some(listing.started);
                    listed_ms = Some(took.as_millis() as u64);
                }
                Err(e) => {
                    self.unreferenced = seen;
                    // Listed again at the next sweep.
                    self.listed_at = None;
                    return Err(e);
                }
            }
        }
        let lost = self.referenced.difference(&referenced);
        if let Err(e) = between_listings(store, &rules, &mut seen, lost, now).await {
            self.unreferenced = seen;
            return Err(e);
        }
        let found_at = started.elapsed();
        let (doomed, waiting) = decide(&mut seen, &rules, SystemTime::now(), Instant::now());
        self.referenced = referenced;
        self.waiting = waiting;
        tracing::debug!(
            walk_ms = (now - started).as_millis() as u64,
            find_ms = (found_at - (now - started)).as_millis() as u64,
            decide_ms = (started.elapsed() - found_at).as_millis() as u64,
            waiting = seen.len(),
            listed_ms,
            removing = doomed.len(),
            "sweep timed"
        );
        seen.shrink_to_fit_loosely();
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

/// What a sweep removes now, taken out of `seen`: the files whose grace period has
/// passed ([`Rules::due`]); then, while the files left that no write in progress holds
/// add up to more than `--cleanup-max-waiting` bytes, the longest-waiting of them (by
/// when a sweep first found them, then the oldest modification, then by path), marked
/// early. A file that is no longer a candidate (its location stopped
/// being swept since the last listing) leaves `seen` without being returned. Also
/// returns what waits after (files held by a write in progress not counted).
///
/// Without sorting the waiting files: those one sweep found share their `since`, so the
/// cap's cut is found among the totals of a few hundred sweeps and only the files of the
/// sweep it falls in are sorted (sorting all ≈ 300,000 files every sweep, once the
/// soak's waiting bytes reached the cap, took ≈ 30 ms of a runtime thread a second).
fn decide(
    seen: &mut FileMap<Waiting>,
    rules: &Rules<'_>,
    wall: SystemTime,
    now: Instant,
) -> (Vec<(PathBuf, Waiting, bool)>, WaitingFiles) {
    let pin = rules.oldest_pin;
    let mut due = Vec::new();
    let mut waiting = WaitingFiles::default();
    for (key, w) in seen.entries() {
        if rules.due(w, wall, now) {
            due.push(key.clone());
        } else if !w.pinned(pin, wall) {
            waiting.files += 1;
            waiting.bytes += w.bytes;
        }
    }
    let mut doomed = Vec::with_capacity(due.len());
    take_candidates(seen, rules, due, false, &mut doomed);
    let cap = rules.limits.max_waiting_bytes;
    if waiting.bytes <= cap {
        return (doomed, waiting);
    }
    let mut by_since: BTreeMap<Instant, u64> = BTreeMap::new();
    for (_, w) in seen.entries().filter(|(_, w)| !w.pinned(pin, wall)) {
        *by_since.entry(w.since).or_default() += w.bytes;
    }
    // Whole sweeps' files go while the rest still exceed the cap; the cut falls in the
    // first sweep whose files bring it within (it always comes: the last sweep's files
    // are all that is left before it).
    let mut cut = None;
    for (since, bytes) in by_since {
        if waiting.bytes - bytes > cap {
            waiting.bytes -= bytes;
        } else {
            cut = Some(since);
            break;
        }
    }
    let cut = cut.expect("the last sweep's files are all that is left before it");
    let mut early = Vec::new();
    let mut at_cut = Vec::new();
    for (key, w) in seen.entries().filter(|(_, w)| !w.pinned(pin, wall)) {
        if w.since < cut {
            early.push(key.clone());
        } else if w.since == cut {
            at_cut.push((w.modified, seen.path(key), key.clone(), w.bytes));
        }
    }
    at_cut.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (_, _, key, bytes) in at_cut {
        if waiting.bytes <= cap {
            break;
        }
        waiting.bytes -= bytes;
        early.push(key);
    }
    waiting.files -= early.len();
    take_candidates(seen, rules, early, true, &mut doomed);
    (doomed, waiting)
}

/// Takes `keys` out of `seen`, pushing those still candidates onto `doomed` (marked
/// `early` or not).
fn take_candidates(
    seen: &mut FileMap<Waiting>,
    rules: &Rules<'_>,
    keys: Vec<FileKey>,
    early: bool,
    doomed: &mut Vec<(PathBuf, Waiting, bool)>,
) {
    for key in keys {
        if let Some((path, waiting)) = seen.take(&key)
            && rules.candidate(&path).is_some()
        {
            doomed.push((path, waiting, early));
        }
    }
}

/// The files a listing (`found`) named without their size and modification time that
/// [`judge_listing`] would make wait, looked up in `store`: candidates ([`Rules::candidate`])
/// neither waiting in `seen` already nor removed by a sweep while it ran (`removed`).
/// Those are the leftovers of failed commits and the files of writes in progress; a
/// file already waiting keeps what its first look found (an Iceberg writer never
/// rewrites a path it wrote), so a listing of a local warehouse costs one `lstat` per
/// file it is the first to find, not one per file. Files gone by then are left out.
///
/// # Errors
/// The store's error inspecting a file (then the listing is not judged).
async fn inspect_new(
    store: &FileStore,
    found: &Found,
    removed: &HashSet<PathBuf>,
    rules: &Rules<'_>,
    seen: &FileMap<Waiting>,
) -> Result<Vec<StoredFile>, GcError> {
    let new: Vec<PathBuf> = found
        .entries()
        .filter(|(_, file)| file.is_none())
        .map(|(key, _)| found.path(key))
        .filter(|path| {
            !removed.contains(path) && !seen.contains(path) && rules.candidate(path).is_some()
        })
        .collect();
    Ok(store.stat(new).await?)
}

/// Judges what a listing (started at `started`) found: each candidate file found
/// ([`Rules::candidate`]) waits in `seen` (since when it first waited, or `now`), but
/// those its sweeps' removals removed while it ran (`removed`); the files that waited
/// before it started and that it did not find are gone and leave `seen`, and so do the
/// directories no waiting file is in. Files that started waiting after it started stay.
/// A file the listing named without its size and modification time joins `seen` only
/// as [`inspect_new`] found it (`inspected`); one already waiting keeps its own.
fn judge_listing(
    found: &Found,
    inspected: Vec<StoredFile>,
    started: Instant,
    removed: &HashSet<PathBuf>,
    rules: &Rules<'_>,
    seen: &mut FileMap<Waiting>,
    now: Instant,
) {
    for (key, file) in found.entries() {
        let path = found.path(key);
        if removed.contains(&path) {
            continue;
        }
        let Some(kind) = rules.candidate(&path) else {
            continue;
        };
        if let Some(waiting) = seen.get_mut(&path) {
            waiting.committed = waiting.committed || rules.committed(&path, kind);
            if let Some(file) = file {
                waiting.bytes = file.bytes;
                waiting.modified = file.modified;
            }
            waiting.kind = kind;
            waiting.listed = true;
        } else if let Some(file) = file {
            let committed = rules.committed(&path, kind);
            seen.insert(&path, Waiting::found(*file, kind, now, committed, true));
        }
    }
    for file in inspected {
        let Some(kind) = rules.candidate(&file.path) else {
            continue;
        };
        let committed = rules.committed(&file.path, kind);
        seen.insert(
            &file.path,
            Waiting::found(Listed::from(&file), kind, now, committed, true),
        );
    }
    seen.retain_values(|waiting| {
        let keep = waiting.listed || waiting.since >= started;
        waiting.listed = false;
        keep
    });
    seen.forget_empty_dirs();
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
            Waiting::found(Listed::from(&file), kind, now, true, false),
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

/// A swept location's two directories, joined once (a listing asks for every file it
/// finds whether it lies under them), and whether its metadata JSON files may go.
#[derive(Debug)]
struct SweptDirs {
    data: PathBuf,
    metadata: PathBuf,
    delete_metadata: bool,
}

impl SweptDirs {
    fn of(locations: Vec<(PathBuf, bool)>) -> Vec<Self> {
        locations
            .into_iter()
            .map(|(location, delete_metadata)| Self {
                data: location.join("data"),
                metadata: location.join("metadata"),
                delete_metadata,
            })
            .collect()
    }
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

/// Where a directory lies among the swept locations ([`Rules::place`]).
#[derive(Debug, Clone, Copy)]
struct Place {
    /// Under a location's `data/` (else under its `metadata/`).
    in_data: bool,
    /// Whether that location's metadata JSON files may go.
    delete_metadata: bool,
}

/// What a sweep may remove (module docs): under which locations, given which
/// references, grace periods and write pins.
struct Rules<'a> {
    /// Swept locations, each with whether its metadata JSON files may go.
    locations: &'a [SweptDirs],
    referenced: &'a HashSet<PathBuf>,
    /// What the last sweep and the pass's observations found referenced.
    was_referenced: &'a HashSet<PathBuf>,
    /// Location → the oldest metadata version its tables' metadata logs still name.
    metadata_floors: &'a HashMap<PathBuf, u64>,
    limits: Limits,
    oldest_pin: Option<SystemTime>,
    /// Directory → its place ([`Self::place`]), worked out once per directory: a sweep
    /// that judges a listing asks for every file of it (190,000 in the soak), and
    /// comparing each file with every location, component by component, took 4 s of
    /// a runtime thread (`docs/performance.md`, "Judging a listing").
    /// (A mutex only so a sweep's future stays `Send`: one task uses it.)
    places: Mutex<HashMap<PathBuf, Option<Place>>>,
}

impl<'a> Rules<'a> {
    fn new(
        locations: &'a [SweptDirs],
        referenced: &'a HashSet<PathBuf>,
        was_referenced: &'a HashSet<PathBuf>,
        metadata_floors: &'a HashMap<PathBuf, u64>,
        limits: Limits,
        oldest_pin: Option<SystemTime>,
    ) -> Self {
        Self {
            locations,
            referenced,
            was_referenced,
            metadata_floors,
            limits,
            oldest_pin,
            places: Mutex::default(),
        }
    }

    /// The kind of `file` if a sweep may consider it at all: under a swept location's
    /// `data/` or `metadata/`, not referenced, and not a metadata JSON file its
    /// location keeps.
    fn candidate(&self, file: &Path) -> Option<FileKind> {
        if self.referenced.contains(file) {
            return None;
        }
        let place = self.place(file.parent()?)?;
        let kind = FileKind::of(file, place.in_data);
        (kind != FileKind::Metadata || place.delete_metadata).then_some(kind)
    }

    /// The place of directory `dir`: under the first swept location (in order) whose
    /// `data/` or `metadata/` it is or lies under; `None` when under none.
    fn place(&self, dir: &Path) -> Option<Place> {
        let mut places = self.places.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(place) = places.get(dir) {
            return *place;
        }
        let place = self.locations.iter().find_map(|location| {
            let in_data = dir.starts_with(&location.data);
            (in_data || dir.starts_with(&location.metadata)).then_some(Place {
                in_data,
                delete_metadata: location.delete_metadata,
            })
        });
        places.insert(dir.to_path_buf(), place);
        place
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
    /// (`now`: the same moment on the monotonic clock, against which `since` counts.)
    fn due(&self, waiting: &Waiting, wall: SystemTime, now: Instant) -> bool {
        let grace = self.limits.grace_of(waiting.kind);
        // An unknown or future modification time counts as age 0: kept.
        let modified = waiting.modified.unwrap_or(wall);
        let young = wall.duration_since(modified).unwrap_or_default() < grace;
        !young
            && !waiting.pinned(self.oldest_pin, wall)
            && now.saturating_duration_since(waiting.since) >= grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn limits(max_waiting_bytes: u64) -> Limits {
        Limits {
            grace: HOUR,
            metadata_grace: HOUR,
            max_waiting_bytes,
        }
    }

    fn waiting(since: Instant, modified: SystemTime, bytes: u64, committed: bool) -> Waiting {
        Waiting {
            since,
            bytes,
            modified: Some(modified),
            kind: FileKind::Data,
            committed,
            listed: false,
        }
    }

    /// Catches: a cap that takes the newest files first or more than it must, that
    /// breaks a tie between files found by one sweep other than by oldest modification
    /// then name, that counts or removes a file a write in progress holds, or a file
    /// due after its grace reported as early. Expected by the rule in `decide`'s docs
    /// (`docs/maintenance.md`, "Table maintenance"): total 220 bytes not held, cap 150,
    /// so the oldest go until 150 or less is left: a, b (first sweep), h, c (second
    /// sweep: h's modification is older, though its name comes last; c's name comes
    /// before e's), leaving e and f (130).
    #[test]
    fn past_the_cap_the_longest_waiting_go_in_order_and_held_files_stay() {
        let base = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let old = wall - 2 * HOUR;
        let now = base + HOUR + Duration::from_secs(5);
        let first = base + Duration::from_secs(10);
        let second = base + Duration::from_secs(20);
        let third = base + Duration::from_secs(30);
        let mut seen = FileMap::default();
        let file = |name: &str| PathBuf::from(format!("/w/t/data/{name}"));
        seen.insert(&file("g"), waiting(base, old, 5, true));
        seen.insert(&file("b"), waiting(first, old, 20, true));
        seen.insert(&file("a"), waiting(first, old, 10, true));
        seen.insert(&file("e"), waiting(second, old + HOUR / 2, 30, true));
        seen.insert(&file("c"), waiting(second, old + HOUR / 2, 30, true));
        seen.insert(&file("h"), waiting(second, old, 30, true));
        seen.insert(&file("f"), waiting(third, old, 100, true));
        // Written after the oldest write pin and never referenced: held.
        seen.insert(&file("p"), waiting(base, wall - HOUR / 6, 1000, false));
        let locations = SweptDirs::of(vec![(PathBuf::from("/w/t"), true)]);
        let (referenced, was_referenced, floors) = Default::default();
        let rules = Rules::new(
            &locations,
            &referenced,
            &was_referenced,
            &floors,
            limits(150),
            Some(wall - HOUR),
        );
        let (doomed, left) = decide(&mut seen, &rules, wall, now);
        let got: Vec<(PathBuf, bool)> = doomed
            .iter()
            .map(|(p, _, early)| (p.clone(), *early))
            .collect();
        let (due, early): (Vec<_>, Vec<_>) = got.into_iter().partition(|(_, early)| !early);
        assert_eq!(due, vec![(file("g"), false)]);
        let mut early: Vec<PathBuf> = early.into_iter().map(|(p, _)| p).collect();
        early.sort();
        assert_eq!(early, vec![file("a"), file("b"), file("c"), file("h")]);
        assert_eq!(
            left,
            WaitingFiles {
                files: 2,
                bytes: 130
            }
        );
        let mut kept: Vec<PathBuf> = seen.entries().map(|(k, _)| seen.path(k)).collect();
        kept.sort();
        assert_eq!(kept, vec![file("e"), file("f"), file("p")]);

        // Under the cap nothing goes early.
        let (doomed, left) = decide(
            &mut seen,
            &Rules {
                limits: limits(130),
                ..rules
            },
            wall,
            now,
        );
        assert!(doomed.is_empty(), "{doomed:?}");
        assert_eq!(
            left,
            WaitingFiles {
                files: 2,
                bytes: 130
            }
        );
    }

    /// Catches: a file taken for a candidate of a location it is not under (a sibling
    /// whose name starts with the location's or its `data`: `/w/ab`, `/w/a/database`),
    /// one in a partition directory under `data/` missed, a kept location's metadata
    /// JSON taken, or a second file of a directory judged by what the first one was.
    #[test]
    fn a_candidate_is_placed_by_its_directory_under_a_swept_location() {
        let locations = SweptDirs::of(vec![
            (PathBuf::from("/w/a"), true),
            (PathBuf::from("/w/b"), false),
        ]);
        let referenced: HashSet<PathBuf> = [PathBuf::from("/w/a/data/referenced.parquet")].into();
        let (was_referenced, floors) = Default::default();
        let rules = Rules::new(
            &locations,
            &referenced,
            &was_referenced,
            &floors,
            limits(u64::MAX),
            None,
        );
        let cases = [
            ("/w/a/data/x.parquet", Some(FileKind::Data)),
            ("/w/a/data/region=eu/day=1/x.parquet", Some(FileKind::Data)),
            ("/w/a/data/referenced.parquet", None),
            (
                "/w/a/metadata/00001-u.metadata.json",
                Some(FileKind::Metadata),
            ),
            ("/w/a/metadata/snap-1-u.avro", Some(FileKind::ManifestList)),
            ("/w/a/metadata/u-m0.avro", Some(FileKind::Manifest)),
            ("/w/b/metadata/00001-u.metadata.json", None),
            ("/w/b/metadata/snap-1-u.avro", Some(FileKind::ManifestList)),
            ("/w/ab/data/x.parquet", None),
            ("/w/a/database/x.parquet", None),
            ("/w/a/other/x.parquet", None),
            ("/w/a/x.parquet", None),
        ];
        for _ in 0..2 {
            for (file, kind) in cases {
                assert_eq!(rules.candidate(Path::new(file)), kind, "{file}");
            }
        }
    }

    /// `<dir>/t` with its `data/` and `metadata/` made.
    fn swept_location(dir: &Path) -> PathBuf {
        let location = dir.join("t");
        std::fs::create_dir_all(location.join("data")).unwrap();
        std::fs::create_dir_all(location.join("metadata")).unwrap();
        location
    }

    /// Empty reference sets, for [`Rules`] of tables that reference nothing.
    #[derive(Default)]
    struct NoReferences {
        referenced: HashSet<PathBuf>,
        was_referenced: HashSet<PathBuf>,
        floors: HashMap<PathBuf, u64>,
    }

    impl NoReferences {
        /// Rules over `locations` with no references, no cap and no write pin.
        fn rules<'a>(&'a self, locations: &'a [SweptDirs]) -> Rules<'a> {
            Rules::new(
                locations,
                &self.referenced,
                &self.was_referenced,
                &self.floors,
                limits(u64::MAX),
                None,
            )
        }
    }

    /// Lists `locations` on the local filesystem and judges it into `seen` at `now`, as
    /// a sweep does.
    async fn list_and_judge(
        locations: &[SweptDirs],
        rules: &Rules<'_>,
        seen: &mut FileMap<Waiting>,
        now: Instant,
    ) {
        let store = FileStore::Local;
        let mut listing = Listing::start(&store, locations);
        let (found, _) = listing.finish().await.unwrap();
        listing
            .judge(&store, &found, rules, seen, now)
            .await
            .unwrap();
    }

    /// Catches: a judged listing that keeps a file no longer on disk, restarts the grace
    /// of a file already waiting, misses a new one or its size, or leaves its marks set
    /// for the next listing (which would then keep files it did not find).
    #[tokio::test]
    async fn a_listing_keeps_what_is_there_with_its_first_time_and_drops_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let location = swept_location(dir.path());
        let kept = location.join("data/kept.parquet");
        let new = location.join("metadata/new.avro");
        std::fs::write(&kept, b"1234").unwrap();
        std::fs::write(&new, b"12").unwrap();
        // Waiting, and no longer on disk: in a swept location and in one no longer swept.
        let gone = location.join("data/gone.parquet");
        let unswept = dir.path().join("dropped/data/gone.parquet");
        let first = Instant::now();
        let mut seen = FileMap::default();
        seen.insert(&kept, waiting(first, SystemTime::now(), 4, true));
        seen.insert(&gone, waiting(first, SystemTime::now(), 1, true));
        seen.insert(&unswept, waiting(first, SystemTime::now(), 1, true));
        let locations = SweptDirs::of(vec![(location.clone(), true)]);
        let no_refs = NoReferences::default();
        let rules = no_refs.rules(&locations);
        let now = Instant::now() + Duration::from_secs(60);
        list_and_judge(&locations, &rules, &mut seen, now).await;
        let mut got: Vec<(PathBuf, Instant, u64, bool)> = seen
            .entries()
            .map(|(k, w)| (seen.path(k), w.since, w.bytes, w.listed))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            vec![(kept, first, 4, false), (new, now, 2, false)],
            "sizes as first found, first times kept, marks reset"
        );
        assert!(!seen.contains(&gone));
        assert!(!seen.contains(&unswept));
        let modified = seen
            .get_mut(&location.join("metadata/new.avro"))
            .and_then(|w| w.modified);
        assert!(
            modified.is_some(),
            "a new file's modification time is looked up (write pins are judged by it)"
        );
    }

    /// Catches: a listing of a local warehouse that looks up every file it names again
    /// (one `lstat` each: most of a listing's 8 s at 190,000 files under the soak's
    /// load) instead of only those no sweep has found before; and a listing that gives
    /// sizes for free (an object store's) whose sizes are dropped.
    #[tokio::test]
    async fn a_listing_looks_up_only_the_files_it_is_the_first_to_find() {
        let dir = tempfile::tempdir().unwrap();
        let location = swept_location(dir.path());
        let waited = location.join("data/waited.parquet");
        let new = location.join("data/new.parquet");
        std::fs::write(&waited, b"1234").unwrap();
        std::fs::write(&new, b"123").unwrap();
        let first = Instant::now();
        let at_first_look = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut seen = FileMap::default();
        // What its first look found: a size and time the file on disk no longer has, so
        // a second look shows.
        seen.insert(&waited, waiting(first, at_first_look, 7, true));
        let locations = SweptDirs::of(vec![(location.clone(), true)]);
        let no_refs = NoReferences::default();
        let rules = no_refs.rules(&locations);
        list_and_judge(&locations, &rules, &mut seen, Instant::now()).await;
        let w = *seen.get_mut(&waited).unwrap();
        assert_eq!((w.bytes, w.modified), (7, Some(at_first_look)));
        assert_eq!(seen.get_mut(&new).unwrap().bytes, 3);

        // A listing that says sizes and times (an object store's): those are taken.
        let mut found = Found::default();
        let listed = Listed {
            bytes: 9,
            modified: Some(at_first_look),
        };
        found.insert(&waited, Some(listed));
        found.insert(&new, Some(listed));
        let orphan = location.join("data/orphan.parquet");
        found.insert(&orphan, Some(listed));
        judge_listing(
            &found,
            Vec::new(),
            Instant::now(),
            &HashSet::new(),
            &rules,
            &mut seen,
            Instant::now(),
        );
        let mut got: Vec<(PathBuf, u64)> = seen
            .entries()
            .map(|(k, w)| (seen.path(k), w.bytes))
            .collect();
        got.sort();
        assert_eq!(got, vec![(new, 9), (orphan, 9), (waited, 9)]);
    }

    /// Catches: a listing judged after the passes went on beside it that puts back to
    /// wait a file a sweep's removals removed meanwhile (it would be removed and
    /// counted twice, and its bytes counted as waiting), or that drops a file which
    /// started waiting after the listing began (so was never going to be found by it).
    #[tokio::test]
    async fn a_listing_judged_late_leaves_out_what_was_removed_and_keeps_what_began_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let location = swept_location(dir.path());
        let removed = location.join("data/removed.parquet");
        let leftover = location.join("data/leftover.parquet");
        std::fs::write(&removed, b"1").unwrap();
        std::fs::write(&leftover, b"1").unwrap();
        let locations = SweptDirs::of(vec![(location.clone(), true)]);
        let mut listing = Listing::start(&FileStore::Local, &locations);
        let (found, _) = listing.finish().await.unwrap();
        // While it ran: a sweep's removals removed `removed`, and `later` (written after
        // the listing read its directory) lost its reference and began to wait.
        std::fs::remove_file(&removed).unwrap();
        listing.removed.insert(removed.clone());
        let later = location.join("data/later.parquet");
        let mut seen = FileMap::default();
        seen.insert(&later, waiting(Instant::now(), SystemTime::now(), 1, true));
        let no_refs = NoReferences::default();
        let rules = no_refs.rules(&locations);
        listing
            .judge(&FileStore::Local, &found, &rules, &mut seen, Instant::now())
            .await
            .unwrap();
        let mut got: Vec<PathBuf> = seen.entries().map(|(k, _)| seen.path(k)).collect();
        got.sort();
        assert_eq!(got, vec![later, leftover]);
    }
}

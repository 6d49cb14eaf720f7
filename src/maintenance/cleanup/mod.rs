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
//! waits for unlinks (one per file, and a sweep can find many thousands due at
//! once), and the next sweep starts once they are done. So do the listings: inside a
//! pass, an object store that lists slowly would hold every pass's expiry and metadata
//! cleanup for as long (`docs/performance.md`, "What the soak measured behind
//! maintenance's shape" and "Ten minutes on S3 with compaction reading ahead").
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

mod listing;
mod rules;
mod sweeper;

use listing::*;
use rules::*;
pub(crate) use sweeper::Sweeper;
#[cfg(test)]
use sweeper::*;

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

    pub(super) fn of(path: &Path, in_data_dir: bool) -> Self {
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
    pub(super) fn grace_of(&self, kind: FileKind) -> Duration {
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
pub(super) struct Waiting {
    /// When a sweep first found it unreferenced.
    pub(super) since: Instant,
    pub(super) bytes: u64,
    /// Its modification time (`None`: unknown, taken as now).
    pub(super) modified: Option<SystemTime>,
    pub(super) kind: FileKind,
    /// A table's metadata referenced it once (a sweep or [`Sweeper::observe`] saw it
    /// referenced, or it is a metadata JSON of a version older than its table's metadata
    /// log): it belongs to a commit that landed, so no write in progress can need it and
    /// write pins do not hold it.
    pub(super) committed: bool,
    /// Found by the listing being judged (false between listings).
    pub(super) listed: bool,
}

/// What the store says of one file: its size and modification time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listed {
    /// Its size in bytes.
    pub(super) bytes: u64,
    /// Its modification time (`None`: the store does not say).
    pub(super) modified: Option<SystemTime>,
}

impl From<&StoredFile> for Listed {
    fn from(file: &StoredFile) -> Self {
        Self {
            bytes: file.size_bytes,
            modified: file.modified,
        }
    }
}

impl Waiting {
    /// `file` (of `kind`) as a sweep first finds it waiting at `since`.
    pub(super) fn found(
        file: Listed,
        kind: FileKind,
        since: Instant,
        committed: bool,
        listed: bool,
    ) -> Self {
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
    pub(super) fn pinned(&self, oldest_pin: Option<SystemTime>, wall: SystemTime) -> bool {
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
    /// (one `lstat` each, most of a large listing's time) instead of only those no sweep
    /// has found before; and a listing that gives sizes for free (an object store's)
    /// whose sizes are dropped.
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

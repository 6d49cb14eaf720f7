//! The listing of the swept locations' directories: it runs in a task of its own beside
//! the passes, and the first sweep after it ends judges what it found; between listings
//! a sweep takes the files that lost their reference.

use super::*;

/// What a listing found: every file by path, each with its size and modification time
/// when the listing gave them (an object store's does, a local directory's read does
/// not: [`inspect_new`] looks up the ones a sweep needs).
pub(super) type Found = FileMap<Option<Listed>>;

/// A listing of the swept locations' `data/` and `metadata/`, running in a task of its
/// own beside the passes; the first sweep after it ends judges what it found
/// ([`judge_listing`]).
#[derive(Debug)]
pub(super) struct Listing {
    /// The files found (each directory's path kept once, as in the sweeper's own map)
    /// and how long the listing took.
    pub(super) task: tokio::task::JoinHandle<Result<(Found, Duration), StorageError>>,
    /// When it started: a file already waiting then and not found by it is gone.
    pub(super) started: Instant,
    /// Files a sweep's removals removed while it ran: it may have found them before they
    /// went, and they must not wait again.
    pub(super) removed: HashSet<PathBuf>,
}

impl Listing {
    /// Starts listing every location of `locations` in `store`, one directory at a
    /// time.
    pub(super) fn start(store: &FileStore, locations: &[SweptDirs]) -> Self {
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
    pub(super) async fn finish(&mut self) -> Result<(Found, Duration), GcError> {
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
    pub(super) async fn judge(
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
pub(super) fn task_failed(what: &'static str, e: tokio::task::JoinError) -> GcError {
    GcError::Storage(StorageError::Io {
        what,
        path: PathBuf::new(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// How often the tables' directories are listed at most, to find files no metadata
/// ever referenced (the leftovers of failed and rolled back commits): every quarter of
/// `--cleanup-grace`, and at least this long apart. Sweeps take their other candidates
/// from the references alone — the files referenced at the last sweep and not now — so
/// their cost follows the table's live files and the files that just lost their
/// reference, not every file still waiting out its grace period (a listing reads all of
/// those, seconds of work under a busy load: `docs/performance.md`, "What the soak
/// measured behind maintenance's shape"). A leftover is therefore removed at most a
/// quarter of the grace, plus one listing, late.
pub(super) const LISTING_EVERY: Duration = Duration::from_secs(30);

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
pub(super) async fn inspect_new(
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
pub(super) fn judge_listing(
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
pub(super) async fn between_listings(
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

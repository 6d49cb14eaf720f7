//! The cleanup state kept across sweeps, the sweep itself, and what it decides to remove
//! now (in a task of its own, beside the passes).

use super::*;

/// Files a sweep decided to remove, being removed in a task of their own so the pass
/// does not wait for the unlinks (one per file, and a sweep can remove many thousands
/// at once when what waits passes `--cleanup-max-waiting`: `docs/performance.md`, "What
/// the soak measured behind maintenance's shape").
#[derive(Debug)]
pub(super) struct Removal {
    pub(super) task: tokio::task::JoinHandle<Result<(), crate::storage::StorageError>>,
    /// The files, each with what it was when it waited and whether it goes early.
    pub(super) doomed: Vec<(PathBuf, Waiting, bool)>,
}

/// The cleanup state kept across sweeps.
#[derive(Debug)]
pub(crate) struct Sweeper {
    pub(super) walker: ReferenceWalker,
    /// Unreferenced files a sweep keeps, with when it first found each (each
    /// directory's path kept once: hundreds of thousands may wait under a busy load).
    pub(super) unreferenced: FileMap<Waiting>,
    /// Every file referenced at the last sweep, and since by a table version a pass
    /// observed ([`Self::observe`]).
    pub(super) referenced: HashSet<PathBuf>,
    /// When the last listing judged started.
    pub(super) listed_at: Option<Instant>,
    /// The listing running beside the passes, while not yet judged.
    pub(super) listing: Option<Listing>,
    /// What the last sweep left waiting.
    pub(super) waiting: WaitingFiles,
    /// The last sweep's removals, while not yet collected ([`Self::finish_removal`]).
    pub(super) removal: Option<Removal>,
}

/// Files one removal request takes (S3's `DeleteObjects` takes at most 1,000 keys).
pub(super) const REMOVE_CHUNK: usize = 1000;

impl Sweeper {
    /// A sweeper that has swept nothing yet, walking references with `walker`.
    pub(crate) fn new(walker: ReferenceWalker) -> Self {
        Self {
            walker,
            unreferenced: FileMap::default(),
            referenced: HashSet::new(),
            listed_at: None,
            listing: None,
            waiting: WaitingFiles::default(),
            removal: None,
        }
    }

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
        let referenced = self.references(tables).await?;
        let locations = SweptDirs::of(swept_locations(store, tables));
        let floors = metadata_floors(store, tables);
        self.start_listing_when_due(store, &locations, limits);
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
            match judge_ended(listing, store, &rules, &mut seen, now).await {
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
        self.start_removal(store, doomed);
        Ok(())
    }

    /// Every file `tables`' metadata references now (their walk kept across sweeps).
    ///
    /// # Errors
    /// [`GcError::Table`] when a table's manifest list or manifest cannot be read.
    async fn references(&mut self, tables: &[SweptTable]) -> Result<HashSet<PathBuf>, GcError> {
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
        Ok(referenced)
    }

    /// Starts a listing of `locations` when none runs and the last one is at least
    /// [`LISTING_EVERY`] (or a quarter of the grace) old.
    fn start_listing_when_due(
        &mut self,
        store: &FileStore,
        locations: &[SweptDirs],
        limits: Limits,
    ) {
        let due = self.listing.is_none()
            && self
                .listed_at
                .is_none_or(|at| at.elapsed() >= LISTING_EVERY.max(limits.grace / 4));
        if due {
            self.listing = Some(Listing::start(store, locations));
        }
    }

    /// Removes `doomed` in a task of its own (collected by [`Self::finish_removal`]).
    fn start_removal(&mut self, store: &FileStore, doomed: Vec<(PathBuf, Waiting, bool)>) {
        if doomed.is_empty() {
            return;
        }
        let paths: Vec<PathBuf> = doomed.iter().map(|(path, ..)| path.clone()).collect();
        let store = store.clone();
        let task = tokio::spawn(async move {
            // In chunks: a runtime shutting down stops the task between two (each chunk
            // is one blocking task or one multi-object delete).
            for chunk in paths.chunks(REMOVE_CHUNK) {
                store.remove(chunk.to_vec()).await?;
            }
            Ok(())
        });
        self.removal = Some(Removal { task, doomed });
    }
}

/// Judges a listing that ended into `seen` ([`Listing::judge`]); returns how long the
/// listing took.
///
/// # Errors
/// The listing's or the look-up's error.
async fn judge_ended(
    listing: &mut Listing,
    store: &FileStore,
    rules: &Rules<'_>,
    seen: &mut FileMap<Waiting>,
    now: Instant,
) -> Result<Duration, GcError> {
    let (found, took) = listing.finish().await?;
    listing.judge(store, &found, rules, seen, now).await?;
    Ok(took)
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
/// sweep it falls in are sorted (sorted whole, every sweep would cost a runtime thread
/// work in proportion to all the waiting files once the waiting bytes reach the cap).
pub(super) fn decide(
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
pub(super) fn take_candidates(
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

//! Online table maintenance: snapshot expiry, manifest merging, small-file compaction and
//! file cleanup, run in the background by the server for every table
//! (`docs/maintenance.md`).
//!
//! A [`Maintainer`] runs a *pass* every `--maintenance-interval`. For each table, under
//! this process's commit turn on the table ([`RedbCatalog::commit_turns`], so in-process
//! appends wait for it instead of racing), it
//! 1. expires snapshots ([`crate::snapshot::expire`]: Iceberg's `history.expire.*` rules through iceberg's
//!    `ExpireSnapshotsAction`, plus skade's count bound);
//! 2. merges the current snapshot's manifests when they reach
//!    `commit.manifest.min-count-to-merge` ([`crate::snapshot::manifests::merge_manifests`]);
//!
//! each as one commit through the catalog's commit driver
//! ([`RedbCatalog::commit_in_turn`]: compare-and-swap on the table's pointer, group
//! commit, warehouse sync before the pointer moves). Its policy (`catalog::commit`):
//! when the table moved under a commit (from outside this process), the job plans again
//! on the table as it now stands and commits that plan, or gives way when there is
//! nothing left to do — maintenance never overwrites an append. Then
//! 3. it compacts a run of small data files ([`compact`]; rows rewritten outside the
//!    turn, the inputs checked and the `replace` commit made under it) — in the
//!    server, in a task of its own beside the passes ([`Maintainer::spawn`]) — and
//! 4. it removes the files nothing references any more ([`cleanup`]), once the
//!    unreferencing commit is durable and the grace period has passed
//!    (`--cleanup-grace`; `--metadata-cleanup-grace` for metadata JSON), or earlier for
//!    the longest-waiting ones when what waits passes `--cleanup-max-waiting` bytes.
//!
//! Metadata JSON retention needs no job of its own: every commit's metadata keeps at
//! most `write.metadata.previous-versions-max` (default 100) entries in its metadata log
//! (iceberg's `TableMetadataBuilder` trims it), and cleanup removes the files that fell
//! out (`write.metadata.delete-after-commit.enabled`, on by default in skade).

pub mod cleanup;
pub mod compact;
mod file_map;
mod jobs;
mod project;
mod sweep;
mod tally;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use iceberg::TableIdent;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::catalog::gc::GcError;
use crate::catalog::{Ownership, RedbCatalog};
use crate::config::MaintenanceConfig;
use crate::metrics::Metrics;
pub use cleanup::WaitingFiles;
use cleanup::{Removed, Sweeper};

/// A sweep runs at least this often even when no table changed (leftovers of failed
/// commits appear without any commit).
const SWEEP_AT_LEAST_EVERY: Duration = Duration::from_secs(30);

/// Why a maintenance job failed. A failed job changes nothing visible: its commit did
/// not land (files it wrote are leftovers for cleanup) or its removals stopped.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    /// The catalog's tables could not be listed; the pass did nothing.
    #[error("maintenance: cannot list the catalog's tables: {0}")]
    Catalog(#[source] Box<iceberg::Error>),
    /// One job of one table failed; the pass went on with the others.
    #[error("maintenance of table {table}: {job} failed: {source}")]
    Job {
        /// The table, `ns.table`.
        table: String,
        /// `expire`, `merge`, `compact`, `cleanup`, `load` or `lease` (the maintenance
        /// lease of a shared catalog could not be asked for).
        job: &'static str,
        /// iceberg's or the catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// Cleanup could not read a table's references or list/remove a file.
    #[error("maintenance cleanup: {0}")]
    Cleanup(#[from] GcError),
}

impl MaintenanceError {
    /// The `job` label of `skade_maintenance_errors_total`.
    pub fn job(&self) -> &'static str {
        match self {
            Self::Catalog(_) => "load",
            Self::Job { job, .. } => job,
            Self::Cleanup(_) => "cleanup",
        }
    }
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct PassReport {
    /// Tables looked at.
    pub tables: usize,
    /// Snapshots removed by expiry commits.
    pub snapshots_expired: usize,
    /// Manifests replaced by merged ones.
    pub manifests_replaced: usize,
    /// Merged manifests written (and committed).
    pub manifests_written: usize,
    /// Data files replaced by compaction commits.
    pub files_compacted: usize,
    /// Maintenance commits that gave way: the table moved under them and the plan on
    /// the table as it then stood was empty (compaction: its inputs were replaced).
    pub conflicts: usize,
    /// Files cleanup removed: this pass's sweep's ([`Maintainer::run_pass`] waits for
    /// them); in a background pass, the last sweep's, collected before it sweeps.
    pub removed: Vec<Removed>,
    /// What the last cleanup sweep (this pass's, or an earlier one) left waiting out a
    /// grace period.
    pub waiting: WaitingFiles,
    /// Jobs that failed (each logged and counted in `skade_maintenance_errors_total`).
    pub errors: Vec<MaintenanceError>,
    /// Tables this instance maintained this pass (held their maintenance lease).
    pub maintained: usize,
    /// Tables another instance sharing the catalog maintained (held their lease), left
    /// alone by this one.
    pub held_elsewhere: usize,
}

/// Runs table maintenance passes over one catalog.
#[derive(Debug)]
pub struct Maintainer {
    catalog: Arc<RedbCatalog>,
    config: MaintenanceConfig,
    metrics: Metrics,
    /// `--target-file-size` (Arrow bytes): what compaction considers small.
    target_file_bytes: u64,
    /// The server's `--memory-budget`, which compaction's runs hold bytes of.
    budget: Option<crate::write::MemoryBudget>,
    /// Passes run one at a time.
    state: tokio::sync::Mutex<State>,
    /// Compaction jobs run one at a time (inside a pass, or in their own task).
    compaction: tokio::sync::Mutex<CompactionState>,
    /// Tables left unmaintained because they set a property that moves their files
    /// ([`crate::catalog::check_file_paths`]); each logged once.
    moved_files: std::sync::Mutex<HashSet<String>>,
}

/// What compaction keeps across its jobs.
#[derive(Debug)]
struct CompactionState {
    /// The parsed manifest lists and manifests compaction reads (its own: in the
    /// background it runs beside the passes).
    manifests: crate::catalog::manifest_cache::ManifestCache,
    /// Table → the current snapshot id when compaction last found nothing to do.
    compacted: HashMap<String, i64>,
    /// Tables whose last compaction left data files alone because a live delete file
    /// may apply to them (each logged once, when it joins).
    held_by_deletes: HashSet<String>,
}

#[derive(Debug)]
struct State {
    sweeper: Sweeper,
    /// Table → (current snapshot id, manifests it lists) when last read.
    manifests: HashMap<String, (i64, usize)>,
    /// Table → metadata location at the last sweep.
    swept_at: HashMap<String, String>,
    /// When the last sweep ran.
    last_sweep: Option<Instant>,
    /// Whether the last sweep left unreferenced files waiting for their grace period, or
    /// a directory listing running (so the sweep that judges it comes soon).
    waiting: bool,
    /// Tables cleanup does not sweep, and why (each logged once).
    unswept: HashMap<String, Ownership>,
    /// Files removed, not yet in the log.
    removed_log: tally::Tally,
    /// Files removed before their grace period ended, not yet in the log.
    early_log: tally::Tally,
}

impl CompactionState {
    fn new(catalog: &RedbCatalog) -> Self {
        Self {
            manifests: catalog.manifest_cache(),
            compacted: HashMap::new(),
            held_by_deletes: HashSet::new(),
        }
    }
}

impl State {
    fn new(catalog: &RedbCatalog) -> Self {
        Self {
            sweeper: Sweeper::new(crate::catalog::gc::ReferenceWalker::new(
                catalog.written_manifests().clone(),
            )),
            manifests: HashMap::new(),
            swept_at: HashMap::new(),
            last_sweep: None,
            waiting: false,
            unswept: HashMap::new(),
            removed_log: tally::Tally::default(),
            early_log: tally::Tally::default(),
        }
    }
}

impl Maintainer {
    /// A maintainer of every table of `catalog`, recording on `metrics`. Passes run
    /// only when called ([`Self::run_pass`]) or spawned ([`Self::spawn`]).
    pub fn new(catalog: Arc<RedbCatalog>, config: MaintenanceConfig, metrics: Metrics) -> Self {
        Self {
            state: tokio::sync::Mutex::new(State::new(&catalog)),
            compaction: tokio::sync::Mutex::new(CompactionState::new(&catalog)),
            catalog,
            config,
            metrics,
            target_file_bytes: 128 << 20,
            budget: None,
            moved_files: std::sync::Mutex::default(),
        }
    }

    /// Sets the `--target-file-size` compaction works against (bytes; default 128 MiB):
    /// files under a quarter of it are small.
    pub fn with_target_file_size(mut self, bytes: u64) -> Self {
        self.target_file_bytes = bytes;
        self
    }

    /// Makes compaction hold the bytes it reads and writes against `budget` (the
    /// server's `--memory-budget`, shared with the streams), so table maintenance stays
    /// within the process's memory bound ([`crate::memory::rss_bound`];
    /// `docs/performance.md`, "Memory").
    pub fn with_memory_budget(mut self, budget: crate::write::MemoryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Runs a pass every `--maintenance-interval`, and early once
    /// [`Self::wake_after_commits`] catalog commits landed since the last pass, until
    /// `shutdown` is cancelled; a pass in progress then stops after the table it is on
    /// (so when the task has ended, nothing of it still uses the catalog).
    ///
    /// Compaction runs in a task of its own on the same schedule, so that expiry, merging
    /// and cleanup never wait for rows being rewritten: inside a pass compaction would
    /// take most of it, and a longer pass expires snapshots less often, which makes every
    /// commit's metadata JSON bigger (`docs/performance.md`, "What the soak measured
    /// behind maintenance's shape").
    /// The returned task ends once both have.
    pub fn spawn(self: Arc<Self>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
        let passes = {
            let (this, shutdown) = (Arc::clone(&self), shutdown.clone());
            tokio::spawn(async move {
                this.on_schedule(&shutdown, |this, stop| {
                    Box::pin(this.pass(Some(stop), false))
                })
                .await;
            })
        };
        let compaction = self.config.compaction.then(|| {
            let (this, shutdown) = (Arc::clone(&self), shutdown.clone());
            tokio::spawn(async move {
                this.on_schedule(&shutdown, |this, stop| Box::pin(this.compaction_pass(stop)))
                    .await;
            })
        });
        tokio::spawn(async move {
            let _ = passes.await;
            if let Some(compaction) = compaction {
                let _ = compaction.await;
            }
        })
    }

    /// Runs `job` every `--maintenance-interval`, and early once
    /// [`Self::wake_after_commits`] catalog commits landed since it last started, until
    /// `shutdown` is cancelled; counts and logs a job that failed.
    async fn on_schedule<F>(&self, shutdown: &CancellationToken, job: F)
    where
        F: for<'a> Fn(
            &'a Self,
            &'a CancellationToken,
        ) -> BoxFuture<'a, Result<PassReport, MaintenanceError>>,
    {
        let mut tick = tokio::time::interval(self.config.maintenance_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wake_after = self.wake_after_commits();
        let mut since = self.catalog.commit_count();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                _ = commits_since(&self.catalog, since, wake_after) => tick.reset(),
            }
            // Counted from the job's start: commits that land while it runs wake the
            // next one (counted from its end, a job longer than `wake_after` commits
            // left a burst's snapshots waiting for the interval).
            since = self.catalog.commit_count();
            if let Err(e) = job(self, shutdown).await {
                self.metrics.record_maintenance_error(e.job());
                // Once a minute during an outage, with the count left out between.
                let error = crate::error::describe(&e);
                if let Some(repeats) = crate::repeats::repeats("maintenance pass", &error) {
                    warn!(%error, repeats, "maintenance pass failed");
                }
            }
        }
    }

    /// Catalog commits (of any table) after which a pass starts before its interval:
    /// a quarter of `--max-snapshots`, at least 16. At a high commit rate a table then
    /// keeps close to `--max-snapshots` snapshots between passes — and every commit's
    /// metadata JSON stays that small — instead of a whole interval's commits more.
    pub fn wake_after_commits(&self) -> u64 {
        (self.config.max_snapshots as u64 / 4).max(16)
    }

    /// One pass over every table (see the module docs). Jobs that fail are logged,
    /// counted and listed in the report; the pass goes on with the rest. It returns once
    /// the files its sweep removes are removed (the background passes of
    /// [`Self::spawn`] leave a sweep's removals running beside the next pass, which
    /// sweeps again only when they are done).
    ///
    /// # Errors
    /// [`MaintenanceError::Catalog`] when the tables cannot be listed.
    ///
    /// # Cancel safety
    /// Dropping the future stops the pass; a commit already queued in the catalog's
    /// committer still lands, and files written for a commit that did not are leftovers
    /// that a later sweep removes. Blocking catalog reads it started finish on their own
    /// (and hold the catalog file open until then).
    pub async fn run_pass(&self) -> Result<PassReport, MaintenanceError> {
        self.pass(None, self.config.compaction).await
    }

    /// [`Self::run_pass`], stopping between tables once `stop` is cancelled; compacts
    /// when `compact` (else [`Self::compaction_pass`] does, in its own task).
    async fn pass(
        &self,
        stop: Option<&CancellationToken>,
        compact: bool,
    ) -> Result<PassReport, MaintenanceError> {
        let started = Instant::now();
        let stopped = || stop.is_some_and(CancellationToken::is_cancelled);
        let idents = self
            .catalog
            .all_tables()
            .await
            .map_err(|e| MaintenanceError::Catalog(Box::new(e)))?;
        let mut state = self.state.lock().await;
        let mut report = PassReport {
            tables: idents.len(),
            ..PassReport::default()
        };
        for ident in &idents {
            if stopped() {
                return Ok(report);
            }
            match self.maintain(ident, &mut state, &mut report).await {
                Ok(Some(table)) if compact => {
                    if let Err(e) = self.compact_loaded(ident, table, &mut report).await {
                        report.errors.push(e);
                    }
                }
                Ok(_) => {}
                Err(e) => report.errors.push(e),
            }
        }
        if stopped() {
            return Ok(report);
        }
        self.forget_dropped(&idents, &mut state);
        match self.catalog.release_leases_of_dropped(&idents).await {
            Ok(0) => {}
            Ok(released) => debug!(released, "maintenance leases of dropped tables handed back"),
            Err(e) => report.errors.push(MaintenanceError::Job {
                table: "*".to_string(),
                job: "lease",
                source: Box::new(e),
            }),
        }
        if compact {
            self.forget_compacted(&idents).await;
        }
        // A pass called on its own waits for a listing it starts; the background
        // passes leave it running and judge it once it ended.
        if let Err(e) = self
            .sweep(&idents, &mut state, &mut report, stop.is_none())
            .await
        {
            report.errors.push(e);
        }
        // A pass called on its own ends with its removals done (they are in the
        // report); the background passes leave them running.
        if stop.is_none()
            && let Err(e) = self.collect_removed(&mut state, &mut report).await
        {
            report.errors.push(e);
        }
        report.waiting = state.sweeper.waiting();
        // Every table's retained snapshots were looked at this pass (`maintain`): what
        // the parsed-manifest cache holds beyond them belongs to expired snapshots.
        state.sweeper.manifests().forget_unused();
        self.metrics.record_maintenance_pass(
            started.elapsed().as_secs_f64(),
            report.maintained,
            report.held_elsewhere,
        );
        self.record_errors(&report);
        Ok(report)
    }

    /// Counts and logs the jobs of `report` that failed.
    fn record_errors(&self, report: &PassReport) {
        for e in &report.errors {
            self.metrics.record_maintenance_error(e.job());
            let error = crate::error::describe(e);
            if let Some(repeats) = crate::repeats::repeats("maintenance job", &error) {
                warn!(%error, repeats, "maintenance job failed");
            }
        }
    }
}

/// The error of `job` on `ident`'s table, from iceberg's or the catalog's `error`.
fn job_failed(
    ident: &TableIdent,
    job: &'static str,
) -> impl FnOnce(iceberg::Error) -> MaintenanceError {
    let table = ident.to_string();
    move |e| MaintenanceError::Job {
        table,
        job,
        source: Box::new(e),
    }
}

/// Returns once `n` commits of `catalog` landed after its count `start`
/// ([`RedbCatalog::commit_count`]: this catalog's, not the process-wide count, so another
/// catalog in the same process never wakes this one's passes), looking every 50 ms.
async fn commits_since(catalog: &RedbCatalog, start: u64, n: u64) {
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if catalog.commit_count().saturating_sub(start) >= n {
            return;
        }
    }
}

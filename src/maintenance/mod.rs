//! Online table maintenance: snapshot expiry, manifest merging, small-file compaction and
//! file cleanup, run in the background by the server for every table (README, "Table
//! maintenance").
//!
//! A [`Maintainer`] runs a *pass* every `--maintenance-interval`. For each table, under
//! this process's commit turn on the table ([`RedbCatalog::commit_turns`], so in-process
//! appends wait for it instead of racing), it
//! 1. expires snapshots ([`expire`]: Iceberg's `history.expire.*` rules through iceberg's
//!    `ExpireSnapshotsAction`, plus skade's count bound);
//! 2. merges the current snapshot's manifests when they reach
//!    `commit.manifest.min-count-to-merge` ([`merge`]);
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
mod project;
mod tally;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::catalog::Stage;
use crate::catalog::gc::GcError;
use crate::catalog::{CommitTarget, CommitTurns, Outcome, Ownership, RedbCatalog};
use crate::config::MaintenanceConfig;
use crate::metrics::{LANE_MAINTENANCE, Metrics};
use crate::snapshot::expire::Expire;
use crate::snapshot::replace::Replace;
use crate::snapshot::rewrite_manifests::RewriteManifests;
use crate::storage::file_store::FileStore;
pub use cleanup::WaitingFiles;
use cleanup::{DELETE_AFTER_COMMIT_PROPERTY, Limits, Removed, Sweeper, SweptTable};

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
#[derive(Debug, Default)]
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

#[derive(Debug, Default)]
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

impl Maintainer {
    /// A maintainer of every table of `catalog`, recording on `metrics`. Passes run
    /// only when called ([`Self::run_pass`]) or spawned ([`Self::spawn`]).
    pub fn new(catalog: Arc<RedbCatalog>, config: MaintenanceConfig, metrics: Metrics) -> Self {
        Self {
            catalog,
            config,
            metrics,
            target_file_bytes: 128 << 20,
            budget: None,
            state: tokio::sync::Mutex::default(),
            compaction: tokio::sync::Mutex::default(),
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
    /// within the process's memory bound (README, "Memory and backpressure").
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
    /// and cleanup never wait for rows being rewritten: in the soak run compaction was
    /// two thirds of a pass, and a pass that took longer expired snapshots less often,
    /// which made every commit's metadata JSON bigger (`docs/performance.md`, "Soak").
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
                warn!(error = %e, "maintenance pass failed");
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
            warn!(error = %e, "maintenance job failed");
        }
    }

    /// Expiry and merge of one table, under its commit turn; updates its gauges.
    /// Returns the table as it stands after, when this instance maintains it (`None`:
    /// another instance does, or the table was dropped).
    async fn maintain(
        &self,
        ident: &TableIdent,
        state: &mut State,
        report: &mut PassReport,
    ) -> Result<Option<Table>, MaintenanceError> {
        let name = ident.to_string();
        let failed = |job| job_failed(ident, job);
        let Some(table) = self.load_live(ident).await? else {
            return Ok(None);
        };
        if self.moves_its_files(&table) {
            return Ok(None);
        }
        // What the table references now (every snapshot's manifest list and manifests,
        // the current one's among them) is read and parsed before the commit turn is
        // taken, so the turn waits only for what the appends of the next moment add.
        // (Also when another instance maintains the table: this one may sweep.)
        state
            .sweeper
            .observe(&table)
            .await
            .map_err(failed("cleanup"))?;
        // On a shared catalog one instance at a time maintains a table.
        if !self
            .catalog
            .maintains(ident)
            .await
            .map_err(failed("lease"))?
        {
            report.held_elsewhere += 1;
            return Ok(None);
        }
        report.maintained += 1;
        let started = Instant::now();
        // The files this table's jobs write before their commit (merged manifests,
        // compacted data files) are held like a put's, for every instance's cleanup.
        let _pin = self.catalog.pin_writes();
        let turns = self.catalog.commit_turns([&table]).await;
        let turn_taken = started.elapsed();
        let uuid = table.metadata().uuid();
        let table = self
            .catalog
            .load_table(ident)
            .await
            .map_err(failed("load"))?;
        if table.metadata().uuid() != uuid {
            return Ok(None); // dropped and created again since: the next pass takes it
        }
        state
            .sweeper
            .observe(&table)
            .await
            .map_err(failed("cleanup"))?;
        let table = self
            .expire(&turns, table, report)
            .await
            .map_err(failed("expire"))?;
        let (table, manifests) = self
            .merge(&turns, table, state, report)
            .await
            .map_err(failed("merge"))?;
        drop(turns);
        self.set_gauges(&name, &table, manifests);
        debug!(
            table = %name,
            wait_turn_ms = turn_taken.as_millis() as u64,
            in_turn_ms = (started.elapsed() - turn_taken).as_millis() as u64,
            "table maintained"
        );
        Ok(Some(table))
    }

    /// Expires `table`'s snapshots when [`expire`] says so; returns the table as it
    /// stands after. Runs under the table's commit turn (`turns`); the plan is made again
    /// on the table as it stands on every attempt of the commit driver.
    async fn expire(
        &self,
        turns: &CommitTurns,
        table: Table,
        report: &mut PassReport,
    ) -> iceberg::Result<Table> {
        let mut stage = Expire {
            default_max_snapshots: self.config.max_snapshots,
        };
        let outcome = self.commit(turns, &table, &mut stage).await?;
        match outcome {
            Outcome::Committed(mut tables, snapshots) => {
                report.snapshots_expired += snapshots;
                self.metrics.record_snapshots_expired(snapshots as u64);
                info!(table = %table.identifier(), snapshots, "snapshots expired");
                Ok(tables.pop().unwrap_or(table))
            }
            Outcome::Unchanged { after_conflict } => {
                report.conflicts += usize::from(after_conflict);
                Ok(table)
            }
        }
    }

    /// Merges `table`'s manifests when [`merge`] says so; returns the table as it stands
    /// after and the manifests its current snapshot lists. A table whose current
    /// snapshot was looked at before (`state`) is not read again. Runs under the table's
    /// commit turn (`turns`); the merge is planned again on the table as it stands on
    /// every attempt of the commit driver.
    async fn merge(
        &self,
        turns: &CommitTurns,
        mut table: Table,
        state: &mut State,
        report: &mut PassReport,
    ) -> iceberg::Result<(Table, usize)> {
        let name = table.identifier().to_string();
        let Some(current) = table.metadata().current_snapshot_id() else {
            return Ok((table, 0));
        };
        if let Some(&(seen, count)) = state.manifests.get(&name)
            && seen == current
        {
            return Ok((table, count));
        }
        let mut count = state.sweeper.manifests().current(&table).await?.len();
        let mut stage = RewriteManifests::new(state.sweeper.manifests());
        let outcome = self.commit(turns, &table, &mut stage).await?;
        match outcome {
            Outcome::Committed(mut tables, (replaced, written, after, bytes)) => {
                if let Some(committed) = tables.pop() {
                    table = committed;
                }
                count = after;
                report.manifests_replaced += replaced;
                report.manifests_written += written;
                self.metrics.record_manifests_merged(replaced as u64, bytes);
                info!(table = %name, replaced, written, "manifests merged");
            }
            Outcome::Unchanged { after_conflict } => {
                report.conflicts += usize::from(after_conflict);
            }
        }
        if let Some(current) = table.metadata().current_snapshot_id() {
            state.manifests.insert(name, (current, count));
        }
        Ok((table, count))
    }

    /// One compaction pass over every table ([`Self::compact_table`]), stopping between
    /// tables once `stop` is cancelled: what [`Self::spawn`] runs beside the passes.
    ///
    /// # Errors
    /// [`MaintenanceError::Catalog`] when the tables cannot be listed.
    async fn compaction_pass(
        &self,
        stop: &CancellationToken,
    ) -> Result<PassReport, MaintenanceError> {
        let idents = self
            .catalog
            .all_tables()
            .await
            .map_err(|e| MaintenanceError::Catalog(Box::new(e)))?;
        let mut report = PassReport {
            tables: idents.len(),
            ..PassReport::default()
        };
        for ident in &idents {
            if stop.is_cancelled() {
                return Ok(report);
            }
            if let Err(e) = self.compact_table(ident, &mut report).await {
                report.errors.push(e);
            }
        }
        self.forget_compacted(&idents).await;
        self.record_errors(&report);
        Ok(report)
    }

    /// Compaction of one table as it stands now, when this instance maintains it (on a
    /// shared catalog, holds its maintenance lease).
    async fn compact_table(
        &self,
        ident: &TableIdent,
        report: &mut PassReport,
    ) -> Result<(), MaintenanceError> {
        let Some(table) = self.load_live(ident).await? else {
            return Ok(());
        };
        if self.moves_its_files(&table) {
            return Ok(());
        }
        if !self
            .catalog
            .maintains(ident)
            .await
            .map_err(|e| job_failed(ident, "lease")(e))?
        {
            return Ok(());
        }
        self.compact_loaded(ident, table, report).await
    }

    /// One compaction job on `table`, which this instance maintains, holding a write pin
    /// for the files the job writes before its commit (for every instance's cleanup).
    async fn compact_loaded(
        &self,
        ident: &TableIdent,
        table: Table,
        report: &mut PassReport,
    ) -> Result<(), MaintenanceError> {
        let _pin = self.catalog.pin_writes();
        let started = Instant::now();
        let mut state = self.compaction.lock().await;
        self.compact(ident, table, &mut state, report)
            .await
            .map_err(|e| job_failed(ident, "compact")(e))?;
        debug!(table = %ident, compact_ms = started.elapsed().as_millis() as u64, "table compacted");
        Ok(())
    }

    /// `ident`'s table, or `None` when it was dropped since the tables were listed.
    async fn load_live(&self, ident: &TableIdent) -> Result<Option<Table>, MaintenanceError> {
        match self.catalog.load_table(ident).await {
            Ok(table) => Ok(Some(table)),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(None),
            Err(e) => Err(job_failed(ident, "load")(e)),
        }
    }

    /// Forgets what compaction kept of tables no longer in the catalog, and the parsed
    /// manifests it read that the tables' current snapshots no longer list.
    async fn forget_compacted(&self, idents: &[TableIdent]) {
        let live: HashSet<String> = idents.iter().map(ToString::to_string).collect();
        let mut state = self.compaction.lock().await;
        state.compacted.retain(|name, _| live.contains(name));
        state.held_by_deletes.retain(|name| live.contains(name));
        self.metrics
            .set_maintenance_skipped("delete_files", state.held_by_deletes.len());
        state.manifests.forget_unused();
    }

    /// One compaction job on `table` (see [`compact`]): rows rewritten outside the
    /// table's commit turn, the inputs checked and the commit made under it.
    async fn compact(
        &self,
        ident: &TableIdent,
        table: Table,
        state: &mut CompactionState,
        report: &mut PassReport,
    ) -> iceberg::Result<()> {
        let name = ident.to_string();
        let Some(current) = table.metadata().current_snapshot_id() else {
            return Ok(());
        };
        if state.compacted.get(&name) == Some(&current) {
            return Ok(());
        }
        let cache = &mut state.manifests;
        let manifests = cache.current(&table).await?;
        let rewriting = compact::rewrite(
            &table,
            &manifests,
            crate::write::target_file_size(&table, self.target_file_bytes),
            cache,
            self.budget.as_ref(),
        )
        .await?;
        self.note_held_by_deletes(&name, rewriting.held_by_deletes, state);
        let Some(rewrite) = rewriting.rewrite else {
            state.compacted.insert(name, current);
            return Ok(());
        };
        let turns = self.catalog.commit_turns([&table]).await;
        let mut stage = Replace::new(&rewrite, &mut state.manifests);
        let outcome = self.commit(&turns, &table, &mut stage).await;
        match outcome {
            Ok(Outcome::Committed(_, (files, bytes))) => {
                report.files_compacted += files;
                self.metrics.record_rewritten("data", files as u64, bytes);
                info!(table = %name, files, bytes, "small files compacted");
            }
            // The inputs were replaced (or the table dropped) since the rewrite: give way.
            Ok(Outcome::Unchanged { .. }) => {
                debug!(table = %name, "compaction inputs changed; attempt dropped");
                report.conflicts += 1;
            }
            Err(e) if e.kind() == ErrorKind::TableNotFound => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Whether `table` sets a property that moves its files elsewhere than skade writes
    /// them ([`crate::catalog::check_file_paths`]): then no maintenance job runs on it (each
    /// would write files where the table's owner did not ask, and the commit is refused).
    /// Logged once per table, counted in [`crate::metrics::MAINTENANCE_SKIPPED_TABLES`]
    /// (`write_path_property`).
    fn moves_its_files(&self, table: &Table) -> bool {
        let name = table.identifier().to_string();
        let refused = crate::catalog::check_file_paths(&name, table.metadata().properties());
        let mut moved = self
            .moved_files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = match &refused {
            Ok(()) => moved.remove(&name),
            Err(e) => {
                let joined = moved.insert(name.clone());
                if joined {
                    warn!(table = %name, reason = %e, "maintenance leaves this table alone");
                }
                joined
            }
        };
        if changed {
            self.metrics
                .set_maintenance_skipped("write_path_property", moved.len());
        }
        refused.is_err()
    }

    /// Records that compaction left `held` data files of table `name` alone for live
    /// delete files: logged once when the table joins the set, counted in
    /// [`crate::metrics::MAINTENANCE_SKIPPED_TABLES`] (`delete_files`).
    fn note_held_by_deletes(&self, name: &str, held: usize, state: &mut CompactionState) {
        if held == 0 {
            state.held_by_deletes.remove(name);
        } else if state.held_by_deletes.insert(name.to_string()) {
            warn!(
                table = %name,
                files = held,
                "compaction leaves data files that live delete files may apply to: rewritten, their deleted rows would come back"
            );
        }
        self.metrics
            .set_maintenance_skipped("delete_files", state.held_by_deletes.len());
    }

    /// Runs one maintenance commit of `table` through the catalog's commit driver, under
    /// the turn the caller holds (the driver's policy: `stage` plans again on the table
    /// as it stands after a conflict, and gives way when the plan is empty).
    ///
    /// # Errors
    /// As [`RedbCatalog::commit_in_turn`].
    async fn commit<S: Stage<Error = iceberg::Error>>(
        &self,
        turns: &CommitTurns,
        table: &Table,
        stage: &mut S,
    ) -> iceberg::Result<Outcome<S::Out>> {
        let started = Instant::now();
        let targets = [CommitTarget::metadata(table)];
        let outcome = self.catalog.commit_in_turn(turns, &targets, stage).await?;
        if let Outcome::Committed(..) = outcome {
            self.metrics
                .record_commit_seconds(LANE_MAINTENANCE, started.elapsed().as_secs_f64());
        }
        Ok(outcome)
    }

    fn set_gauges(&self, name: &str, table: &Table, manifests: usize) {
        let metadata = table.metadata();
        let data_files = metadata
            .current_snapshot()
            .and_then(|s| s.summary().additional_properties.get("total-data-files"))
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0);
        self.metrics
            .set_table_shape(name, metadata.snapshots().len(), manifests, data_files);
    }

    /// Forgets the state and gauge series of tables no longer in the catalog.
    fn forget_dropped(&self, idents: &[TableIdent], state: &mut State) {
        let live: HashSet<String> = idents.iter().map(ToString::to_string).collect();
        let gone: Vec<String> = state
            .manifests
            .keys()
            .filter(|name| !live.contains(*name))
            .cloned()
            .collect();
        for name in gone {
            state.manifests.remove(&name);
            self.metrics.forget_table(&name);
        }
        let mut moved = self
            .moved_files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        moved.retain(|name| live.contains(name));
        self.metrics
            .set_maintenance_skipped("write_path_property", moved.len());
    }

    /// Cleanup over every table, when a table changed since the last sweep or files wait
    /// for their grace period (at most every tenth of the shortest grace period), or
    /// [`SWEEP_AT_LEAST_EVERY`] passed. Waits for the directory listing it starts when
    /// `wait_for_listing` (a listing it starts or one running; else a later sweep judges
    /// it: `Sweeper::sweep`).
    async fn sweep(
        &self,
        idents: &[TableIdent],
        state: &mut State,
        report: &mut PassReport,
        wait_for_listing: bool,
    ) -> Result<(), MaintenanceError> {
        let lease_failed = |e: iceberg::Error| MaintenanceError::Job {
            table: "*".to_string(),
            job: "lease",
            source: Box::new(e),
        };
        // The last sweep's removals run beside the passes; a new sweep waits for them.
        if state.sweeper.removing() {
            return Ok(());
        }
        self.collect_removed(state, report).await?;
        // On a shared catalog one instance at a time sweeps.
        if !self.catalog.sweeps().await.map_err(lease_failed)? {
            return Ok(());
        }
        let mut loaded = Vec::with_capacity(idents.len());
        for ident in idents {
            match self.catalog.load_table(ident).await {
                Ok(table) => loaded.push(table),
                Err(e) if e.kind() == ErrorKind::TableNotFound => continue,
                Err(e) => {
                    return Err(MaintenanceError::Job {
                        table: ident.to_string(),
                        job: "cleanup",
                        source: Box::new(e),
                    });
                }
            }
        }
        let locations: HashMap<String, String> = loaded
            .iter()
            .filter_map(|table| {
                let location = table.metadata_location()?;
                Some((table.identifier().to_string(), location.to_string()))
            })
            .collect();
        // After a change, or while files wait or a listing runs, a sweep runs at most
        // every tenth of the shortest grace period (removals, and the judging of a
        // listing that ended, are then at most that late), and at least every
        // SWEEP_AT_LEAST_EVERY for leftovers that appear without a commit.
        let limits = Limits {
            grace: self.config.cleanup_grace,
            metadata_grace: self.config.metadata_cleanup_grace,
            max_waiting_bytes: self.config.cleanup_max_waiting,
        };
        let since = state.last_sweep.map(|at| at.elapsed());
        let changed = state.waiting || locations != state.swept_at;
        let due = match since {
            None => true,
            Some(since) => {
                since >= SWEEP_AT_LEAST_EVERY || (changed && since >= limits.shortest_grace() / 10)
            }
        };
        if !due {
            return Ok(());
        }
        // Only a location a table owns is swept (`catalog::locations`).
        let ownership =
            self.catalog
                .ownership(&loaded)
                .await
                .map_err(|e| MaintenanceError::Job {
                    table: "*".to_string(),
                    job: "cleanup",
                    source: Box::new(e),
                })?;
        self.note_unswept(&loaded, &ownership, state);
        let tables: Vec<SweptTable> = loaded
            .into_iter()
            .zip(ownership)
            .map(|(table, ownership)| {
                let metadata = table.metadata();
                // A table whose files may lie elsewhere is not swept either.
                let sweep = ownership == Ownership::Owned
                    && crate::catalog::check_file_paths("", metadata.properties()).is_ok()
                    && metadata
                        .table_properties()
                        .map(|p| p.gc_enabled)
                        .unwrap_or(false);
                let delete_metadata = metadata
                    .properties()
                    .get(DELETE_AFTER_COMMIT_PROPERTY)
                    .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
                SweptTable {
                    table,
                    sweep,
                    delete_metadata,
                }
            })
            .collect();
        let oldest_pin = self
            .catalog
            .oldest_write_pin_anywhere()
            .await
            .map_err(lease_failed)?;
        let started = Instant::now();
        state
            .sweeper
            .sweep(
                &FileStore::of(self.catalog.warehouse()),
                &tables,
                limits,
                oldest_pin,
                wait_for_listing,
            )
            .await?;
        state.swept_at = locations;
        state.last_sweep = Some(Instant::now());
        state.waiting = state.sweeper.kept() > 0 || state.sweeper.listing();
        let waiting = state.sweeper.waiting();
        self.metrics
            .set_cleanup_waiting(waiting.files, waiting.bytes);
        let (kept, referenced, (lists, names, manifests)) = state.sweeper.kept_sizes();
        debug!(
            waiting = waiting.files,
            sweep_ms = started.elapsed().as_millis() as u64,
            kept,
            referenced,
            lists,
            names,
            manifests,
            written_paths = crate::catalog::manifest_cache::written_paths(),
            "swept"
        );
        Ok(())
    }

    /// Logs each table cleanup does not sweep for its location's sake once (when it
    /// starts being left out, or its reason changes), and sets
    /// [`crate::metrics::MAINTENANCE_SKIPPED_TABLES`] by reason.
    fn note_unswept(&self, tables: &[Table], ownership: &[Ownership], state: &mut State) {
        let mut unswept = HashMap::new();
        for (table, ownership) in tables.iter().zip(ownership) {
            if *ownership == Ownership::Owned {
                continue;
            }
            let name = table.identifier().to_string();
            if state.unswept.get(&name) != Some(ownership) {
                match ownership {
                    Ownership::Shared { with } => info!(
                        table = %name,
                        location = table.metadata().location(),
                        with = %with,
                        "cleanup leaves this table's location alone: another table uses it"
                    ),
                    _ => info!(
                        table = %name,
                        location = table.metadata().location(),
                        "cleanup leaves this table's location alone: skade did not create the table there (registered, or created by another engine)"
                    ),
                }
            }
            unswept.insert(name, ownership.clone());
        }
        for reason in ["location_not_owned", "location_shared"] {
            let tables = unswept
                .values()
                .filter(|o| o.skipped_reason() == Some(reason))
                .count();
            self.metrics.set_maintenance_skipped(reason, tables);
        }
        state.unswept = unswept;
    }

    /// Waits for the last sweep's removals (when there are any not yet collected),
    /// counts the files they removed and adds them to `report`.
    ///
    /// # Errors
    /// [`MaintenanceError::Cleanup`] when the removals failed (their files wait again).
    async fn collect_removed(
        &self,
        state: &mut State,
        report: &mut PassReport,
    ) -> Result<(), MaintenanceError> {
        let removed = state.sweeper.finish_removal().await?;
        for file in &removed {
            self.metrics
                .record_file_deleted(file.kind.as_str(), file.bytes);
            if file.early {
                self.metrics
                    .record_file_deleted_early(file.kind.as_str(), file.bytes);
            }
        }
        // Logged at most once a minute each, with the counts since (`tally`).
        let now = Instant::now();
        let early = removed.iter().filter(|f| f.early);
        let (files, bytes) = (early.clone().count() as u64, early.map(|f| f.bytes).sum());
        if let Some((files, bytes)) = state.early_log.add(files, bytes, now) {
            warn!(
                files,
                bytes,
                max_waiting_bytes = self.config.cleanup_max_waiting,
                "unreferenced files removed before their grace period ended: the files waiting out a grace passed --cleanup-max-waiting"
            );
        }
        let bytes = removed.iter().map(|f| f.bytes).sum();
        if let Some((files, bytes)) = state.removed_log.add(removed.len() as u64, bytes, now) {
            info!(files, bytes, "unreferenced files removed");
        }
        report.removed.extend(removed);
        Ok(())
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

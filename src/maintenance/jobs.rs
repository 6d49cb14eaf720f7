//! The table jobs of a maintenance pass: expiry and manifest merging under the table's
//! commit turn, compaction (rows rewritten outside it, committed under it), and what
//! the jobs count and log. Each change is a snapshot producer of [`crate::snapshot`]
//! committed through the catalog's commit driver.

use std::collections::HashSet;
use std::time::Instant;

use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{
    CompactionState, Maintainer, MaintenanceError, PassReport, State, compact, job_failed,
};
use crate::catalog::{CommitTarget, CommitTurns, Outcome, Stage};
use crate::metrics::LANE_MAINTENANCE;
use crate::snapshot::expire::Expire;
use crate::snapshot::replace::Replace;
use crate::snapshot::rewrite_manifests::RewriteManifests;

impl Maintainer {
    /// Expiry and merge of one table, under its commit turn; updates its gauges.
    /// Returns the table as it stands after, when this instance maintains it (`None`:
    /// another instance does, or the table was dropped).
    pub(super) async fn maintain(
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

    /// Expires `table`'s snapshots when [`crate::snapshot::expire::plan`] says so; returns the table as it
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

    /// Merges `table`'s manifests when [`crate::snapshot::manifests::merge_manifests`] says so; returns the table as it stands
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
    pub(super) async fn compaction_pass(
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
    pub(super) async fn compact_loaded(
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
    pub(super) async fn forget_compacted(&self, idents: &[TableIdent]) {
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
    /// As [`crate::catalog::RedbCatalog::commit_in_turn`].
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
    pub(super) fn forget_dropped(&self, idents: &[TableIdent], state: &mut State) {
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
}

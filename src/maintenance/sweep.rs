//! Cleanup's part of a maintenance pass: when to sweep, which tables' locations may be
//! swept ([`crate::catalog::Ownership`]), and counting and logging what the sweeper
//! removed ([`super::cleanup`] holds the rules).

use std::collections::HashMap;
use std::time::Instant;

use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent};
use tracing::{debug, info, warn};

use super::cleanup::{DELETE_AFTER_COMMIT_PROPERTY, Limits, SweptTable};
use super::{Maintainer, MaintenanceError, PassReport, SWEEP_AT_LEAST_EVERY, State};
use crate::catalog::Ownership;
use crate::storage::file_store::FileStore;

impl Maintainer {
    /// Cleanup over every table, when a table changed since the last sweep or files wait
    /// for their grace period (at most every tenth of the shortest grace period), or
    /// [`SWEEP_AT_LEAST_EVERY`] passed. Waits for the directory listing it starts when
    /// `wait_for_listing` (a listing it starts or one running; else a later sweep judges
    /// it: `Sweeper::sweep`).
    pub(super) async fn sweep(
        &self,
        idents: &[TableIdent],
        state: &mut State,
        report: &mut PassReport,
        wait_for_listing: bool,
    ) -> Result<(), MaintenanceError> {
        // The last sweep's removals run beside the passes; a new sweep waits for them.
        if state.sweeper.removing() {
            return Ok(());
        }
        self.collect_removed(state, report).await?;
        // On a shared catalog one instance at a time sweeps.
        if !self.catalog.sweeps().await.map_err(lease_failed)? {
            return Ok(());
        }
        let loaded = self.load_tables(idents).await?;
        let locations: HashMap<String, String> = loaded
            .iter()
            .filter_map(|table| {
                let location = table.metadata_location()?;
                Some((table.identifier().to_string(), location.to_string()))
            })
            .collect();
        let limits = self.limits();
        if !sweep_due(state, &locations, limits) {
            return Ok(());
        }
        let tables = self.swept_tables(loaded, state).await?;
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
        self.record_swept(state, started);
        Ok(())
    }

    /// The cleanup limits of the configuration.
    fn limits(&self) -> Limits {
        Limits {
            grace: self.config.cleanup_grace,
            metadata_grace: self.config.metadata_cleanup_grace,
            max_waiting_bytes: self.config.cleanup_max_waiting,
        }
    }

    /// The tables of `idents` that are still in the catalog, loaded.
    ///
    /// # Errors
    /// [`MaintenanceError::Job`] (`cleanup`) for a table that cannot be loaded.
    async fn load_tables(&self, idents: &[TableIdent]) -> Result<Vec<Table>, MaintenanceError> {
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
        Ok(loaded)
    }

    /// Each of `loaded` with whether the sweep may remove files under its location: only
    /// a location the table owns (`catalog::locations`), whose files lie where skade
    /// writes them, with `gc.enabled`; the tables left out are noted ([`Self::note_unswept`]).
    ///
    /// # Errors
    /// [`MaintenanceError::Job`] (`cleanup`) when the catalog's store cannot be read.
    async fn swept_tables(
        &self,
        loaded: Vec<Table>,
        state: &mut State,
    ) -> Result<Vec<SweptTable>, MaintenanceError> {
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
        Ok(loaded
            .into_iter()
            .zip(ownership)
            .map(|(table, ownership)| {
                let metadata = table.metadata();
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
            .collect())
    }

    /// Sets the waiting gauges after a sweep that started at `started`, and logs it.
    fn record_swept(&self, state: &State, started: Instant) {
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
            written_paths = self.catalog.written_manifests().written_paths(),
            "swept"
        );
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
    pub(super) async fn collect_removed(
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

/// The error of a lease or pin read of the catalog's store.
fn lease_failed(e: iceberg::Error) -> MaintenanceError {
    MaintenanceError::Job {
        table: "*".to_string(),
        job: "lease",
        source: Box::new(e),
    }
}

/// Whether a sweep is due: after a change (`locations` differ from the last sweep's) or
/// while files wait or a listing runs, at most every tenth of the shortest grace period
/// (removals, and the judging of a listing that ended, are then at most that late); and
/// at least every [`SWEEP_AT_LEAST_EVERY`], for leftovers that appear without a commit.
fn sweep_due(state: &State, locations: &HashMap<String, String>, limits: Limits) -> bool {
    let changed = state.waiting || *locations != state.swept_at;
    match state.last_sweep.map(|at| at.elapsed()) {
        None => true,
        Some(since) => {
            since >= SWEEP_AT_LEAST_EVERY || (changed && since >= limits.shortest_grace() / 10)
        }
    }
}

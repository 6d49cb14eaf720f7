//! What a maintainer, cleanup and readiness ask of the catalog that differs when several
//! instances share it (a PostgreSQL catalog, [`super::postgres::cluster`]): who maintains
//! a table, who sweeps, and the oldest write pin of any instance. On the embedded redb
//! catalog this process is the only one: every lease is held and the oldest pin is its
//! own.

use std::time::SystemTime;

use iceberg::{Result, TableIdent};

use super::RedbCatalog;
use super::postgres::cluster::Lease;

/// The right to run maintenance jobs on one table (or to sweep), held until dropped
/// ([`RedbCatalog::maintenance_lease`]).
#[derive(Debug)]
#[must_use = "dropping the lease lets another instance take it at once"]
pub struct MaintenanceLease {
    _held: Option<Lease>,
}

impl RedbCatalog {
    /// Takes the lease of maintaining `ident` — `None` while another instance holds it
    /// (it maintains the table; this one leaves it alone this pass). Always granted on
    /// the redb catalog.
    ///
    /// # Errors
    /// The catalog database's error (`Unavailable` when unreachable).
    pub async fn maintenance_lease(&self, ident: &TableIdent) -> Result<Option<MaintenanceLease>> {
        let Some(pg) = self.database() else {
            return Ok(Some(MaintenanceLease { _held: None }));
        };
        let mut parts = vec!["maintain", pg.catalog_name()];
        parts.extend(ident.namespace().as_ref().iter().map(String::as_str));
        parts.push(ident.name());
        Ok(pg
            .try_lease(&parts)
            .await?
            .map(|lease| MaintenanceLease { _held: Some(lease) }))
    }

    /// Takes the lease of sweeping the warehouse for unreferenced files (one instance
    /// at a time sweeps) — `None` while another instance holds it. Always granted on the
    /// redb catalog.
    ///
    /// # Errors
    /// The catalog database's error.
    pub async fn sweep_lease(&self) -> Result<Option<MaintenanceLease>> {
        let Some(pg) = self.database() else {
            return Ok(Some(MaintenanceLease { _held: None }));
        };
        Ok(pg
            .try_lease(&["sweep", pg.catalog_name()])
            .await?
            .map(|lease| MaintenanceLease { _held: Some(lease) }))
    }

    /// The oldest write pin any writer that may still commit holds: this process's
    /// ([`Self::oldest_write_pin`]) on the redb catalog; on a shared one, the oldest of
    /// every live instance's, and never later than now less
    /// [`super::postgres::cluster::PIN_PUBLISH_BOUND`] (a pin just taken elsewhere may
    /// not be published yet).
    ///
    /// # Errors
    /// The catalog database's error: cleanup must then remove nothing.
    pub async fn oldest_write_pin_anywhere(&self) -> Result<Option<SystemTime>> {
        match self.database() {
            None => Ok(self.oldest_write_pin()),
            Some(pg) => pg.cluster_oldest_pin().await.map(Some),
        }
    }
}

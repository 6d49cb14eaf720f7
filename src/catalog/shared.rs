//! What a maintainer, cleanup and readiness ask of the catalog that differs when several
//! instances share it (a PostgreSQL catalog, [`super::postgres::cluster`]): who maintains
//! a table, who sweeps, and the oldest write pin of any instance. On the embedded redb
//! catalog this process is the only one: every lease is held and the oldest pin is its
//! own.

use std::time::SystemTime;

use iceberg::{Result, TableIdent};

use super::RedbCatalog;

impl RedbCatalog {
    /// Whether this instance maintains `ident`: on a shared catalog, whether it holds
    /// the table's maintenance lease (taken now when no instance holds it; kept from
    /// pass to pass, [`super::postgres::cluster::Leases`]); always on the redb catalog.
    ///
    /// # Errors
    /// The catalog database's error (`Unavailable` when unreachable).
    pub async fn maintains(&self, ident: &TableIdent) -> Result<bool> {
        let Some(pg) = self.database() else {
            return Ok(true);
        };
        let mut parts = vec!["maintain", pg.catalog_name()];
        parts.extend(ident.namespace().as_ref().iter().map(String::as_str));
        parts.push(ident.name());
        pg.hold_lease(&parts).await
    }

    /// Whether this instance sweeps the warehouse for unreferenced files (one instance
    /// at a time does, holding the sweep lease the same way); always on the redb catalog.
    ///
    /// # Errors
    /// The catalog database's error.
    pub async fn sweeps(&self) -> Result<bool> {
        match self.database() {
            None => Ok(true),
            Some(pg) => pg.hold_lease(&["sweep", pg.catalog_name()]).await,
        }
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

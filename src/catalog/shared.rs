//! What a maintainer, cleanup and readiness ask of the catalog that differs when several
//! instances share its store (a PostgreSQL catalog, [`super::store::postgres::cluster`]):
//! who maintains a table, who sweeps, and the oldest write pin of any instance. A store
//! of one instance (redb) answers that this process holds every lease and its own pin is
//! the oldest.

use std::time::SystemTime;

use iceberg::{Result, TableIdent};

use super::RedbCatalog;

impl RedbCatalog {
    /// Whether this instance maintains `ident`: on a shared catalog, whether it holds
    /// the table's maintenance lease (taken now when no instance holds it; kept from
    /// pass to pass, [`super::store::postgres::cluster::Leases`]); always on redb.
    ///
    /// # Errors
    /// The store's error (`Unavailable` when unreachable).
    pub async fn maintains(&self, ident: &TableIdent) -> Result<bool> {
        self.store.maintains(ident).await
    }

    /// Hands back the maintenance leases this instance holds on tables that are gone:
    /// not in `listed` (the tables of the catalog as a pass listed them) and not in the
    /// catalog now. Without it a dropped table's lease would stay with this instance
    /// until it stopped, and a table created again under the name could be maintained
    /// only here. Returns how many were handed back; nothing on redb.
    ///
    /// # Errors
    /// The store's error: the leases are then kept until the next call.
    pub async fn release_leases_of_dropped(&self, listed: &[TableIdent]) -> Result<usize> {
        let mut released = 0;
        for ident in self.store.held_leases().await? {
            if listed.contains(&ident) {
                continue;
            }
            // Listed before it was created: it is there now, and its lease stays.
            if iceberg::Catalog::table_exists(self, &ident).await? {
                continue;
            }
            self.store.release_lease(&ident).await?;
            released += 1;
        }
        Ok(released)
    }

    /// Whether this instance sweeps the warehouse for unreferenced files (one instance
    /// at a time does, holding the sweep lease the same way); always on redb.
    ///
    /// # Errors
    /// The store's error.
    pub async fn sweeps(&self) -> Result<bool> {
        self.store.sweeps().await
    }

    /// The oldest write pin any writer that may still commit holds: this process's
    /// ([`Self::oldest_write_pin`]) on redb; on a shared catalog, the oldest of every
    /// live instance's, and never later than now less
    /// [`super::store::postgres::cluster::PIN_PUBLISH_BOUND`] (a pin just taken elsewhere
    /// may not be published yet).
    ///
    /// # Errors
    /// The store's error: cleanup must then remove nothing.
    pub async fn oldest_write_pin_anywhere(&self) -> Result<Option<SystemTime>> {
        self.store.oldest_write_pin(self.oldest_write_pin()).await
    }
}

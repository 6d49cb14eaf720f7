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
        pg.hold_lease(&lease_of(pg.catalog_name(), ident)).await
    }

    /// Hands back the maintenance leases this instance holds on tables that are gone:
    /// not in `listed` (the tables of the catalog as a pass listed them) and not in the
    /// catalog now. Without it a dropped table's lease would stay with this instance
    /// until it stopped, and a table created again under the name could be maintained
    /// only here. Returns how many were handed back; nothing on the redb catalog.
    ///
    /// # Errors
    /// The catalog database's error: the leases are then kept until the next call.
    pub async fn release_leases_of_dropped(&self, listed: &[TableIdent]) -> Result<usize> {
        let Some(pg) = self.database() else {
            return Ok(0);
        };
        let catalog = pg.catalog_name();
        let listed: std::collections::HashSet<Vec<&str>> = listed
            .iter()
            .map(|ident| lease_of(catalog, ident))
            .collect();
        let mut released = 0;
        for parts in pg.held_leases().await {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            // ["maintain", catalog, level…, name]
            let [kind, of, levels @ .., name] = parts.as_slice() else {
                continue;
            };
            if *kind != "maintain" || *of != catalog || levels.is_empty() || listed.contains(&parts)
            {
                continue;
            }
            let namespace = iceberg::NamespaceIdent::from_strs(levels.iter().copied())?;
            let ident = TableIdent::new(namespace, (*name).to_string());
            // Listed before it was created: it is there now, and its lease stays.
            if iceberg::Catalog::table_exists(self, &ident).await? {
                continue;
            }
            pg.release_lease(&parts).await?;
            released += 1;
        }
        Ok(released)
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

/// The name parts of the maintenance lease of `ident` in catalog `catalog`.
fn lease_of<'a>(catalog: &'a str, ident: &'a TableIdent) -> Vec<&'a str> {
    let mut parts = vec!["maintain", catalog];
    parts.extend(ident.namespace().as_ref().iter().map(String::as_str));
    parts.push(ident.name());
    parts
}

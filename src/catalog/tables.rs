//! The catalog's own reads and DDL beyond `iceberg::Catalog`, over its store: every table,
//! a table's pointer, the table outside the warehouse, dropping a table a failed put
//! created, namespace property updates and producers' high-water marks.

use std::collections::HashMap;

use iceberg::{Catalog, Error, ErrorKind, NamespaceIdent, Result, TableIdent};

use super::error::table_not_found;
use super::metadata_cache::cache_key;
use super::{RedbCatalog, marks};

impl RedbCatalog {
    /// Every table of the catalog.
    ///
    /// # Errors
    /// The store's error.
    pub async fn all_tables(&self) -> Result<Vec<TableIdent>> {
        Ok(self
            .store
            .all_pointers()
            .await?
            .into_iter()
            .map(|(ident, _)| ident)
            .collect())
    }

    /// The first table whose current metadata location is not below the warehouse root
    /// ([`crate::storage::Warehouse::holds`]), with that location; `None` when every
    /// table is. Such a table was written to another warehouse (e.g. the data dir served
    /// a local warehouse before `--warehouse s3://...`): its files cannot be read or
    /// written through this warehouse's storage.
    ///
    /// # Errors
    /// The store's error.
    pub async fn first_table_outside_warehouse(&self) -> Result<Option<(TableIdent, String)>> {
        Ok(self
            .store
            .all_pointers()
            .await?
            .into_iter()
            .find(|(_, location)| !self.warehouse.holds(location)))
    }

    /// Drops `ident` and removes its files (as a purge, `purge.rs`) when its pointer is
    /// still `location`, i.e. nothing was committed into it since that metadata: what a
    /// put that created the table and failed before its first commit leaves behind.
    /// Returns whether it dropped; `false` when the table is gone or has moved on (another
    /// writer committed into it, or a DDL changed it), which is then left alone.
    ///
    /// # Errors
    /// The catalog's error loading or dropping the table; after the drop, a file that
    /// cannot be removed (the table is gone from the catalog either way).
    pub async fn drop_table_if_unchanged(
        &self,
        ident: &TableIdent,
        location: &str,
    ) -> Result<bool> {
        let table = match self.load_table(ident).await {
            Ok(table) => table,
            Err(e) if e.kind() == ErrorKind::TableNotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let dropped = self.store.drop_pointer(ident, Some(location)).await?;
        if dropped {
            self.metadata.remove(&cache_key(ident));
            super::purge::purge_files(self, &table).await?;
        }
        Ok(dropped)
    }

    /// The table's current metadata location, as the store holds it.
    ///
    /// # Errors
    /// `TableNotFound` when the table does not exist; the store's error.
    pub async fn metadata_location(&self, ident: &TableIdent) -> Result<String> {
        self.store
            .pointer(ident)
            .await?
            .ok_or_else(|| table_not_found(ident))
    }

    /// Sets `updates` and removes `removals` from a namespace's properties in one
    /// transaction of the store (a concurrent update is never lost). Returns the keys
    /// set, the keys removed and the keys asked to be removed that were absent, each
    /// sorted (the REST spec's `UpdateNamespacePropertiesResponse`).
    ///
    /// # Errors
    /// `NamespaceNotFound`; `DataInvalid` when a key is both set and removed; the store's
    /// error.
    pub async fn update_namespace_properties(
        &self,
        namespace: &NamespaceIdent,
        removals: Vec<String>,
        updates: HashMap<String, String>,
    ) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
        if let Some(both) = removals.iter().find(|k| updates.contains_key(*k)) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("property {both:?} is both set and removed"),
            ));
        }
        let (mut removed, mut missing) = self
            .store
            .update_namespace_properties(namespace, &removals, &updates, false)
            .await?;
        let mut updated: Vec<String> = updates.into_keys().collect();
        updated.sort();
        removed.sort();
        removed.dedup();
        missing.sort();
        missing.dedup();
        Ok((updated, removed, missing))
    }

    /// Every table `writer` has committed to, with its high-water mark there ([`marks`]),
    /// in table-name order. Empty for a writer never seen (or forgotten).
    ///
    /// # Errors
    /// The store's error.
    pub async fn writer_marks(&self, writer: &str) -> Result<Vec<(TableIdent, marks::WriterMark)>> {
        self.store.writer_marks(writer).await
    }

    /// `writer`'s high-water mark in `ident`, if it committed there.
    ///
    /// # Errors
    /// The store's error.
    pub async fn writer_mark(
        &self,
        writer: &str,
        ident: &TableIdent,
    ) -> Result<Option<marks::WriterMark>> {
        self.store.writer_mark(writer, ident).await
    }

    /// The number of writer ids with a committed high-water mark ([`marks`]), and whether
    /// `writer` (when given) is one of them. The count is what `--max-writers` bounds.
    ///
    /// # Errors
    /// The store's error.
    pub async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)> {
        self.store.writers(writer).await
    }

    /// Forgets every writer id whose last commit is older than `idle` (its high-water
    /// marks in every table), in one transaction of the store; returns the ids forgotten.
    /// A forgotten producer that comes back is a new one: its sequences start afresh,
    /// and a replay of batches committed before it was forgotten lands again
    /// (`docs/exactly-once.md`, "Bounded state").
    ///
    /// # Errors
    /// The store's error; nothing is forgotten then.
    pub async fn forget_idle_writers(&self, idle: std::time::Duration) -> Result<Vec<String>> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let cutoff_ms = u64::try_from(now_ms.saturating_sub(idle.as_millis())).unwrap_or(0);
        self.store.forget_idle_writers(cutoff_ms).await
    }

    /// Inserts a new table pointer (DDL: not a data commit) and, when given, the claim
    /// `(location key, table uuid)` of its location (`locations.rs`), in one transaction,
    /// after the local warehouse's sync (the metadata it names is durable first; an
    /// object store's acknowledged PUT is durable already).
    ///
    /// # Errors
    /// `TableAlreadyExists`; `DataInvalid` when another table claimed the location; the
    /// store's error.
    pub(super) async fn insert_pointer(
        &self,
        ident: &TableIdent,
        location: String,
        claim: Option<(String, String)>,
    ) -> Result<()> {
        let claim = claim.as_ref().map(|(l, u)| (l.as_str(), u.as_str()));
        self.store
            .insert_pointer(ident, &location, claim, self.warehouse.local_path())
            .await
    }
}

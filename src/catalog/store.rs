//! The redb rows: the namespace and table-pointer tables, their key codec, the read and
//! DDL transactions, and the catalog's own reads over them (pointers, every table,
//! namespace properties, producers' high-water marks) — each answered by the catalog
//! database instead when the catalog is kept in PostgreSQL ([`super::postgres`]).

use std::collections::HashMap;
use std::path::Path;

use iceberg::{Catalog, Error, ErrorKind, NamespaceIdent, Result, TableIdent};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::blocking::blocking;
use super::error::{io_error, namespace_not_found, redb_error, table_exists, table_not_found};
use super::{RedbCatalog, marks};
use crate::storage::durable;

/// Namespace key → JSON object of the namespace's properties.
pub(super) const NAMESPACES: TableDefinition<&str, &str> = TableDefinition::new("namespaces");

/// Table key → current metadata location (absolute path of a `*.metadata.json`).
pub(super) const TABLES: TableDefinition<&str, &str> = TableDefinition::new("tables");

/// Separates name elements inside a redb key. Names cannot contain it (see [`key_of`]).
pub(super) const KEY_SEP: char = '\u{1f}';

impl RedbCatalog {
    /// Every table of the catalog, namespace by namespace (parents before children).
    ///
    /// # Errors
    /// `Unexpected` for redb failures.
    pub async fn all_tables(&self) -> Result<Vec<TableIdent>> {
        if let Some(pg) = self.database() {
            return pg
                .all_pointers()
                .await?
                .into_iter()
                .map(|(ns, name, _)| Ok(TableIdent::new(NamespaceIdent::from_vec(ns)?, name)))
                .collect();
        }
        let mut tables = Vec::new();
        let mut pending: Vec<Option<NamespaceIdent>> = vec![None];
        while let Some(parent) = pending.pop() {
            for ns in self.list_namespaces(parent.as_ref()).await? {
                tables.extend(self.list_tables(&ns).await?);
                pending.push(Some(ns));
            }
        }
        Ok(tables)
    }

    /// The first table (in key order) whose current metadata location is not below the
    /// warehouse root ([`super::Warehouse::holds`]), with that location; `None` when
    /// every table is. Such a table was written to another warehouse (e.g. the data dir
    /// served a local warehouse before `--warehouse s3://...`): its files cannot be read
    /// or written through this warehouse's storage.
    ///
    /// # Errors
    /// `Unexpected` for redb failures.
    pub async fn first_table_outside_warehouse(&self) -> Result<Option<(TableIdent, String)>> {
        let warehouse = self.warehouse.clone();
        if let Some(pg) = self.database() {
            for (ns, name, location) in pg.all_pointers().await? {
                if !warehouse.holds(&location) {
                    return Ok(Some((
                        TableIdent::new(NamespaceIdent::from_vec(ns)?, name),
                        location,
                    )));
                }
            }
            return Ok(None);
        }
        self.read(move |txn| {
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            for row in tables.iter().map_err(redb_error)? {
                let (key, location) = row.map_err(redb_error)?;
                let location = location.value();
                if !warehouse.holds(location) {
                    let ident = TableIdent::from_strs(split_key(key.value()))?;
                    return Ok(Some((ident, location.to_string())));
                }
            }
            Ok(None)
        })
        .await
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
        let key = table_key(ident)?;
        let (k, expected) = (key.clone(), location.to_string());
        let dropped = if let Some(pg) = self.database() {
            pg.drop_pointer(ident.namespace().as_ref(), ident.name(), Some(location))
                .await?
        } else {
            self.ddl(move |txn| {
                let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
                let current = tables
                    .get(k.as_str())
                    .map_err(redb_error)?
                    .map(|v| v.value().to_string());
                if current.as_deref() != Some(expected.as_str()) {
                    return Ok(false);
                }
                tables.remove(k.as_str()).map_err(redb_error)?;
                Ok(true)
            })
            .await?
        };
        if dropped {
            self.metadata.remove(&key);
            super::purge::purge_files(self, &table).await?;
        }
        Ok(dropped)
    }

    /// The table's current metadata location, as stored in redb.
    ///
    /// # Errors
    /// `TableNotFound` when the table does not exist; `Unexpected` for redb failures.
    pub async fn metadata_location(&self, ident: &TableIdent) -> Result<String> {
        self.pointer(ident, table_key(ident)?).await
    }

    /// The stored pointer of table `key` (`ident`'s key, named in errors).
    pub(super) async fn pointer(&self, ident: &TableIdent, key: String) -> Result<String> {
        if let Some(pg) = self.database() {
            return pg
                .pointer(ident.namespace().as_ref(), ident.name())
                .await?
                .ok_or_else(|| table_not_found(ident));
        }
        let db = self.redb()?.clone();
        let found = blocking(move || {
            let txn = db.begin_read().map_err(redb_error)?;
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let value = tables.get(key.as_str()).map_err(redb_error)?;
            Ok(value.map(|v| v.value().to_string()))
        })
        .await?;
        found.ok_or_else(|| table_not_found(ident))
    }

    /// Sets `updates` and removes `removals` from a namespace's properties in one redb
    /// write transaction (a concurrent update is never lost). Returns the keys set, the
    /// keys removed and the keys asked to be removed that were absent, each sorted (the
    /// REST spec's `UpdateNamespacePropertiesResponse`).
    ///
    /// # Errors
    /// `NamespaceNotFound`; `DataInvalid` when a key is both set and removed; redb's
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
        if let Some(pg) = self.database() {
            let (mut removed, mut missing) = pg
                .update_namespace_properties(namespace.as_ref(), &removals, &updates, false)
                .await?;
            let mut updated: Vec<String> = updates.into_keys().collect();
            updated.sort();
            removed.sort();
            removed.dedup();
            missing.sort();
            missing.dedup();
            return Ok((updated, removed, missing));
        }
        let key = key_of(namespace.as_ref())?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let json = namespaces
                .get(key.as_str())
                .map_err(redb_error)?
                .map(|v| v.value().to_string())
                .ok_or_else(|| namespace_not_found(&ns))?;
            let mut properties: HashMap<String, String> = serde_json::from_str(&json)?;
            let (mut removed, mut missing) = (Vec::new(), Vec::new());
            for k in removals {
                match properties.remove(&k) {
                    Some(_) => removed.push(k),
                    None => missing.push(k),
                }
            }
            let mut updated: Vec<String> = updates.keys().cloned().collect();
            properties.extend(updates);
            let json = serde_json::to_string(&properties)?;
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            updated.sort();
            removed.sort();
            removed.dedup();
            missing.sort();
            missing.dedup();
            Ok((updated, removed, missing))
        })
        .await
    }

    /// Every table `writer` has committed to, with its high-water mark there ([`marks`]),
    /// in table-name order. Empty for a writer never seen (or forgotten).
    ///
    /// # Errors
    /// redb's error reading the catalog.
    pub async fn writer_marks(&self, writer: &str) -> Result<Vec<(TableIdent, marks::WriterMark)>> {
        if let Some(pg) = self.database() {
            let mut out = Vec::new();
            for (ns, name, mark) in pg.writer_marks(writer).await? {
                if let Ok(ns) = NamespaceIdent::from_vec(ns) {
                    out.push((TableIdent::new(ns, name), mark));
                }
            }
            return Ok(out);
        }
        let prefix = format!("{writer}{KEY_SEP}");
        self.read(move |txn| {
            let table = txn.open_table(marks::WRITER_MARKS).map_err(redb_error)?;
            let mut out = Vec::new();
            for row in table.range(prefix.as_str()..).map_err(redb_error)? {
                let (key, value) = row.map_err(redb_error)?;
                let Some(table_key) = key.value().strip_prefix(prefix.as_str()) else {
                    break;
                };
                let parts = split_key(table_key);
                let Some((name, namespace)) = parts.split_last() else {
                    continue;
                };
                let (Ok(namespace), Some(mark)) = (
                    NamespaceIdent::from_vec(namespace.to_vec()),
                    marks::WriterMark::decode(value.value()),
                ) else {
                    continue;
                };
                out.push((TableIdent::new(namespace, name.clone()), mark));
            }
            Ok(out)
        })
        .await
    }

    /// `writer`'s high-water mark in `ident`, if it committed there.
    ///
    /// # Errors
    /// redb's error reading the catalog.
    pub async fn writer_mark(
        &self,
        writer: &str,
        ident: &TableIdent,
    ) -> Result<Option<marks::WriterMark>> {
        if let Some(pg) = self.database() {
            return pg
                .writer_mark(writer, ident.namespace().as_ref(), ident.name())
                .await;
        }
        let key = marks::mark_key(writer, &table_key(ident)?);
        self.read(move |txn| {
            let table = txn.open_table(marks::WRITER_MARKS).map_err(redb_error)?;
            Ok(table
                .get(key.as_str())
                .map_err(redb_error)?
                .and_then(|v| marks::WriterMark::decode(v.value())))
        })
        .await
    }

    /// The number of writer ids with a committed high-water mark ([`marks`]), and whether
    /// `writer` (when given) is one of them. The count is what `--max-writers` bounds.
    ///
    /// # Errors
    /// redb's error reading the catalog.
    pub async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)> {
        if let Some(pg) = self.database() {
            return pg.writers(writer).await;
        }
        let writer = writer.map(str::to_string);
        self.read(move |txn| marks::writers(txn, writer.as_deref()).map_err(redb_error))
            .await
    }

    /// Forgets every writer id whose last commit is older than `idle` (its high-water
    /// marks in every table), in one redb write transaction; returns the ids forgotten.
    /// A forgotten producer that comes back is a new one: its sequences start afresh,
    /// and a replay of batches committed before it was forgotten lands again (README,
    /// "Exactly-once").
    ///
    /// # Errors
    /// redb's error writing the catalog; nothing is forgotten then.
    pub async fn forget_idle_writers(&self, idle: std::time::Duration) -> Result<Vec<String>> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let cutoff_ms = u64::try_from(now_ms.saturating_sub(idle.as_millis())).unwrap_or(0);
        if let Some(pg) = self.database() {
            return pg.forget_idle_writers(cutoff_ms).await;
        }
        self.ddl(move |txn| marks::forget_idle(txn, cutoff_ms).map_err(redb_error))
            .await
    }

    /// Inserts a new table pointer (DDL: not a data commit) and, when given, the claim
    /// `(location key, table uuid)` of its location (`locations.rs`), in one transaction.
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
        let key = table_key(ident)?;
        let id = ident.clone();
        let local = self.warehouse.local_path().map(Path::to_path_buf);
        if let Some(pg) = self.database() {
            // An object store's acknowledged PUT is durable: only a local warehouse syncs.
            if let Some(warehouse) = local {
                blocking(move || {
                    durable::sync_warehouse(&warehouse)
                        .map_err(|e| io_error("sync warehouse", &warehouse, e))
                })
                .await?;
            }
            let claim = claim.as_ref().map(|(l, u)| (l.as_str(), u.as_str()));
            return pg
                .insert_pointer(ident.namespace().as_ref(), ident.name(), &location, claim)
                .await;
        }
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.get(key.as_str()).map_err(redb_error)?.is_some() {
                return Err(table_exists(&id));
            }
            // An object store's acknowledged PUT is durable: only a local warehouse syncs.
            if let Some(warehouse) = &local {
                durable::sync_warehouse(warehouse)
                    .map_err(|e| io_error("sync warehouse", warehouse, e))?;
            }
            if let Some((claimed, uuid)) = &claim {
                let mut claims = txn
                    .open_table(super::locations::LOCATION_CLAIMS)
                    .map_err(redb_error)?;
                if !super::locations::claim_in(&mut claims, (claimed, uuid)).map_err(redb_error)? {
                    return Err(super::group_commit::location_taken(
                        &id.to_string(),
                        claimed,
                    ));
                }
            }
            tables
                .insert(key.as_str(), location.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    /// Runs a DDL write transaction (not counted as a data commit).
    pub(super) async fn ddl<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.redb()?.clone();
        blocking(move || {
            let txn = db.begin_write().map_err(redb_error)?;
            let out = f(&txn)?;
            txn.commit().map_err(redb_error)?;
            Ok(out)
        })
        .await
    }

    pub(super) async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.redb()?.clone();
        blocking(move || {
            let txn = db.begin_read().map_err(redb_error)?;
            f(&txn)
        })
        .await
    }
}

/// The redb key of a list of name elements.
///
/// # Errors
/// `DataInvalid` for an empty list or an element that is empty or holds the separator.
pub(super) fn key_of(parts: &[String]) -> Result<String> {
    if parts.is_empty() || parts.iter().any(|p| p.is_empty() || p.contains(KEY_SEP)) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("invalid catalog name {parts:?}"),
        ));
    }
    Ok(parts.join(&KEY_SEP.to_string()))
}

pub(super) fn table_key(ident: &TableIdent) -> Result<String> {
    let mut parts = ident.namespace().as_ref().clone();
    parts.push(ident.name().to_string());
    key_of(&parts)
}

pub(super) fn split_key(key: &str) -> Vec<String> {
    key.split(KEY_SEP).map(str::to_string).collect()
}

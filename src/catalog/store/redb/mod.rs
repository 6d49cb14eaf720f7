//! The embedded catalog store: one redb file, opened by this process alone. Its tables:
//! namespaces (key → properties JSON), table pointers (key → metadata location), the
//! producers' marks ([`marks`]) and the location claims. Keys join name elements with
//! [`KEY_SEP`]. redb blocks: every transaction runs on the blocking pool ([`crate::storage::blocking`]);
//! a group-commit batch is ONE write transaction at `Durability::Immediate` ([`batch`]).

mod batch;
mod marks;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::{Error, ErrorKind, NamespaceIdent, Result, TableIdent};
use redb::{
    Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle, WriteTransaction,
};

use super::{BatchError, Flip, Store, StoreKind, location_taken};
use crate::catalog::commit::{COMMIT_POLICY, CommitPolicy};
use crate::catalog::counters::Counters;
use crate::catalog::error::{
    io_error, namespace_not_found, redb_error, table_exists, table_not_found,
};
use crate::catalog::marks::WriterMark;
use crate::storage::blocking::run_blocking;
use crate::storage::durable;
use crate::storage::file_store::FileStore;

/// Namespace key → JSON object of the namespace's properties.
const NAMESPACES: TableDefinition<&str, &str> = TableDefinition::new("namespaces");

/// Table key → current metadata location (absolute path of a `*.metadata.json`).
const TABLES: TableDefinition<&str, &str> = TableDefinition::new("tables");

/// Location key ([`FileStore::path_of`]) → the uuid of the table skade created there;
/// empty for a table that predates claims, adopted by the first sweep that finds it
/// (`catalog/locations.rs`).
const LOCATION_CLAIMS: TableDefinition<&str, &str> = TableDefinition::new("location_claims");

/// Separates name elements inside a redb key. Names cannot contain it (see [`key_of`]).
const KEY_SEP: char = '\u{1f}';

/// The redb catalog store (module docs).
#[derive(Debug)]
pub(crate) struct RedbStore {
    db: Arc<Database>,
}

impl RedbStore {
    /// Opens (or creates) the catalog file `path` and its tables; the tables it already
    /// holds get a location claim to adopt when the file predates claims (`files` names
    /// their locations).
    ///
    /// # Errors
    /// redb's error (`DatabaseAlreadyOpen` when another process holds the file), with the
    /// path as context.
    pub(crate) fn open(path: &Path, files: &FileStore) -> Result<Self> {
        let db = Arc::new(
            Database::create(path)
                .map_err(|e| redb_error(e).with_context("catalog", path.display().to_string()))?,
        );
        let txn = db.begin_write().map_err(redb_error)?;
        txn.open_table(NAMESPACES).map_err(redb_error)?;
        txn.open_table(TABLES).map_err(redb_error)?;
        marks::init(&txn).map_err(redb_error)?;
        init_claims(&txn, files).map_err(redb_error)?;
        txn.commit().map_err(redb_error)?;
        Ok(Self { db })
    }

    /// Runs a write transaction (DDL: not a data commit) on the blocking pool.
    async fn ddl<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        run_blocking(move || {
            let txn = db.begin_write().map_err(redb_error)?;
            let out = f(&txn)?;
            txn.commit().map_err(redb_error)?;
            Ok(out)
        })
        .await
        .map_err(task_failed)?
    }

    /// Runs a read transaction on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        run_blocking(move || {
            let txn = db.begin_read().map_err(redb_error)?;
            f(&txn)
        })
        .await
        .map_err(task_failed)?
    }
}

/// The error of a redb task that did not run to its end.
fn task_failed(e: tokio::task::JoinError) -> Error {
    Error::new(ErrorKind::Unexpected, "catalog task failed").with_source(e)
}

/// Creates the claims table when absent; the tables the file already holds then get a
/// claim to adopt (`catalog/locations.rs`).
fn init_claims(txn: &WriteTransaction, files: &FileStore) -> std::result::Result<(), redb::Error> {
    let existed = txn
        .list_tables()?
        .any(|table| table.name() == LOCATION_CLAIMS.name());
    let mut claims = txn.open_table(LOCATION_CLAIMS)?;
    if existed {
        return Ok(());
    }
    let tables = txn.open_table(TABLES)?;
    for row in tables.iter()? {
        let (_, metadata_location) = row?;
        let Some(location) =
            crate::catalog::locations::location_of_metadata(metadata_location.value())
                .and_then(|location| files.path_of(location))
        else {
            continue;
        };
        let key = location.to_string_lossy();
        if claims.get(key.as_ref())?.is_none() {
            claims.insert(key.as_ref(), "")?;
        }
    }
    Ok(())
}

/// Writes the claim `(location, uuid)` in a write transaction of a create. Returns
/// `false` when another table holds the location.
fn claim_in(
    claims: &mut redb::Table<'_, &'static str, &'static str>,
    (location, uuid): (&str, &str),
) -> std::result::Result<bool, redb::Error> {
    if let Some(held) = claims.get(location)? {
        return Ok(held.value() == uuid);
    }
    claims.insert(location, uuid)?;
    Ok(true)
}

/// The redb key of a list of name elements.
///
/// # Errors
/// `DataInvalid` for an empty list or an element that is empty or holds the separator.
fn key_of(parts: &[String]) -> Result<String> {
    if parts.is_empty() || parts.iter().any(|p| p.is_empty() || p.contains(KEY_SEP)) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("invalid catalog name {parts:?}"),
        ));
    }
    Ok(parts.join(&KEY_SEP.to_string()))
}

/// The redb key of a table.
///
/// # Errors
/// As [`key_of`].
fn table_key(ident: &TableIdent) -> Result<String> {
    let mut parts = ident.namespace().as_ref().clone();
    parts.push(ident.name().to_string());
    key_of(&parts)
}

fn split_key(key: &str) -> Vec<String> {
    key.split(KEY_SEP).map(str::to_string).collect()
}

/// The table a key names.
fn ident_of(key: &str) -> Result<TableIdent> {
    TableIdent::from_strs(split_key(key))
}

#[async_trait]
impl Store for RedbStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Redb
    }

    fn commit_policy(&self) -> CommitPolicy {
        COMMIT_POLICY
    }

    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let parent: Vec<String> = parent.map(|p| p.as_ref().clone()).unwrap_or_default();
        self.read(move |txn| {
            let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let mut out = Vec::new();
            for entry in namespaces.iter().map_err(redb_error)? {
                let (key, _) = entry.map_err(redb_error)?;
                let parts = split_key(key.value());
                if parts.len() == parent.len() + 1 && parts.starts_with(&parent) {
                    out.push(NamespaceIdent::from_vec(parts)?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: &HashMap<String, String>,
    ) -> Result<()> {
        let key = key_of(namespace.as_ref())?;
        let parent = namespace.parent().map(|p| key_of(p.as_ref())).transpose()?;
        let json = serde_json::to_string(properties)?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            if namespaces.get(key.as_str()).map_err(redb_error)?.is_some() {
                return Err(Error::new(
                    ErrorKind::NamespaceAlreadyExists,
                    format!("namespace {} already exists", ns.join(".")),
                ));
            }
            if let Some(parent) = parent
                && namespaces
                    .get(parent.as_str())
                    .map_err(redb_error)?
                    .is_none()
            {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("parent of namespace {} does not exist", ns.join(".")),
                ));
            }
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    async fn namespace_properties(
        &self,
        namespace: &NamespaceIdent,
    ) -> Result<Option<HashMap<String, String>>> {
        let key = key_of(namespace.as_ref())?;
        let json = self
            .read(move |txn| {
                let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
                let value = namespaces.get(key.as_str()).map_err(redb_error)?;
                Ok(value.map(|v| v.value().to_string()))
            })
            .await?;
        json.map(|json| serde_json::from_str(&json).map_err(Into::into))
            .transpose()
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let key = key_of(namespace.as_ref())?;
        self.read(move |txn| {
            let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            Ok(namespaces.get(key.as_str()).map_err(redb_error)?.is_some())
        })
        .await
    }

    async fn update_namespace_properties(
        &self,
        namespace: &NamespaceIdent,
        removals: &[String],
        updates: &HashMap<String, String>,
        replace_all: bool,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let key = key_of(namespace.as_ref())?;
        let ns = namespace.clone();
        let (removals, updates) = (removals.to_vec(), updates.clone());
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            let json = namespaces
                .get(key.as_str())
                .map_err(redb_error)?
                .map(|v| v.value().to_string())
                .ok_or_else(|| namespace_not_found(&ns))?;
            let mut properties: HashMap<String, String> = if replace_all {
                HashMap::new()
            } else {
                serde_json::from_str(&json)?
            };
            let (mut removed, mut missing) = (Vec::new(), Vec::new());
            for k in removals {
                match properties.remove(&k) {
                    Some(_) => removed.push(k),
                    None => missing.push(k),
                }
            }
            properties.extend(updates);
            let json = serde_json::to_string(&properties)?;
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            Ok((removed, missing))
        })
        .await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let parts = namespace.as_ref().clone();
        let key = key_of(&parts)?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            if namespaces.get(key.as_str()).map_err(redb_error)?.is_none() {
                return Err(namespace_not_found(&ns));
            }
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let holds_table = tables.iter().map_err(redb_error)?.any(|e| {
                e.map(|(k, _)| split_key(k.value()).starts_with(&parts))
                    .unwrap_or(true)
            });
            let holds_child = namespaces.iter().map_err(redb_error)?.any(|e| {
                e.map(|(k, _)| {
                    let p = split_key(k.value());
                    p.len() > parts.len() && p.starts_with(&parts)
                })
                .unwrap_or(true)
            });
            if holds_table || holds_child {
                return Err(Error::new(
                    ErrorKind::PreconditionFailed,
                    format!("namespace {} is not empty", ns.join(".")),
                ));
            }
            namespaces.remove(key.as_str()).map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<String>> {
        let parts = namespace.as_ref().clone();
        self.read(move |txn| {
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let mut out = Vec::new();
            for entry in tables.iter().map_err(redb_error)? {
                let (key, _) = entry.map_err(redb_error)?;
                let mut p = split_key(key.value());
                if p.len() == parts.len() + 1 && p.starts_with(&parts) {
                    out.push(p.pop().unwrap_or_default());
                }
            }
            Ok(out)
        })
        .await
    }

    async fn pointer(&self, ident: &TableIdent) -> Result<Option<String>> {
        let key = table_key(ident)?;
        self.read(move |txn| {
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let value = tables.get(key.as_str()).map_err(redb_error)?;
            Ok(value.map(|v| v.value().to_string()))
        })
        .await
    }

    async fn all_pointers(&self) -> Result<Vec<(TableIdent, String)>> {
        self.read(|txn| {
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let mut out = Vec::new();
            for row in tables.iter().map_err(redb_error)? {
                let (key, location) = row.map_err(redb_error)?;
                out.push((ident_of(key.value())?, location.value().to_string()));
            }
            Ok(out)
        })
        .await
    }

    async fn insert_pointer(
        &self,
        ident: &TableIdent,
        location: &str,
        claim: Option<(&str, &str)>,
        sync: Option<&Path>,
    ) -> Result<()> {
        let key = table_key(ident)?;
        let id = ident.clone();
        let location = location.to_string();
        let claim = claim.map(|(l, u)| (l.to_string(), u.to_string()));
        let sync = sync.map(Path::to_path_buf);
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.get(key.as_str()).map_err(redb_error)?.is_some() {
                return Err(table_exists(&id));
            }
            if let Some((claimed, uuid)) = &claim {
                let mut claims = txn.open_table(LOCATION_CLAIMS).map_err(redb_error)?;
                if !claim_in(&mut claims, (claimed, uuid)).map_err(redb_error)? {
                    return Err(location_taken(&id, claimed));
                }
            }
            if let Some(warehouse) = &sync {
                durable::sync_warehouse(warehouse)
                    .map_err(|e| io_error("sync warehouse", warehouse, e))?;
            }
            tables
                .insert(key.as_str(), location.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    async fn drop_pointer(&self, ident: &TableIdent, expected: Option<&str>) -> Result<bool> {
        let key = table_key(ident)?;
        let expected = expected.map(str::to_string);
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            let current = tables
                .get(key.as_str())
                .map_err(redb_error)?
                .map(|v| v.value().to_string());
            let Some(current) = current else {
                return Ok(false);
            };
            if expected.as_ref().is_some_and(|e| *e != current) {
                return Ok(false);
            }
            tables.remove(key.as_str()).map_err(redb_error)?;
            Ok(true)
        })
        .await
    }

    async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        let (src_key, dest_key) = (table_key(from)?, table_key(to)?);
        let (s, d) = (from.clone(), to.clone());
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.get(dest_key.as_str()).map_err(redb_error)?.is_some() {
                return Err(table_exists(&d));
            }
            let location = tables
                .remove(src_key.as_str())
                .map_err(redb_error)?
                .map(|v| v.value().to_string())
                .ok_or_else(|| table_not_found(&s))?;
            tables
                .insert(dest_key.as_str(), location.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    async fn writer_marks(&self, writer: &str) -> Result<Vec<(TableIdent, WriterMark)>> {
        let prefix = format!("{writer}{KEY_SEP}");
        self.read(move |txn| {
            let table = txn.open_table(marks::WRITER_MARKS).map_err(redb_error)?;
            let mut out = Vec::new();
            for row in table.range(prefix.as_str()..).map_err(redb_error)? {
                let (key, value) = row.map_err(redb_error)?;
                let Some(table_key) = key.value().strip_prefix(prefix.as_str()) else {
                    break;
                };
                let (Ok(ident), Some(mark)) = (ident_of(table_key), marks::decode(value.value()))
                else {
                    continue;
                };
                out.push((ident, mark));
            }
            Ok(out)
        })
        .await
    }

    async fn writer_mark(&self, writer: &str, ident: &TableIdent) -> Result<Option<WriterMark>> {
        let key = marks::mark_key(writer, &table_key(ident)?);
        self.read(move |txn| {
            let table = txn.open_table(marks::WRITER_MARKS).map_err(redb_error)?;
            Ok(table
                .get(key.as_str())
                .map_err(redb_error)?
                .and_then(|v| marks::decode(v.value())))
        })
        .await
    }

    async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)> {
        let writer = writer.map(str::to_string);
        self.read(move |txn| marks::writers(txn, writer.as_deref()).map_err(redb_error))
            .await
    }

    async fn forget_idle_writers(&self, cutoff_ms: u64) -> Result<Vec<String>> {
        self.ddl(move |txn| marks::forget_idle(txn, cutoff_ms).map_err(redb_error))
            .await
    }

    async fn location_claims(&self) -> Result<Vec<(String, Option<String>)>> {
        self.read(|txn| {
            let claims = txn.open_table(LOCATION_CLAIMS).map_err(redb_error)?;
            let mut out = Vec::new();
            for row in claims.iter().map_err(redb_error)? {
                let (location, uuid) = row.map_err(redb_error)?;
                let uuid = uuid.value();
                out.push((
                    location.value().to_string(),
                    (!uuid.is_empty()).then(|| uuid.to_string()),
                ));
            }
            Ok(out)
        })
        .await
    }

    async fn adopt_location(&self, location: &str, uuid: &str) -> Result<bool> {
        let (key, uuid) = (location.to_string(), uuid.to_string());
        self.ddl(move |txn| {
            let mut claims = txn.open_table(LOCATION_CLAIMS).map_err(redb_error)?;
            let unclaimed = claims
                .get(key.as_str())
                .map_err(redb_error)?
                .is_some_and(|v| v.value().is_empty());
            if unclaimed {
                claims
                    .insert(key.as_str(), uuid.as_str())
                    .map_err(redb_error)?;
            }
            Ok(unclaimed)
        })
        .await
    }

    async fn release_location(&self, location: &str, uuid: &str) -> Result<()> {
        let (key, uuid) = (location.to_string(), uuid.to_string());
        self.ddl(move |txn| {
            let mut claims = txn.open_table(LOCATION_CLAIMS).map_err(redb_error)?;
            let held = claims
                .get(key.as_str())
                .map_err(redb_error)?
                .is_some_and(|v| v.value() == uuid);
            if held {
                claims.remove(key.as_str()).map_err(redb_error)?;
            }
            Ok(())
        })
        .await
    }

    async fn commit_batch(
        &self,
        releases: &[&[Flip]],
        sync: Option<&Path>,
        counters: &Counters,
    ) -> std::result::Result<Vec<Result<()>>, BatchError> {
        let db = self.db.clone();
        let releases: Vec<Vec<Flip>> = releases.iter().map(|r| r.to_vec()).collect();
        let sync = sync.map(Path::to_path_buf);
        let (outcomes, committed) = crate::storage::blocking::run_blocking(move || {
            batch::commit(&db, &releases, sync.as_deref())
        })
        .await
        .map_err(|_| BatchError::Panicked)??;
        if let Some(synced) = committed {
            if synced {
                counters.record_sync();
            }
            let commits = counters.record_commit();
            crate::catalog::fault::after_commit(commits);
        }
        Ok(outcomes)
    }
}

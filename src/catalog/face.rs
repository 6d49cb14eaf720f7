//! The `iceberg::Catalog` face of [`RedbCatalog`]: namespaces and tables through the
//! store (redb, [`super::store`], or the catalog database, [`super::postgres`]); a table
//! commit is a one-table release ([`super::release`]).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent,
};
use redb::ReadableTable;

use super::error::{namespace_not_found, redb_error, table_exists, table_not_found};
use super::store::{NAMESPACES, TABLES, key_of, split_key, table_key};
use super::{RedbCatalog, purge};

#[async_trait]
impl Catalog for RedbCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        if let Some(parent) = parent
            && !self.namespace_exists(parent).await?
        {
            return Err(namespace_not_found(parent));
        }
        let parent: Vec<String> = parent.map(|p| p.as_ref().clone()).unwrap_or_default();
        if let Some(pg) = self.database() {
            return pg
                .list_namespaces(&parent)
                .await?
                .into_iter()
                .map(NamespaceIdent::from_vec)
                .collect();
        }
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
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        if let Some(pg) = self.database() {
            pg.create_namespace(namespace.as_ref(), &properties).await?;
            return Ok(Namespace::with_properties(namespace.clone(), properties));
        }
        let key = key_of(namespace.as_ref())?;
        let parent = namespace.parent().map(|p| key_of(p.as_ref())).transpose()?;
        let json = serde_json::to_string(&properties)?;
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
        .await?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        if let Some(pg) = self.database() {
            let properties = pg
                .namespace_properties(namespace.as_ref())
                .await?
                .ok_or_else(|| namespace_not_found(namespace))?;
            return Ok(Namespace::with_properties(namespace.clone(), properties));
        }
        let key = key_of(namespace.as_ref())?;
        let json = self
            .read(move |txn| {
                let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
                let value = namespaces.get(key.as_str()).map_err(redb_error)?;
                Ok(value.map(|v| v.value().to_string()))
            })
            .await?
            .ok_or_else(|| namespace_not_found(namespace))?;
        let properties: HashMap<String, String> = serde_json::from_str(&json)?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        if let Some(pg) = self.database() {
            return pg.namespace_exists(namespace.as_ref()).await;
        }
        let key = key_of(namespace.as_ref())?;
        self.read(move |txn| {
            let namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            Ok(namespaces.get(key.as_str()).map_err(redb_error)?.is_some())
        })
        .await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        if let Some(pg) = self.database() {
            return pg
                .update_namespace_properties(namespace.as_ref(), &[], &properties, true)
                .await
                .map(drop);
        }
        let key = key_of(namespace.as_ref())?;
        let json = serde_json::to_string(&properties)?;
        let ns = namespace.clone();
        self.ddl(move |txn| {
            let mut namespaces = txn.open_table(NAMESPACES).map_err(redb_error)?;
            if namespaces.get(key.as_str()).map_err(redb_error)?.is_none() {
                return Err(namespace_not_found(&ns));
            }
            namespaces
                .insert(key.as_str(), json.as_str())
                .map_err(redb_error)?;
            Ok(())
        })
        .await
    }

    /// Drops an empty namespace.
    ///
    /// # Errors
    /// `NamespaceNotFound`; `PreconditionFailed` when it still holds tables or child
    /// namespaces (skade never drops data implicitly).
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if let Some(pg) = self.database() {
            return pg.drop_namespace(namespace.as_ref()).await;
        }
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

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        if !self.namespace_exists(namespace).await? {
            return Err(namespace_not_found(namespace));
        }
        if let Some(pg) = self.database() {
            return Ok(pg
                .list_tables(namespace.as_ref())
                .await?
                .into_iter()
                .map(|name| TableIdent::new(namespace.clone(), name))
                .collect());
        }
        let parts = namespace.as_ref().clone();
        let ns = namespace.clone();
        self.read(move |txn| {
            let tables = txn.open_table(TABLES).map_err(redb_error)?;
            let mut out = Vec::new();
            for entry in tables.iter().map_err(redb_error)? {
                let (key, _) = entry.map_err(redb_error)?;
                let mut p = split_key(key.value());
                if p.len() == parts.len() + 1 && p.starts_with(&parts) {
                    let name = p.pop().unwrap_or_default();
                    out.push(TableIdent::new(ns.clone(), name));
                }
            }
            Ok(out)
        })
        .await
    }

    /// Creates an empty table at `<warehouse>/<namespace...>/<table>` (or the creation's
    /// own location) and writes its first metadata JSON, synced before the pointer exists.
    ///
    /// # Errors
    /// `NamespaceNotFound`, `TableAlreadyExists`, or iceberg's error for an invalid
    /// creation.
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        if !self.namespace_exists(namespace).await? {
            return Err(namespace_not_found(namespace));
        }
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if self.table_exists(&ident).await? {
            return Err(table_exists(&ident));
        }
        // The same table `plan_table` describes, written and inserted now.
        let table = self.plan_table(&ident, creation).await?;
        let metadata_location = table.metadata_location_result()?.to_string();
        let at = MetadataLocation::from_str(&metadata_location)?;
        table.metadata().write_to(&self.file_io, &at).await?;
        self.insert_pointer(
            &ident,
            metadata_location.clone(),
            super::locations::claim_of(self, &table),
        )
        .await?;
        self.metadata.put(
            &table_key(&ident)?,
            &metadata_location,
            table.metadata_ref(),
            None,
        );
        Ok(table)
    }

    /// Loads the table at its current pointer (read from redb every time); the metadata
    /// JSON is read and parsed only when it is not the one last seen at that location
    /// (`metadata_cache.rs`).
    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let key = table_key(ident)?;
        let location = self.pointer(ident, key.clone()).await?;
        let metadata = match self.metadata.get(&key, &location) {
            Some(metadata) => metadata,
            None => {
                let metadata = Arc::new(TableMetadata::read_from(&self.file_io, &location).await?);
                self.metadata.put(&key, &location, metadata.clone(), None);
                metadata
            }
        };
        self.table_handle(ident.clone(), location, metadata)
    }

    /// Removes the table from the catalog; its files stay on disk.
    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let key = table_key(ident)?;
        self.metadata.remove(&key);
        if let Some(pg) = self.database() {
            return match pg
                .drop_pointer(ident.namespace().as_ref(), ident.name(), None)
                .await?
            {
                true => Ok(()),
                false => Err(table_not_found(ident)),
            };
        }
        let id = ident.clone();
        self.ddl(move |txn| {
            let mut tables = txn.open_table(TABLES).map_err(redb_error)?;
            if tables.remove(key.as_str()).map_err(redb_error)?.is_none() {
                return Err(table_not_found(&id));
            }
            Ok(())
        })
        .await
    }

    /// Drops the table, then removes its files under its location (never elsewhere:
    /// `purge.rs`).
    ///
    /// # Errors
    /// `TableNotFound`; after the drop, a manifest that cannot be read or a file that
    /// cannot be removed (the table is gone from the catalog either way).
    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        self.drop_table(ident).await?;
        purge::purge_files(self, &table).await.map(drop)
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        match self.metadata_location(ident).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves the catalog entry; files stay where they are (the metadata keeps its
    /// location), as Iceberg catalogs do.
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        if !self.namespace_exists(dest.namespace()).await? {
            return Err(namespace_not_found(dest.namespace()));
        }
        let src_key = table_key(src)?;
        let dest_key = table_key(dest)?;
        self.metadata.remove(&src_key);
        if let Some(pg) = self.database() {
            return pg
                .rename_table(
                    (src.namespace().as_ref(), src.name()),
                    (dest.namespace().as_ref(), dest.name()),
                )
                .await;
        }
        let (s, d) = (src.clone(), dest.clone());
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

    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> Result<Table> {
        if !self.namespace_exists(ident.namespace()).await? {
            return Err(namespace_not_found(ident.namespace()));
        }
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        // A registered table's files were not written for it here: no claim, never
        // swept (`locations.rs`).
        self.insert_pointer(ident, metadata_location.clone(), None)
            .await?;
        self.table_handle(ident.clone(), metadata_location, metadata)
    }

    /// Commits one table (what iceberg's transactions end in) through the catalog's
    /// commit driver ([`RedbCatalog::commit`]): under this process's commit turn on the
    /// table, checks the requirements against the table as it stands, applies the
    /// updates, writes the new metadata JSON, syncs the warehouse and flips the pointer
    /// in ONE redb write transaction (compare-and-swap on the base location), which
    /// concurrent commits may share (group commit); returns once it is durable.
    ///
    /// # Errors
    /// `CatalogCommitConflicts`, retryable, when a requirement fails (iceberg's
    /// transaction then rebases and retries; the driver does not retry the caller's
    /// requirements) or the pointer kept moving; `TableNotFound` for an unknown table;
    /// `Unexpected` when the warehouse sync or the redb transaction failed.
    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let table = self.load_table(commit.identifier()).await?;
        let target = super::CommitTarget::metadata(&table);
        let staged = (commit.take_requirements(), commit.take_updates());
        let staged = &staged;
        self.commit_one(&target, move |current| {
            let staged = staged.clone();
            Box::pin(async move {
                for requirement in &staged.0 {
                    requirement.check(Some(current.metadata()))?;
                }
                Ok(staged)
            })
        })
        .await
    }
}

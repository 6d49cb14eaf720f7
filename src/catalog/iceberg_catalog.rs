//! The `iceberg::Catalog` face of [`RedbCatalog`]: namespaces and tables through its
//! [`super::store`]; a table commit runs the commit driver ([`super::commit`]).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use super::error::{namespace_not_found, table_exists, table_not_found};
use super::metadata_cache::cache_key;
use super::stage::MetadataUpdate;
use super::{RedbCatalog, purge};
use async_trait::async_trait;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Catalog, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, TableCommit,
    TableCreation, TableIdent,
};

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
        self.store.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.store.create_namespace(namespace, &properties).await?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let properties = self
            .store
            .namespace_properties(namespace)
            .await?
            .ok_or_else(|| namespace_not_found(namespace))?;
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.store.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.store
            .update_namespace_properties(namespace, &[], &properties, true)
            .await
            .map(drop)
    }

    /// Drops an empty namespace.
    ///
    /// # Errors
    /// `NamespaceNotFound`; `PreconditionFailed` when it still holds tables or child
    /// namespaces (skade never drops data implicitly).
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.store.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        if !self.namespace_exists(namespace).await? {
            return Err(namespace_not_found(namespace));
        }
        Ok(self
            .store
            .list_tables(namespace)
            .await?
            .into_iter()
            .map(|name| TableIdent::new(namespace.clone(), name))
            .collect())
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
        // The same table `plan_table` describes, written and inserted now: a DDL write of
        // the store, not a data commit (the design notes count data commits only,
        // `docs/design/ingest_multi.md` §f4), under the same location rules and claim.
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
            &cache_key(&ident),
            &metadata_location,
            table.metadata_ref(),
            None,
        );
        Ok(table)
    }

    /// Loads the table at its current pointer (read from the store every time); the metadata
    /// JSON is read and parsed only when it is not the one last seen at that location
    /// (`metadata_cache.rs`).
    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let key = cache_key(ident);
        let location = self.metadata_location(ident).await?;
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

    /// Removes the table from the catalog; its files stay on disk (and its location
    /// stays claimed: `locations.rs`). Waits for the table's commit turn
    /// ([`RedbCatalog::commit_turns`]), so a commit already under way lands first and
    /// none is half-way through when the pointer goes.
    ///
    /// # Errors
    /// `TableNotFound`; a store error.
    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        let _turns = self.commit_turns([&table]).await;
        self.drop_pointer_of(ident).await
    }

    /// Drops the table under its commit turn as [`Catalog::drop_table`] does, then
    /// removes its files under its location (never elsewhere: `purge.rs`).
    ///
    /// # Errors
    /// `TableNotFound`; after the drop, a manifest that cannot be read or a file that
    /// cannot be removed (the table is gone from the catalog either way).
    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        {
            let _turns = self.commit_turns([&table]).await;
            self.drop_pointer_of(ident).await?;
        }
        purge::purge_files(self, &table).await.map(drop)
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        match self.metadata_location(ident).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves the catalog entry under the table's commit turn (as
    /// [`Catalog::drop_table`]); files stay where they are (the metadata keeps its
    /// location), as Iceberg catalogs do.
    ///
    /// # Errors
    /// `TableNotFound` for `src`, `NamespaceNotFound` for `dest`'s namespace,
    /// `TableAlreadyExists` when `dest` is taken; a store error.
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        let table = self.load_table(src).await?;
        if !self.namespace_exists(dest.namespace()).await? {
            return Err(namespace_not_found(dest.namespace()));
        }
        let _turns = self.commit_turns([&table]).await;
        self.metadata.remove(&cache_key(src));
        self.store.rename_table(src, dest).await
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
    /// in ONE transaction of the store (compare-and-swap on the base location), which
    /// concurrent commits may share (group commit); returns once it is durable.
    ///
    /// # Errors
    /// `CatalogCommitConflicts`, retryable, when a requirement fails (iceberg's
    /// transaction then rebases and retries; the driver does not retry the caller's
    /// requirements) or the pointer kept moving; `TableNotFound` for an unknown table;
    /// `Unexpected` when the warehouse sync or the transaction failed.
    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let table = self.load_table(commit.identifier()).await?;
        let target = super::CommitTarget::metadata(&table);
        let mut stage = MetadataUpdate::new(commit.take_requirements(), commit.take_updates());
        self.commit_one(&target, &mut stage).await
    }
}

impl RedbCatalog {
    /// Removes the table's pointer and its cached metadata; the caller holds its turn.
    async fn drop_pointer_of(&self, ident: &TableIdent) -> Result<()> {
        self.metadata.remove(&cache_key(ident));
        match self.store.drop_pointer(ident, None).await? {
            true => Ok(()),
            false => Err(table_not_found(ident)),
        }
    }
}

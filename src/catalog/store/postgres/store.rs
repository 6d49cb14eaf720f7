//! [`PgStore`] as the catalog's [`Store`]: each operation is the rows of its own module
//! (`rows.rs`, `locations.rs`, `batch.rs`, `cluster.rs`, `turns.rs`); this file maps the
//! catalog's types onto them.

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

use async_trait::async_trait;
use iceberg::{NamespaceIdent, Result, TableIdent};

use super::PgStore;
use super::turns::DatabaseTurns;
use crate::catalog::commit::{CommitPolicy, SHARED_COMMIT_POLICY};
use crate::catalog::counters::Counters;
use crate::catalog::error::io_error;
use crate::catalog::marks::WriterMark;
use crate::catalog::store::{BatchError, Flip, HeldTurns, Store, StoreKind};
use crate::storage::durable;

/// The name parts of the maintenance lease of `ident` in catalog `catalog`.
fn lease_of<'a>(catalog: &'a str, ident: &'a TableIdent) -> Vec<&'a str> {
    let mut parts = vec!["maintain", catalog];
    parts.extend(ident.namespace().as_ref().iter().map(String::as_str));
    parts.push(ident.name());
    parts
}

impl HeldTurns for DatabaseTurns {
    fn take_pointer(&self, ident: &TableIdent) -> Option<String> {
        DatabaseTurns::take_pointer(self, ident)
    }
}

#[async_trait]
impl Store for PgStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Postgres {
            target: self.target().to_string(),
            instance: self.instance_id(),
        }
    }

    fn commit_policy(&self) -> CommitPolicy {
        SHARED_COMMIT_POLICY
    }

    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let parent: Vec<String> = parent.map(|p| p.as_ref().clone()).unwrap_or_default();
        PgStore::list_namespaces(self, &parent)
            .await?
            .into_iter()
            .map(NamespaceIdent::from_vec)
            .collect()
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: &HashMap<String, String>,
    ) -> Result<()> {
        PgStore::create_namespace(self, namespace.as_ref(), properties).await
    }

    async fn namespace_properties(
        &self,
        namespace: &NamespaceIdent,
    ) -> Result<Option<HashMap<String, String>>> {
        PgStore::namespace_properties(self, namespace.as_ref()).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        PgStore::namespace_exists(self, namespace.as_ref()).await
    }

    async fn update_namespace_properties(
        &self,
        namespace: &NamespaceIdent,
        removals: &[String],
        updates: &HashMap<String, String>,
        replace_all: bool,
    ) -> Result<(Vec<String>, Vec<String>)> {
        PgStore::update_namespace_properties(
            self,
            namespace.as_ref(),
            removals,
            updates,
            replace_all,
        )
        .await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        PgStore::drop_namespace(self, namespace.as_ref()).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<String>> {
        PgStore::list_tables(self, namespace.as_ref()).await
    }

    async fn pointer(&self, ident: &TableIdent) -> Result<Option<String>> {
        PgStore::pointer(self, ident.namespace().as_ref(), ident.name()).await
    }

    async fn all_pointers(&self) -> Result<Vec<(TableIdent, String)>> {
        let mut out = Vec::new();
        for (ns, name, location) in PgStore::all_pointers(self).await? {
            // A row the JDBC catalog holds under a namespace skade cannot name is not
            // one of skade's tables.
            if let Ok(ns) = NamespaceIdent::from_vec(ns) {
                out.push((TableIdent::new(ns, name), location));
            }
        }
        Ok(out)
    }

    async fn insert_pointer(
        &self,
        ident: &TableIdent,
        location: &str,
        claim: Option<(&str, &str)>,
        sync: Option<&Path>,
    ) -> Result<()> {
        if let Some(warehouse) = sync {
            sync_off_runtime(warehouse).await?;
        }
        PgStore::insert_pointer(
            self,
            ident.namespace().as_ref(),
            ident.name(),
            location,
            claim,
        )
        .await
    }

    async fn drop_pointer(&self, ident: &TableIdent, expected: Option<&str>) -> Result<bool> {
        PgStore::drop_pointer(self, ident.namespace().as_ref(), ident.name(), expected).await
    }

    async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()> {
        PgStore::rename_table(
            self,
            (from.namespace().as_ref(), from.name()),
            (to.namespace().as_ref(), to.name()),
        )
        .await
    }

    async fn writer_marks(&self, writer: &str) -> Result<Vec<(TableIdent, WriterMark)>> {
        let mut out = Vec::new();
        for (ns, name, mark) in PgStore::writer_marks(self, writer).await? {
            if let Ok(ns) = NamespaceIdent::from_vec(ns) {
                out.push((TableIdent::new(ns, name), mark));
            }
        }
        Ok(out)
    }

    async fn writer_mark(&self, writer: &str, ident: &TableIdent) -> Result<Option<WriterMark>> {
        PgStore::writer_mark(self, writer, ident.namespace().as_ref(), ident.name()).await
    }

    async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)> {
        PgStore::writers(self, writer).await
    }

    async fn forget_idle_writers(&self, cutoff_ms: u64) -> Result<Vec<String>> {
        PgStore::forget_idle_writers(self, cutoff_ms).await
    }

    async fn location_claims(&self) -> Result<Vec<(String, Option<String>)>> {
        PgStore::location_claims(self).await
    }

    async fn adopt_location(&self, location: &str, uuid: &str) -> Result<bool> {
        PgStore::adopt_location(self, location, uuid).await
    }

    async fn release_location(&self, location: &str, uuid: &str) -> Result<()> {
        PgStore::release_location(self, location, uuid).await
    }

    async fn other_catalogs_tables(&self) -> Result<Vec<(String, String)>> {
        PgStore::other_catalogs_tables(self).await
    }

    async fn maintains(&self, ident: &TableIdent) -> Result<bool> {
        self.hold_lease(&lease_of(self.catalog_name(), ident)).await
    }

    async fn held_leases(&self) -> Result<Vec<TableIdent>> {
        let catalog = self.catalog_name();
        let mut out = Vec::new();
        for parts in PgStore::held_leases(self).await {
            // ["maintain", catalog, level…, name]
            let [kind, of, levels @ .., name] = parts.as_slice() else {
                continue;
            };
            if kind != "maintain" || of != catalog || levels.is_empty() {
                continue;
            }
            let namespace = NamespaceIdent::from_vec(levels.to_vec())?;
            out.push(TableIdent::new(namespace, name.clone()));
        }
        Ok(out)
    }

    async fn release_lease(&self, ident: &TableIdent) -> Result<()> {
        PgStore::release_lease(self, &lease_of(self.catalog_name(), ident)).await
    }

    async fn sweeps(&self) -> Result<bool> {
        self.hold_lease(&["sweep", self.catalog_name()]).await
    }

    async fn oldest_write_pin(&self, _local: Option<SystemTime>) -> Result<Option<SystemTime>> {
        self.cluster_oldest_pin().await.map(Some)
    }

    async fn take_turns(
        &self,
        tables: &[(uuid::Uuid, &TableIdent)],
    ) -> Result<Option<Box<dyn HeldTurns>>> {
        Ok(PgStore::take_turns(self, tables)
            .await?
            .map(|turns| Box::new(turns) as Box<dyn HeldTurns>))
    }

    async fn commit_batch(
        &self,
        releases: &[&[Flip]],
        sync: Option<&Path>,
        counters: &Counters,
    ) -> std::result::Result<Vec<Result<()>>, BatchError> {
        let outcomes = PgStore::commit_batch(self, releases, sync)
            .await
            .map_err(BatchError::Store)?;
        if sync.is_some() && outcomes.iter().any(Result::is_ok) {
            counters.record_sync();
        }
        if outcomes.iter().any(Result::is_ok) {
            let commits = counters.record_database_commit();
            crate::catalog::fault::after_commit(commits);
        }
        Ok(outcomes)
    }
}

/// `syncfs` of the local warehouse on the blocking pool.
///
/// # Errors
/// The sync's error, naming the warehouse.
pub(super) async fn sync_off_runtime(warehouse: &Path) -> Result<()> {
    let warehouse = warehouse.to_path_buf();
    crate::storage::blocking::run_blocking(move || {
        durable::sync_warehouse(&warehouse).map_err(|e| io_error("sync warehouse", &warehouse, e))
    })
    .await
    .map_err(|e| {
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, "warehouse sync task failed")
            .with_source(e)
    })?
}

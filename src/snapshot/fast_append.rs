//! iceberg's own fast append ([`FastAppend`], what other Iceberg writers commit), and how
//! any iceberg transaction's `(requirements, updates)` are captured without committing
//! it ([`stage_transaction`]).
//!
//! iceberg 0.10.1 keeps `FastAppendAction::commit` crate-private and `TableCommit`'s
//! builder too, so an outside caller cannot ask for a fast append's commit directly. A
//! `StagingCatalog` is the seam (`docs/design/ingest_multi.md` §f3, translated): its
//! `load_table` returns exactly the base table and its `update_table` keeps the commit's
//! requirements and updates instead of applying them. Running the ordinary
//! `Transaction::commit` against it writes the same manifest and manifest list a real
//! fast append would, and hands back what `atomic_release_raw` needs.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use iceberg::spec::DataFile;

use crate::catalog::{Stage, Staged, TableChange};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent, TableRequirement, TableUpdate,
};

/// Stages `data_files` as one fast append on `table` (one new snapshot when released):
/// writes its manifest and manifest list, and returns its `(requirements, updates)`.
/// The catalog is not touched.
///
/// # Errors
/// iceberg's error from the fast append (e.g. a data file whose partition does not fit
/// the table's spec, or a manifest write failure).
pub async fn stage_fast_append(
    table: &Table,
    data_files: Vec<DataFile>,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    stage_fast_append_with(table, data_files, HashMap::new()).await
}

/// [`stage_fast_append`] whose snapshot summary also carries `properties` (e.g. a
/// producer's writer id and sequence, `catalog::marks`).
///
/// # Errors
/// As [`stage_fast_append`].
pub async fn stage_fast_append_with(
    table: &Table,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let tx = Transaction::new(table);
    let tx = tx
        .fast_append()
        .with_check_duplicate(false)
        .set_snapshot_properties(properties)
        .add_data_files(data_files)
        .apply(tx)?;
    stage_transaction(table, tx).await
}

/// iceberg 0.10.1's fast append of data files into one table: a new manifest of them and
/// every manifest of the parent carried on (no merge), as Iceberg writers that do not
/// merge append commit. Staged again on the table as it stands at each attempt.
#[derive(Debug, Clone)]
pub struct FastAppend {
    files: Vec<DataFile>,
    properties: HashMap<String, String>,
}

impl FastAppend {
    /// The fast append of `files`, with `properties` in its snapshot's summary.
    pub fn new(files: Vec<DataFile>, properties: HashMap<String, String>) -> Self {
        Self { files, properties }
    }
}

#[async_trait]
impl Stage for FastAppend {
    type Out = ();
    type Error = Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<()>>> {
        let [table] = current else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a fast append commits one table",
            ));
        };
        let (requirements, updates) =
            stage_fast_append_with(table, self.files.clone(), self.properties.clone()).await?;
        Ok(Some(Staged::new(
            vec![TableChange::new(requirements, updates)],
            (),
        )))
    }
}

/// Runs `tx` — a transaction built on `table` — against a catalog that only knows
/// `table`, and returns the `(requirements, updates)` it would commit, without touching
/// any real catalog (iceberg 0.10.1 keeps its actions' `commit` crate-private; this is
/// how an outside caller gets at e.g. an expire-snapshots action's plan). Files the
/// actions write (a fast append's manifests) are written.
///
/// # Errors
/// The actions' error (e.g. an expiry that names a referenced snapshot).
pub async fn stage_transaction(
    table: &Table,
    tx: Transaction,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let staging = StagingCatalog {
        base: table.clone(),
        captured: Mutex::new(None),
    };
    tx.commit(&staging).await?;
    let captured = staging
        .captured
        .lock()
        .map_err(|_| Error::new(ErrorKind::Unexpected, "staging catalog lock poisoned"))?
        .take();
    captured.ok_or_else(|| Error::new(ErrorKind::Unexpected, "the transaction produced no commit"))
}

/// A catalog that knows one table and records the commit made to it.
#[derive(Debug)]
struct StagingCatalog {
    base: Table,
    captured: Mutex<Option<(Vec<TableRequirement>, Vec<TableUpdate>)>>,
}

fn unsupported() -> Error {
    Error::new(
        ErrorKind::FeatureUnsupported,
        "the staging catalog only loads its base table and captures one commit",
    )
}

#[async_trait]
impl Catalog for StagingCatalog {
    async fn list_namespaces(&self, _: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        Err(unsupported())
    }
    async fn create_namespace(
        &self,
        _: &NamespaceIdent,
        _: HashMap<String, String>,
    ) -> Result<Namespace> {
        Err(unsupported())
    }
    async fn get_namespace(&self, _: &NamespaceIdent) -> Result<Namespace> {
        Err(unsupported())
    }
    async fn namespace_exists(&self, _: &NamespaceIdent) -> Result<bool> {
        Err(unsupported())
    }
    async fn update_namespace(&self, _: &NamespaceIdent, _: HashMap<String, String>) -> Result<()> {
        Err(unsupported())
    }
    async fn drop_namespace(&self, _: &NamespaceIdent) -> Result<()> {
        Err(unsupported())
    }
    async fn list_tables(&self, _: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        Err(unsupported())
    }
    async fn create_table(&self, _: &NamespaceIdent, _: TableCreation) -> Result<Table> {
        Err(unsupported())
    }
    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        if ident == self.base.identifier() {
            Ok(self.base.clone())
        } else {
            Err(unsupported())
        }
    }
    async fn drop_table(&self, _: &TableIdent) -> Result<()> {
        Err(unsupported())
    }
    async fn purge_table(&self, _: &TableIdent) -> Result<()> {
        Err(unsupported())
    }
    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(ident == self.base.identifier())
    }
    async fn rename_table(&self, _: &TableIdent, _: &TableIdent) -> Result<()> {
        Err(unsupported())
    }
    async fn register_table(&self, _: &TableIdent, _: String) -> Result<Table> {
        Err(unsupported())
    }
    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let staged = (commit.take_requirements(), commit.take_updates());
        *self
            .captured
            .lock()
            .map_err(|_| Error::new(ErrorKind::Unexpected, "staging catalog lock poisoned"))? =
            Some(staged);
        Ok(self.base.clone())
    }
}

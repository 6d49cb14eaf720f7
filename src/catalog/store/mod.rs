//! Where a catalog's durable state lives, behind one trait: [`Store`], with one room per
//! backend — the embedded redb file ([`redb`], the default) and a PostgreSQL database in
//! the Iceberg JDBC catalog's schema shared by several instances ([`postgres`]).
//!
//! A store keeps namespaces (with their properties), table pointers (each table's
//! current metadata location), producers' high-water marks, location claims, and — on a
//! shared database — what instances need of each other (maintenance leases, commit turns,
//! write pins). Everything above it (the commit driver, the release, the metadata JSON,
//! the caches, group commit) is the same for every backend: the catalog holds a
//! `dyn Store` and never asks which one it is.
//!
//! The one write that matters most is [`Store::commit_batch`]: the pointer flips of a
//! group-commit batch (`group_commit.rs`) in ONE transaction of the store, made durable
//! after the local warehouse's `syncfs` — every release's compare-and-swaps checked
//! against the pointers as earlier releases of the batch left them, a failing release
//! failing alone, a multi-table release all or nothing (`docs/design/ingest_multi.md`
//! §f1).

pub mod postgres;
pub mod redb;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use async_trait::async_trait;
use iceberg::{Error, ErrorKind, NamespaceIdent, Result, TableIdent};

use super::commit::CommitPolicy;
use super::counters::Counters;
use super::marks::{MarkAdvance, WriterMark};

/// One pointer flip of a release.
#[derive(Debug, Clone)]
pub(crate) struct Flip {
    /// The table.
    pub(crate) ident: TableIdent,
    /// The pointer the commit was built on; `None` for a table the release creates (the
    /// table must then still be absent).
    pub(crate) base: Option<String>,
    /// The new metadata location.
    pub(crate) new: String,
    /// Namespaces (every level, outermost first) to create when absent; only for creates.
    pub(crate) namespaces: Vec<NamespaceIdent>,
    /// The producer's high-water mark this flip advances, in the same transaction.
    pub(crate) mark: Option<MarkAdvance>,
    /// The claim of the created table's location (location key, table uuid), written
    /// with its pointer (`locations.rs`); only for creates.
    pub(crate) claim: Option<(String, String)>,
}

/// Why a whole batch failed: nothing of it is visible.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BatchError {
    /// The local warehouse's `syncfs` before the commit failed.
    #[error("sync warehouse {path}: {source}")]
    Sync {
        /// The warehouse directory.
        path: PathBuf,
        /// The sync's error.
        source: std::io::Error,
    },
    /// The store's transaction failed (its error; an I/O or redb cause when the storage
    /// under it failed).
    #[error("{}", .0.message())]
    Store(Error),
    /// A bug in the committer or the store; the transaction is rolled back unless the
    /// panic came from inside its commit.
    #[error("the catalog committer panicked; its batch may not be committed")]
    Panicked,
}

/// The commit turns a store holds across instances for one commit (a shared database's
/// advisory locks), handed back when dropped.
pub(crate) trait HeldTurns: std::fmt::Debug + Send + Sync {
    /// The pointer of `ident` as read right after its turn was taken, once (the first
    /// commit under the turns needs no read of its own); `None` once taken.
    fn take_pointer(&self, ident: &TableIdent) -> Option<String>;
}

/// Where the store is, for the start-up log and messages.
#[derive(Debug, Clone)]
pub enum StoreKind {
    /// The embedded redb file.
    Redb,
    /// A PostgreSQL database shared with other instances.
    Postgres {
        /// Host, port and database (no password).
        target: String,
        /// This instance's id in `skade_instances`.
        instance: String,
    },
}

/// A catalog's durable state (module docs). Every method may be called concurrently.
#[async_trait]
pub(crate) trait Store: std::fmt::Debug + Send + Sync {
    /// Where the store is.
    fn kind(&self) -> StoreKind;

    /// The retry policy of commits on this store (`commit.rs`): a shared database, where
    /// writers that take no turn conflict, retries more and jitters.
    fn commit_policy(&self) -> CommitPolicy;

    // ---- namespaces

    /// The namespaces one level below `parent` (the top level for `None`).
    async fn list_namespaces(&self, parent: Option<&NamespaceIdent>)
    -> Result<Vec<NamespaceIdent>>;

    /// Creates `namespace` with `properties`.
    ///
    /// # Errors
    /// `NamespaceAlreadyExists`; `NamespaceNotFound` for a missing parent (redb).
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: &HashMap<String, String>,
    ) -> Result<()>;

    /// `namespace`'s properties, `None` when it does not exist.
    async fn namespace_properties(
        &self,
        namespace: &NamespaceIdent,
    ) -> Result<Option<HashMap<String, String>>>;

    /// Whether `namespace` exists.
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool>;

    /// Removes `removals` and sets `updates` in `namespace`'s properties in one
    /// transaction (all of them replaced by `updates` when `replace_all`); returns the
    /// keys removed and the removals that were absent.
    ///
    /// # Errors
    /// `NamespaceNotFound`.
    async fn update_namespace_properties(
        &self,
        namespace: &NamespaceIdent,
        removals: &[String],
        updates: &HashMap<String, String>,
        replace_all: bool,
    ) -> Result<(Vec<String>, Vec<String>)>;

    /// Drops an empty namespace.
    ///
    /// # Errors
    /// `NamespaceNotFound`; `PreconditionFailed` when it holds tables or namespaces.
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()>;

    // ---- table pointers

    /// The names of the tables directly in `namespace`, sorted.
    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<String>>;

    /// `ident`'s current metadata location, `None` when there is no such table.
    async fn pointer(&self, ident: &TableIdent) -> Result<Option<String>>;

    /// Every table with its current metadata location.
    async fn all_pointers(&self) -> Result<Vec<(TableIdent, String)>>;

    /// Inserts a new table's pointer (DDL, not a data commit) and, when given, the claim
    /// `(location key, table uuid)` of its location, in one transaction, after syncing
    /// the local warehouse `sync` (when given) so the metadata it names is durable first.
    ///
    /// # Errors
    /// `TableAlreadyExists`; `DataInvalid` when another table claimed the location.
    async fn insert_pointer(
        &self,
        ident: &TableIdent,
        location: &str,
        claim: Option<(&str, &str)>,
        sync: Option<&Path>,
    ) -> Result<()>;

    /// Removes `ident`'s pointer — only while it is `expected`, when given. Returns
    /// whether it removed one.
    async fn drop_pointer(&self, ident: &TableIdent, expected: Option<&str>) -> Result<bool>;

    /// Moves a table's pointer to another name.
    ///
    /// # Errors
    /// `TableNotFound` for `from`; `TableAlreadyExists` for `to`.
    async fn rename_table(&self, from: &TableIdent, to: &TableIdent) -> Result<()>;

    // ---- producers' marks (`marks.rs`)

    /// Every table `writer` committed to, with its mark there, in table-name order.
    async fn writer_marks(&self, writer: &str) -> Result<Vec<(TableIdent, WriterMark)>>;

    /// `writer`'s mark in `ident`.
    async fn writer_mark(&self, writer: &str, ident: &TableIdent) -> Result<Option<WriterMark>>;

    /// The number of writer ids with a mark, and whether `writer` (when given) is one.
    async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)>;

    /// Forgets every writer id whose last commit is older than `cutoff_ms` (ms since the
    /// Unix epoch), with its marks; returns the ids forgotten.
    async fn forget_idle_writers(&self, cutoff_ms: u64) -> Result<Vec<String>>;

    // ---- location claims (`locations.rs`)

    /// Every claim: (location key, table uuid; `None` for a table to adopt).
    async fn location_claims(&self) -> Result<Vec<(String, Option<String>)>>;

    /// Gives the claim without uuid at `location` to table `uuid`; whether it did.
    async fn adopt_location(&self, location: &str, uuid: &str) -> Result<bool>;

    /// Removes the claim of `location` by table `uuid`.
    async fn release_location(&self, location: &str, uuid: &str) -> Result<()>;

    /// The tables of the other catalog names sharing the store: (`catalog/ns.table`,
    /// metadata location). None on a store of one catalog.
    async fn other_catalogs_tables(&self) -> Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }

    // ---- several instances (`shared.rs`)

    /// Whether this instance maintains `ident` (holds its maintenance lease). Always on a
    /// store of one instance.
    async fn maintains(&self, _ident: &TableIdent) -> Result<bool> {
        Ok(true)
    }

    /// The maintenance leases this instance holds, as table identifiers.
    async fn held_leases(&self) -> Result<Vec<TableIdent>> {
        Ok(Vec::new())
    }

    /// Hands back the maintenance lease of `ident`.
    async fn release_lease(&self, _ident: &TableIdent) -> Result<()> {
        Ok(())
    }

    /// Whether this instance sweeps the warehouse (holds the sweep lease).
    async fn sweeps(&self) -> Result<bool> {
        Ok(true)
    }

    /// The oldest write pin of every live instance, given this process's own (`local`).
    async fn oldest_write_pin(&self, local: Option<SystemTime>) -> Result<Option<SystemTime>> {
        Ok(local)
    }

    /// Takes the commit turns of `tables` (uuid, identifier, in uuid order) across
    /// instances; `None` when the store has none to take.
    ///
    /// # Errors
    /// The store's error: the caller goes ahead without them.
    async fn take_turns(
        &self,
        _tables: &[(uuid::Uuid, &TableIdent)],
    ) -> Result<Option<Box<dyn HeldTurns>>> {
        Ok(None)
    }

    // ---- group commit

    /// Commits `releases` — each the flips of one table, or of several that move
    /// together — in ONE transaction (module docs), the local warehouse `sync` (when
    /// given) synced just before it commits; records the commit and the sync in
    /// `counters`. Returns each release's own outcome, in order: `Ok`, or the release's
    /// `CatalogCommitConflicts` (retryable), `TableAlreadyExists`, `TableNotFound`,
    /// `PreconditionFailed` (a producer's mark) or `DataInvalid` (a location claimed by
    /// another table), with nothing of it written.
    ///
    /// # Errors
    /// [`BatchError`] when the whole batch failed: nothing of it is visible.
    async fn commit_batch(
        &self,
        releases: &[&[Flip]],
        sync: Option<&Path>,
        counters: &Counters,
    ) -> std::result::Result<Vec<Result<()>>, BatchError>;
}

/// One flip's compare-and-swap against `current`, the table's pointer as the committing
/// transaction sees it (`None`: no such table).
///
/// # Errors
/// `TableAlreadyExists` for a create whose table exists, `TableNotFound` for an advance
/// whose table is gone, `CatalogCommitConflicts` (retryable, with the expected and found
/// locations) for an advance whose base moved.
pub(crate) fn cas_outcome(flip: &Flip, current: Option<&str>) -> Result<()> {
    let failure = match (&flip.base, current) {
        (None, None) => return Ok(()),
        (None, Some(_)) => Error::new(
            ErrorKind::TableAlreadyExists,
            format!("table {} was created concurrently", flip.ident),
        ),
        (Some(_), None) => Error::new(
            ErrorKind::TableNotFound,
            format!("table {} was dropped during the commit", flip.ident),
        ),
        (Some(base), Some(current)) if current == base => return Ok(()),
        (Some(base), Some(current)) => Error::new(
            ErrorKind::CatalogCommitConflicts,
            format!("table {} was committed concurrently", flip.ident),
        )
        .with_context("expected", base.clone())
        .with_context("found", current.to_string())
        .with_retryable(true),
    };
    Err(failure)
}

/// The failure of a create whose location another table claimed since it was planned.
pub(crate) fn location_taken(table: &TableIdent, location: &str) -> Error {
    Error::new(
        ErrorKind::DataInvalid,
        format!(
            "table {table}: location {location} was taken by another table while the create was prepared; create it again"
        ),
    )
}

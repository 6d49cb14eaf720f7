//! Snapshot producers: one file per kind of table change, each a [`Stage`] the catalog's
//! commit driver runs (`catalog/commit.rs`) — as iceberg-rust's `transaction/` actions
//! are run by its `Transaction::commit`.
//!
//! A stage is handed the commit's tables as they stand under their commit turns and
//! builds the change of each — the files it must write (manifests, manifest lists) and
//! the `(requirements, updates)` that make them current — or gives way with `None`.
//! The driver releases what it built in ONE transaction of the catalog's store and, on
//! a retryable conflict of that release, runs the stage again on the tables as they then
//! stand. A stage's error is its own type (a REST refusal stays a 400 from the stage to
//! the response) and is never retried.
//!
//! The producers:
//! - [`append`]: Java's merge append (plain, or evolving the schema in the same commit),
//!   of one table or of several in one commit — both ingest lanes;
//! - [`fast_append`]: iceberg's own fast append (what other Iceberg writers do);
//! - [`replace`]: compaction's `replace` (small data files swapped for their rewrite);
//! - [`rewrite_manifests`]: manifest merging's `replace` (the same files in fewer
//!   manifests);
//! - [`expire`]: snapshot expiry;
//! - [`metadata`]: a caller's own requirements and updates (the `iceberg::Catalog`
//!   face's `update_table`);
//! - [`schema_change`]: a schema change committed together with an append (schema
//!   evolution on ingest);
//!
//! and what they share: [`manifests`] (writing manifests, Java's merge rules) and
//! [`deletes`] (which data files a live delete file may apply to).

pub mod append;
pub(crate) mod deletes;
pub mod expire;
pub mod fast_append;
pub mod manifests;
pub mod metadata;
pub mod replace;
pub mod rewrite_manifests;
pub mod schema_change;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};

pub use crate::catalog::marks::WriterRange;

/// One table's change, as a stage built it: the requirements its base must still meet,
/// the updates to apply, and the producer's mark it advances.
#[derive(Debug, Clone, Default)]
pub struct TableChange {
    /// Requirements on the table as it stands when released.
    pub requirements: Vec<TableRequirement>,
    /// Updates to apply (an `AddSnapshot` among them for a data commit).
    pub updates: Vec<TableUpdate>,
    /// The producer's writer range this change commits, if it has one.
    pub mark: Option<WriterRange>,
}

impl TableChange {
    /// A change of `requirements` and `updates`, advancing no mark.
    pub fn new(requirements: Vec<TableRequirement>, updates: Vec<TableUpdate>) -> Self {
        Self {
            requirements,
            updates,
            mark: None,
        }
    }

    /// This change, also advancing `mark`.
    pub fn with_mark(mut self, mark: Option<WriterRange>) -> Self {
        self.mark = mark;
        self
    }
}

/// What a stage built: each target's change, in target order, and a value for the
/// caller (e.g. what a plan counted).
#[derive(Debug)]
pub struct Staged<T> {
    /// One change per commit target, in target order.
    pub changes: Vec<TableChange>,
    /// What the caller gets back when the commit lands.
    pub out: T,
}

impl<T> Staged<T> {
    /// Changes `changes` with the caller's value `out`.
    pub fn new(changes: Vec<TableChange>, out: T) -> Self {
        Self { changes, out }
    }
}

/// One producer of table changes, run by the commit driver on every attempt of a commit
/// (module docs).
#[async_trait]
pub trait Stage: Send {
    /// What the caller gets back when the commit lands.
    type Out: Send;
    /// The stage's own error; the driver's errors (the release's, a dropped table's)
    /// convert into it.
    type Error: From<iceberg::Error> + Send;

    /// Builds the change of every target on `current` — the targets as they stand, in
    /// target order (a planned table for a table the commit creates) — writing the files
    /// it needs; or `None` to give way (nothing is committed).
    ///
    /// # Errors
    /// The stage's own: the commit fails with it, unretried.
    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<Self::Out>>, Self::Error>;
}

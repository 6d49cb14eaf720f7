//! What the commit driver runs: a [`Stage`] builds each target table's [`TableChange`]
//! on the tables as they stand (`commit.rs` runs it; the producers live in
//! `crate::snapshot`, one file each, as iceberg-rust's `transaction/` actions). The one
//! stage kept here is [`MetadataUpdate`]: a caller's own requirements and updates, what
//! the `iceberg::Catalog` face's `update_table` (and a create) commits.

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, TableRequirement, TableUpdate};

pub use super::marks::WriterRange;

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

/// Commits `requirements` and `updates` on one table as given. The requirements are
/// checked against the table as it stands at each attempt, and a failed one fails the
/// commit at once (the caller's conflict: it refreshes and retries, as Java's
/// `CatalogHandlers.commit` does); only the release's own conflict is re-staged.
#[derive(Debug, Clone)]
pub struct MetadataUpdate {
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
}

impl MetadataUpdate {
    /// The change of `requirements` and `updates`.
    pub fn new(requirements: Vec<TableRequirement>, updates: Vec<TableUpdate>) -> Self {
        Self {
            requirements,
            updates,
        }
    }
}

#[async_trait]
impl Stage for MetadataUpdate {
    type Out = ();
    type Error = Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<()>>, Error> {
        let [table] = current else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a metadata update commits one table",
            ));
        };
        for requirement in &self.requirements {
            requirement.check(Some(table.metadata()))?;
        }
        let change = TableChange::new(self.requirements.clone(), self.updates.clone());
        Ok(Some(Staged::new(vec![change], ())))
    }
}

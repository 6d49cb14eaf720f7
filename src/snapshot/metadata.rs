//! A caller's own change of one table: its requirements and updates as given (what the
//! `iceberg::Catalog` face's `update_table` commits, e.g. iceberg's transactions).

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, TableRequirement, TableUpdate};

use super::{Stage, Staged, TableChange};

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

//! `POST /v1/namespaces/{namespace}/tables/{table}` (the spec's `updateTable`): a
//! commit of metadata-only updates, through the catalog's commit driver like every data
//! commit ([`RedbCatalog::commit`]: the table's commit turn, so it never races this
//! process's puts; the requirements checked against the table as it stands; the new
//! metadata JSON written and synced, the pointer compare-and-swapped in the
//! group-commit redb transaction, counted in `skade_catalog_commits_total`). A failed
//! requirement answers 409 at once; a pointer moved from outside this process between
//! the check and the flip is checked and committed again (the driver's policy, as
//! Java's `CatalogHandlers.commit` retries only the compare-and-swap).
//!
//! Served updates: `add-schema`, `set-current-schema`, `add-spec`, `set-default-spec`,
//! `add-sort-order`, `set-default-sort-order`, `set-properties`, `remove-properties`.
//! Every requirement of the spec is checked, and the updates must leave a table every
//! reader can read (`rest::validate`: schema evolution and partition spec rules,
//! 400 naming the column). Any other update — `add-snapshot` above
//! all: data reaches skade's tables through Flight — is refused with 400 naming it, and
//! nothing is written.

use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use iceberg::table::Table;
use iceberg::{Catalog, TableRequirement, TableUpdate};

use super::model::{CommitTableRequest, CommitTableResponse};
use super::{RestError, body_of, json, table_of};
use crate::catalog::{CommitTarget, RedbCatalog};
use crate::catalog::{Stage, Staged, TableChange};

/// The `action` of every update `commit_table` serves.
pub const SERVED_UPDATES: [&str; 8] = [
    "add-schema",
    "set-current-schema",
    "add-spec",
    "set-default-spec",
    "add-sort-order",
    "set-default-sort-order",
    "set-properties",
    "remove-properties",
];

/// Commits a `CommitTableRequest` and answers `CommitTableResponse`: 400 for an unknown
/// or refused update ([`super::validate::check_commit`]) or an identifier that is not the
/// path's, 404 for a missing table,
/// 409 `CommitFailedException` for a failed requirement or a concurrent commit.
pub(super) async fn commit_table(
    State(catalog): State<Arc<RedbCatalog>>,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Bytes,
) -> Result<Response, RestError> {
    let ident = table_of(path)?;
    let request: CommitTableRequest = body_of("CommitTableRequest", &body)?;
    if let Some(named) = &request.identifier {
        let named = named
            .ident()
            .map_err(|e| RestError::bad(format!("identifier: {}", e.message())))?;
        if named != ident {
            return Err(RestError::bad(format!(
                "the body's identifier {named} is not the path's table {ident}"
            )));
        }
    }
    for update in &request.updates {
        let action = action_of(update);
        if !SERVED_UPDATES.contains(&action.as_str()) {
            return Err(RestError::bad(format!(
                "update {action:?} is not served: commits here carry metadata-only updates \
                 ({}); data is committed through Flight",
                SERVED_UPDATES.join(", ")
            )));
        }
    }
    let table = catalog
        .load_table(&ident)
        .await
        .map_err(|e| RestError::of_table(&ident, e))?;
    let target = CommitTarget::metadata(&table);
    let mut stage = RestUpdate {
        requirements: request.requirements,
        updates: request.updates,
    };
    let committed = catalog
        .commit_one(&target, &mut stage)
        .await
        .map_err(|e| match e {
            RestCommitError::Refused(refused) => refused,
            RestCommitError::Catalog(e) => RestError::of_table(&ident, e),
        })?;
    let metadata_location = committed
        .metadata_location_result()
        .map_err(|e| RestError::of_table(&ident, e))?
        .to_string();
    tracing::info!(table = %ident, %metadata_location, "metadata committed");
    json(
        "commit table",
        &CommitTableResponse {
            metadata_location,
            metadata: committed.metadata().clone(),
        },
    )
}

/// A REST client's `updateTable` as a snapshot producer: its requirements checked
/// against the table as it stands (a failure is the client's conflict, 409, not
/// retried), then its updates checked on that same table before anything is written
/// ([`super::validate::check_commit`]: a refusal is a 400 that reaches the response as
/// it is).
struct RestUpdate {
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
}

/// Why a REST commit did not land: its updates were refused, or the catalog's error.
enum RestCommitError {
    Refused(RestError),
    Catalog(iceberg::Error),
}

impl From<iceberg::Error> for RestCommitError {
    fn from(e: iceberg::Error) -> Self {
        Self::Catalog(e)
    }
}

#[async_trait]
impl Stage for RestUpdate {
    type Out = ();
    type Error = RestCommitError;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<()>>, RestCommitError> {
        let [table] = current else {
            return Err(RestCommitError::Catalog(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "a REST commit commits one table",
            )));
        };
        for requirement in &self.requirements {
            requirement.check(Some(table.metadata()))?;
        }
        super::validate::check_commit(table, &self.updates).map_err(RestCommitError::Refused)?;
        let change = TableChange::new(self.requirements.clone(), self.updates.clone());
        Ok(Some(Staged::new(vec![change], ())))
    }
}

/// An update's `action`, as the spec spells it.
fn action_of(update: &TableUpdate) -> String {
    serde_json::to_value(update)
        .ok()
        .and_then(|v| v.get("action").and_then(|a| a.as_str()).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::action_of;
    use iceberg::TableUpdate;

    // Catches the served list drifting from iceberg's serde names (a served update
    // would then be refused).
    #[test]
    fn served_actions_are_iceberg_spellings() {
        let update: TableUpdate =
            serde_json::from_str(r#"{"action":"set-default-spec","spec-id":-1}"#).unwrap();
        assert_eq!(action_of(&update), "set-default-spec");
        let update: TableUpdate =
            serde_json::from_str(r#"{"action":"remove-properties","removals":["a"]}"#).unwrap();
        assert_eq!(action_of(&update), "remove-properties");
    }
}

//! The DDL routes of the REST catalog: create and drop namespaces, update namespace
//! properties, create, drop (optionally purging) and rename tables (the spec's
//! `createNamespace`, `dropNamespace`, `updateProperties`, `createTable`, `dropTable`,
//! `renameTable`).
//!
//! A table is created through the catalog's commit driver ([`RedbCatalog::commit`] of a
//! [`CommitTarget::Create`]: compare-and-swap on an absent pointer, the warehouse synced
//! before the pointer exists). Dropping and renaming are the catalog's own
//! (`iceberg::Catalog::drop_table`, `purge_table`, `rename_table`), which take the table's
//! commit turn so a commit of this process already under way finishes first; a put still streaming into the table fails at its commit with
//! `NotFound` naming the table, and never recreates it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use iceberg::spec::FormatVersion;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};

use super::model::{
    CreateNamespaceRequest, CreateNamespaceResponse, CreateTableRequest, RenameTableRequest,
    UpdateNamespacePropertiesRequest, UpdateNamespacePropertiesResponse,
};
use super::{
    RestError, body_of, json, load_table_result, namespace_of, path_param, query_param, table_of,
};
use crate::catalog::MetadataUpdate;
use crate::catalog::{CommitTarget, RedbCatalog};

type Db = State<Arc<RedbCatalog>>;

/// `POST /v1/namespaces`: creates a namespace (its parent must exist).
pub(super) async fn create_namespace(
    State(catalog): Db,
    body: Bytes,
) -> Result<Response, RestError> {
    let request: CreateNamespaceRequest = body_of("CreateNamespaceRequest", &body)?;
    let ns = levels_of(request.namespace)?;
    check_new_name(&ns, None)?;
    let namespace = catalog
        .create_namespace(&ns, request.properties)
        .await
        .map_err(|e| RestError::of_namespace(&ns, e))?;
    json(
        "create namespace",
        &CreateNamespaceResponse {
            namespace: super::model::levels(namespace.name()),
            properties: namespace.properties().clone(),
        },
    )
}

/// `DELETE /v1/namespaces/{namespace}`: drops an empty namespace (409
/// `NamespaceNotEmptyException` when it holds tables or namespaces).
pub(super) async fn drop_namespace(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, RestError> {
    let ns = namespace_of(&path_param(path)?)?;
    match catalog.drop_namespace(&ns).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(e) if e.kind() == ErrorKind::PreconditionFailed => Err(RestError::NamespaceNotEmpty {
            namespace: ns.join("."),
        }),
        Err(e) => Err(RestError::of_namespace(&ns, e)),
    }
}

/// `POST /v1/namespaces/{namespace}/properties`: sets and removes properties in one
/// catalog transaction (422 when a key is both set and removed).
pub(super) async fn update_properties(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, RestError> {
    let ns = namespace_of(&path_param(path)?)?;
    let request: UpdateNamespacePropertiesRequest =
        body_of("UpdateNamespacePropertiesRequest", &body)?;
    if let Some(both) = request
        .removals
        .iter()
        .find(|k| request.updates.contains_key(*k))
    {
        return Err(RestError::Unprocessable {
            reason: format!("property {both:?} is both in updates and in removals"),
        });
    }
    let (updated, removed, missing) = catalog
        .update_namespace_properties(&ns, request.removals, request.updates)
        .await
        .map_err(|e| RestError::of_namespace(&ns, e))?;
    json(
        "update namespace properties",
        &UpdateNamespacePropertiesResponse {
            updated,
            removed,
            missing,
        },
    )
}

/// `POST /v1/namespaces/{namespace}/tables`: creates a table with the request's schema,
/// partition spec, sort order and properties, and answers its `LoadTableResult`.
/// `stage-create` is refused (400): skade creates tables at once.
pub(super) async fn create_table(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, RestError> {
    let ns = namespace_of(&path_param(path)?)?;
    let request = create_request(&body)?;
    check_new_name(&ns, Some(&request.name))?;
    let ident = TableIdent::new(ns.clone(), request.name.clone());
    check_can_create(&catalog, &ident).await?;
    let location = request
        .location
        .as_deref()
        .map(|l| location_in(catalog.warehouse(), l))
        .transpose()?;
    super::validate::check_create_spec(&request.schema, request.partition_spec.as_ref())?;
    let mut properties = request.properties;
    let format_version = format_version_of(&mut properties)?;
    let creation = TableCreation {
        name: request.name,
        location,
        schema: request.schema,
        partition_spec: request.partition_spec,
        sort_order: request.write_order,
        properties,
        format_version,
    };
    let planned = catalog
        .plan_table(&ident, creation)
        .await
        .map_err(|e| RestError::of_table(&ident, e))?;
    super::validate::check_new_table(&ident.to_string(), planned.metadata())?;
    let target = CommitTarget::Create(planned);
    let mut create = MetadataUpdate::new(Vec::new(), Vec::new());
    let table = catalog
        .commit_one(&target, &mut create)
        .await
        .map_err(|e| RestError::of_table(&ident, e))?;
    // No credentials here: a load-table that asks for them gets them.
    load_table_result(&catalog, "create table", &table, false)
}

/// The `CreateTableRequest` of `body`; a schema without an id gets id 0 (clients send a
/// fresh schema that has none yet; the first schema is 0 anyway).
///
/// # Errors
/// 400 for a body that is not a `CreateTableRequest`, or that asks for `stage-create`
/// (the spec's createTable declares no 406).
fn create_request(body: &Bytes) -> Result<CreateTableRequest, RestError> {
    let mut value: serde_json::Value = body_of("CreateTableRequest", body)?;
    if let Some(schema) = value.get_mut("schema").and_then(|s| s.as_object_mut()) {
        schema
            .entry("schema-id")
            .or_insert(serde_json::Value::from(0));
    }
    let request: CreateTableRequest = serde_json::from_value(value)
        .map_err(|e| RestError::bad(format!("invalid CreateTableRequest body: {e}")))?;
    if request.stage_create {
        return Err(RestError::bad(
            "stage-create is not served: skade creates tables at once; create without it",
        ));
    }
    Ok(request)
}

/// Checks that `ident`'s namespace exists and `ident` does not.
///
/// # Errors
/// `NoSuchNamespace` (404), `AlreadyExists` (409), or the catalog's error.
async fn check_can_create(catalog: &RedbCatalog, ident: &TableIdent) -> Result<(), RestError> {
    let ns = ident.namespace();
    if !catalog
        .namespace_exists(ns)
        .await
        .map_err(|e| RestError::of_namespace(ns, e))?
    {
        return Err(RestError::NoSuchNamespace {
            namespace: ns.join("."),
        });
    }
    if catalog
        .table_exists(ident)
        .await
        .map_err(|e| RestError::of_table(ident, e))?
    {
        return Err(RestError::AlreadyExists {
            name: format!("table {ident}"),
        });
    }
    Ok(())
}

/// Takes the `format-version` table property out of `properties` (the REST spec passes
/// it as a property): 2 when absent.
///
/// # Errors
/// 400 for a version other than 1, 2 or 3.
fn format_version_of(properties: &mut HashMap<String, String>) -> Result<FormatVersion, RestError> {
    match properties.remove("format-version").as_deref() {
        None | Some("2") => Ok(FormatVersion::V2),
        Some("1") => Ok(FormatVersion::V1),
        Some("3") => Ok(FormatVersion::V3),
        Some(other) => Err(RestError::bad(format!(
            "format-version {other:?} is not 1, 2 or 3"
        ))),
    }
}

/// `DELETE /v1/namespaces/{namespace}/tables/{table}[?purgeRequested=true]`: removes the
/// table from the catalog; with `purgeRequested=true` also its files under its location
/// (`catalog::purge`).
pub(super) async fn drop_table(
    State(catalog): Db,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<StatusCode, RestError> {
    let ident = table_of(path)?;
    // Booleans case-insensitively: pyiceberg sends `True`.
    let purge = match query_param(query.as_deref(), "purgeRequested") {
        None => false,
        Some(flag) if flag.eq_ignore_ascii_case("false") => false,
        Some(flag) if flag.eq_ignore_ascii_case("true") => true,
        Some(other) => {
            return Err(RestError::bad(format!(
                "purgeRequested {other:?} is not true or false"
            )));
        }
    };
    let dropped = if purge {
        catalog.purge_table(&ident).await
    } else {
        catalog.drop_table(&ident).await
    };
    dropped.map_err(|e| RestError::of_table(&ident, e))?;
    tracing::info!(table = %ident, purge, "table dropped");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/tables/rename`: moves the catalog entry; the files stay where they are.
pub(super) async fn rename_table(State(catalog): Db, body: Bytes) -> Result<StatusCode, RestError> {
    let request: RenameTableRequest = body_of("RenameTableRequest", &body)?;
    let source = identifier(&request.source)?;
    let destination = identifier(&request.destination)?;
    check_new_name(destination.namespace(), Some(destination.name()))?;
    match catalog.rename_table(&source, &destination).await {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NamespaceNotFound => {
            return Err(RestError::NoSuchNamespace {
                namespace: destination.namespace().join("."),
            });
        }
        Err(e) if e.kind() == ErrorKind::TableAlreadyExists => {
            return Err(RestError::AlreadyExists {
                name: format!("table {destination}"),
            });
        }
        Err(e) => return Err(RestError::of_table(&source, e)),
    }
    tracing::info!(from = %source, to = %destination, "table renamed");
    Ok(StatusCode::NO_CONTENT)
}

/// A `TableIdentifier` of a body as iceberg's, refusing empty names and levels.
fn identifier(id: &super::model::TableIdentifier) -> Result<TableIdent, RestError> {
    if id.name.is_empty() {
        return Err(RestError::bad("empty table name"));
    }
    Ok(TableIdent::new(
        levels_of(id.namespace.clone())?,
        id.name.clone(),
    ))
}

/// A body's `Namespace` array: at least one level, none empty.
fn levels_of(levels: Vec<String>) -> Result<NamespaceIdent, RestError> {
    if levels.iter().any(String::is_empty) {
        return Err(RestError::bad(format!(
            "namespace {levels:?} has an empty level"
        )));
    }
    NamespaceIdent::from_vec(levels)
        .map_err(|e| RestError::bad(format!("namespace: {}", e.message())))
}

/// Checks a namespace (and table name) to be created against the names Flight accepts
/// (docs/SERVICE.md, "Table names": `[A-Za-z0-9_-]+`, at most 128 bytes, at most 8
/// namespace levels): each is a directory under the warehouse, so `..`, `/` and the like
/// must never reach a path.
fn check_new_name(ns: &NamespaceIdent, table: Option<&str>) -> Result<(), RestError> {
    crate::catalog::names::check_name(ns.iter().map(String::as_str), table).map_err(RestError::bad)
}

/// A requested table location, accepted only as a plain absolute path under the
/// warehouse (`file://` stripped): purge removes files under it, so it must not name
/// anything else on the server.
fn location_in(warehouse: &crate::storage::Warehouse, location: &str) -> Result<String, RestError> {
    let Some(warehouse) = warehouse.local_path() else {
        // An object-store warehouse: a location below its root, without `..`.
        let root = format!("{}/", warehouse.root().trim_end_matches('/'));
        let location = location.trim_end_matches('/');
        if !location.starts_with(&root) || location.split('/').any(|part| part == "..") {
            return Err(RestError::bad(format!(
                "location {location:?} must be below the warehouse {root:?}, without `..`"
            )));
        }
        return Ok(location.to_string());
    };
    let path = crate::storage::warehouse::local_path(location.trim_end_matches('/'));
    if !crate::catalog::is_plain_absolute(&path)
        || !path.starts_with(warehouse)
        || path == warehouse
    {
        return Err(RestError::bad(format!(
            "location {location:?} must be an absolute path below the warehouse, without `..`"
        )));
    }
    Ok(path.to_string_lossy().into_owned())
}

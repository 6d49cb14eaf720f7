//! The Iceberg REST catalog API, served next to `/metrics` so any Iceberg engine
//! (pyiceberg, DuckDB, Spark, Trino) reads skade's tables with
//! `uri=http://<metrics-addr>`, always at the committed snapshot, and creates, evolves,
//! renames and drops them.
//!
//! Served, without a `prefix` (`/v1/namespaces/...`): `GET /v1/config`; listing (paginated:
//! `page.rs`), loading, creating and dropping namespaces and updating their properties;
//! listing, loading, creating, dropping (with `purgeRequested`) and renaming tables
//! (`ddl.rs`); and committing metadata-only table updates ([`commit`]). `GET /v1/config`
//! advertises exactly these in `endpoints`; a method a served path does not serve answers
//! 405, any other path 404. Multi-level namespaces are joined with the unit separator
//! (`%1F` in a URL). Errors carry the spec's `{"error": ErrorModel}` body ([`RestError`]).

pub mod commit;
mod ddl;
mod error;
pub mod model;
mod page;
mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{Instrument, info, info_span};

use crate::auth::Tokens;
use crate::catalog::RedbCatalog;
pub use error::RestError;
use model::{
    CatalogConfig, GetNamespaceResponse, ListNamespacesResponse, ListTablesResponse,
    LoadTableResult, TableIdentifier,
};
use page::PageRequest;

/// Every endpoint this module serves besides `GET /v1/config`, spelled as the spec's
/// `CatalogConfig.endpoints` wants them.
pub const ENDPOINTS: [&str; 13] = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/tables/rename",
];

/// Separates the levels of a namespace in a path or in the `parent` query parameter.
const NAMESPACE_SEP: char = '\u{1f}';

/// The REST catalog routes over `catalog`, ready to merge into the metrics router. With
/// `tokens` (the Flight server's `--auth-token-file`), every route — reads and writes
/// alike — needs the same `authorization: Bearer <token>` header as Flight;
/// `/metrics`, `/healthz` and `/readyz` stay open.
pub fn router(catalog: Arc<RedbCatalog>, tokens: Option<Arc<Tokens>>) -> Router {
    let routes = Router::new()
        .route("/v1/config", get(get_config))
        .route(
            "/v1/namespaces",
            get(list_namespaces).post(ddl::create_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}",
            get(load_namespace)
                .head(namespace_exists)
                .delete(ddl::drop_namespace),
        )
        .route(
            "/v1/namespaces/{namespace}/properties",
            post(ddl::update_properties),
        )
        .route(
            "/v1/namespaces/{namespace}/tables",
            get(list_tables).post(ddl::create_table),
        )
        .route(
            "/v1/namespaces/{namespace}/tables/{table}",
            get(load_table)
                .head(table_exists)
                .post(commit::commit_table)
                .delete(ddl::drop_table),
        )
        .route("/v1/tables/rename", post(ddl::rename_table))
        .with_state(catalog);
    let routes = match tokens {
        Some(tokens) => routes.layer(axum::middleware::from_fn_with_state(tokens, require_bearer)),
        None => routes,
    };
    routes.layer(axum::middleware::from_fn(in_span))
}

/// Runs a REST request in a `rest` span with its `method`, `path` and `peer`, as a Flight
/// RPC runs in its `rpc` span.
async fn in_span(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let span = info_span!(
        "rest",
        method = %request.method(),
        path = %request.uri().path(),
        peer = %peer_of(&request),
    );
    next.run(request).instrument(span).await
}

/// The client's address (empty when the server runs without connect info).
fn peer_of(request: &axum::extract::Request) -> String {
    request
        .extensions()
        .get::<axum::extract::ConnectInfo<crate::tls::Peer>>()
        .map(|info| info.0.0.to_string())
        .unwrap_or_default()
}

/// Refuses a request without a valid bearer token with 401 and the spec's error body.
async fn require_bearer(
    State(tokens): State<Arc<Tokens>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if tokens.allows_header(header) {
        next.run(request).await
    } else {
        tokens.refused(crate::auth::SURFACE_REST);
        // The same event as a refused Flight call (`auth::FlightGuard`).
        info!(
            peer = %peer_of(&request),
            header = if header.is_some() { "invalid" } else { "missing" },
            "unauthenticated"
        );
        RestError::NotAuthorized.into_response()
    }
}

type Db = State<Arc<RedbCatalog>>;

async fn get_config() -> Result<Response, RestError> {
    json(
        "config",
        &CatalogConfig {
            defaults: BTreeMap::new(),
            overrides: BTreeMap::new(),
            endpoints: ENDPOINTS.to_vec(),
        },
    )
}

/// `GET /v1/namespaces[?parent=a%1Fb][&pageToken=…&pageSize=n]`: the namespaces one level
/// below `parent` (top level when absent or empty), one page of them ([`page`]).
async fn list_namespaces(
    State(catalog): Db,
    RawQuery(query): RawQuery,
) -> Result<Response, RestError> {
    let paging = PageRequest::parse(query.as_deref())?;
    let parent = query_param(query.as_deref(), "parent")
        .filter(|p| !p.is_empty())
        .map(|p| namespace_of(&p))
        .transpose()?;
    let namespaces = catalog
        .list_namespaces(parent.as_ref())
        .await
        .map_err(|e| match &parent {
            Some(ns) => RestError::of_namespace(ns, e),
            None => RestError::of_catalog(String::new(), None, e),
        })?;
    let page = paging.page(namespaces, |ns| ns.as_ref().join("\u{1f}"));
    json(
        "list namespaces",
        &ListNamespacesResponse {
            next_page_token: page.next,
            namespaces: page.items.iter().map(model::levels).collect(),
        },
    )
}

async fn load_namespace(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, RestError> {
    let ns = namespace_of(&path_param(path)?)?;
    let namespace = catalog
        .get_namespace(&ns)
        .await
        .map_err(|e| RestError::of_namespace(&ns, e))?;
    json(
        "load namespace",
        &GetNamespaceResponse {
            namespace: model::levels(namespace.name()),
            properties: namespace.properties().clone(),
        },
    )
}

async fn namespace_exists(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, RestError> {
    let ns = namespace_of(&path_param(path)?)?;
    match catalog.namespace_exists(&ns).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(RestError::NoSuchNamespace {
            namespace: ns.join("."),
        }),
        Err(e) => Err(RestError::of_namespace(&ns, e)),
    }
}

/// `GET /v1/namespaces/{namespace}/tables[?pageToken=…&pageSize=n]`: the tables directly
/// in the namespace, one page of them ([`page`]).
async fn list_tables(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, RestError> {
    let paging = PageRequest::parse(query.as_deref())?;
    let ns = namespace_of(&path_param(path)?)?;
    let tables = catalog
        .list_tables(&ns)
        .await
        .map_err(|e| RestError::of_namespace(&ns, e))?;
    let page = paging.page(tables, |t| t.name().to_string());
    json(
        "list tables",
        &ListTablesResponse {
            next_page_token: page.next,
            identifiers: page.items.iter().map(TableIdentifier::from).collect(),
        },
    )
}

/// `GET /v1/namespaces/{namespace}/tables/{table}`: the metadata the catalog's current
/// pointer names, with that pointer. `snapshots` must be `all` or `refs` (400
/// otherwise); every snapshot is returned for both, which the spec allows for `refs`.
async fn load_table(
    State(catalog): Db,
    headers: axum::http::HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Response, RestError> {
    if let Some(snapshots) = query_param(query.as_deref(), "snapshots")
        && snapshots != "all"
        && snapshots != "refs"
    {
        return Err(RestError::bad(format!(
            "snapshots {snapshots:?} is not all or refs"
        )));
    }
    let ident = table_of(path)?;
    let table = catalog
        .load_table(&ident)
        .await
        .map_err(|e| RestError::of_table(&ident, e))?;
    let credentials = asks_for_vended_credentials(&headers);
    load_table_result(&catalog, "load table", &table, credentials)
}

/// A 200 `LoadTableResult` for `table`, answering `what`: its metadata location and
/// metadata, and what a reader needs to open its files (the warehouse's reader
/// configuration, with vended credentials only when `credentials`).
///
/// # Errors
/// The catalog's error (naming the table) for a table with no metadata location;
/// [`RestError::Encode`] when the body does not serialize.
fn load_table_result(
    catalog: &RedbCatalog,
    what: &'static str,
    table: &iceberg::table::Table,
    credentials: bool,
) -> Result<Response, RestError> {
    let metadata_location = table
        .metadata_location_result()
        .map_err(|e| RestError::of_table(table.identifier(), e))?
        .to_string();
    json(
        what,
        &LoadTableResult {
            metadata_location,
            metadata: table.metadata().clone(),
            config: catalog
                .warehouse()
                .reader_config(credentials)
                .into_iter()
                .collect(),
        },
    )
}

/// Whether the client asked for vended credentials (Iceberg REST spec,
/// `X-Iceberg-Access-Delegation`, a comma-separated list of mechanisms).
fn asks_for_vended_credentials(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all("x-iceberg-access-delegation")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|m| m.trim().eq_ignore_ascii_case("vended-credentials"))
}

async fn table_exists(
    State(catalog): Db,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, RestError> {
    let ident = table_of(path)?;
    match catalog.table_exists(&ident).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(RestError::NoSuchTable {
            table: ident.to_string(),
        }),
        Err(e) => Err(RestError::of_table(&ident, e)),
    }
}

/// A request body parsed as `T` (the spec's schema `what`).
///
/// # Errors
/// [`RestError::BadRequest`] naming `what` and serde's complaint (the field, the unknown
/// `action`, the line and column).
fn body_of<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, RestError> {
    serde_json::from_slice(body).map_err(|e| RestError::bad(format!("invalid {what} body: {e}")))
}

/// A 200 response with `body` as JSON.
fn json<T: Serialize>(what: &'static str, body: &T) -> Result<Response, RestError> {
    let bytes = serde_json::to_vec(body).map_err(|source| RestError::Encode { what, source })?;
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

fn path_param<T>(path: Result<Path<T>, PathRejection>) -> Result<T, RestError> {
    path.map(|Path(value)| value)
        .map_err(|e| RestError::BadRequest {
            reason: e.body_text(),
        })
}

fn table_of(path: Result<Path<(String, String)>, PathRejection>) -> Result<TableIdent, RestError> {
    let (namespace, table) = path_param(path)?;
    if table.is_empty() {
        return Err(RestError::BadRequest {
            reason: "empty table name".to_string(),
        });
    }
    Ok(TableIdent::new(namespace_of(&namespace)?, table))
}

/// A percent-decoded namespace: levels separated by the unit separator, none empty.
fn namespace_of(raw: &str) -> Result<NamespaceIdent, RestError> {
    let levels: Vec<String> = raw.split(NAMESPACE_SEP).map(str::to_string).collect();
    if levels.iter().any(String::is_empty) {
        return Err(RestError::BadRequest {
            reason: format!("namespace {raw:?} has an empty level"),
        });
    }
    NamespaceIdent::from_vec(levels).map_err(|e| RestError::BadRequest {
        reason: format!("namespace {raw:?}: {}", e.message()),
    })
}

/// The decoded value of the first `name=` in a URL query.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

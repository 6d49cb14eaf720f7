//! The read-only half of the Iceberg REST catalog API, served next to `/metrics` so any
//! Iceberg engine (pyiceberg, DuckDB, Spark, Trino) reads skade's tables with
//! `uri=http://<metrics-addr>`, always at the committed snapshot.
//!
//! Served, without a `prefix` (`/v1/namespaces/...`): `GET /v1/config`, listing and
//! loading namespaces, listing tables, and loading a table (`LoadTableResult` built from
//! the catalog's current pointer). `GET /v1/config` advertises exactly these in
//! `endpoints`, so clients do not assume writes exist; a mutating method on a served path
//! answers 405, any other path 404. Multi-level namespaces are joined with the unit
//! separator (`%1F` in a URL). Errors carry the spec's `{"error": ErrorModel}` body.

pub mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableIdent};
use serde::Serialize;
use tracing::{Instrument, info, info_span, warn};

use crate::auth::Tokens;
use crate::catalog::RedbCatalog;
use model::{
    CatalogConfig, ErrorModel, ErrorResponse, GetNamespaceResponse, ListNamespacesResponse,
    ListTablesResponse, LoadTableResult, TableIdentifier,
};

/// Every endpoint this module serves besides `GET /v1/config`, spelled as the spec's
/// `CatalogConfig.endpoints` wants them.
pub const ENDPOINTS: [&str; 6] = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
];

/// Separates the levels of a namespace in a path or in the `parent` query parameter.
const NAMESPACE_SEP: char = '\u{1f}';

/// Why a REST catalog request failed; each variant is one status and `ErrorModel.type`.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// 404 `NoSuchNamespaceException`.
    #[error("namespace {namespace} does not exist")]
    NoSuchNamespace {
        /// The namespace, levels joined with `.`.
        namespace: String,
    },
    /// 404 `NoSuchTableException`.
    #[error("table {table} does not exist")]
    NoSuchTable {
        /// The table identifier.
        table: String,
    },
    /// 400 `BadRequestException`: a name or parameter that cannot name anything.
    #[error("bad request: {reason}")]
    BadRequest {
        /// What is wrong, quoting the value.
        reason: String,
    },
    /// 500 `InternalServerError`: the catalog or the metadata file failed.
    #[error("catalog failure on {name}: {source}")]
    Catalog {
        /// The namespace or table concerned.
        name: String,
        /// The catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// 401 `NotAuthorizedException`: bearer tokens are configured and the request has no
    /// valid `authorization: Bearer <token>` header (the token is never echoed).
    #[error("a valid bearer token is required (authorization: Bearer <token>)")]
    NotAuthorized,
    /// 500 `InternalServerError`: a response could not be encoded as JSON.
    #[error("cannot encode the {what} response: {source}")]
    Encode {
        /// Which response.
        what: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
}

impl RestError {
    /// The HTTP status and the spec's exception type.
    fn status_and_type(&self) -> (StatusCode, &'static str) {
        match self {
            Self::NoSuchNamespace { .. } => (StatusCode::NOT_FOUND, "NoSuchNamespaceException"),
            Self::NoSuchTable { .. } => (StatusCode::NOT_FOUND, "NoSuchTableException"),
            Self::BadRequest { .. } => (StatusCode::BAD_REQUEST, "BadRequestException"),
            Self::NotAuthorized => (StatusCode::UNAUTHORIZED, "NotAuthorizedException"),
            Self::Catalog { .. } | Self::Encode { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError")
            }
        }
    }

    /// Maps a catalog error met while serving `ns` (or a table in it).
    fn of_namespace(ns: &NamespaceIdent, e: iceberg::Error) -> Self {
        Self::of_catalog(ns.join("."), None, e)
    }

    /// Maps a catalog error met while serving `ident`.
    fn of_table(ident: &TableIdent, e: iceberg::Error) -> Self {
        Self::of_catalog(ident.namespace().join("."), Some(ident.to_string()), e)
    }

    fn of_catalog(namespace: String, table: Option<String>, e: iceberg::Error) -> Self {
        match (e.kind(), table) {
            (ErrorKind::TableNotFound, Some(table)) => Self::NoSuchTable { table },
            (ErrorKind::NamespaceNotFound, _) => Self::NoSuchNamespace { namespace },
            (ErrorKind::DataInvalid, _) => Self::BadRequest {
                reason: e.message().to_string(),
            },
            (_, table) => Self::Catalog {
                name: table.unwrap_or(namespace),
                source: Box::new(e),
            },
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_type();
        // As a Flight RPC's failure: the server's at `warn`, the client's at `info`, in
        // the request's `rest` span (method, path, peer). A missing token is logged where
        // it is refused (`unauthenticated`).
        if status.is_server_error() {
            warn!(code = status.as_u16(), error = %self, "request failed");
        } else if !matches!(self, Self::NotAuthorized) {
            info!(code = status.as_u16(), error = %self, "request refused");
        }
        let body = ErrorResponse {
            error: ErrorModel {
                message: self.to_string(),
                kind,
                code: status.as_u16(),
            },
        };
        match serde_json::to_vec(&body) {
            Ok(bytes) => {
                (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
            }
            Err(_) => (status, self.to_string()).into_response(),
        }
    }
}

/// The REST catalog routes over `catalog`, ready to merge into the metrics router. With
/// `tokens` (the Flight server's `--auth-token-file`), every route needs the same
/// `authorization: Bearer <token>` header as Flight (issue "REST catalog", item 2);
/// `/metrics`, `/healthz` and `/readyz` stay open.
pub fn router(catalog: Arc<RedbCatalog>, tokens: Option<Arc<Tokens>>) -> Router {
    let routes = Router::new()
        .route("/v1/config", get(get_config))
        .route("/v1/namespaces", get(list_namespaces))
        .route(
            "/v1/namespaces/{namespace}",
            get(load_namespace).head(namespace_exists),
        )
        .route("/v1/namespaces/{namespace}/tables", get(list_tables))
        .route(
            "/v1/namespaces/{namespace}/tables/{table}",
            get(load_table).head(table_exists),
        )
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
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.to_string())
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

/// `GET /v1/namespaces[?parent=a%1Fb]`: the namespaces one level below `parent` (top
/// level when absent or empty).
async fn list_namespaces(
    State(catalog): Db,
    RawQuery(query): RawQuery,
) -> Result<Response, RestError> {
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
    json(
        "list namespaces",
        &ListNamespacesResponse {
            namespaces: namespaces.iter().map(model::levels).collect(),
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

async fn list_tables(
    State(catalog): Db,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, RestError> {
    let ns = namespace_of(&path_param(path)?)?;
    let tables = catalog
        .list_tables(&ns)
        .await
        .map_err(|e| RestError::of_namespace(&ns, e))?;
    json(
        "list tables",
        &ListTablesResponse {
            identifiers: tables.iter().map(TableIdentifier::from).collect(),
        },
    )
}

/// `GET /v1/namespaces/{namespace}/tables/{table}`: the metadata the catalog's current
/// pointer names, with that pointer. The `snapshots` parameter is ignored: every
/// snapshot is returned, which the spec allows for `refs` too.
async fn load_table(
    State(catalog): Db,
    headers: axum::http::HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, RestError> {
    let ident = table_of(path)?;
    let table = catalog
        .load_table(&ident)
        .await
        .map_err(|e| RestError::of_table(&ident, e))?;
    let metadata_location = table
        .metadata_location_result()
        .map_err(|e| RestError::of_table(&ident, e))?
        .to_string();
    json(
        "load table",
        &LoadTableResult {
            metadata_location,
            metadata: table.metadata().clone(),
            config: catalog
                .warehouse()
                .reader_config(asks_for_vended_credentials(&headers))
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

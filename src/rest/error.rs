//! Why a REST catalog request failed, and its answer: the status and `ErrorModel.type`
//! the spec (`open-api/rest-catalog-open-api.yaml`, apache/iceberg) gives each case, with
//! the spec's `{"error": ErrorModel}` body.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use iceberg::{ErrorKind, NamespaceIdent, TableIdent};
use tracing::{info, warn};

use super::model::{ErrorModel, ErrorResponse};

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
    /// 400 `BadRequestException`: a name, parameter or body the spec declares invalid,
    /// or an update skade does not serve.
    #[error("bad request: {reason}")]
    BadRequest {
        /// What is wrong, quoting the value.
        reason: String,
    },
    /// 409 `AlreadyExistsException`: the namespace or table to create (or the rename's
    /// destination) exists.
    #[error("{name} already exists")]
    AlreadyExists {
        /// The namespace or table.
        name: String,
    },
    /// 409 `NamespaceNotEmptyException`: a namespace to drop still holds tables or
    /// namespaces.
    #[error("namespace {namespace} is not empty")]
    NamespaceNotEmpty {
        /// The namespace, levels joined with `.`.
        namespace: String,
    },
    /// 409 `CommitFailedException`: a commit's requirement does not hold against the
    /// table's current metadata, or the table moved while the commit was made. Nothing
    /// was committed; the client may reload and retry.
    #[error("commit to {table} failed: {reason}")]
    CommitFailed {
        /// The table identifier.
        table: String,
        /// The failed requirement or conflict.
        reason: String,
    },
    /// 422 `UnprocessableEntityException`: a namespace property both set and removed.
    #[error("{reason}")]
    Unprocessable {
        /// What is contradictory.
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
            Self::AlreadyExists { .. } => (StatusCode::CONFLICT, "AlreadyExistsException"),
            Self::NamespaceNotEmpty { .. } => (StatusCode::CONFLICT, "NamespaceNotEmptyException"),
            Self::CommitFailed { .. } => (StatusCode::CONFLICT, "CommitFailedException"),
            Self::Unprocessable { .. } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "UnprocessableEntityException",
            ),
            Self::NotAuthorized => (StatusCode::UNAUTHORIZED, "NotAuthorizedException"),
            Self::Catalog { .. } | Self::Encode { .. } => {
                (StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError")
            }
        }
    }

    /// A 400 for `reason`.
    pub(super) fn bad(reason: impl Into<String>) -> Self {
        Self::BadRequest {
            reason: reason.into(),
        }
    }

    /// Maps a catalog error met while serving `ns` (or a table in it).
    pub(super) fn of_namespace(ns: &NamespaceIdent, e: iceberg::Error) -> Self {
        Self::of_catalog(ns.join("."), None, e)
    }

    /// Maps a catalog error met while serving `ident`.
    pub(super) fn of_table(ident: &TableIdent, e: iceberg::Error) -> Self {
        Self::of_catalog(ident.namespace().join("."), Some(ident.to_string()), e)
    }

    /// Maps a catalog error: not-found kinds to 404, already-exists to 409, a failed
    /// requirement or moved pointer to 409 `CommitFailedException`, invalid input to 400,
    /// the rest to 500.
    pub(super) fn of_catalog(namespace: String, table: Option<String>, e: iceberg::Error) -> Self {
        match (e.kind(), table) {
            (ErrorKind::TableNotFound, Some(table)) => Self::NoSuchTable { table },
            (ErrorKind::NamespaceNotFound, _) => Self::NoSuchNamespace { namespace },
            (ErrorKind::TableAlreadyExists, table) => Self::AlreadyExists {
                name: format!("table {}", table.unwrap_or(namespace)),
            },
            (ErrorKind::NamespaceAlreadyExists, _) => Self::AlreadyExists {
                name: format!("namespace {namespace}"),
            },
            (ErrorKind::CatalogCommitConflicts, table) => Self::CommitFailed {
                table: table.unwrap_or(namespace),
                reason: describe(&e),
            },
            (ErrorKind::DataInvalid | ErrorKind::FeatureUnsupported, _) => Self::BadRequest {
                reason: describe(&e),
            },
            (_, table) => Self::Catalog {
                name: table.unwrap_or(namespace),
                source: Box::new(e),
            },
        }
    }
}

/// An iceberg error as one line in skade's words: its message, its context (`expected`,
/// `found`, …, which is where a failed requirement says what it saw) and its causes,
/// never iceberg's `Kind => message` form ([`crate::error::describe`]).
fn describe(e: &iceberg::Error) -> String {
    crate::error::describe(e)
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_type();
        // As a Flight RPC's failure: the server's at `warn`, the client's at `info`, in
        // the request's `rest` span (method, path, peer). A missing token is logged where
        // it is refused (`unauthenticated`).
        if status.is_server_error() {
            warn!(code = status.as_u16(), error = %crate::error::describe(&self), "request failed");
        } else if !matches!(self, Self::NotAuthorized) {
            info!(code = status.as_u16(), error = %crate::error::describe(&self), "request refused");
        }
        let body = ErrorResponse {
            error: ErrorModel {
                message: crate::error::describe(&self),
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

//! The JSON bodies of the Iceberg REST catalog API that skade serves, named and spelled
//! as in the spec (`open-api/rest-catalog-open-api.yaml` in apache/iceberg).

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::TableMetadata;
use iceberg::{NamespaceIdent, TableIdent};
use serde::Serialize;

/// `CatalogConfig`: the answer to `GET /v1/config`.
#[derive(Debug, Serialize)]
pub struct CatalogConfig {
    /// Properties applied before the client's own configuration.
    pub defaults: BTreeMap<String, String>,
    /// Properties applied after the client's own configuration.
    pub overrides: BTreeMap<String, String>,
    /// Every endpoint served, as `"<verb> <path from the spec>"`.
    pub endpoints: Vec<&'static str>,
}

/// `ListNamespacesResponse`. Not paginated: `next-page-token` is omitted, as the spec
/// asks of servers that do not paginate.
#[derive(Debug, Serialize)]
pub struct ListNamespacesResponse {
    /// Each namespace as its list of levels.
    pub namespaces: Vec<Vec<String>>,
}

/// `GetNamespaceResponse`.
#[derive(Debug, Serialize)]
pub struct GetNamespaceResponse {
    /// The namespace's levels.
    pub namespace: Vec<String>,
    /// Its stored properties.
    pub properties: HashMap<String, String>,
}

/// `TableIdentifier`.
#[derive(Debug, Serialize)]
pub struct TableIdentifier {
    /// The namespace's levels.
    pub namespace: Vec<String>,
    /// The table name.
    pub name: String,
}

impl From<&TableIdent> for TableIdentifier {
    fn from(ident: &TableIdent) -> Self {
        Self {
            namespace: ident.namespace().as_ref().clone(),
            name: ident.name().to_string(),
        }
    }
}

/// `ListTablesResponse`. Not paginated (see [`ListNamespacesResponse`]).
#[derive(Debug, Serialize)]
pub struct ListTablesResponse {
    /// The tables directly in the namespace.
    pub identifiers: Vec<TableIdentifier>,
}

/// `LoadTableResult`: the table's current metadata location and that metadata.
#[derive(Debug, Serialize)]
pub struct LoadTableResult {
    /// The current metadata JSON's path, as the catalog points to it.
    #[serde(rename = "metadata-location")]
    pub metadata_location: String,
    /// The metadata read from that file (the spec's table-metadata JSON).
    pub metadata: TableMetadata,
    /// Table-specific client configuration: for an S3 warehouse the `s3.*` properties a
    /// reader needs (endpoint, region, path style; credentials only when vended).
    pub config: BTreeMap<String, String>,
}

/// `IcebergErrorResponse`: `{"error": ErrorModel}`.
#[derive(Debug, Serialize)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorModel,
}

/// `ErrorModel`.
#[derive(Debug, Serialize)]
pub struct ErrorModel {
    /// Human-readable message.
    pub message: String,
    /// The exception type clients branch on, e.g. `NoSuchTableException`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The HTTP status code, repeated.
    pub code: u16,
}

/// A namespace's levels as the spec's `Namespace` array.
pub(crate) fn levels(ns: &NamespaceIdent) -> Vec<String> {
    ns.as_ref().clone()
}

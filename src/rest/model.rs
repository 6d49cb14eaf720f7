//! The JSON bodies of the Iceberg REST catalog API that skade serves, named and spelled
//! as in the spec (`open-api/rest-catalog-open-api.yaml` in apache/iceberg).

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::TableMetadata;
use iceberg::spec::{Schema, SortOrder, UnboundPartitionSpec};
use iceberg::{NamespaceIdent, TableIdent};
use iceberg::{TableRequirement, TableUpdate};
use serde::{Deserialize, Serialize};

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

/// `ListNamespacesResponse`, one page of it (`rest/page.rs`).
#[derive(Debug, Serialize)]
pub struct ListNamespacesResponse {
    /// The next page's token; `null` on the last page.
    #[serde(rename = "next-page-token")]
    pub next_page_token: Option<String>,
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
#[derive(Debug, Serialize, Deserialize)]
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

/// `ListTablesResponse`, one page of it (`rest/page.rs`).
#[derive(Debug, Serialize)]
pub struct ListTablesResponse {
    /// The next page's token; `null` on the last page.
    #[serde(rename = "next-page-token")]
    pub next_page_token: Option<String>,
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

impl TableIdentifier {
    /// The identifier as iceberg's.
    ///
    /// # Errors
    /// `DataInvalid` for an empty namespace.
    pub fn ident(&self) -> iceberg::Result<TableIdent> {
        Ok(TableIdent::new(
            NamespaceIdent::from_vec(self.namespace.clone())?,
            self.name.clone(),
        ))
    }
}

/// `CreateNamespaceRequest`.
#[derive(Debug, Deserialize)]
pub struct CreateNamespaceRequest {
    /// The namespace's levels.
    pub namespace: Vec<String>,
    /// Its properties.
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

/// `CreateNamespaceResponse`.
#[derive(Debug, Serialize)]
pub struct CreateNamespaceResponse {
    /// The namespace's levels.
    pub namespace: Vec<String>,
    /// The properties stored.
    pub properties: HashMap<String, String>,
}

/// `UpdateNamespacePropertiesRequest`.
#[derive(Debug, Deserialize)]
pub struct UpdateNamespacePropertiesRequest {
    /// Keys to remove.
    #[serde(default)]
    pub removals: Vec<String>,
    /// Keys to set, with their values.
    #[serde(default)]
    pub updates: HashMap<String, String>,
}

/// `UpdateNamespacePropertiesResponse`.
#[derive(Debug, Serialize)]
pub struct UpdateNamespacePropertiesResponse {
    /// Keys set (added or changed).
    pub updated: Vec<String>,
    /// Keys removed.
    pub removed: Vec<String>,
    /// Keys asked to be removed that were not there.
    pub missing: Vec<String>,
}

/// `CreateTableRequest`. `schema-id` may be left out of `schema` (clients send the
/// schema before it has one); the table's first schema gets id 0 whatever it says.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateTableRequest {
    /// The table's name.
    pub name: String,
    /// Where its files go (must be under the warehouse); `<warehouse>/<ns...>/<name>`
    /// when absent.
    pub location: Option<String>,
    /// Its schema.
    pub schema: Schema,
    /// Its partition spec (unpartitioned when absent).
    pub partition_spec: Option<UnboundPartitionSpec>,
    /// Its sort order (unsorted when absent). `order-id` is `readOnly` in the spec and
    /// may be left out ([`read_only`]).
    #[serde(default, deserialize_with = "read_only::write_order")]
    pub write_order: Option<SortOrder>,
    /// A staged create (refused: skade creates tables at once).
    #[serde(default)]
    pub stage_create: bool,
    /// Table properties; `format-version` picks the format version (default 2).
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

/// `CommitTableRequest`: requirements to check and updates to apply, as iceberg's own
/// serde types (spelled as the spec's `TableRequirement` and `TableUpdate`).
#[derive(Debug, Deserialize)]
pub struct CommitTableRequest {
    /// The table, when given; must then match the path.
    pub identifier: Option<TableIdentifier>,
    /// Checked against the table's current metadata before anything is written.
    pub requirements: Vec<TableRequirement>,
    /// Applied in order. The spec's `readOnly` ids may be left out of the objects they
    /// belong to ([`read_only`]).
    #[serde(deserialize_with = "read_only::updates")]
    pub updates: Vec<TableUpdate>,
}

/// `RenameTableRequest`.
#[derive(Debug, Deserialize)]
pub struct RenameTableRequest {
    /// The table to rename.
    pub source: TableIdentifier,
    /// Its new identifier (the namespace must exist).
    pub destination: TableIdentifier,
}

/// `CommitTableResponse`: the committed metadata and its location.
#[derive(Debug, Serialize)]
pub struct CommitTableResponse {
    /// The new metadata JSON's path, as the catalog now points to it.
    #[serde(rename = "metadata-location")]
    pub metadata_location: String,
    /// The committed metadata.
    pub metadata: TableMetadata,
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

/// Request bodies without the ids the REST spec marks `readOnly`
/// (`tests/interop/rest-catalog-open-api.yaml`: `Schema.schema-id`,
/// `PartitionSpec.spec-id`, `SortOrder.order-id`), which "may be omitted in a request"
/// (OpenAPI 3, `readOnly`). iceberg's serde types already default the first two
/// (`schema-id` 0, `spec-id` none); a `SortOrder` without `order-id` is read here. The
/// id sent, or the placeholder filled in, is never kept: the table's metadata builder
/// assigns it as Iceberg's reference catalog does (Java `TableMetadata`: a new table's
/// sort order is 1, or 0 when unsorted; an added order reuses the id of an equal order,
/// else the highest id + 1).
pub mod read_only {
    use iceberg::TableUpdate;
    use iceberg::spec::{SortField, SortOrder};
    use serde::{Deserialize, Deserializer};

    /// A `SortOrder` as a request may send it.
    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct SortOrderRequest {
        #[serde(default)]
        order_id: Option<i64>,
        fields: Vec<SortField>,
    }

    impl From<SortOrderRequest> for SortOrder {
        fn from(order: SortOrderRequest) -> Self {
            let placeholder = if order.fields.is_empty() { 0 } else { 1 };
            SortOrder {
                order_id: order.order_id.unwrap_or(placeholder),
                fields: order.fields,
            }
        }
    }

    /// `CreateTableRequest.write-order`, its `order-id` optional.
    ///
    /// # Errors
    /// serde's error for a body that is not a `SortOrder` otherwise.
    pub fn write_order<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SortOrder>, D::Error> {
        Ok(Option::<SortOrderRequest>::deserialize(d)?.map(SortOrder::from))
    }

    /// `CommitTableRequest.updates`, with `add-sort-order`'s `sort-order.order-id`
    /// optional.
    ///
    /// # Errors
    /// serde's error for an update that is not one of the spec's `TableUpdate`s.
    pub fn updates<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TableUpdate>, D::Error> {
        let raw = Vec::<serde_json::Value>::deserialize(d)?;
        raw.into_iter()
            .map(|mut update| {
                if update.get("action").and_then(|a| a.as_str()) == Some("add-sort-order")
                    && let Some(order) = update.get_mut("sort-order")
                    && let Some(fields) = order.as_object_mut()
                    && !fields.contains_key("order-id")
                {
                    let sorted = fields
                        .get("fields")
                        .and_then(|f| f.as_array())
                        .is_some_and(|f| !f.is_empty());
                    fields.insert("order-id".into(), i64::from(sorted).into());
                }
                serde_json::from_value(update).map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

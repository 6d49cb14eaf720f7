//! Replacing a table's schema and rows in one commit, as Iceberg's replace-table
//! transaction does (Java's `TableMetadata.buildReplacement` followed by an append): the
//! same table (uuid, location, properties) with a new current schema, an unpartitioned
//! default spec, no sort order, and `main` pointing at a new snapshot without parent that
//! holds only the new rows. Older snapshots, schemas and specs stay in the metadata, so
//! time travel to them keeps working; readers never see an empty or missing table (one
//! commit). ADBC's `mode="replace"` commits through it.
//!
//! The new schema's field ids are fresh (above the table's `last-column-id`), so no id
//! of the replaced schema is reused for another column or type.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    DataFile, ManifestFile, NestedField, NestedFieldRef, Operation, Schema,
    SnapshotSummaryCollector, StructType, Summary, TableMetadataBuilder, Type,
    UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};

use super::files::{carry_totals, write_added, write_snapshot};
use super::manifests::unique_snapshot_id;
use crate::catalog::RedbCatalog;
use crate::catalog::manifest_cache::WrittenManifests;

/// The id of the unsorted sort order every table has (table spec, "Sort Orders").
const UNSORTED_ORDER_ID: i64 = 0;

/// `schema` (ids from 1, as a new table's) with every field id raised by `offset`: the
/// schema a replace writes with, `offset` the table's `last-column-id`.
///
/// # Errors
/// `DataInvalid` if the renumbered schema does not build (it always does).
pub fn with_fresh_ids(schema: &Schema, offset: i32) -> Result<Schema> {
    let fields: Vec<NestedFieldRef> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| Arc::new(shifted(f, offset)))
        .collect();
    Schema::builder().with_fields(fields).build()
}

fn shifted(field: &NestedField, offset: i32) -> NestedField {
    let mut out = field.clone();
    out.id = field.id + offset;
    out.field_type = Box::new(shifted_type(&field.field_type, offset));
    out
}

fn shifted_type(ty: &Type, offset: i32) -> Type {
    match ty {
        Type::Primitive(_) => ty.clone(),
        Type::Struct(s) => Type::Struct(StructType::new(
            s.fields()
                .iter()
                .map(|f| Arc::new(shifted(f, offset)))
                .collect(),
        )),
        Type::List(list) => {
            let mut list = list.clone();
            list.element_field = Arc::new(shifted(&list.element_field, offset));
            Type::List(list)
        }
        Type::Map(map) => {
            let mut map = map.clone();
            map.key_field = Arc::new(shifted(&map.key_field, offset));
            map.value_field = Arc::new(shifted(&map.value_field, offset));
            Type::Map(map)
        }
    }
}

/// A handle of `table` (as it stands in its commit turn) as the replace leaves it
/// before its snapshot: `schema` current, an unpartitioned default spec, no sort order,
/// no `main` — what the replace's manifests and manifest list are written on.
///
/// # Errors
/// `CatalogCommitConflicts` (not retryable) when the table's schema is no longer
/// `base_schema_id`, the one the replace was planned on (its files carry ids of the
/// planned schema); iceberg's error when the metadata does not build.
pub(crate) fn replaced_handle(
    catalog: &RedbCatalog,
    table: &Table,
    schema: &Schema,
    base_schema_id: i32,
) -> Result<Table> {
    let metadata = table.metadata();
    if metadata.current_schema_id() != base_schema_id {
        return Err(Error::new(
            ErrorKind::CatalogCommitConflicts,
            format!(
                "table {}'s schema changed while it was being replaced: replace it again",
                table.identifier()
            ),
        ));
    }
    let replaced = TableMetadataBuilder::new_from_metadata(
        metadata.clone(),
        table.metadata_location().map(str::to_string),
    )
    .add_default_partition_spec(UnboundPartitionSpec::builder().build())?
    .add_current_schema(schema.clone())?
    .set_default_sort_order(UNSORTED_ORDER_ID)?
    .remove_ref(iceberg::spec::MAIN_BRANCH)
    .build()?
    .metadata;
    catalog.handle_with_metadata(table, replaced)
}

/// Stages the replace of `table` (as it stands in its commit turn; `handle` from
/// [`replaced_handle`]) by `schema` (fresh ids, planned on schema `base_schema_id`) and
/// `files` (written with `schema`): `(requirements, updates)` for one commit (module
/// docs). Requires the table's uuid, `main` and current schema as they stand.
///
/// # Errors
/// iceberg's error when a manifest or the manifest list cannot be written.
pub(crate) async fn stage_replace(
    written: &Arc<WrittenManifests>,
    table: &Table,
    handle: &Table,
    schema: &Schema,
    base_schema_id: i32,
    files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let metadata = table.metadata();
    let handle = handle.clone();
    let snapshot_id = unique_snapshot_id(&handle);
    let commit_uuid = uuid::Uuid::now_v7();
    let sequence_number = handle.metadata().next_sequence_number();
    let path = format!("{}/metadata/{commit_uuid}-m0.avro", metadata.location());
    let mut manifests: Vec<ManifestFile> = Vec::new();
    if !files.is_empty() {
        manifests.push(
            write_added(
                &handle,
                written,
                &path,
                snapshot_id,
                sequence_number,
                files.clone(),
            )
            .await?,
        );
    }
    let summary = summary(&handle, &files, properties);
    let (_, snapshot_updates) = write_snapshot(
        &handle,
        written,
        snapshot_id,
        commit_uuid,
        manifests,
        summary,
    )
    .await?;
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: iceberg::spec::MAIN_BRANCH.to_string(),
            snapshot_id: metadata.current_snapshot_id(),
        },
        TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: base_schema_id,
        },
    ];
    let mut updates = vec![
        TableUpdate::AddSpec {
            spec: UnboundPartitionSpec::builder().build(),
        },
        TableUpdate::SetDefaultSpec { spec_id: -1 },
        TableUpdate::AddSchema {
            schema: schema.clone(),
        },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
        TableUpdate::SetDefaultSortOrder {
            sort_order_id: UNSORTED_ORDER_ID,
        },
    ];
    updates.extend(snapshot_updates);
    Ok((requirements, updates))
}

/// The summary of the replace's snapshot: `properties`, the `added-*` figures of
/// `files`, and `total-*` equal to them ([`carry_totals`]: the snapshot has no parent).
fn summary(handle: &Table, files: &[DataFile], properties: HashMap<String, String>) -> Summary {
    let metadata = handle.metadata();
    let mut collector = SnapshotSummaryCollector::default();
    for file in files {
        collector.add_file(
            file,
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    let mut summary = properties;
    summary.extend(collector.build());
    // The handle has no `main`: the totals count from zero.
    carry_totals(handle, &mut summary);
    Summary {
        operation: Operation::Overwrite,
        additional_properties: summary,
    }
}

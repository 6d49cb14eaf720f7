//! Schema evolution on ingest, opt-in per table with the property
//! [`EVOLVE_SCHEMA`]` = true` (README "Schema evolution on ingest").
//!
//! When a stream starts, its Arrow schema is compared with the table's current schema by
//! top-level column name ([`plan`]):
//! - a column the table does not have is added as a new optional field with fresh field
//!   ids after the table's `last-column-id` (nested fields too); it must be nullable, as
//!   rows written before have no value (Iceberg spec, "Schema Evolution": added columns
//!   read as null for older files);
//! - a column whose type Iceberg allows to be promoted to the stream's type gets it:
//!   `int → long`, `float → double`, `decimal(P, S) → decimal(P', S)` with `P' > P`
//!   (Iceberg spec, "Schema Evolution", type promotion);
//! - everything else is left to conforming, which refuses any other change naming the
//!   column (`InvalidArgument`).
//!
//! The evolved schema is what the stream's batches are conformed to and its data files
//! written with; the stream's first commit carries `AddSchema` + `SetCurrentSchema`
//! together with its fast append, in ONE catalog commit (one redb transaction), required
//! to apply on the schema the stream started from ([`stage_evolving_append`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::Schema as ArrowSchema;
use iceberg::spec::{
    DataFile, ListType, MapType, NestedFieldRef, PrimitiveType, Schema, StructType,
    TableMetadataBuilder, Type,
};
use iceberg::table::Table;
use iceberg::{Catalog, TableRequirement, TableUpdate};

use super::WriteError;
use super::append::stage_append;
use super::ingest::table_commit_lock;
use super::schema::iceberg_schema_for;
use crate::catalog::{RedbCatalog, run_blocking_io};

/// skade's table property that lets a stream evolve the table's schema (`true`; any other
/// value or none: off, the schema never changes on ingest).
pub const EVOLVE_SCHEMA: &str = "skade.ingest.evolve-schema";

/// A schema a stream evolved its table to, committed with the stream's first data.
#[derive(Debug, Clone)]
pub struct SchemaChange {
    /// The table's current schema id the change was planned on; the commit requires it
    /// to be still current.
    pub base_schema_id: i32,
    /// The evolved schema (new fields have ids after the table's `last-column-id`).
    pub schema: Arc<Schema>,
}

/// Whether `table` opted into schema evolution on ingest ([`EVOLVE_SCHEMA`]).
pub fn evolves(table: &Table) -> bool {
    table
        .metadata()
        .properties()
        .get(EVOLVE_SCHEMA)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The change a stream with Arrow schema `arrow` makes to `table` when the table opted
/// in, starting from `schema` (the table's current schema, or one already evolved in the
/// same transaction); `None` when the table did not opt in or nothing changes.
///
/// # Errors
/// [`WriteError::Schema`] naming the column: a new column that is not nullable, or one
/// whose Arrow type has no Iceberg type.
pub fn plan(
    table: &Table,
    schema: &Schema,
    arrow: &ArrowSchema,
) -> Result<Option<SchemaChange>, WriteError> {
    if !evolves(table) {
        return Ok(None);
    }
    let name = table.identifier().to_string();
    let last_column_id = table
        .metadata()
        .last_column_id()
        .max(schema.highest_field_id());
    let mut fields: Vec<NestedFieldRef> = schema.as_struct().fields().to_vec();
    let mut changed = false;
    let mut added = Vec::new();
    for field in arrow.fields() {
        let Some(position) = fields.iter().position(|f| f.name == *field.name()) else {
            if !field.is_nullable() {
                return Err(WriteError::Schema {
                    table: name,
                    column: field.name().clone(),
                    reason: "a new column must be nullable (rows written before it read as \
                             null): send it as a nullable field"
                        .to_string(),
                });
            }
            added.push(field.as_ref().clone());
            continue;
        };
        // The Iceberg type the stream's column would have in a new table.
        let wanted = iceberg_schema_for(&name, &ArrowSchema::new(vec![field.as_ref().clone()]))?;
        let wanted = wanted.as_struct().fields()[0].field_type.clone();
        let current = &fields[position];
        if let Some(promoted) = promotion(&current.field_type, &wanted) {
            let mut field = current.as_ref().clone();
            field.field_type = Box::new(Type::Primitive(promoted));
            fields[position] = Arc::new(field);
            changed = true;
        }
    }
    if !added.is_empty() {
        let new = iceberg_schema_for(&name, &ArrowSchema::new(added))?;
        for field in new.as_struct().fields() {
            let mut field = shift_ids(field, last_column_id);
            Arc::make_mut(&mut field).required = false;
            fields.push(field);
        }
        changed = true;
    }
    if !changed {
        return Ok(None);
    }
    let evolved = Schema::builder()
        .with_schema_id(schema.schema_id() + 1)
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|source| WriteError::UnsupportedSchema {
            table: name,
            source: Box::new(source),
        })?;
    Ok(Some(SchemaChange {
        base_schema_id: table.metadata().current_schema_id(),
        schema: Arc::new(evolved),
    }))
}

/// The promoted type when Iceberg allows `current` to become `wanted` (int → long,
/// float → double, decimal precision widening at the same scale).
fn promotion(current: &Type, wanted: &Type) -> Option<PrimitiveType> {
    use PrimitiveType as P;
    let (Type::Primitive(current), Type::Primitive(wanted)) = (current, wanted) else {
        return None;
    };
    match (current, wanted) {
        (P::Int, P::Long) => Some(P::Long),
        (P::Float, P::Double) => Some(P::Double),
        (
            P::Decimal { precision, scale },
            P::Decimal {
                precision: wider,
                scale: same,
            },
        ) if same == scale && wider > precision => Some(P::Decimal {
            precision: *wider,
            scale: *scale,
        }),
        _ => None,
    }
}

/// `field` with every field id (nested ones too) moved up by `offset`.
fn shift_ids(field: &NestedFieldRef, offset: i32) -> NestedFieldRef {
    let mut out = field.as_ref().clone();
    out.id += offset;
    out.field_type = Box::new(match field.field_type.as_ref() {
        Type::Primitive(p) => Type::Primitive(p.clone()),
        Type::Struct(st) => Type::Struct(StructType::new(
            st.fields().iter().map(|f| shift_ids(f, offset)).collect(),
        )),
        Type::List(list) => Type::List(ListType::new(shift_ids(&list.element_field, offset))),
        Type::Map(map) => Type::Map(MapType::new(
            shift_ids(&map.key_field, offset),
            shift_ids(&map.value_field, offset),
        )),
    });
    Arc::new(out)
}

/// A handle of `table` whose current schema is `change`'s (nothing is written): what
/// the fast append of the evolving commit is staged on, so its manifests carry the
/// evolved schema.
///
/// # Errors
/// `CatalogCommitConflicts` (not retryable) when `table`'s current schema is no longer
/// the one the change was planned on; iceberg's error when the schema cannot be added.
pub fn evolved_handle(
    catalog: &RedbCatalog,
    table: &Table,
    change: &SchemaChange,
) -> iceberg::Result<Table> {
    let current = table.metadata().current_schema_id();
    if current != change.base_schema_id {
        return Err(iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!(
                "table {}: its schema changed (id {} → {current}) while this stream was \
                 evolving it; retry the stream",
                table.identifier(),
                change.base_schema_id
            ),
        ));
    }
    let metadata = TableMetadataBuilder::new_from_metadata(
        table.metadata().clone(),
        table.metadata_location().map(str::to_string),
    )
    .add_current_schema(change.schema.as_ref().clone())?
    .build()?
    .metadata;
    catalog.handle_with_metadata(table, metadata)
}

/// Stages `data_files` as one fast append on `evolved` (from [`evolved_handle`]) that
/// also makes `change` the table's current schema: `(requirements, updates)` for ONE
/// catalog commit — the append's own, plus "the current schema is still
/// `change.base_schema_id`", with `AddSchema` + `SetCurrentSchema` before the append.
///
/// # Errors
/// iceberg's error from the fast append (e.g. a manifest write failure).
pub async fn stage_evolving_append(
    evolved: Table,
    change: &SchemaChange,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> iceberg::Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let (mut requirements, appended) = stage_append(&evolved, data_files, properties).await?;
    requirements.push(TableRequirement::CurrentSchemaIdMatch {
        current_schema_id: change.base_schema_id,
    });
    let mut updates = vec![
        TableUpdate::AddSchema {
            schema: change.schema.as_ref().clone(),
        },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    updates.extend(appended);
    Ok((requirements, updates))
}

/// Commits `data_files` to `table` as one fast append that also makes `change` the
/// current schema, in ONE catalog commit (one redb transaction), taking this process's
/// commit turn on the table like [`super::ingest::commit_files_with`].
///
/// # Errors
/// [`WriteError::Catalog`]: `CatalogCommitConflicts` when the table's schema or its
/// snapshot moved in a way this commit cannot build on (another process's commit, a
/// schema changed meanwhile), or a storage failure. Nothing is committed then.
///
/// # Cancel safety
/// As [`super::ingest::commit_files`].
pub async fn commit_evolving(
    catalog: &RedbCatalog,
    table: &Table,
    change: &SchemaChange,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<Table, WriteError> {
    let ident = table.identifier().clone();
    let lock = table_commit_lock(table.metadata().uuid());
    let _turn = lock.lock().await;
    let current = catalog
        .load_table(&ident)
        .await
        .map_err(|e| WriteError::catalog(&ident, e))?;
    super::ingest::same_table(table, &current)?;
    super::ingest::same_spec(table, &current)?;
    let evolved =
        evolved_handle(catalog, &current, change).map_err(|e| WriteError::catalog(&ident, e))?;
    let change_owned = change.clone();
    let (requirements, updates) = run_blocking_io(async move {
        stage_evolving_append(evolved, &change_owned, data_files, properties).await
    })
    .await
    .map_err(|e| WriteError::catalog(&ident, e))?;
    let mut tables = catalog
        .atomic_release_raw(vec![(ident.clone(), requirements, updates)])
        .await
        .map_err(|e| WriteError::catalog(&ident, e))?;
    tables.pop().ok_or_else(|| {
        WriteError::catalog(
            &ident,
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "the release returned no table",
            ),
        )
    })
}

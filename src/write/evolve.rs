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
//! together with its append, in ONE catalog commit (one redb transaction), required
//! to apply on the schema it was planned on ([`stage_evolving_append`]) — rebased onto
//! the table's current schema first when that moved since and the change still fits it
//! ([`rebase`]). `commit_append` is the one-table append through the catalog's commit
//! driver, with such a change ([`commit_evolving`]) or without one
//! ([`super::ingest::commit_files_with`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::Schema as ArrowSchema;
use iceberg::spec::{
    DataFile, ListType, MapType, NestedFieldRef, PrimitiveType, Schema, StructType,
    TableMetadataBuilder, Type,
};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};

use super::EVOLVE_SCHEMA;
use super::WriteError;
use super::append::stage_append;
use super::schema::iceberg_schema_for;
use crate::catalog::{CommitTarget, RedbCatalog, run_blocking_io};

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

/// A handle of `table` (the table as it stands at commit) whose current schema is
/// `change`'s, rebased onto `table`'s current schema when that moved ([`rebase`]), with
/// nothing written: what the append of the evolving commit is staged on, so its
/// manifests carry the evolved schema. Returns the handle and the change to commit.
///
/// # Errors
/// `CatalogCommitConflicts` (not retryable) when `table`'s schema moved in a way the
/// change cannot be rebased onto ([`rebase`]); iceberg's error when the schema cannot be
/// added.
pub fn evolved_handle(
    catalog: &RedbCatalog,
    table: &Table,
    change: &SchemaChange,
) -> iceberg::Result<(Table, SchemaChange)> {
    let change = rebase(table, change)?;
    let metadata = TableMetadataBuilder::new_from_metadata(
        table.metadata().clone(),
        table.metadata_location().map(str::to_string),
    )
    .add_current_schema(change.schema.as_ref().clone())?
    .build()?
    .metadata;
    Ok((catalog.handle_with_metadata(table, metadata)?, change))
}

/// `change` made to apply on `table`'s current schema — the policy for an evolving
/// commit whose table's schema moved (e.g. a REST `updateTable`) after the stream planned
/// its change. The stream's data files are already written with `change.schema`'s field
/// ids, so a rebase is possible exactly when those ids still mean the same columns:
/// - every column the stream added (a field id the base schema does not have) has an id
///   above the table's `last-column-id` now (no column was added since, so the ids are
///   still free), and no column of that name exists now;
/// - every other column of the stream has, in the current schema, the same type, a type
///   the stream's promotes to (the promotion is kept), or a type that promotes the
///   stream's (the current type is kept: the files read as it, Iceberg spec "Schema
///   Evolution");
/// - the current schema's other changes (renames, docs, columns dropped, other
///   promotions) are kept as they are (the files are read by field id).
///
/// Returns `change` itself when the schema did not move; the rebased change (on the
/// current schema id) otherwise.
///
/// # Errors
/// `CatalogCommitConflicts`, not retryable, naming the column that cannot be rebased
/// (or the missing base schema): the stream must be retried.
pub fn rebase(table: &Table, change: &SchemaChange) -> iceberg::Result<SchemaChange> {
    let metadata = table.metadata();
    let current = metadata.current_schema();
    if current.schema_id() == change.base_schema_id {
        return Ok(change.clone());
    }
    let conflict = |why: String| {
        iceberg::Error::new(
            iceberg::ErrorKind::CatalogCommitConflicts,
            format!(
                "table {}: its schema changed (id {} → {}) while this stream was evolving                  it, and {why}; retry the stream",
                table.identifier(),
                change.base_schema_id,
                current.schema_id()
            ),
        )
    };
    let Some(base) = metadata.schema_by_id(change.base_schema_id) else {
        return Err(conflict("the schema it started from is gone".to_string()));
    };
    let mut fields: Vec<NestedFieldRef> = current.as_struct().fields().to_vec();
    for field in change.schema.as_struct().fields() {
        if base.field_by_id(field.id).is_none() {
            if field.id <= metadata.last_column_id() {
                return Err(conflict(format!(
                    "the id of its new column {:?} was given to another column meanwhile",
                    field.name
                )));
            }
            if current.field_by_name(&field.name).is_some() {
                return Err(conflict(format!(
                    "a column {:?} was added meanwhile",
                    field.name
                )));
            }
            fields.push(field.clone());
            continue;
        }
        let Some(position) = fields.iter().position(|f| f.id == field.id) else {
            continue; // dropped meanwhile: the files' column is not read
        };
        let now = &fields[position];
        if now.field_type == field.field_type
            || promotion(&field.field_type, &now.field_type).is_some()
        {
            continue;
        }
        if let Some(promoted) = promotion(&now.field_type, &field.field_type) {
            let mut kept = now.as_ref().clone();
            kept.field_type = Box::new(Type::Primitive(promoted));
            fields[position] = Arc::new(kept);
            continue;
        }
        return Err(conflict(format!(
            "column {:?} is now {} where the stream writes {}",
            now.name, now.field_type, field.field_type
        )));
    }
    let next_id = metadata
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        + 1;
    let schema = Schema::builder()
        .with_schema_id(next_id)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()?;
    Ok(SchemaChange {
        base_schema_id: current.schema_id(),
        schema: Arc::new(schema),
    })
}

/// Stages `data_files` as one append ([`stage_append`]) on `evolved` (from [`evolved_handle`]) that
/// also makes `change` the table's current schema: `(requirements, updates)` for ONE
/// catalog commit — the append's own, plus "the current schema is still
/// `change.base_schema_id`", with `AddSchema` + `SetCurrentSchema` before the append.
///
/// # Errors
/// iceberg's error from the append (e.g. a manifest write failure).
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

/// Commits `data_files` to `table` as one append that also makes `change` the current
/// schema, in ONE catalog commit (one redb transaction), through the catalog's commit
/// driver ([`RedbCatalog::commit`]) — the same turn, checks and conflict policy as a
/// plain append ([`super::ingest::commit_files_with`]).
///
/// # Errors
/// [`WriteError::Catalog`]: `CatalogCommitConflicts` (not retryable) when the table's
/// schema changed since the change was planned, or its partition spec; a conflict that
/// outlasted the driver's retries; or a storage failure. Nothing is committed then.
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
    commit_append(catalog, table, Some(change), data_files, properties).await
}

/// The one-table append both [`commit_evolving`] and [`super::ingest::commit_files_with`]
/// run: `data_files` with summary `properties` as one merge append through the catalog's
/// commit driver, staged on the table as it stands at each attempt; with `change`, the
/// append also makes it the current schema (that stage runs on the blocking pool,
/// [`run_blocking_io`]).
///
/// # Errors
/// As [`commit_evolving`] with a change, as [`super::ingest::commit_files_with`] without.
///
/// # Cancel safety
/// As [`super::ingest::commit_files`].
pub(super) async fn commit_append(
    catalog: &RedbCatalog,
    table: &Table,
    change: Option<&SchemaChange>,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<Table, WriteError> {
    let target = CommitTarget::data(table);
    let (files, properties) = (&data_files, &properties);
    catalog
        .commit_one(&target, move |current| {
            let (files, properties) = (files.clone(), properties.clone());
            Box::pin(async move {
                let Some(change) = change else {
                    return stage_append(&current, files, properties).await;
                };
                let (evolved, change) = evolved_handle(catalog, &current, change)?;
                run_blocking_io(async move {
                    stage_evolving_append(evolved, &change, files, properties).await
                })
                .await
            })
        })
        .await
        .map_err(|e| WriteError::catalog(table.identifier(), e))
}

//! A schema change committed together with an append (schema evolution on ingest,
//! `write::evolve` plans it): the change as planned, the table handle the append is
//! staged on, and the rebase of a change onto a schema that moved since it was planned
//! (Iceberg spec, "Schema Evolution").

use std::sync::Arc;

use iceberg::spec::{NestedFieldRef, PrimitiveType, Schema, TableMetadataBuilder, Type};
use iceberg::table::Table;

use crate::catalog::RedbCatalog;

/// A schema a stream evolved its table to, committed with the stream's first data.
#[derive(Debug, Clone)]
pub struct SchemaChange {
    /// The table's current schema id the change was planned on; the commit requires it
    /// to be still current.
    pub base_schema_id: i32,
    /// The evolved schema (new fields have ids after the table's `last-column-id`).
    pub schema: Arc<Schema>,
}

/// The promoted type when Iceberg allows `current` to become `wanted` (int → long,
/// float → double, decimal precision widening at the same scale).
pub(crate) fn promotion(current: &Type, wanted: &Type) -> Option<PrimitiveType> {
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

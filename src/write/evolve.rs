//! Schema evolution on ingest, opt-in per table with the property
//! [`EVOLVE_SCHEMA`]` = true` (`docs/schema-evolution.md`).
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
//! together with its append, in ONE catalog commit, required to apply on the schema it
//! was planned on — rebased onto the table's current schema first when that moved since
//! and the change still fits it ([`crate::snapshot::schema_change`]).

use std::sync::Arc;

use arrow_schema::Schema as ArrowSchema;
use iceberg::spec::{ListType, MapType, NestedFieldRef, Schema, StructType, Type};
use iceberg::table::Table;

use super::EVOLVE_SCHEMA;
use super::WriteError;
use super::schema::iceberg_schema_for;
use crate::snapshot::schema_change::{SchemaChange, promotion};

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

//! The checks a REST commit or a table creation passes before anything is written, so
//! that whatever the catalog accepts, every reader can still read (Iceberg spec,
//! "Schema Evolution", "Default values", "Partition Transforms"; Iceberg Java's
//! `SchemaUpdate`, `TypeUtil.isPromotionAllowed` and `Schema.checkCompatibility`, the
//! rules its reference catalog's clients apply).
//!
//! A commit's updates are applied to the table's current metadata in memory (iceberg's
//! `TableMetadataBuilder`, as the commit itself will), and the schema that results is
//! compared with the current one field by field, by field id, at every depth:
//! - a field that stays keeps its kind (primitive, struct, list, map); a primitive type
//!   changes only by a promotion both v1/v2 and Java allow: `int → long`,
//!   `float → double`, `decimal(P, S) → decimal(P', S)` with `P' ≥ P`;
//! - an optional field does not become required (its files may hold nulls);
//! - a field's `initial-default` does not change (spec: "must be set when a field is
//!   added and cannot change");
//! - a new field has an id above the table's `last-column-id` (an id used before would
//!   read the old field's values in old files);
//! - a new required field needs an `initial-default` when the table holds rows (Java:
//!   "cannot add required column without a default value"), unless its parent struct is
//!   new too;
//! - a new `initial-default` or `write-default` needs format v3 (Java:
//!   "non-null default … is not supported until v3");
//! - a dropped field is not the source of a field of the default partition spec;
//! - no field is added to a struct that already exists (legal in the spec, but DoGet's
//!   reader, iceberg 0.10.1's, cannot read the older files then; a new top-level column,
//!   or a new struct with its fields, is fine).
//!
//! The default partition spec must apply to the schema: every transform to its source
//! column's type, checked by building skade's partitioner over it
//! ([`crate::write::Partitioner::new`]). Each refusal is a 400 naming the column path.

use std::collections::HashMap;

use iceberg::TableUpdate;
use iceberg::spec::{
    FormatVersion, NestedFieldRef, PartitionField, PrimitiveType, Schema, TableMetadata,
    TableMetadataBuilder, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;

use super::RestError;
use crate::write::Partitioner;

/// Checks that `updates`, applied to `table` (its current metadata), leave a table every
/// reader can read (module docs). Updates iceberg cannot apply are left to the commit,
/// which refuses them itself.
///
/// # Errors
/// [`RestError::BadRequest`] naming the column and the rule.
pub(super) fn check_commit(table: &Table, updates: &[TableUpdate]) -> Result<(), RestError> {
    let before = table.metadata();
    // A new spec's transforms against the schema it will partition: the last one this
    // commit adds, or the current one.
    let mut schema = before.current_schema().clone();
    for update in updates {
        match update {
            TableUpdate::AddSchema { schema: added } => {
                check_partition_sources(before, added)?;
                schema = std::sync::Arc::new(added.clone());
            }
            TableUpdate::AddSpec { spec } => check_create_spec(&schema, Some(spec))?,
            _ => {}
        }
    }
    let mut builder = TableMetadataBuilder::new_from_metadata(
        before.clone(),
        table.metadata_location().map(str::to_string),
    );
    for update in updates {
        builder = match update.clone().apply(builder) {
            Ok(next) => next,
            Err(_) => return Ok(()),
        };
    }
    let Ok(built) = builder.build() else {
        return Ok(());
    };
    let after = built.metadata;
    let schema_changed = after.current_schema_id() != before.current_schema_id();
    if schema_changed {
        check_schema_change(before, &after)?;
    }
    if schema_changed || after.default_partition_spec_id() != before.default_partition_spec_id() {
        check_spec(&table.identifier().to_string(), &after)?;
    }
    Ok(())
}

/// Checks a creation's partition spec against its schema (as the request numbers its
/// fields) before the catalog binds it: each transform applies to its source column.
///
/// # Errors
/// [`RestError::BadRequest`] naming the partition field and the column.
pub(super) fn check_create_spec(
    schema: &Schema,
    spec: Option<&UnboundPartitionSpec>,
) -> Result<(), RestError> {
    for field in spec.map(|s| s.fields()).unwrap_or_default() {
        let bound = PartitionField {
            source_id: field.source_id,
            field_id: field.field_id.unwrap_or_default(),
            name: field.name.clone(),
            transform: field.transform,
        };
        crate::write::partition::check_field(&bound, schema)
            .map_err(|e| RestError::bad(format!("partition spec: {}", e.message())))?;
    }
    Ok(())
}

/// Checks a new table's metadata: defaults need v3, and its partition spec applies to its
/// schema.
///
/// # Errors
/// [`RestError::BadRequest`] naming the column.
pub(super) fn check_new_table(table: &str, metadata: &TableMetadata) -> Result<(), RestError> {
    let schema = metadata.current_schema();
    if metadata.format_version() < FormatVersion::V3 {
        for (path, field) in fields_of(schema).0 {
            if field.initial_default.is_some() || field.write_default.is_some() {
                return Err(default_needs_v3(&path, metadata.format_version()));
            }
        }
    }
    check_spec(table, metadata)
}

fn default_needs_v3(path: &str, version: FormatVersion) -> RestError {
    RestError::bad(format!(
        "column {path:?}: initial-default and write-default are a format v3 feature and this \
         table is {version}: drop the default (or create the table with format-version 3)"
    ))
}

/// Every field of `schema` at every depth with its dotted path, parents before their
/// children; and each field's parent's id by field id (`None` at the top level).
fn fields_of(schema: &Schema) -> (Vec<(String, NestedFieldRef)>, Parents) {
    let (mut out, mut parents) = (Vec::new(), Parents::new());
    walk(
        "",
        schema.as_struct().fields(),
        None,
        &mut out,
        &mut parents,
    );
    (out, parents)
}

type Parents = HashMap<i32, Option<i32>>;

fn walk(
    parent_path: &str,
    fields: &[NestedFieldRef],
    parent: Option<i32>,
    out: &mut Vec<(String, NestedFieldRef)>,
    parents: &mut Parents,
) {
    for field in fields {
        let path = if parent_path.is_empty() {
            field.name.clone()
        } else {
            format!("{parent_path}.{}", field.name)
        };
        parents.insert(field.id, parent);
        out.push((path.clone(), field.clone()));
        match field.field_type.as_ref() {
            Type::Primitive(_) => {}
            Type::Struct(st) => walk(&path, st.fields(), Some(field.id), out, parents),
            Type::List(list) => walk(
                &path,
                std::slice::from_ref(&list.element_field),
                Some(field.id),
                out,
                parents,
            ),
            Type::Map(map) => walk(
                &path,
                &[map.key_field.clone(), map.value_field.clone()],
                Some(field.id),
                out,
                parents,
            ),
        }
    }
}

/// The rules of the module docs, `before`'s current schema to `after`'s.
fn check_schema_change(before: &TableMetadata, after: &TableMetadata) -> Result<(), RestError> {
    let old = before.current_schema();
    let new = after.current_schema();
    let (new_fields, new_parents) = fields_of(new);
    let has_rows = before.current_snapshot().is_some_and(|s| {
        s.summary()
            .additional_properties
            .get("total-records")
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|rows| rows > 0)
    });
    let v3 = after.format_version() >= FormatVersion::V3;
    for (path, field) in &new_fields {
        let was = old.field_by_id(field.id);
        let default_is_new =
            |get: fn(&iceberg::spec::NestedField) -> &Option<iceberg::spec::Literal>| {
                get(field).is_some() && was.is_none_or(|w| get(w) != get(field))
            };
        if !v3 && (default_is_new(|f| &f.initial_default) || default_is_new(|f| &f.write_default)) {
            return Err(default_needs_v3(path, after.format_version()));
        }
        let Some(was) = was else {
            if field.id <= before.last_column_id() {
                return Err(RestError::bad(format!(
                    "column {path:?}: field id {} is not in the current schema but not new \
                     either (the table's last-column-id is {}): a new field needs an id above \
                     it, or the old field's values would be read as this one's",
                    field.id,
                    before.last_column_id()
                )));
            }
            let parent = new_parents.get(&field.id).copied().flatten();
            let parent_is_old = parent.is_none_or(|parent| old.field_by_id(parent).is_some());
            // Spec-legal, but DoGet's reader (iceberg 0.10.1's ArrowReader) fails on every
            // file written before the addition ("Incorrect number of arrays for
            // StructArray fields"); schema evolution on ingest refuses it too.
            if parent.is_some() && parent_is_old {
                return Err(RestError::bad(format!(
                    "column {path:?}: adding a field to an existing struct is not supported: \
                     skade's reader (iceberg 0.10.1) cannot read the table's older files after \
                     it; add a top-level column instead"
                )));
            }
            if field.required && field.initial_default.is_none() && has_rows && parent_is_old {
                return Err(RestError::bad(format!(
                    "column {path:?}: cannot add a required column without an initial-default \
                     to a table that holds rows (its rows have no value for it): add it as \
                     optional{}",
                    if v3 {
                        ", or give it an initial-default"
                    } else {
                        ""
                    }
                )));
            }
            continue;
        };
        check_type_change(path, &was.field_type, &field.field_type)?;
        if field.required && !was.required {
            return Err(RestError::bad(format!(
                "column {path:?}: cannot change an optional column to required (its data files \
                 may hold nulls)"
            )));
        }
        if field.initial_default != was.initial_default && was.initial_default.is_some() {
            return Err(RestError::bad(format!(
                "column {path:?}: a field's initial-default cannot change once set (spec, \
                 \"Default values\"); change its write-default instead"
            )));
        }
    }
    check_partition_sources(after, new)
}

/// `schema` keeps the source column of every field of `metadata`'s default partition
/// spec.
///
/// # Errors
/// [`RestError::BadRequest`] naming the dropped column and the partition field.
fn check_partition_sources(metadata: &TableMetadata, schema: &Schema) -> Result<(), RestError> {
    let current = metadata.current_schema();
    for partition in metadata.default_partition_spec().fields() {
        if schema.field_by_id(partition.source_id).is_none() {
            let name = current
                .name_by_field_id(partition.source_id)
                .unwrap_or("?")
                .to_string();
            return Err(RestError::bad(format!(
                "column {name:?}: cannot drop the source of partition field {:?} of the \
                 default partition spec: evolve the spec first",
                partition.name
            )));
        }
    }
    Ok(())
}

/// A field's type change from `old` to `new` at `path`: the same kind, and for
/// primitives the same type or a promotion Iceberg Java allows.
fn check_type_change(path: &str, old: &Type, new: &Type) -> Result<(), RestError> {
    use PrimitiveType as P;
    let allowed = match (old, new) {
        (Type::Primitive(a), Type::Primitive(b)) => {
            a == b
                || matches!((a, b), (P::Int, P::Long) | (P::Float, P::Double))
                || matches!(
                    (a, b),
                    (P::Decimal { precision: p, scale: s }, P::Decimal { precision: q, scale: t })
                        if s == t && q >= p
                )
        }
        (Type::Struct(_), Type::Struct(_))
        | (Type::List(_), Type::List(_))
        | (Type::Map(_), Type::Map(_)) => true,
        _ => false,
    };
    if allowed {
        return Ok(());
    }
    Err(RestError::bad(format!(
        "column {path:?}: cannot change type {old} to {new}: Iceberg allows only int → long, \
         float → double and decimal(P, S) → decimal(P', S) with P' ≥ P"
    )))
}

/// The default partition spec of `metadata` applies to its current schema.
fn check_spec(table: &str, metadata: &TableMetadata) -> Result<(), RestError> {
    Partitioner::new(
        table,
        metadata.default_partition_spec(),
        metadata.current_schema(),
    )
    .map(|_| ())
    .map_err(|e| {
        let reason = match &e {
            crate::write::WriteError::Encode { source, .. } => source.message().to_string(),
            other => other.to_string(),
        };
        RestError::bad(format!("partition spec: {reason}"))
    })
}

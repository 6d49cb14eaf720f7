//! Arrow ↔ Iceberg schema rules for ingest (SERVICE.md, Lane 1).
//!
//! A new table's Iceberg schema comes from the stream's Arrow schema with field ids
//! assigned from 1 and nullability kept. Arrow types map as iceberg-rust's
//! `arrow_type_to_type` does (dictionary → its value type; large/view strings and
//! binaries → string/binary; `uint8`/`uint16` → int, `uint32` → long; `uint64` is
//! rejected), except that nanosecond timestamps become microsecond ones, since format-v2
//! tables have no nanosecond type.
//!
//! Incoming batches are conformed to the table's Arrow schema ([`conform_batch`]):
//! columns are matched by name, cast to the table's type (a cast that would lose a value
//! is an error, never a null), and a missing nullable column is written as nulls.

use std::sync::Arc;

use arrow_array::{RecordBatch, new_null_array};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, FieldRef, Schema as ArrowSchema, SchemaRef, TimeUnit};
use iceberg::arrow::arrow_schema_to_schema_auto_assign_ids;
use iceberg::spec::Schema;

use super::WriteError;

/// The Iceberg schema a new table gets for a stream with Arrow schema `arrow`.
///
/// # Errors
/// [`WriteError::Schema`] for duplicate column names; [`WriteError::UnsupportedSchema`]
/// for Arrow types without an Iceberg equivalent (e.g. `uint64`, unions, intervals).
pub fn iceberg_schema_for(table: &str, arrow: &ArrowSchema) -> Result<Schema, WriteError> {
    let mut seen = std::collections::HashSet::new();
    for field in arrow.fields() {
        if !seen.insert(field.name()) {
            return Err(WriteError::Schema {
                table: table.to_string(),
                column: field.name().clone(),
                reason: "duplicate column name".to_string(),
            });
        }
    }
    let fields: Vec<FieldRef> = arrow.fields().iter().map(normalize_field).collect();
    let normalized = ArrowSchema::new(fields);
    arrow_schema_to_schema_auto_assign_ids(&normalized).map_err(|source| {
        WriteError::UnsupportedSchema {
            table: table.to_string(),
            source: Box::new(source),
        }
    })
}

/// Replaces nanosecond timestamps (at any depth) with microsecond ones.
fn normalize_field(field: &FieldRef) -> FieldRef {
    let data_type = normalize_type(field.data_type());
    Arc::new(Field::clone(field).with_data_type(data_type))
}

fn normalize_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Timestamp(TimeUnit::Nanosecond, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
        }
        DataType::Dictionary(_, value) => normalize_type(value),
        DataType::List(f) => DataType::List(normalize_field(f)),
        DataType::LargeList(f) => DataType::LargeList(normalize_field(f)),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(normalize_field).collect()),
        DataType::Map(f, sorted) => DataType::Map(normalize_field(f), *sorted),
        other => other.clone(),
    }
}

/// Checks that an incoming column of Arrow type `from` holds the Iceberg type of the
/// table's column (Arrow type `to`): the same primitive type (so `utf8`/`large_utf8`/
/// dictionary of strings all fit a string column, any time zone fits a `timestamptz`
/// column), or a lossless widening Iceberg allows (int → long, float → double). Nested
/// columns are left to the cast.
fn same_iceberg_type(from: &DataType, to: &DataType) -> Result<(), String> {
    use iceberg::arrow::arrow_type_to_type;
    use iceberg::spec::{PrimitiveType as P, Type};
    let from = normalize_type(from);
    if from.is_nested() || to.is_nested() {
        return Ok(());
    }
    let have = arrow_type_to_type(&from).map_err(|e| format!("unsupported type {from}: {e}"))?;
    let want = arrow_type_to_type(to).map_err(|e| format!("unsupported table type {to}: {e}"))?;
    let fits = match (&have, &want) {
        (Type::Primitive(a), Type::Primitive(b)) => {
            a == b || matches!((a, b), (P::Int, P::Long) | (P::Float, P::Double))
        }
        _ => false,
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "the table's column is {want}, the batch sends {have} (Arrow {from})"
        ))
    }
}

/// Rebuilds `batch` with the table's Arrow schema `target` (which carries the
/// `PARQUET:field_id` metadata the encoder needs).
///
/// # Errors
/// [`WriteError::Schema`] naming the column when: a column of `batch` is not in the table;
/// a required table column is missing; a column's Iceberg type differs from the table's
/// (other than int → long, float → double); a value cannot be cast without loss; a
/// non-nullable column holds nulls; a column name repeats.
pub fn conform_batch(
    table: &str,
    batch: &RecordBatch,
    target: &SchemaRef,
) -> Result<RecordBatch, WriteError> {
    let err = |column: &str, reason: String| WriteError::Schema {
        table: table.to_string(),
        column: column.to_string(),
        reason,
    };
    let incoming = batch.schema();
    let mut seen = std::collections::HashSet::new();
    for field in incoming.fields() {
        if !seen.insert(field.name()) {
            return Err(err(field.name(), "duplicate column name".to_string()));
        }
        if target.field_with_name(field.name()).is_err() {
            return Err(err(field.name(), "column is not in the table".to_string()));
        }
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut columns = Vec::with_capacity(target.fields().len());
    for field in target.fields() {
        let column = match incoming.index_of(field.name()) {
            Ok(i) => {
                let source = batch.column(i);
                same_iceberg_type(source.data_type(), field.data_type())
                    .map_err(|reason| err(field.name(), reason))?;
                if source.data_type() == field.data_type() {
                    source.clone()
                } else {
                    cast_with_options(source, field.data_type(), &options).map_err(|e| {
                        err(
                            field.name(),
                            format!(
                                "cannot convert {} to the table's {}: {e}",
                                source.data_type(),
                                field.data_type()
                            ),
                        )
                    })?
                }
            }
            Err(_) if field.is_nullable() => new_null_array(field.data_type(), batch.num_rows()),
            Err(_) => {
                return Err(err(field.name(), "required column is missing".to_string()));
            }
        };
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(err(
                field.name(),
                format!("{} nulls in a required column", column.null_count()),
            ));
        }
        columns.push(column);
    }
    RecordBatch::try_new(target.clone(), columns)
        .map_err(|e| err("*", format!("batch does not fit the table schema: {e}")))
}

/// Loads `ident`, creating its namespace (every level) and the table from the stream's
/// Arrow schema when absent: field ids assigned, nullability kept, unpartitioned, format
/// v2. A concurrent creator winning the race is fine: its table is loaded.
///
/// # Errors
/// [`WriteError::Schema`]/[`WriteError::UnsupportedSchema`] when `arrow` cannot become a
/// table; [`WriteError::Catalog`] for catalog failures.
pub async fn ensure_table(
    catalog: &dyn iceberg::Catalog,
    ident: &iceberg::TableIdent,
    arrow: &ArrowSchema,
) -> Result<iceberg::table::Table, WriteError> {
    use iceberg::ErrorKind;
    let table_name = ident.to_string();
    match catalog.load_table(ident).await {
        Ok(table) => return Ok(table),
        Err(e) if e.kind() == ErrorKind::TableNotFound => {}
        Err(e) => return Err(WriteError::catalog(ident, e)),
    }
    let schema = iceberg_schema_for(&table_name, arrow)?;
    let parts = ident.namespace().as_ref();
    for depth in 1..=parts.len() {
        let ns = iceberg::NamespaceIdent::from_vec(parts[..depth].to_vec())
            .map_err(|e| WriteError::catalog(ident, e))?;
        match catalog.create_namespace(&ns, Default::default()).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {}
            Err(e) => return Err(WriteError::catalog(ident, e)),
        }
    }
    let creation = iceberg::TableCreation::builder()
        .name(ident.name().to_string())
        .schema(schema)
        .build();
    match catalog.create_table(ident.namespace(), creation).await {
        Ok(table) => Ok(table),
        Err(e) if e.kind() == ErrorKind::TableAlreadyExists => catalog
            .load_table(ident)
            .await
            .map_err(|e| WriteError::catalog(ident, e)),
        Err(e) => Err(WriteError::catalog(ident, e)),
    }
}

/// The Arrow schema batches must have to be encoded into `table` (with the
/// `PARQUET:field_id` metadata of every field).
///
/// # Errors
/// [`WriteError::UnsupportedSchema`] if iceberg cannot express the table's schema in Arrow.
pub fn table_arrow_schema(table: &iceberg::table::Table) -> Result<SchemaRef, WriteError> {
    iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
        .map(Arc::new)
        .map_err(|source| WriteError::UnsupportedSchema {
            table: table.identifier().to_string(),
            source: Box::new(source),
        })
}

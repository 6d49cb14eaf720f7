//! Arrow ↔ Iceberg schema rules for ingest (`docs/arrow-types.md`).
//!
//! A new table's Iceberg schema comes from the stream's Arrow schema with field ids
//! assigned from 1 and nullability kept; each Arrow type becomes the Iceberg type
//! [`super::types`] gives it, and a type Iceberg cannot hold is refused naming its column
//! path. Before a table is created, the schema is also checked to be writable as Parquet
//! ([`check_new_table`]), so a refused first put leaves nothing behind.
//!
//! Incoming batches are conformed to the table's Arrow schema ([`conform_batch`],
//! [`super::conform`]): fields matched by name at every depth, values converted only
//! when exact, a missing nullable field written as nulls.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use iceberg::arrow::arrow_schema_to_schema_auto_assign_ids;
use iceberg::spec::Schema;

use super::WriteError;
use super::conform::{ConformOptions, conform_columns};
use super::types::{ColumnError, storage_fields};

/// The Iceberg schema a new table gets for a stream with Arrow schema `arrow`: every
/// column's type from [`super::types::storage_type`], field ids from 1, nullability kept.
/// The schema is also checked to be writable as Parquet.
///
/// # Errors
/// [`WriteError::Schema`] naming the column path: no columns at all, a duplicate name at
/// any depth, an Arrow type without an Iceberg equivalent (with what to send instead), or
/// a column Parquet cannot write.
pub fn iceberg_schema_for(table: &str, arrow: &ArrowSchema) -> Result<Schema, WriteError> {
    let column_error = |e: ColumnError| WriteError::Schema {
        table: table.to_string(),
        column: e.path,
        reason: e.reason,
    };
    if arrow.fields().is_empty() {
        return Err(column_error(ColumnError::new(
            "*",
            "the stream has no columns, and a table needs at least one: send a schema with \
             a column",
        )));
    }
    let fields = storage_fields("", arrow.fields()).map_err(column_error)?;
    let schema =
        arrow_schema_to_schema_auto_assign_ids(&ArrowSchema::new(fields)).map_err(|source| {
            WriteError::UnsupportedSchema {
                table: table.to_string(),
                source: Box::new(source),
            }
        })?;
    let stored = iceberg::arrow::schema_to_arrow_schema(&schema).map_err(|source| {
        WriteError::UnsupportedSchema {
            table: table.to_string(),
            source: Box::new(source),
        }
    })?;
    parquet::arrow::ArrowSchemaConverter::new()
        .convert(&stored)
        .map_err(|e| {
            column_error(ColumnError::new(
                "*",
                format!("Parquet cannot write this schema: {e}"),
            ))
        })?;
    Ok(schema)
}

/// Checks, before anything is created, that a stream with schema `arrow` can create a
/// table and that its first batch `first` (if any) fits it: the whole schema mapping,
/// the Parquet check, and every value of `first` converted exactly.
///
/// # Errors
/// As [`iceberg_schema_for`] and [`conform_batch`].
pub fn check_new_table(
    table: &str,
    arrow: &ArrowSchema,
    first: Option<&RecordBatch>,
) -> Result<(), WriteError> {
    let schema = iceberg_schema_for(table, arrow)?;
    if let Some(batch) = first {
        let target = iceberg::arrow::schema_to_arrow_schema(&schema).map_err(|source| {
            WriteError::UnsupportedSchema {
                table: table.to_string(),
                source: Box::new(source),
            }
        })?;
        conform_batch(table, batch, &Arc::new(target))?;
    }
    Ok(())
}

/// Rebuilds `batch` with the table's Arrow schema `target` (which carries the
/// `PARQUET:field_id` metadata the encoder needs), with default [`ConformOptions`].
///
/// # Errors
/// As [`conform_batch_with`].
pub fn conform_batch(
    table: &str,
    batch: &RecordBatch,
    target: &SchemaRef,
) -> Result<RecordBatch, WriteError> {
    conform_batch_with(table, batch, target, &ConformOptions::default())
}

/// Rebuilds `batch` with the table's Arrow schema `target`: fields matched by name at
/// every depth, values converted only when exact (see [`super::conform`]), a field the
/// batch leaves out filled with its `write-default` (when `options` carry the schema) or
/// null.
///
/// # Errors
/// [`WriteError::Schema`] naming the column path when: a field of `batch` is not in the
/// table; a required field without a `write-default` is missing, or null; a field's Iceberg type differs from the
/// table's (other than Iceberg's widenings int → long, float → double, decimal
/// precision); a value would change (overflow, a sub-microsecond part, a `date64` that is
/// not a whole day); a name repeats.
pub fn conform_batch_with(
    table: &str,
    batch: &RecordBatch,
    target: &SchemaRef,
    options: &ConformOptions,
) -> Result<RecordBatch, WriteError> {
    conform_columns(batch, target, options).map_err(|e| WriteError::Schema {
        table: table.to_string(),
        column: e.path,
        reason: e.reason,
    })
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
    ensure_table_created(catalog, ident, arrow)
        .await
        .map(|(table, _)| table)
}

/// [`ensure_table`], also telling whether this call created the table (`true`) or
/// loaded one that existed or that a concurrent creator made first (`false`).
///
/// # Errors
/// As [`ensure_table`].
pub async fn ensure_table_created(
    catalog: &dyn iceberg::Catalog,
    ident: &iceberg::TableIdent,
    arrow: &ArrowSchema,
) -> Result<(iceberg::table::Table, bool), WriteError> {
    use iceberg::ErrorKind;
    let table_name = ident.to_string();
    match catalog.load_table(ident).await {
        Ok(table) => return Ok((table, false)),
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
        Ok(table) => Ok((table, true)),
        Err(e) if e.kind() == ErrorKind::TableAlreadyExists => catalog
            .load_table(ident)
            .await
            .map(|table| (table, false))
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

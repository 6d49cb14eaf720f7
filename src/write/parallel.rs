//! Column-parallel Parquet encoding of one data file.
//!
//! A 128 MiB data file encoded by one `ArrowWriter` uses one core; a streaming put has
//! only one or two files in flight, so the other cores idle while it is encoded
//! (`skade-bench -- ingest`, issue "Benchmarks"). This encoder cuts the file's batches
//! into row groups exactly as `ArrowWriter::write` does (at `max_row_group_row_count`
//! rows, splitting batches), encodes every (row group, top-level column) pair as its own
//! rayon task with parquet-rs's `ArrowColumnWriter`s (the parallel-encoding pattern
//! parquet-rs documents on `ArrowColumnWriter`), and appends the chunks in schema order.
//! The result is byte-identical to what iceberg's `ParquetWriter` (an `ArrowWriter` with
//! the same properties) writes for the same batches; `tests/parallel_encode.rs` pins
//! that, and the file's Iceberg metrics come from its footer ([`super::file_stats`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use bytes::Bytes;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFileBuilder, NestedField, Schema, Type};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowColumnWriter, compute_leaves};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;

use super::file_stats::data_file_from_footer;

/// Encodes `batches` (conformed to `schema`'s Arrow form, see
/// [`super::conform_batch`]) as one Parquet file with `props`, using every core. Blocking
/// (CPU only): call it on rayon's pool or from `spawn_blocking`.
///
/// Returns the file's bytes and its `DataFile` builder (metrics as iceberg computes them;
/// no path yet), or `None` when the batches hold no rows.
///
/// # Errors
/// An iceberg error wrapping the Parquet error (e.g. a batch column whose type does not
/// match the schema), or one from reading the footer's statistics.
pub fn encode_file(
    schema: &Arc<Schema>,
    props: &WriterProperties,
    batches: &[RecordBatch],
) -> iceberg::Result<Option<(Bytes, DataFileBuilder)>> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        return Ok(None);
    }
    let arrow = Arc::new(schema_to_arrow_schema(schema)?);
    let mut buffer = Vec::new();
    let writer = ArrowWriter::try_new(&mut buffer, arrow.clone(), Some(props.clone()))
        .map_err(parquet_error)?;
    if props.max_row_group_bytes().is_some() {
        // Row groups cut by estimated bytes depend on the encoder's running state: keep
        // ArrowWriter's own sequential cut. skade's writer properties never set this.
        let metadata = sequential(writer, batches)?;
        let nans = nan_value_counts(schema, batches);
        let bytes = Bytes::from(buffer);
        let builder = data_file_from_footer(schema, &metadata, bytes.len() as u64, nans)?;
        return Ok(Some((bytes, builder)));
    }
    let (mut file, factory) = writer.into_serialized_writer().map_err(parquet_error)?;
    let row_groups = plan_row_groups(batches, props.max_row_group_row_count());
    let leaves: Vec<usize> = file
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| leaf_count(f))
        .collect();

    // One task per (row group, top-level column), in file order.
    type Task = (usize, usize, Vec<ArrowColumnWriter>);
    let mut tasks: Vec<Task> = Vec::with_capacity(row_groups.len() * leaves.len());
    for rg in 0..row_groups.len() {
        let mut writers = factory
            .create_column_writers(rg)
            .map_err(parquet_error)?
            .into_iter();
        for (column, &n) in leaves.iter().enumerate() {
            tasks.push((rg, column, writers.by_ref().take(n).collect()));
        }
    }
    let fields = arrow.fields();
    let (chunks, nans) = rayon::join(
        || {
            tasks
                .into_par_iter()
                .map(|(rg, column, mut writers)| {
                    for batch in &row_groups[rg] {
                        let leaves = compute_leaves(&fields[column], batch.column(column))?;
                        for (writer, leaf) in writers.iter_mut().zip(&leaves) {
                            writer.write(leaf)?;
                        }
                    }
                    writers
                        .into_iter()
                        .map(ArrowColumnWriter::close)
                        .collect::<Result<Vec<ArrowColumnChunk>, ParquetError>>()
                })
                .collect::<Result<Vec<Vec<ArrowColumnChunk>>, ParquetError>>()
        },
        || nan_value_counts(schema, batches),
    );
    let mut chunks = chunks.map_err(parquet_error)?.into_iter();
    for _ in 0..row_groups.len() {
        let mut row_group = file.next_row_group().map_err(parquet_error)?;
        for chunk in chunks.by_ref().take(leaves.len()).flatten() {
            chunk
                .append_to_row_group(&mut row_group)
                .map_err(parquet_error)?;
        }
        row_group.close().map_err(parquet_error)?;
    }
    let metadata = file.close().map_err(parquet_error)?;
    let bytes = Bytes::from(buffer);
    let builder = data_file_from_footer(schema, &metadata, bytes.len() as u64, nans)?;
    Ok(Some((bytes, builder)))
}

/// The one-core path: `ArrowWriter::write` batch by batch; returns the footer.
fn sequential(
    mut writer: ArrowWriter<&mut Vec<u8>>,
    batches: &[RecordBatch],
) -> iceberg::Result<ParquetMetaData> {
    for batch in batches {
        writer.write(batch).map_err(parquet_error)?;
    }
    writer.close().map_err(parquet_error)
}

/// The batches of each row group, cut as `ArrowWriter::write` cuts them: a row group
/// closes when it reaches `max_rows` rows, and a batch that would overflow it is sliced.
fn plan_row_groups(batches: &[RecordBatch], max_rows: Option<usize>) -> Vec<Vec<RecordBatch>> {
    let max_rows = max_rows.unwrap_or(usize::MAX).max(1);
    let mut groups: Vec<Vec<RecordBatch>> = vec![Vec::new()];
    let mut rows_in_group = 0;
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let take = (batch.num_rows() - offset).min(max_rows - rows_in_group);
            if let Some(group) = groups.last_mut() {
                group.push(batch.slice(offset, take));
            }
            offset += take;
            rows_in_group += take;
            if rows_in_group == max_rows {
                groups.push(Vec::new());
                rows_in_group = 0;
            }
        }
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// Parquet leaf columns under one schema node.
fn leaf_count(node: &parquet::schema::types::Type) -> usize {
    if node.is_primitive() {
        1
    } else {
        node.get_fields().iter().map(|f| leaf_count(f)).sum()
    }
}

/// NaN counts per field id over `batches`, as iceberg's `NanValueCountVisitor` (private
/// in iceberg 0.10.1) counts them: one entry, possibly 0, for every float and double field
/// (struct members, list elements, map keys and values included), counting non-null NaN
/// values of the field's whole child array.
fn nan_value_counts(schema: &Schema, batches: &[RecordBatch]) -> HashMap<i32, u64> {
    let mut counts = HashMap::new();
    for batch in batches.iter().filter(|b| b.num_rows() > 0) {
        for (field, column) in schema.as_struct().fields().iter().zip(batch.columns()) {
            count_nans(field, column, &mut counts);
        }
    }
    counts
}

fn count_nans(field: &NestedField, array: &ArrayRef, counts: &mut HashMap<i32, u64>) {
    match (field.field_type.as_ref(), array.data_type()) {
        (Type::Primitive(_), DataType::Float32) => {
            let nans = array
                .as_primitive::<Float32Type>()
                .iter()
                .flatten()
                .filter(|v| v.is_nan());
            *counts.entry(field.id).or_default() += nans.count() as u64;
        }
        (Type::Primitive(_), DataType::Float64) => {
            let nans = array
                .as_primitive::<Float64Type>()
                .iter()
                .flatten()
                .filter(|v| v.is_nan());
            *counts.entry(field.id).or_default() += nans.count() as u64;
        }
        (Type::Struct(st), DataType::Struct(_)) => {
            for (child, column) in st.fields().iter().zip(array.as_struct().columns()) {
                count_nans(child, column, counts);
            }
        }
        (Type::List(list), DataType::List(_)) => {
            count_nans(&list.element_field, array.as_list::<i32>().values(), counts);
        }
        (Type::List(list), DataType::LargeList(_)) => {
            count_nans(&list.element_field, array.as_list::<i64>().values(), counts);
        }
        (Type::Map(map), DataType::Map(..)) => {
            let entries = array.as_map();
            count_nans(&map.key_field, entries.keys(), counts);
            count_nans(&map.value_field, entries.values(), counts);
        }
        _ => {}
    }
}

fn parquet_error(e: ParquetError) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, "Parquet encode failed").with_source(e)
}

//! A data file's Iceberg metrics, read from the footer of the Parquet file skade wrote.
//!
//! The same rules as iceberg-rust 0.10.1's `ParquetWriter::parquet_to_data_file_builder`
//! (crate-private there), which follows Iceberg Java's `ParquetUtil.footerMetrics`:
//! per field id, the column chunks' compressed sizes, value counts and null counts summed
//! over row groups; lower/upper bounds the minimum/maximum of the chunks' exact
//! statistics (Iceberg spec, "Manifests": `lower_bounds`, `upper_bounds`); split offsets
//! the row groups' file offsets. A column whose statistics are inexact (e.g. truncated
//! strings) gets no bound, as in iceberg. Bounds are built through
//! [`Datum::try_from_bytes`] (Iceberg spec, Appendix D, "Binary single-value
//! serialization"), so every primitive type decodes exactly as iceberg reads it back.

use std::collections::HashMap;

use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, PrimitiveType, Schema, Struct, Type,
};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;

/// Which end of a column chunk's range.
#[derive(Clone, Copy)]
enum End {
    Lower,
    Upper,
}

/// The `DataFile` builder (content data, format Parquet, unpartitioned, no path yet) for
/// a Parquet file of `size` bytes whose footer is `metadata`, written from `schema`
/// (leaf columns carry Iceberg field ids). `nan_value_counts` come from the batches
/// (iceberg's `NanValueCountVisitor`): Parquet statistics do not count NaNs.
///
/// # Errors
/// An iceberg `DataInvalid` error when a statistic cannot be read as its field's type
/// (e.g. a string bound that is not UTF-8).
pub fn data_file_from_footer(
    schema: &Schema,
    metadata: &ParquetMetaData,
    size: u64,
    nan_value_counts: HashMap<i32, u64>,
) -> iceberg::Result<DataFileBuilder> {
    // Long on purpose: one pass in the order of iceberg's `parquet_to_data_file_builder`,
    // kept whole so the two read side by side.
    let mut column_sizes: HashMap<i32, u64> = HashMap::new();
    let mut value_counts: HashMap<i32, u64> = HashMap::new();
    let mut null_counts: HashMap<i32, u64> = HashMap::new();
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    for row_group in metadata.row_groups() {
        for chunk in row_group.columns() {
            let info = chunk.column_descr().self_type().get_basic_info();
            if !info.has_id() {
                continue;
            }
            let id = info.id();
            let Some(field) = schema.field_by_id(id) else {
                continue; // as iceberg: a column not in the schema is ignored
            };
            *column_sizes.entry(id).or_default() += chunk.compressed_size() as u64;
            *value_counts.entry(id).or_default() += chunk.num_values() as u64;
            let Some(stats) = chunk.statistics() else {
                continue;
            };
            if let Some(nulls) = stats.null_count_opt() {
                *null_counts.entry(id).or_default() += nulls;
            }
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                continue;
            };
            if stats.min_is_exact()
                && let Some(min) = bound(ty, stats, End::Lower)?
            {
                lower
                    .entry(id)
                    .and_modify(|b| {
                        if *b > min {
                            *b = min.clone();
                        }
                    })
                    .or_insert(min);
            }
            if stats.max_is_exact()
                && let Some(max) = bound(ty, stats, End::Upper)?
            {
                upper
                    .entry(id)
                    .and_modify(|b| {
                        if *b < max {
                            *b = max.clone();
                        }
                    })
                    .or_insert(max);
            }
        }
    }
    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::Data)
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .record_count(metadata.file_metadata().num_rows() as u64)
        .file_size_in_bytes(size)
        .column_sizes(column_sizes)
        .value_counts(value_counts)
        .null_value_counts(null_counts)
        .nan_value_counts(nan_value_counts)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(
            metadata
                .row_groups()
                .iter()
                .filter_map(|group| group.file_offset())
                .collect(),
        ));
    Ok(builder)
}

/// One end of `stats` as a `Datum` of `ty`, or `None` when the chunk has no such value or
/// the physical type does not carry `ty` (iceberg's `get_parquet_stat_{min,max}_as_datum`).
fn bound(ty: &PrimitiveType, stats: &Statistics, end: End) -> iceberg::Result<Option<Datum>> {
    use PrimitiveType as P;
    fn pick<T>(min: Option<T>, max: Option<T>, end: End) -> Option<T> {
        match end {
            End::Lower => min,
            End::Upper => max,
        }
    }
    // The Iceberg single-value serialization of the bound: little-endian numbers,
    // big-endian two's-complement decimals and UUIDs, raw bytes for strings and binary.
    let bytes: Option<Vec<u8>> = match (ty, stats) {
        (P::Boolean, Statistics::Boolean(s)) => {
            pick(s.min_opt(), s.max_opt(), end).map(|v| vec![u8::from(*v)])
        }
        (P::Int | P::Date, Statistics::Int32(s)) => {
            pick(s.min_opt(), s.max_opt(), end).map(|v| v.to_le_bytes().to_vec())
        }
        (P::Decimal { .. }, Statistics::Int32(s)) => {
            pick(s.min_opt(), s.max_opt(), end).map(|v| i128::from(*v).to_be_bytes().to_vec())
        }
        (
            P::Long | P::Time | P::Timestamp | P::Timestamptz | P::TimestampNs | P::TimestamptzNs,
            Statistics::Int64(s),
        ) => pick(s.min_opt(), s.max_opt(), end).map(|v| v.to_le_bytes().to_vec()),
        (P::Decimal { .. }, Statistics::Int64(s)) => {
            pick(s.min_opt(), s.max_opt(), end).map(|v| i128::from(*v).to_be_bytes().to_vec())
        }
        (P::Float, Statistics::Float(s)) => {
            pick(s.min_opt(), s.max_opt(), end).map(|v| v.to_le_bytes().to_vec())
        }
        (P::Double, Statistics::Double(s)) => {
            pick(s.min_opt(), s.max_opt(), end).map(|v| v.to_le_bytes().to_vec())
        }
        (P::String | P::Binary | P::Decimal { .. }, Statistics::ByteArray(s)) => {
            pick(s.min_bytes_opt(), s.max_bytes_opt(), end).map(<[u8]>::to_vec)
        }
        (P::Uuid | P::Fixed(_) | P::Decimal { .. }, Statistics::FixedLenByteArray(s)) => {
            pick(s.min_bytes_opt(), s.max_bytes_opt(), end).map(<[u8]>::to_vec)
        }
        _ => None,
    };
    bytes
        .map(|b| Datum::try_from_bytes(&b, ty.clone()))
        .transpose()
}

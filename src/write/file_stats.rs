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
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
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
    // One pass in the order of iceberg's `parquet_to_data_file_builder`.
    let mut metrics = ColumnMetrics::default();
    for row_group in metadata.row_groups() {
        for chunk in row_group.columns() {
            metrics.add(schema, chunk)?;
        }
    }
    let ColumnMetrics {
        column_sizes,
        value_counts,
        null_counts,
        lower,
        upper,
    } = metrics;
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

/// The per-field-id metrics of a data file, summed over its column chunks.
#[derive(Default)]
struct ColumnMetrics {
    column_sizes: HashMap<i32, u64>,
    value_counts: HashMap<i32, u64>,
    null_counts: HashMap<i32, u64>,
    lower: HashMap<i32, Datum>,
    upper: HashMap<i32, Datum>,
}

impl ColumnMetrics {
    /// Adds one column chunk; a column without a field id, or whose id is not in
    /// `schema`, is ignored as iceberg ignores it. Bounds count only when the footer says
    /// they are exact.
    fn add(&mut self, schema: &Schema, chunk: &ColumnChunkMetaData) -> iceberg::Result<()> {
        let info = chunk.column_descr().self_type().get_basic_info();
        if !info.has_id() {
            return Ok(());
        }
        let id = info.id();
        let Some(field) = schema.field_by_id(id) else {
            return Ok(());
        };
        *self.column_sizes.entry(id).or_default() += chunk.compressed_size() as u64;
        *self.value_counts.entry(id).or_default() += chunk.num_values() as u64;
        let Some(stats) = chunk.statistics() else {
            return Ok(());
        };
        if let Some(nulls) = stats.null_count_opt() {
            *self.null_counts.entry(id).or_default() += nulls;
        }
        let Type::Primitive(ty) = field.field_type.as_ref() else {
            return Ok(());
        };
        if stats.min_is_exact()
            && let Some(min) = bound(ty, stats, End::Lower)?
        {
            keep(&mut self.lower, id, min, |kept, new| new < kept);
        }
        if stats.max_is_exact()
            && let Some(max) = bound(ty, stats, End::Upper)?
        {
            keep(&mut self.upper, id, max, |kept, new| new > kept);
        }
        Ok(())
    }
}

/// Puts `value` at `id` unless the bound already there is tighter (`wins(kept, new)`
/// says whether `new` replaces `kept`).
fn keep(bounds: &mut HashMap<i32, Datum>, id: i32, value: Datum, wins: fn(&Datum, &Datum) -> bool) {
    match bounds.get_mut(&id) {
        Some(kept) if wins(kept, &value) => *kept = value,
        Some(_) => {}
        None => {
            bounds.insert(id, value);
        }
    }
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

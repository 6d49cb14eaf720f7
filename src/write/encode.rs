//! All-core Parquet encode: groups of record batches → in-memory Parquet files.
//!
//! Each group becomes one file. Groups are encoded in parallel on rayon's pool and the
//! results come back in input order (`encoded[i]` is group `i`), the submission order every
//! write path preserves (`docs/design/ingest_pipelined_overlap.md` §f2). Each file is itself
//! encoded column-parallel ([`super::parallel`]), byte-identical to what iceberg's own
//! `ParquetWriter` writes for the same batches, with its `DataFile` metrics (record count,
//! column sizes, value/null/NaN counts, lower/upper bounds) read from the footer by
//! iceberg's rules; two paths given the same groups produce byte-identical files.

use std::sync::Arc;

use arrow_array::RecordBatch;
use bytes::Bytes;
use iceberg::spec::DataFileBuilder;
use iceberg::table::Table;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;

use super::WriteError;
use super::partition::{PartitionTuple, unpartitioned};

/// Iceberg table property naming the Parquet codec (Iceberg spec, "Table properties").
pub const COMPRESSION_CODEC: &str = "write.parquet.compression-codec";
/// Iceberg table property naming the codec level.
pub const COMPRESSION_LEVEL: &str = "write.parquet.compression-level";

/// How data files are written, beyond what the table's properties say.
#[derive(Debug, Clone)]
pub struct WriteProps {
    /// Data-file writes in flight at once (≥ 1).
    pub channel_depth: usize,
}

impl Default for WriteProps {
    fn default() -> Self {
        Self { channel_depth: 4 }
    }
}

/// One encoded data file, not yet written to storage.
#[derive(Clone)]
pub struct EncodedFile {
    /// The complete Parquet file.
    pub bytes: Bytes,
    /// Its `DataFile` with statistics; the file path is set when it is written.
    pub data_file: DataFileBuilder,
    /// Rows in the file.
    pub rows: u64,
    /// The partition of every row in the file (spec id and tuple).
    pub partition: PartitionTuple,
}

impl std::fmt::Debug for EncodedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedFile")
            .field("bytes", &self.bytes.len())
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

/// The Parquet writer properties for `table`: codec from `write.parquet.compression-codec`
/// (`zstd` when unset, as Iceberg's Java writer; also `snappy`, `gzip`, `lz4`, `brotli`,
/// `uncompressed`), level from `write.parquet.compression-level` (codec default when unset).
///
/// # Errors
/// [`WriteError::Encode`] naming the property for an unknown codec or a bad level.
pub fn writer_properties(table: &Table) -> Result<WriterProperties, WriteError> {
    writer_properties_for(table, table.metadata().current_schema())
}

/// [`writer_properties`] for files of `schema` (a schema evolved for a stream, not yet
/// the table's current one).
///
/// # Errors
/// As [`writer_properties`].
pub fn writer_properties_for(
    table: &Table,
    schema: &iceberg::spec::Schema,
) -> Result<WriterProperties, WriteError> {
    let props = table.metadata().properties();
    let bad = |what: String| WriteError::Encode {
        table: table.identifier().to_string(),
        source: Box::new(iceberg::Error::new(iceberg::ErrorKind::DataInvalid, what)),
    };
    let level = props
        .get(COMPRESSION_LEVEL)
        .map(|l| l.parse::<i32>())
        .transpose()
        .map_err(|e| bad(format!("{COMPRESSION_LEVEL}: {e}")))?;
    let codec = props
        .get(COMPRESSION_CODEC)
        .map(|c| c.to_ascii_lowercase())
        .unwrap_or_else(|| "zstd".to_string());
    let compression = match codec.as_str() {
        "zstd" => Compression::ZSTD(match level {
            Some(l) => {
                ZstdLevel::try_new(l).map_err(|e| bad(format!("{COMPRESSION_LEVEL}: {e}")))?
            }
            None => ZstdLevel::default(),
        }),
        "snappy" => Compression::SNAPPY,
        "lz4" => Compression::LZ4_RAW,
        "uncompressed" | "none" => Compression::UNCOMPRESSED,
        "gzip" => Compression::GZIP(match level {
            Some(l) => parquet::basic::GzipLevel::try_new(l as u32)
                .map_err(|e| bad(format!("{COMPRESSION_LEVEL}: {e}")))?,
            None => Default::default(),
        }),
        "brotli" => Compression::BROTLI(match level {
            Some(l) => parquet::basic::BrotliLevel::try_new(l as u32)
                .map_err(|e| bad(format!("{COMPRESSION_LEVEL}: {e}")))?,
            None => Default::default(),
        }),
        other => return Err(bad(format!("{COMPRESSION_CODEC}: unknown codec {other:?}"))),
    };
    let builder = WriterProperties::builder().set_compression(compression);
    let tuned = props
        .get(TUNED_WRITER)
        .map(|v| !v.eq_ignore_ascii_case("false"))
        .unwrap_or(true);
    let builder = if tuned {
        tune(builder, schema)
    } else {
        builder
    };
    Ok(builder.build())
}

/// skade's own table property: `false` writes with parquet-rs's default encodings and
/// page-level statistics instead of skade's tuned ones (the codec still follows
/// `write.parquet.compression-codec`).
pub const TUNED_WRITER: &str = "skade.parquet.tuned-writer";

/// skade's default Parquet layout, chosen for encode speed without losing what readers
/// need (measured by `skade-bench -- ingest`: `docs/performance.md`, "Ingest (`ingest`
/// arm)"):
/// - column-chunk statistics instead of per-page ones: the footer keeps every column's
///   min/max/null count (Iceberg's file-level bounds and row-group pruning), without the
///   per-page work;
/// - dictionary encoding only for string and binary columns, where values repeat;
///   numbers, timestamps and booleans are written without a dictionary;
/// - `DELTA_BINARY_PACKED` for integer, date, time and timestamp columns (ids and event
///   times mostly increase, so deltas are small).
fn tune(
    builder: parquet::file::properties::WriterPropertiesBuilder,
    schema: &iceberg::spec::Schema,
) -> parquet::file::properties::WriterPropertiesBuilder {
    use iceberg::spec::{PrimitiveType as P, Type};
    use parquet::basic::Encoding;
    use parquet::file::properties::EnabledStatistics;
    use parquet::schema::types::ColumnPath;
    let mut builder = builder.set_statistics_enabled(EnabledStatistics::Chunk);
    for field in schema.as_struct().fields() {
        let Type::Primitive(primitive) = field.field_type.as_ref() else {
            continue;
        };
        let path = ColumnPath::from(field.name.as_str());
        match primitive {
            P::String | P::Binary => {}
            P::Int
            | P::Long
            | P::Date
            | P::Time
            | P::Timestamp
            | P::Timestamptz
            | P::TimestampNs
            | P::TimestamptzNs => {
                builder = builder
                    .set_column_dictionary_enabled(path.clone(), false)
                    .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
            }
            _ => {
                builder = builder.set_column_dictionary_enabled(path, false);
            }
        }
    }
    builder
}

/// Encodes each group of `groups` (batches already conformed to `table`'s Arrow schema,
/// see [`super::conform_batch`]) into one Parquet file, on all cores, each file in the
/// unpartitioned tuple of the table's default spec (a partitioned table's rows go
/// through a [`super::Batcher`] instead; its commit refuses such files). Blocking: call it
/// from `spawn_blocking`. Returns one [`EncodedFile`] per non-empty group, in input order;
/// groups with no rows produce no file.
///
/// # Errors
/// [`WriteError::Encode`] for the first group that fails (e.g. a batch whose schema does
/// not match the table's field ids).
pub fn encode_groups(
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
) -> Result<Vec<EncodedFile>, WriteError> {
    let props = writer_properties(table)?;
    let schema = table.metadata().current_schema().clone();
    let encoded: Vec<Result<Option<EncodedFile>, WriteError>> = groups
        .into_par_iter()
        .map(|group| encode_one(table, &props, &schema, group))
        .collect();
    encoded.into_iter().filter_map(Result::transpose).collect()
}

fn encode_one(
    table: &Table,
    props: &WriterProperties,
    schema: &Arc<iceberg::spec::Schema>,
    group: Vec<RecordBatch>,
) -> Result<Option<EncodedFile>, WriteError> {
    let rows: usize = group.iter().map(RecordBatch::num_rows).sum();
    let encoded = super::parallel::encode_file(schema, props, &group).map_err(|source| {
        WriteError::Encode {
            table: table.identifier().to_string(),
            source: Box::new(source),
        }
    })?;
    Ok(encoded.map(|(bytes, data_file)| EncodedFile {
        bytes,
        data_file,
        rows: rows as u64,
        partition: unpartitioned(table.metadata().default_partition_spec_id()),
    }))
}

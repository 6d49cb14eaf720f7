//! v2 position-delete files: Parquet files of (`file_path`, `pos`) rows (table spec,
//! "Position Delete Files").
//!
//! skade writes them file-scoped: one file per data file, its rows sorted by `pos`, no
//! `row` column, `referenced_data_file` set and equal `file_path` bounds (what lets a
//! reader skip the file for every other data file). It reads any position-delete file,
//! file-scoped or not, finding the two columns by their reserved field ids (by name when
//! the file has no field ids) and ignoring any `row` column.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum};
use iceberg::{Error, ErrorKind, Result};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use roaring::RoaringTreemap;

use crate::storage::blocking::{run_blocking, run_blocking_io};

/// Field id of the `file_path` column (table spec, "Position Delete Files").
pub const FILE_PATH_FIELD_ID: i32 = 2_147_483_546;
/// Field id of the `pos` column (table spec, "Position Delete Files").
pub const POS_FIELD_ID: i32 = 2_147_483_545;

/// Parquet's key for a column's Iceberg field id in Arrow field metadata.
const FIELD_ID_KEY: &str = parquet::arrow::PARQUET_FIELD_ID_META_KEY;

/// Writes the file-scoped position-delete file at `path` deleting `positions` of the data
/// file `data_file` (module docs); returns its `DataFile` (partition and spec id those of
/// `data_file`, `spec_id`; record count = positions; bounds and counts of both columns).
///
/// # Errors
/// iceberg's storage error, or `Unexpected` for a Parquet encoding failure, naming `path`.
pub(super) async fn write(
    file_io: &FileIO,
    path: &str,
    data_file: &DataFile,
    spec_id: i32,
    positions: &RoaringTreemap,
) -> Result<DataFile> {
    let data_path = data_file.file_path().to_string();
    let rows = positions.len();
    let (Some(min), Some(max)) = (positions.min(), positions.max()) else {
        return Err(Error::new(
            ErrorKind::Unexpected,
            format!("position-delete file {path}: no positions to write"),
        ));
    };
    let (min, max) = (to_i64(min, path)?, to_i64(max, path)?);
    let positions = positions
        .iter()
        .map(|p| to_i64(p, path))
        .collect::<Result<Vec<_>>>()?;
    let owned_path = path.to_string();
    let bytes = run_blocking(move || encode(&data_path, positions))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("position-delete file {owned_path}: encoding task failed"),
            )
            .with_source(e)
        })?
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("position-delete file {path}: Parquet encoding failed"),
            )
            .with_source(e)
        })?;
    let size = bytes.len() as u64;
    let output = file_io.new_output(path)?;
    // A local FileIO's write blocks: off the runtime's workers (`storage::blocking`).
    run_blocking_io(async move { output.write(bytes).await })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("position-delete file {path}: write failed"),
            )
            .with_source(e)
        })?;
    let path_bound = Datum::string(data_file.file_path());
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(data_file.partition().clone())
        .partition_spec_id(spec_id)
        .record_count(rows)
        .file_size_in_bytes(size)
        .value_counts(HashMap::from([
            (FILE_PATH_FIELD_ID, rows),
            (POS_FIELD_ID, rows),
        ]))
        .null_value_counts(HashMap::from([(FILE_PATH_FIELD_ID, 0), (POS_FIELD_ID, 0)]))
        .lower_bounds(HashMap::from([
            (FILE_PATH_FIELD_ID, path_bound.clone()),
            (POS_FIELD_ID, Datum::long(min)),
        ]))
        .upper_bounds(HashMap::from([
            (FILE_PATH_FIELD_ID, path_bound),
            (POS_FIELD_ID, Datum::long(max)),
        ]))
        .referenced_data_file(Some(data_file.file_path().to_string()))
        .build()
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("position-delete file {path}: {e}"),
            )
        })
}

fn to_i64(position: u64, path: &str) -> Result<i64> {
    i64::try_from(position).map_err(|_| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("position-delete file {path}: position {position} is above a long"),
        )
    })
}

/// The two columns with their field ids, both required.
fn schema() -> Arc<Schema> {
    let with_id = |field: Field, id: i32| {
        field.with_metadata(HashMap::from([(FIELD_ID_KEY.to_string(), id.to_string())]))
    };
    Arc::new(Schema::new(vec![
        with_id(
            Field::new("file_path", DataType::Utf8, false),
            FILE_PATH_FIELD_ID,
        ),
        with_id(Field::new("pos", DataType::Int64, false), POS_FIELD_ID),
    ]))
}

/// The Parquet bytes of one data file's sorted `positions`.
fn encode(data_path: &str, positions: Vec<i64>) -> parquet::errors::Result<Bytes> {
    let rows = positions.len();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                data_path, rows,
            ))) as ArrayRef,
            Arc::new(Int64Array::from(positions)) as ArrayRef,
        ],
    )?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(out.into())
}

/// The positions that the position-delete file `delete_path` records for
/// `data_file_path` (its rows whose `file_path` equals it).
///
/// # Errors
/// iceberg's storage error naming the file; `DataInvalid` naming it when it is not
/// Parquet, lacks a `file_path` (string) or `pos` (long) column, or holds a null or
/// negative position.
pub(super) async fn read(
    file_io: &FileIO,
    delete_path: &str,
    data_file_path: &str,
) -> Result<RoaringTreemap> {
    let bytes = file_io.new_input(delete_path)?.read().await.map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("position-delete file {delete_path}: read failed"),
        )
        .with_source(e)
    })?;
    let delete_path_owned = delete_path.to_string();
    let data_path = data_file_path.to_string();
    run_blocking(move || positions_in(bytes, &delete_path_owned, &data_path))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("position-delete file {delete_path}: decoding task failed"),
            )
            .with_source(e)
        })?
}

/// [`read`]'s decoding, on bytes in memory.
fn positions_in(bytes: Bytes, delete_path: &str, data_path: &str) -> Result<RoaringTreemap> {
    let invalid = |why: String| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("position-delete file {delete_path}: {why}"),
        )
    };
    let parquet = |e: parquet::errors::ParquetError| invalid(format!("not readable Parquet: {e}"));
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(parquet)?;
    let column = |id: i32, name: &str| {
        let fields = builder.schema().fields();
        let by_id = fields.iter().position(|f| {
            f.metadata()
                .get(FIELD_ID_KEY)
                .is_some_and(|v| v == &id.to_string())
        });
        by_id
            .or_else(|| fields.iter().position(|f| f.name() == name))
            .ok_or_else(|| invalid(format!("no `{name}` column (field id {id})")))
    };
    let path_index = column(FILE_PATH_FIELD_ID, "file_path")?;
    let pos_index = column(POS_FIELD_ID, "pos")?;
    let mask =
        parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), [path_index, pos_index]);
    // The projected batch keeps the two columns in file order.
    let (path_at, pos_at) = if path_index < pos_index {
        (0, 1)
    } else {
        (1, 0)
    };
    let reader = builder.with_projection(mask).build().map_err(parquet)?;
    let mut positions = RoaringTreemap::new();
    for batch in reader {
        let batch = batch.map_err(|e| invalid(format!("not readable Parquet: {e}")))?;
        let paths = batch
            .column(path_at)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| invalid("`file_path` is not a string column".to_string()))?;
        let pos = batch
            .column(pos_at)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| invalid("`pos` is not a long column".to_string()))?;
        for row in 0..batch.num_rows() {
            if paths.is_null(row) || paths.value(row) != data_path {
                continue;
            }
            if pos.is_null(row) {
                return Err(invalid(format!("row {row} has a null `pos`")));
            }
            let p = u64::try_from(pos.value(row))
                .map_err(|_| invalid(format!("negative position {}", pos.value(row))))?;
            positions.insert(p);
        }
    }
    Ok(positions)
}

//! Delete files: writing and reading the two forms skade writes (table spec, "Delete
//! Formats"), never equality deletes.
//!
//! - **Position-delete files** (format 2): Parquet with the reserved columns `file_path`
//!   (field id 2147483546) and `pos` (2147483545), rows sorted by path then position;
//!   skade writes one per data file (file-scoped: `referenced_data_file` set, equal
//!   `file_path` bounds), in the data file's partition spec and partition.
//! - **Deletion vectors** (format 3; the spec forbids new position-delete files there):
//!   one `deletion-vector-v1` blob per data file ([`dv`]) in a Puffin file — one Puffin
//!   file per commit — each listed as a delete file of format `puffin` with
//!   `referenced_data_file`, `content_offset`, `content_size_in_bytes` and
//!   `record_count` = its cardinality.
//!
//! [`deleted_positions`] reads both back for one data file (the commit path needs them to
//! merge and count; iceberg 0.10.1's reader cannot read deletion vectors, so
//! [`crate::read`] applies them with it too).

pub mod dv;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::puffin::{Blob, CompressionCodec, DELETION_VECTOR_V1, PuffinWriter};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, FormatVersion,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use roaring::RoaringTreemap;

/// Field id of a position-delete file's `file_path` column (table spec, "Position
/// Delete Files").
pub const FILE_PATH_FIELD_ID: i32 = 2_147_483_546;
/// Field id of a position-delete file's `pos` column, and of the row position a
/// deletion vector's blob names in its `fields` (table spec, "Reserved Field IDs").
pub const POS_FIELD_ID: i32 = 2_147_483_545;

/// Rows of one data file to delete: 0-based row positions in the file.
#[derive(Debug, Clone)]
pub struct DeletedRows {
    /// The data file (its path, partition and spec are the delete file's).
    pub data_file: DataFile,
    /// The positions, every one below the file's `record_count`.
    pub positions: RoaringTreemap,
}

/// Writes the delete files of `rows` in the form `table`'s format version takes (module
/// docs), under `<table location>/data/`, and returns them as manifest entries take
/// them; `spec_ids` gives each data file's partition spec id by path (0 when absent).
/// For a v3 table each data file's positions must be ALL its deleted rows (its existing
/// deletes merged in); on v2 only the new ones. Nothing is written for empty `rows`.
///
/// # Errors
/// `FeatureUnsupported` for a format-1 table; iceberg's error when a file cannot be
/// written.
pub async fn write_delete_files(
    table: &Table,
    rows: &[DeletedRows],
    spec_ids: &HashMap<String, i32>,
) -> Result<Vec<DataFile>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let spec_of = |f: &DataFile| spec_ids.get(f.file_path()).copied().unwrap_or_default();
    match table.metadata().format_version() {
        FormatVersion::V1 => Err(Error::new(
            ErrorKind::FeatureUnsupported,
            "row-level deletes need format version 2 or later",
        )),
        FormatVersion::V2 => {
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                out.push(write_position_deletes(table, row, spec_of(&row.data_file)).await?);
            }
            Ok(out)
        }
        FormatVersion::V3 => write_deletion_vectors(table, rows, spec_of).await,
    }
}

/// A new file's path under `table`'s data directory.
fn new_path(table: &Table, suffix: &str) -> String {
    format!(
        "{}/data/{}-{suffix}",
        table.metadata().location(),
        uuid::Uuid::now_v7()
    )
}

/// One file-scoped position-delete file (Parquet) of `row`.
///
/// # Errors
/// iceberg's error when the file cannot be written.
async fn write_position_deletes(
    table: &Table,
    row: &DeletedRows,
    spec_id: i32,
) -> Result<DataFile> {
    let data_path = row.data_file.file_path();
    let field = |name: &str, ty: DataType, id: i32| {
        Field::new(name, ty, false)
            .with_metadata([("PARQUET:field_id".to_string(), id.to_string())].into())
    };
    let schema = Arc::new(Schema::new(vec![
        field("file_path", DataType::Utf8, FILE_PATH_FIELD_ID),
        field("pos", DataType::Int64, POS_FIELD_ID),
    ]));
    let count = row.positions.len() as usize;
    let positions: Vec<i64> = row.positions.iter().map(|p| p as i64).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec![data_path; count])),
            Arc::new(Int64Array::from(positions)),
        ],
    )
    .map_err(|e| Error::new(ErrorKind::Unexpected, format!("position deletes: {e}")))?;
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, None)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("position deletes: {e}")))?;
    writer
        .write(&batch)
        .and_then(|_| writer.close().map(|_| ()))
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("position deletes: {e}")))?;
    let path = new_path(table, "deletes.parquet");
    let size = bytes.len() as u64;
    table
        .file_io()
        .new_output(&path)?
        .write(Bytes::from(bytes))
        .await?;
    let (min, max) = (
        row.positions.min().unwrap_or(0),
        row.positions.max().unwrap_or(0),
    );
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(row.data_file.partition().clone())
        .partition_spec_id(spec_id)
        .record_count(row.positions.len())
        .file_size_in_bytes(size)
        .referenced_data_file(Some(data_path.to_string()))
        .lower_bounds(HashMap::from([
            (FILE_PATH_FIELD_ID, Datum::string(data_path)),
            (POS_FIELD_ID, Datum::long(min as i64)),
        ]))
        .upper_bounds(HashMap::from([
            (FILE_PATH_FIELD_ID, Datum::string(data_path)),
            (POS_FIELD_ID, Datum::long(max as i64)),
        ]))
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("position delete entry: {e}")))
}

/// One Puffin file holding a deletion vector per entry of `rows`, and an entry per
/// vector.
///
/// # Errors
/// iceberg's error when the file cannot be written.
async fn write_deletion_vectors(
    table: &Table,
    rows: &[DeletedRows],
    spec_of: impl Fn(&DataFile) -> i32,
) -> Result<Vec<DataFile>> {
    let path = new_path(table, "dv.puffin");
    let output = table.file_io().new_output(&path)?;
    let mut writer = PuffinWriter::new(&output, HashMap::new(), false).await?;
    // Blobs follow the 4-byte header magic in order, uncompressed (Puffin spec).
    let mut offset: u64 = 4;
    let mut placed = Vec::with_capacity(rows.len());
    for row in rows {
        let data = dv::encode(&row.positions)?;
        let length = data.len() as u64;
        let blob = Blob::builder()
            .r#type(DELETION_VECTOR_V1.to_string())
            .fields(vec![POS_FIELD_ID])
            .snapshot_id(-1)
            .sequence_number(-1)
            .data(data)
            .properties(HashMap::from([
                (
                    "referenced-data-file".to_string(),
                    row.data_file.file_path().to_string(),
                ),
                ("cardinality".to_string(), row.positions.len().to_string()),
            ]))
            .build();
        writer.add(blob, CompressionCodec::None).await?;
        placed.push((offset, length));
        offset += length;
    }
    writer.close().await?;
    let size = table.file_io().new_input(&path)?.metadata().await?.size;
    rows.iter()
        .zip(placed)
        .map(|(row, (offset, length))| {
            DataFileBuilder::default()
                .content(DataContentType::PositionDeletes)
                .file_path(path.clone())
                .file_format(DataFileFormat::Puffin)
                .partition(row.data_file.partition().clone())
                .partition_spec_id(spec_of(&row.data_file))
                .record_count(row.positions.len())
                .file_size_in_bytes(size)
                .referenced_data_file(Some(row.data_file.file_path().to_string()))
                .content_offset(Some(offset as i64))
                .content_size_in_bytes(Some(length as i64))
                .build()
                .map_err(|e| {
                    Error::new(ErrorKind::Unexpected, format!("deletion vector entry: {e}"))
                })
        })
        .collect()
}

/// The positions of `data_file_path`'s rows that `deletes` delete — live delete files
/// that apply to it by scan planning (the caller picks them): deletion vectors (the
/// blob at `content_offset`, checked) and position-delete files (their rows naming the
/// path). When a deletion vector is among them, position-delete files are ignored: the
/// vector holds them (table spec, "Scan Planning").
///
/// # Errors
/// `FeatureUnsupported` for an equality-delete file; `DataInvalid` for a deletion vector
/// without offset or size, damaged, or for another data file; iceberg's error when a
/// file cannot be read.
pub async fn deleted_positions(
    file_io: &FileIO,
    data_file_path: &str,
    deletes: &[DataFile],
) -> Result<RoaringTreemap> {
    let has_dv = deletes
        .iter()
        .any(|d| d.file_format() == DataFileFormat::Puffin);
    let mut positions = RoaringTreemap::new();
    for delete in deletes {
        match (delete.content_type(), delete.file_format()) {
            (DataContentType::EqualityDeletes, _) | (DataContentType::Data, _) => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!(
                        "{} is not a position delete file (applying it to {data_file_path})",
                        delete.file_path()
                    ),
                ));
            }
            (_, DataFileFormat::Puffin) => {
                positions |= read_dv(file_io, data_file_path, delete).await?
            }
            _ if has_dv => {}
            _ => positions |= read_position_deletes(file_io, data_file_path, delete).await?,
        }
    }
    Ok(positions)
}

/// The deletion vector `delete` lists, checked to be `data_file_path`'s.
///
/// # Errors
/// As [`deleted_positions`].
pub async fn read_dv(
    file_io: &FileIO,
    data_file_path: &str,
    delete: &DataFile,
) -> Result<RoaringTreemap> {
    let what = format!("{} (of {data_file_path})", delete.file_path());
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("deletion vector {what}: {why}"),
        )
    };
    if delete.referenced_data_file().as_deref() != Some(data_file_path) {
        return Err(invalid("its referenced_data_file is another data file"));
    }
    let (Some(offset), Some(size)) = (delete.content_offset(), delete.content_size_in_bytes())
    else {
        return Err(invalid("no content_offset or content_size_in_bytes"));
    };
    let (offset, size) = (offset.max(0) as u64, size.max(0) as u64);
    let bytes = file_io
        .new_input(delete.file_path())?
        .reader()
        .await?
        .read(offset..offset + size)
        .await?;
    let positions = dv::decode(&bytes, &what)?;
    if positions.len() != delete.record_count() {
        return Err(invalid(&format!(
            "it holds {} positions; its record_count says {}",
            positions.len(),
            delete.record_count()
        )));
    }
    Ok(positions)
}

/// The positions of `data_file_path` that the position-delete file `delete` lists.
///
/// # Errors
/// As [`deleted_positions`].
async fn read_position_deletes(
    file_io: &FileIO,
    data_file_path: &str,
    delete: &DataFile,
) -> Result<RoaringTreemap> {
    let bytes = file_io.new_input(delete.file_path())?.read().await?;
    let invalid = |why: String| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("position delete file {}: {why}", delete.file_path()),
        )
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| invalid(e.to_string()))?;
    let mut positions = RoaringTreemap::new();
    for batch in reader {
        let batch = batch.map_err(|e| invalid(e.to_string()))?;
        let paths = batch
            .column_by_name("file_path")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| invalid("no string column file_path".into()))?;
        let pos = batch
            .column_by_name("pos")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| invalid("no long column pos".into()))?;
        for i in 0..batch.num_rows() {
            if paths.is_valid(i) && paths.value(i) == data_file_path && pos.is_valid(i) {
                positions.insert(pos.value(i).max(0) as u64);
            }
        }
    }
    Ok(positions)
}

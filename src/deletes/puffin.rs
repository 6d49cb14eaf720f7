//! Deletion vectors in Puffin files: one file holding one `deletion-vector-v1` blob per
//! data file, and each blob back by its offset and length (table spec, "Deletion
//! Vectors"; Puffin spec, "File structure" and "`deletion-vector-v1` blob type").

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::puffin::{Blob, CREATED_BY_PROPERTY, CompressionCodec, PuffinWriter};
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat};
use iceberg::{Error, ErrorKind, Result};
use roaring::RoaringTreemap;

use super::dv;

/// Bytes before the first blob: the Puffin header magic `PFA1` (Puffin spec, "File
/// structure"). `PuffinWriter` writes blobs after it in the order they are added,
/// uncompressed blobs as they are, so blob *i* starts at 4 + the lengths of blobs before
/// it.
const HEADER_BYTES: u64 = 4;

/// One deletion vector to write: the data file it applies to, that file's partition spec
/// id, and the complete set of its deleted positions.
pub(super) struct Vector<'a> {
    pub(super) data_file: &'a DataFile,
    pub(super) spec_id: i32,
    pub(super) positions: &'a RoaringTreemap,
}

/// Writes the Puffin file `path` holding one deletion vector blob per entry of `vectors`,
/// in order; returns one `DataFile` per blob (position deletes in Puffin format, with
/// `referenced_data_file`, `content_offset`, `content_size_in_bytes`, record count = the
/// vector's cardinality, the data file's partition and spec id, the Puffin file's size).
///
/// # Errors
/// iceberg's storage error, or a vector [`dv::encode`] refuses, naming `path`.
pub(super) async fn write(
    file_io: &FileIO,
    path: &str,
    vectors: &[Vector<'_>],
) -> Result<Vec<DataFile>> {
    let context = |e: Error| {
        Error::new(
            e.kind(),
            format!("deletion vector file {path}: {}", e.message()),
        )
        .with_source(e)
    };
    let output = file_io.new_output(path).map_err(context)?;
    let properties = HashMap::from([(
        CREATED_BY_PROPERTY.to_string(),
        format!("skade {}", env!("CARGO_PKG_VERSION")),
    )]);
    let mut writer = PuffinWriter::new(&output, properties, false)
        .await
        .map_err(context)?;
    let mut placed = Vec::with_capacity(vectors.len());
    let mut offset = HEADER_BYTES;
    for vector in vectors {
        let data = dv::encode(vector.positions).map_err(context)?;
        let length = data.len() as u64;
        let cardinality = vector.positions.len();
        let blob = Blob::builder()
            .r#type(dv::BLOB_TYPE.to_string())
            .fields(dv::FIELDS.to_vec())
            .snapshot_id(-1)
            .sequence_number(-1)
            .data(data)
            .properties(HashMap::from([
                (
                    dv::REFERENCED_DATA_FILE.to_string(),
                    vector.data_file.file_path().to_string(),
                ),
                (dv::CARDINALITY.to_string(), cardinality.to_string()),
            ]))
            .build();
        writer
            .add(blob, CompressionCodec::None)
            .await
            .map_err(context)?;
        placed.push((vector, offset, length, cardinality));
        offset += length;
    }
    writer.close().await.map_err(context)?;
    let size = file_io
        .new_input(path)
        .map_err(context)?
        .metadata()
        .await
        .map_err(context)?
        .size;
    placed
        .into_iter()
        .map(|(vector, offset, length, cardinality)| {
            DataFileBuilder::default()
                .content(DataContentType::PositionDeletes)
                .file_path(path.to_string())
                .file_format(DataFileFormat::Puffin)
                .partition(vector.data_file.partition().clone())
                .partition_spec_id(vector.spec_id)
                .record_count(cardinality)
                .file_size_in_bytes(size)
                .referenced_data_file(Some(vector.data_file.file_path().to_string()))
                .content_offset(Some(as_long(offset, path)?))
                .content_size_in_bytes(Some(as_long(length, path)?))
                .build()
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Unexpected,
                        format!("deletion vector file {path}: {e}"),
                    )
                })
        })
        .collect()
}

fn as_long(value: u64, path: &str) -> Result<i64> {
    i64::try_from(value).map_err(|_| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("deletion vector file {path}: offset {value} is above a long"),
        )
    })
}

/// The positions of the deletion vector `dv` (a Puffin delete file's manifest entry),
/// which must reference `data_file_path`. Reads only the blob's bytes
/// (`content_offset`, `content_size_in_bytes`), not the Puffin footer.
///
/// # Errors
/// `DataInvalid` naming the Puffin file when `dv` is not a Puffin position delete, names
/// another data file or none, lacks or has a negative offset or size, its range passes
/// the file's end, its blob is damaged ([`dv::decode`]), or its cardinality differs
/// from its record count; iceberg's storage error for a failed read.
pub(super) async fn read(
    file_io: &FileIO,
    dv: &DataFile,
    data_file_path: &str,
) -> Result<RoaringTreemap> {
    let path = dv.file_path();
    let invalid = |why: String| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("deletion vector in {path}: {why}"),
        )
    };
    if dv.content_type() != DataContentType::PositionDeletes
        || dv.file_format() != DataFileFormat::Puffin
    {
        return Err(invalid(format!(
            "a {:?} file in {} format, not a Puffin position delete",
            dv.content_type(),
            dv.file_format()
        )));
    }
    match dv.referenced_data_file() {
        Some(referenced) if referenced == data_file_path => {}
        Some(referenced) => {
            return Err(invalid(format!(
                "references {referenced}, not {data_file_path}"
            )));
        }
        None => return Err(invalid("has no referenced_data_file".to_string())),
    }
    let (Some(offset), Some(length)) = (dv.content_offset(), dv.content_size_in_bytes()) else {
        return Err(invalid(
            "lacks content_offset or content_size_in_bytes".to_string(),
        ));
    };
    let (Ok(start), Ok(length)) = (u64::try_from(offset), u64::try_from(length)) else {
        return Err(invalid(format!(
            "negative offset {offset} or size {length}"
        )));
    };
    let end = start
        .checked_add(length)
        .filter(|&end| end <= dv.file_size_in_bytes())
        .ok_or_else(|| {
            invalid(format!(
                "blob at {start}+{length} passes the file's {} bytes",
                dv.file_size_in_bytes()
            ))
        })?;
    let reader = file_io.new_input(path)?.reader().await?;
    let bytes = reader.read(start..end).await.map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("deletion vector in {path}: read of {start}..{end} failed"),
        )
        .with_source(e)
    })?;
    let positions = dv::decode(&bytes, &format!("{path} at offset {start}"))?;
    if positions.len() != dv.record_count() {
        return Err(invalid(format!(
            "cardinality {} but record_count {}",
            positions.len(),
            dv.record_count()
        )));
    }
    Ok(positions)
}

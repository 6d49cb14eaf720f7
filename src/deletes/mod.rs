//! Delete files: their formats, writing them, and reading which rows they delete.
//!
//! Iceberg deletes rows without rewriting data files (table spec, "Row-level Deletes"
//! and "Delete Formats"): a v2 table records them in position-delete files (Parquet rows
//! of data file path and row position, [`position_file`]); a v3 table in deletion
//! vectors (a bitmap of positions per data file, [`dv`], held in Puffin files,
//! [`puffin`]). [`write_delete_files`] writes the form the table's format version takes;
//! [`deleted_positions`] reads either back for one data file; [`scope`] says which live
//! deletion vectors of a snapshot apply to which data files, for the read path
//! (`crate::read`), since iceberg 0.10.1's reader cannot read them.
//!
//! Committing the files (a row-delta snapshot) is `snapshot/`'s job, not this room's.

pub mod dv;
pub mod position_file;
pub mod puffin;
pub mod scope;

use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, FormatVersion};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use roaring::RoaringTreemap;

pub use scope::LiveVectors;

/// Rows of one data file to delete (0-based row positions in the file).
#[derive(Debug, Clone)]
pub struct DeletedRows {
    /// The data file, as its manifest entry holds it (path, partition, spec id).
    pub data_file: DataFile,
    /// Positions of its rows to delete, from 0 in file order.
    pub positions: RoaringTreemap,
}

/// Writes the delete files for `rows` in the form `table`'s format version takes (table
/// spec, "Delete Formats"):
/// - v2: one file-scoped position-delete Parquet file per data file (columns `file_path`,
///   field id 2147483546, and `pos`, 2147483545, both required; no `row` column; rows
///   sorted by `pos`; `referenced_data_file` set; `file_path` bounds the path, `pos`
///   bounds the least and greatest position; record count the positions; the data
///   file's partition and spec id) — [`position_file`];
/// - v3: one Puffin file holding one `deletion-vector-v1` blob per data file, and one
///   `DataFile` per blob (position deletes, Puffin format, `referenced_data_file`,
///   `content_offset`, `content_size_in_bytes`, record count the vector's cardinality,
///   the data file's partition and spec id, file size the Puffin file's) — [`puffin`].
///
/// The positions given are the *complete* set to record for each data file: a v3 table
/// allows one DV per data file, so the caller merges in the positions already deleted
/// ([`deleted_positions`]) before calling. A data file with no positions gets no delete
/// file; a data file given twice is refused. Files go under `<table location>/data/`,
/// named `<uuid-v7>-deletes.parquet` or `<uuid-v7>-dv.puffin`. Empty `rows` write
/// nothing. Returns the delete files in the order of `rows`.
///
/// # Errors
/// `FeatureUnsupported` for a v1 table ("row-level deletes need format version 2 or
/// later"); `DataInvalid` for a data file given twice, one that is not a data file, or
/// whose partition spec the table does not have; iceberg's storage or encoding errors
/// naming the delete file.
///
/// # Cancel safety
/// Dropping the future may leave delete files written but never committed (orphans).
pub async fn write_delete_files(table: &Table, rows: &[DeletedRows]) -> Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let version = metadata.format_version();
    if version == FormatVersion::V1 {
        return Err(Error::new(
            ErrorKind::FeatureUnsupported,
            format!(
                "row-level deletes need format version 2 or later; table {} is version 1",
                table.identifier()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut files = Vec::with_capacity(rows.len());
    for row in rows.iter().filter(|r| !r.positions.is_empty()) {
        let path = row.data_file.file_path();
        if row.data_file.content_type() != DataContentType::Data {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("{path} is a delete file, not a data file whose rows can be deleted"),
            ));
        }
        if !seen.insert(path) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("data file {path} is given twice; give all its positions at once"),
            ));
        }
        files.push((row, spec_id_of(table, &row.data_file)?));
    }
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let location = metadata.location().trim_end_matches('/');
    let file_io = table.file_io();
    if version == FormatVersion::V2 {
        let mut out = Vec::with_capacity(files.len());
        for (row, spec_id) in files {
            let path = format!("{location}/data/{}-deletes.parquet", uuid::Uuid::now_v7());
            out.push(
                position_file::write(file_io, &path, &row.data_file, spec_id, &row.positions)
                    .await?,
            );
        }
        return Ok(out);
    }
    let path = format!("{location}/data/{}-dv.puffin", uuid::Uuid::now_v7());
    let vectors: Vec<_> = files
        .iter()
        .map(|(row, spec_id)| puffin::Vector {
            data_file: &row.data_file,
            spec_id: *spec_id,
            positions: &row.positions,
        })
        .collect();
    puffin::write(file_io, &path, &vectors).await
}

/// The positions of the data file `data_file_path` that `deletes` delete — the live
/// delete files that apply to it by the spec's scan planning (the caller picks them):
/// - deletion vectors (Puffin, [`puffin::read`]): only the blob's bytes are read; its
///   length, magic and CRC are checked, and that it references `data_file_path`;
/// - position-delete files (Parquet, [`position_file`]): their rows whose `file_path`
///   equals `data_file_path`.
///
/// When a DV is among `deletes`, position-delete files are ignored: the DV holds every
/// position they delete (table spec, "Scan Planning" and "Deletion Vectors").
///
/// # Errors
/// `FeatureUnsupported` naming the file for an equality-delete file (callers decide
/// what to do with those); `DataInvalid` naming it for a data file among `deletes`,
/// two DVs, a delete file in another format, or a damaged one; iceberg's storage
/// error for a failed read.
pub async fn deleted_positions(
    file_io: &FileIO,
    data_file_path: &str,
    deletes: &[DataFile],
) -> Result<RoaringTreemap> {
    let mut vectors = Vec::new();
    let mut position_files = Vec::new();
    for delete in deletes {
        let path = delete.file_path();
        match (delete.content_type(), delete.file_format()) {
            (DataContentType::EqualityDeletes, _) => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!(
                        "equality-delete file {path}: skade does not apply equality deletes here"
                    ),
                ));
            }
            (DataContentType::Data, _) => {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!("{path} is a data file, not a delete file"),
                ));
            }
            (DataContentType::PositionDeletes, DataFileFormat::Puffin) => vectors.push(delete),
            (DataContentType::PositionDeletes, DataFileFormat::Parquet) => {
                position_files.push(delete)
            }
            (DataContentType::PositionDeletes, format) => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!(
                        "position-delete file {path} in {format} format: skade reads Parquet and Puffin"
                    ),
                ));
            }
        }
    }
    match vectors.as_slice() {
        [] => {}
        [dv] => return puffin::read(file_io, dv, data_file_path).await,
        [first, second, ..] => {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "two deletion vectors for data file {data_file_path} (in {} and {}); the spec allows one",
                    first.file_path(),
                    second.file_path()
                ),
            ));
        }
    }
    let mut positions = RoaringTreemap::new();
    for file in position_files {
        positions |= position_file::read(file_io, file.file_path(), data_file_path).await?;
    }
    Ok(positions)
}

/// The partition spec id of `data_file`, among `table`'s specs.
///
/// iceberg 0.10.1's `DataFile` has no public getter for its spec id. Every other field
/// has one, so this rebuilds the file with each of the table's spec ids and keeps the
/// one that compares equal.
///
/// # Errors
/// `DataInvalid` naming the file when none of the table's specs matches.
pub fn spec_id_of(table: &Table, data_file: &DataFile) -> Result<i32> {
    for spec in table.metadata().partition_specs_iter() {
        let mut builder = DataFileBuilder::default();
        builder
            .content(data_file.content_type())
            .file_path(data_file.file_path().to_string())
            .file_format(data_file.file_format())
            .partition(data_file.partition().clone())
            .record_count(data_file.record_count())
            .file_size_in_bytes(data_file.file_size_in_bytes())
            .column_sizes(data_file.column_sizes().clone())
            .value_counts(data_file.value_counts().clone())
            .null_value_counts(data_file.null_value_counts().clone())
            .nan_value_counts(data_file.nan_value_counts().clone())
            .lower_bounds(data_file.lower_bounds().clone())
            .upper_bounds(data_file.upper_bounds().clone())
            .key_metadata(data_file.key_metadata().map(<[u8]>::to_vec))
            .split_offsets(data_file.split_offsets().map(<[i64]>::to_vec))
            .equality_ids(data_file.equality_ids())
            .first_row_id(data_file.first_row_id())
            .partition_spec_id(spec.spec_id())
            .referenced_data_file(data_file.referenced_data_file())
            .content_offset(data_file.content_offset())
            .content_size_in_bytes(data_file.content_size_in_bytes());
        if let Some(order) = data_file.sort_order_id() {
            builder.sort_order_id(order);
        }
        if builder.build().is_ok_and(|probe| &probe == data_file) {
            return Ok(spec.spec_id());
        }
    }
    Err(Error::new(
        ErrorKind::DataInvalid,
        format!(
            "data file {} is of none of table {}'s partition specs",
            data_file.file_path(),
            table.identifier()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use futures::TryStreamExt;
    use iceberg::puffin::{CompressionCodec, PuffinReader};
    use iceberg::spec::{
        Datum, MAIN_BRANCH, ManifestListWriter, ManifestWriterBuilder, NestedField, Operation,
        PrimitiveType, Schema, Snapshot, SnapshotReference, SnapshotRetention, Struct, Summary,
        Type, UNASSIGNED_SEQUENCE_NUMBER,
    };
    use iceberg::{Catalog, NamespaceIdent, TableCreation, TableRequirement, TableUpdate};
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::catalog::{CommitTarget, MetadataUpdate, RedbCatalog};

    /// A table in a redb catalog in a temp dir, with data files whose `id` column holds
    /// 0, 1, 2, … across the files in order.
    pub(crate) struct Fixture {
        _dir: tempfile::TempDir,
        pub(crate) catalog: RedbCatalog,
        pub(crate) table: Table,
        /// The data files, in order, and the ids of each.
        pub(crate) files: Vec<(DataFile, Vec<i64>)>,
    }

    /// A table of `version` with one data file per entry of `rows` (that many rows,
    /// row groups of 30 000), committed as one fast append.
    pub(crate) async fn fixture(version: FormatVersion, rows: &[i64]) -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let catalog =
            RedbCatalog::open(&dir.path().join("c.redb"), &dir.path().join("w")).expect("catalog");
        let ns = NamespaceIdent::new("ns".into());
        catalog
            .create_namespace(&ns, HashMap::new())
            .await
            .expect("namespace");
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .expect("schema");
        let creation = TableCreation::builder()
            .name("t".into())
            .schema(schema)
            .format_version(version)
            .build();
        let table = catalog.create_table(&ns, creation).await.expect("table");
        let mut files = Vec::new();
        let mut next = 0;
        for (i, &n) in rows.iter().enumerate() {
            let ids: Vec<i64> = (next..next + n).collect();
            next += n;
            let path = format!("{}/data/f{i}.parquet", table.metadata().location());
            files.push((write_data_file(&table, &path, &ids).await, ids));
        }
        let data: Vec<DataFile> = files.iter().map(|(f, _)| f.clone()).collect();
        let (requirements, updates) = crate::snapshot::fast_append::stage_fast_append(&table, data)
            .await
            .expect("stage append");
        let table = commit(&catalog, &table, requirements, updates).await;
        Fixture {
            _dir: dir,
            catalog,
            table,
            files,
        }
    }

    async fn write_data_file(table: &Table, path: &str, ids: &[i64]) -> DataFile {
        let field = Field::new("id", DataType::Int64, false).with_metadata(HashMap::from([(
            parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
            "1".to_string(),
        )]));
        let batch = RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![field])),
            vec![Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef],
        )
        .expect("batch");
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(30_000))
            .build();
        let mut bytes = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props))
                .expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let size = bytes.len() as u64;
        table
            .file_io()
            .new_output(path)
            .expect("output")
            .write(bytes.into())
            .await
            .expect("write data file");
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(path.to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .record_count(ids.len() as u64)
            .file_size_in_bytes(size)
            .build()
            .expect("data file")
    }

    async fn commit(
        catalog: &RedbCatalog,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Table {
        catalog
            .commit_one(
                &CommitTarget::metadata(table),
                &mut MetadataUpdate::new(requirements, updates),
            )
            .await
            .expect("commit")
    }

    /// Commits `deletes` as one `delete` snapshot: a delete manifest of them, then the
    /// current snapshot's manifests (what a row delta without data files writes).
    pub(crate) async fn commit_deletes(f: &mut Fixture, deletes: Vec<DataFile>) {
        let table = &f.table;
        let metadata = table.metadata();
        let v3 = metadata.format_version() == FormatVersion::V3;
        let snapshot_id = 7_000 + metadata.snapshots().count() as i64;
        let sequence_number = metadata.next_sequence_number();
        let parent = metadata.current_snapshot().expect("a snapshot");
        let location = metadata.location();
        let manifest_path = format!("{location}/metadata/del-{snapshot_id}-m0.avro");
        let builder = ManifestWriterBuilder::new(
            table.file_io().new_output(&manifest_path).expect("output"),
            Some(snapshot_id),
            metadata.current_schema().clone(),
            metadata.default_partition_spec().as_ref().clone(),
        );
        let mut writer = if v3 {
            builder.build_v3_deletes()
        } else {
            builder.build_v2_deletes()
        };
        for file in deletes {
            writer
                .add_file(file, UNASSIGNED_SEQUENCE_NUMBER)
                .expect("add delete file");
        }
        let mut manifests = vec![writer.write_manifest_file().await.expect("manifest")];
        manifests.extend(
            table
                .manifest_list_reader(parent)
                .load()
                .await
                .expect("manifest list")
                .consume_entries(),
        );
        let list_path = format!("{location}/metadata/snap-{snapshot_id}-del.avro");
        let out = table
            .file_io()
            .new_output(&list_path)
            .expect("output")
            .writer()
            .await
            .expect("writer");
        let first_row_id = metadata.next_row_id();
        let mut list = if v3 {
            ManifestListWriter::v3(
                out,
                snapshot_id,
                Some(parent.snapshot_id()),
                sequence_number,
                Some(first_row_id),
            )
        } else {
            ManifestListWriter::v2(
                out,
                snapshot_id,
                Some(parent.snapshot_id()),
                sequence_number,
            )
        };
        list.add_manifests(manifests.into_iter())
            .expect("manifests");
        list.close().await.expect("close list");
        let snapshot = Snapshot::builder()
            .with_manifest_list(list_path)
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(Some(parent.snapshot_id()))
            .with_sequence_number(sequence_number)
            .with_summary(Summary {
                operation: Operation::Delete,
                additional_properties: HashMap::new(),
            })
            .with_schema_id(metadata.current_schema_id())
            .with_timestamp_ms(metadata.last_updated_ms() + 1);
        let snapshot = if v3 {
            snapshot.with_row_range(first_row_id, 0).build()
        } else {
            snapshot.build()
        };
        let requirements = vec![TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: Some(parent.snapshot_id()),
        }];
        let updates = vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ];
        f.table = commit(&f.catalog, &f.table, requirements, updates).await;
    }

    /// The `id` column of every batch of `stream`, in order.
    pub(crate) async fn ids(stream: iceberg::scan::ArrowRecordBatchStream) -> Vec<i64> {
        let batches: Vec<RecordBatch> = stream.try_collect().await.expect("read");
        batches
            .iter()
            .flat_map(|b| {
                let col = b
                    .column_by_name("id")
                    .expect("id")
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("longs")
                    .clone();
                (0..col.len()).map(move |i| col.value(i))
            })
            .collect()
    }

    fn rows(f: &Fixture, picks: &[&[u64]]) -> Vec<DeletedRows> {
        f.files
            .iter()
            .zip(picks)
            .map(|((file, _), positions)| DeletedRows {
                data_file: file.clone(),
                positions: positions.iter().copied().collect(),
            })
            .collect()
    }

    /// The ids left after deleting `picks` (positions per file) from `f`'s files.
    fn left(f: &Fixture, picks: &[&[u64]]) -> Vec<i64> {
        f.files
            .iter()
            .zip(picks.iter().chain(std::iter::repeat(&(&[][..]))))
            .flat_map(|((_, ids), gone)| {
                ids.iter()
                    .enumerate()
                    .filter(|(p, _)| !gone.contains(&(*p as u64)))
                    .map(|(_, id)| *id)
            })
            .collect()
    }

    /// Catches a v2 position-delete file that is not the spec's (wrong field ids, types,
    /// scope, bounds) or that iceberg's own reader (a second implementation) reads
    /// differently: its `DataFile` says what it holds, `deleted_positions` reads back
    /// each data file's set (and no other file's), and once committed `table.scan()`
    /// and skade's read both hide exactly those rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn v2_position_delete_files_read_back_and_iceberg_applies_them() {
        let mut f = fixture(FormatVersion::V2, &[10, 5]).await;
        let picks: &[&[u64]] = &[&[0, 3, 9], &[4]];
        let written = write_delete_files(&f.table, &rows(&f, picks))
            .await
            .expect("write");
        assert_eq!(written.len(), 2);
        for ((data, _), (delete, pick)) in f.files.iter().zip(written.iter().zip(picks)) {
            assert_eq!(delete.content_type(), DataContentType::PositionDeletes);
            assert_eq!(delete.file_format(), DataFileFormat::Parquet);
            assert!(delete.file_path().ends_with("-deletes.parquet"));
            assert!(delete.file_path().contains("/data/"));
            assert_eq!(
                delete.referenced_data_file().as_deref(),
                Some(data.file_path())
            );
            assert_eq!(delete.record_count(), pick.len() as u64);
            let path = Datum::string(data.file_path());
            assert_eq!(
                delete.lower_bounds()[&position_file::FILE_PATH_FIELD_ID],
                path
            );
            assert_eq!(
                delete.upper_bounds()[&position_file::FILE_PATH_FIELD_ID],
                path
            );
            let (min, max) = (pick[0] as i64, pick[pick.len() - 1] as i64);
            assert_eq!(
                delete.lower_bounds()[&position_file::POS_FIELD_ID],
                Datum::long(min)
            );
            assert_eq!(
                delete.upper_bounds()[&position_file::POS_FIELD_ID],
                Datum::long(max)
            );
            assert_eq!(spec_id_of(&f.table, delete).expect("spec"), 0);
            let back = deleted_positions(f.table.file_io(), data.file_path(), &written)
                .await
                .expect("read back");
            assert_eq!(back, pick.iter().copied().collect());
        }
        commit_deletes(&mut f, written).await;
        let expected = left(&f, picks);
        let mut by_iceberg = ids(f
            .table
            .scan()
            .build()
            .expect("scan")
            .to_arrow()
            .await
            .expect("read"))
        .await;
        by_iceberg.sort();
        assert_eq!(by_iceberg, expected);
        let by_skade = ids(crate::read::scan_in_write_order(&f.table)
            .await
            .expect("read"))
        .await;
        assert_eq!(by_skade, expected);
    }

    /// Catches a Puffin file whose footer disagrees with the `DataFile`s (offsets,
    /// lengths, blob type, fields, properties, compression, -1 snapshot and sequence) —
    /// read with iceberg's `PuffinReader`, a second implementation of the framing — and
    /// vectors that do not read back per data file.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn v3_vectors_share_one_puffin_file_that_iceberg_reads() {
        let f = fixture(FormatVersion::V3, &[10, 5, 3]).await;
        let picks: &[&[u64]] = &[&[0, 3, 9], &[], &[0, 1, 2]];
        let written = write_delete_files(&f.table, &rows(&f, picks))
            .await
            .expect("write");
        assert_eq!(written.len(), 2, "no vector for a file without positions");
        let puffin_path = written[0].file_path();
        assert!(puffin_path.ends_with("-dv.puffin"));
        let input = f.table.file_io().new_input(puffin_path).expect("input");
        let size = input.metadata().await.expect("stat").size;
        let reader = PuffinReader::new(input);
        let footer = reader.file_metadata().await.expect("footer");
        assert_eq!(footer.blobs().len(), 2);
        let targets = [(&f.files[0].0, picks[0]), (&f.files[2].0, picks[2])];
        for ((dv, blob), (data, pick)) in written.iter().zip(footer.blobs()).zip(targets) {
            assert_eq!(dv.file_path(), puffin_path);
            assert_eq!(dv.file_format(), DataFileFormat::Puffin);
            assert_eq!(dv.content_type(), DataContentType::PositionDeletes);
            assert_eq!(dv.file_size_in_bytes(), size);
            assert_eq!(dv.record_count(), pick.len() as u64);
            assert_eq!(dv.referenced_data_file().as_deref(), Some(data.file_path()));
            assert_eq!(blob.blob_type(), "deletion-vector-v1");
            assert_eq!(blob.fields(), &[2_147_483_645]);
            assert_eq!((blob.snapshot_id(), blob.sequence_number()), (-1, -1));
            assert_eq!(blob.compression_codec(), CompressionCodec::None);
            assert_eq!(dv.content_offset(), Some(blob.offset() as i64));
            assert_eq!(dv.content_size_in_bytes(), Some(blob.length() as i64));
            assert_eq!(
                blob.properties()
                    .get("referenced-data-file")
                    .map(String::as_str),
                Some(data.file_path())
            );
            assert_eq!(
                blob.properties().get("cardinality"),
                Some(&pick.len().to_string())
            );
            let bytes = reader.blob(blob).await.expect("blob");
            assert_eq!(
                dv::decode(bytes.data(), "t").expect("decode"),
                pick.iter().copied().collect()
            );
            let back = deleted_positions(
                f.table.file_io(),
                data.file_path(),
                std::slice::from_ref(dv),
            )
            .await
            .expect("read back");
            assert_eq!(back, pick.iter().copied().collect());
        }
        let err = deleted_positions(f.table.file_io(), f.files[1].0.file_path(), &written[..1])
            .await
            .expect_err("a vector of another file");
        assert_eq!(err.kind(), ErrorKind::DataInvalid);
        assert!(err.to_string().contains(f.files[0].0.file_path()), "{err}");
    }

    /// Catches the read path ignoring a committed deletion vector (or iceberg trying to
    /// read its Puffin file as Parquet): rows at the vector's positions are gone,
    /// across batch (65 536 rows) and row-group (30 000) edges, the rest in write order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_read_path_drops_the_rows_of_a_committed_vector() {
        let mut f = fixture(FormatVersion::V3, &[70_000, 10, 4]).await;
        let picks: &[&[u64]] = &[&[0, 29_999, 30_000, 65_535, 65_536, 69_999], &[], &[3]];
        let written = write_delete_files(&f.table, &rows(&f, picks))
            .await
            .expect("write");
        commit_deletes(&mut f, written).await;
        let read = ids(crate::read::scan_in_write_order(&f.table)
            .await
            .expect("read"))
        .await;
        assert_eq!(read.len(), 70_014 - 7);
        assert_eq!(read, left(&f, picks));
    }

    /// Catches deletes written to a v1 table (the spec has none) and files written for
    /// nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn v1_is_refused_and_nothing_writes_nothing() {
        let f = fixture(FormatVersion::V1, &[3]).await;
        let err = write_delete_files(&f.table, &rows(&f, &[&[1]]))
            .await
            .expect_err("v1");
        assert_eq!(err.kind(), ErrorKind::FeatureUnsupported);
        assert!(
            err.to_string()
                .contains("row-level deletes need format version 2 or later")
        );
        let f = fixture(FormatVersion::V3, &[3]).await;
        assert!(
            write_delete_files(&f.table, &[])
                .await
                .expect("empty")
                .is_empty()
        );
        assert!(
            write_delete_files(&f.table, &rows(&f, &[&[]]))
                .await
                .expect("none")
                .is_empty()
        );
    }
}

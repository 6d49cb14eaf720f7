//! Commits another Iceberg writer makes (Spark, Trino, Flink, pyiceberg), built by hand
//! from the table spec so that maintenance meets what other engines leave in a table:
//! a `delete` snapshot of position-delete files ("Position Delete Files": columns
//! `file_path` and `pos` with the reserved field ids 2147483546 and 2147483545, rows
//! sorted by path then position) or of an equality-delete file ("Equality Delete
//! Files": the equality columns with the table's field ids), in one delete manifest,
//! the parent's manifests carried on.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, MAIN_BRANCH,
    ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot, SnapshotReference,
    SnapshotRetention, Struct, Summary, UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent, TableRequirement, TableUpdate};
use skade::catalog::MetadataUpdate;
use skade::catalog::{CommitTarget, RedbCatalog};

/// Field id of a position delete file's `file_path` column.
const FILE_PATH_ID: i32 = 2_147_483_546;
/// Field id of a position delete file's `pos` column.
const POS_ID: i32 = 2_147_483_545;

/// The live data files of `table`'s current snapshot, in path order, each with the ids
/// of its rows in file order (read from the Parquet file).
pub async fn data_files_with_ids(table: &Table) -> Vec<(String, Vec<i64>)> {
    let mut out = Vec::new();
    let snapshot = table.metadata().current_snapshot().expect("a snapshot");
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .expect("manifest list");
    for manifest in list.entries() {
        if manifest.content != iceberg::spec::ManifestContentType::Data {
            continue;
        }
        let manifest = manifest
            .load_manifest(table.file_io())
            .await
            .expect("manifest");
        for entry in manifest.entries() {
            if entry.is_alive() {
                let path = entry.file_path().to_string();
                let ids = ids_in(&path);
                out.push((path, ids));
            }
        }
    }
    out.sort();
    out
}

/// The `id` column of the Parquet file at local `path`, in file order.
fn ids_in(path: &str) -> Vec<i64> {
    let file = std::fs::File::open(path.strip_prefix("file://").unwrap_or(path)).expect("open");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        let col = batch
            .column_by_name("id")
            .expect("id column")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("int64 ids")
            .clone();
        ids.extend(col.values().iter().copied());
    }
    ids
}

/// Deletes the rows whose ids are `ids` as a v2 writer of another engine does: one
/// position-delete file per data file holding some of them (file-scoped:
/// `referenced_data_file` set when `file_scoped`, and in any case equal `file_path`
/// bounds), committed as one `delete` snapshot. Returns the delete files' paths.
pub async fn delete_by_position(
    catalog: &RedbCatalog,
    ident: &TableIdent,
    ids: &[i64],
    file_scoped: bool,
) -> Vec<String> {
    let table = catalog.load_table(ident).await.expect("table");
    let mut deletes = Vec::new();
    for (path, file_ids) in data_files_with_ids(&table).await {
        let positions: Vec<i64> = file_ids
            .iter()
            .enumerate()
            .filter(|(_, id)| ids.contains(id))
            .map(|(pos, _)| pos as i64)
            .collect();
        if positions.is_empty() {
            continue;
        }
        let rows = positions.len();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                with_id(Field::new("file_path", DataType::Utf8, false), FILE_PATH_ID),
                with_id(Field::new("pos", DataType::Int64, false), POS_ID),
            ])),
            vec![
                Arc::new(StringArray::from(vec![path.clone(); rows])) as ArrayRef,
                Arc::new(Int64Array::from(positions)) as ArrayRef,
            ],
        )
        .expect("batch");
        let location = format!(
            "{}/data/{}-deletes.parquet",
            table.metadata().location(),
            uuid::Uuid::now_v7()
        );
        let size = write_parquet(&table, &location, &batch).await;
        let bound = Datum::string(&path);
        let file = DataFileBuilder::default()
            .content(DataContentType::PositionDeletes)
            .file_path(location.clone())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .partition_spec_id(table.metadata().default_partition_spec_id())
            .record_count(rows as u64)
            .file_size_in_bytes(size)
            .lower_bounds(HashMap::from([(FILE_PATH_ID, bound.clone())]))
            .upper_bounds(HashMap::from([(FILE_PATH_ID, bound)]))
            .referenced_data_file(file_scoped.then(|| path.clone()))
            .build()
            .expect("delete file");
        deletes.push(file);
    }
    assert!(!deletes.is_empty(), "no row of {ids:?} in {ident}");
    let paths = deletes.iter().map(|f| f.file_path().to_string()).collect();
    commit_deletes(catalog, &table, deletes, ids.len()).await;
    paths
}

/// Deletes every row whose `id` is in `ids` as an equality delete file on the `id`
/// column (field id from the table's schema), committed as one `delete` snapshot.
/// Returns the delete file's path.
pub async fn delete_by_equality(catalog: &RedbCatalog, ident: &TableIdent, ids: &[i64]) -> String {
    let table = catalog.load_table(ident).await.expect("table");
    let id_field = table
        .metadata()
        .current_schema()
        .field_by_name("id")
        .expect("an id column")
        .id;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![with_id(
            Field::new("id", DataType::Int64, false),
            id_field,
        )])),
        vec![Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef],
    )
    .expect("batch");
    let location = format!(
        "{}/data/{}-eq-deletes.parquet",
        table.metadata().location(),
        uuid::Uuid::now_v7()
    );
    let size = write_parquet(&table, &location, &batch).await;
    let file = DataFileBuilder::default()
        .content(DataContentType::EqualityDeletes)
        .file_path(location.clone())
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::empty())
        .partition_spec_id(table.metadata().default_partition_spec_id())
        .record_count(ids.len() as u64)
        .file_size_in_bytes(size)
        .equality_ids(Some(vec![id_field]))
        .build()
        .expect("delete file");
    commit_deletes(catalog, &table, vec![file], ids.len()).await;
    location
}

fn with_id(field: Field, id: i32) -> Field {
    field.with_metadata(HashMap::from([(
        "PARQUET:field_id".to_string(),
        id.to_string(),
    )]))
}

/// Writes `batch` as a Parquet file at `location`; returns its size in bytes.
async fn write_parquet(table: &Table, location: &str, batch: &RecordBatch) -> u64 {
    let mut bytes = Vec::new();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
    let size = bytes.len() as u64;
    table
        .file_io()
        .new_output(location)
        .expect("output")
        .write(bytes.into())
        .await
        .expect("write delete file");
    size
}

/// Commits `deletes` (removing `rows` rows) as one `delete` snapshot of `table`: a
/// delete manifest of them first, then every manifest of the current snapshot.
async fn commit_deletes(catalog: &RedbCatalog, table: &Table, deletes: Vec<DataFile>, rows: usize) {
    let metadata = table.metadata();
    let snapshot_id = i64::from(rand_id());
    let sequence_number = metadata.next_sequence_number();
    let parent = metadata.current_snapshot().expect("a snapshot");
    let commit = uuid::Uuid::now_v7();
    let manifest_path = format!("{}/metadata/{commit}-m0.avro", metadata.location());
    let mut writer = ManifestWriterBuilder::new(
        table.file_io().new_output(&manifest_path).expect("output"),
        Some(snapshot_id),
        metadata.current_schema().clone(),
        metadata.default_partition_spec().as_ref().clone(),
    )
    .build_v2_deletes();
    let files = deletes.len();
    for file in deletes {
        writer
            .add_file(file, UNASSIGNED_SEQUENCE_NUMBER)
            .expect("add delete file");
    }
    let delete_manifest = writer.write_manifest_file().await.expect("manifest");
    let mut manifests = vec![delete_manifest];
    manifests.extend(
        table
            .manifest_list_reader(parent)
            .load()
            .await
            .expect("manifest list")
            .consume_entries(),
    );
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit}.avro",
        metadata.location()
    );
    let mut list = ManifestListWriter::v2(
        table
            .file_io()
            .new_output(&list_path)
            .expect("output")
            .writer()
            .await
            .expect("writer"),
        snapshot_id,
        Some(parent.snapshot_id()),
        sequence_number,
    );
    list.add_manifests(manifests.into_iter())
        .expect("manifests");
    list.close().await.expect("close list");
    let previous = &parent.summary().additional_properties;
    let total = |key: &str| {
        previous
            .get(key)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let mut summary = HashMap::new();
    for (key, value) in [
        ("total-records", total("total-records")),
        ("total-data-files", total("total-data-files")),
        ("total-files-size", total("total-files-size")),
        (
            "total-delete-files",
            total("total-delete-files") + files as i64,
        ),
        ("added-delete-files", files as i64),
    ] {
        summary.insert(key.to_string(), value.to_string());
    }
    summary.insert("deleted-rows-requested".to_string(), rows.to_string());
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(parent.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_summary(Summary {
            operation: Operation::Delete,
            additional_properties: summary,
        })
        .with_schema_id(metadata.current_schema_id())
        .with_timestamp_ms(metadata.last_updated_ms() + 1)
        .build();
    let staged = (
        vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_string(),
                snapshot_id: Some(parent.snapshot_id()),
            },
        ],
        vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ],
    );
    // Through the catalog's commit driver, as the face's `update_table` would (the
    // requirements checked against the table as it stands).
    let target = CommitTarget::metadata(table);
    let mut update = MetadataUpdate::new(staged.0, staged.1);
    catalog
        .commit_one(&target, &mut update)
        .await
        .expect("commit the deletes");
}

/// A positive snapshot id no other commit of the test picks.
fn rand_id() -> i32 {
    (uuid::Uuid::now_v7().as_u128() as i32).abs().max(1)
}

//! Reading a table's current snapshot back as Arrow, in write order.
//!
//! iceberg's scan plans the data files and reads them, applying Parquet position-delete
//! and equality-delete files itself. Deletion vectors (v3) it cannot read — its delete
//! loader would read a Puffin file as Parquet — so a data file with one is read here
//! without its delete files and the vector's rows dropped as the rows stream by
//! ([`crate::deletes::LiveVectors`] finds them; table spec, "Scan Planning").

use futures::{StreamExt, TryStreamExt};
use iceberg::scan::{ArrowRecordBatchStream, FileScanTask};
use iceberg::spec::{DataContentType, DataFile};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind};

use arrow_array::{BooleanArray, RecordBatch};
use roaring::RoaringTreemap;

use crate::deletes::{LiveVectors, deleted_positions};

/// Rows per record batch when reading.
pub const READ_BATCH_ROWS: usize = 65_536;

/// Streams the rows of `table`'s current snapshot (nothing for a table without one).
///
/// Data files are read one at a time in file-name order. skade names files
/// `<uuid-v7>-<seq>` (see [`crate::write::FileNames`]), so a table written by sequential
/// ingests reads back in the order its rows were sent.
///
/// # Errors
/// iceberg's error for unreadable manifests; read errors end the stream.
pub async fn scan_in_write_order(table: &Table) -> iceberg::Result<ArrowRecordBatchStream> {
    scan_snapshot_in_write_order(table, None, None).await
}

/// As [`scan_in_write_order`], of the snapshot `snapshot_id` (the current one when
/// `None`) and, when `columns` is given, only those top-level columns (by name, in the
/// snapshot's schema), in that order. Deletion vectors are applied (module docs).
///
/// # Errors
/// iceberg's error for an unknown snapshot or column, or unreadable manifests;
/// `FeatureUnsupported` naming the data file when one with a deletion vector also has
/// equality deletes; `DataInvalid` when two deletion vectors apply to one data file.
/// Read errors (a damaged deletion vector among them) end the stream.
pub async fn scan_snapshot_in_write_order(
    table: &Table,
    snapshot_id: Option<i64>,
    columns: Option<Vec<String>>,
) -> iceberg::Result<ArrowRecordBatchStream> {
    let mut scan = table.scan();
    if let Some(id) = snapshot_id {
        scan = scan.snapshot_id(id);
    }
    if let Some(columns) = columns {
        scan = scan.select(columns);
    }
    let scan = scan.build()?;
    let vectors = match scan.snapshot() {
        Some(snapshot) => LiveVectors::of_snapshot(table, snapshot).await?,
        None => LiveVectors::none(),
    };
    let mut tasks: Vec<_> = scan.plan_files().await?.try_collect().await?;
    tasks.sort_by(|a, b| a.data_file_path.cmp(&b.data_file_path));
    read_tasks(table, plan_reads(tasks, &vectors)?)
}

/// One read of [`read_tasks`]: data files iceberg reads as planned, or one data file read
/// bare with its deletion vector applied here.
#[derive(Debug)]
enum Read {
    /// Tasks iceberg's reader reads (and applies the deletes of) itself.
    Planned(Vec<FileScanTask>),
    /// A task without delete files, whole, with no predicate: its rows arrive in file
    /// order from position 0, and the positions of `vector` are dropped.
    WithVector {
        task: Box<FileScanTask>,
        vector: Box<DataFile>,
    },
}

/// Splits `tasks` (in the order they are to be read) into [`Read`]s: a task whose data
/// file has a deletion vector in `vectors` becomes a [`Read::WithVector`] without its
/// delete files (the vector supersedes its position deletes); runs of the others one
/// [`Read::Planned`]. Every task loses the Puffin files among its delete files (iceberg
/// would read them as Parquet).
///
/// # Errors
/// `FeatureUnsupported` naming the data file when a task with a deletion vector also has
/// equality deletes (skade never writes them), a predicate, or covers part of its file
/// (its rows would not start at position 0).
fn plan_reads(tasks: Vec<FileScanTask>, vectors: &LiveVectors) -> iceberg::Result<Vec<Read>> {
    let mut reads = Vec::new();
    let mut planned = Vec::new();
    for mut task in tasks {
        if !vectors.is_empty() {
            task.deletes
                .retain(|d| !vectors.is_vector_file(&d.file_path));
        }
        let Some(vector) = vectors.vector_for(&task.data_file_path) else {
            planned.push(task);
            continue;
        };
        let unsupported = |why: &str| {
            Err(Error::new(
                ErrorKind::FeatureUnsupported,
                format!(
                    "data file {} has a deletion vector and {why}",
                    task.data_file_path
                ),
            ))
        };
        if task
            .deletes
            .iter()
            .any(|d| d.file_type == DataContentType::EqualityDeletes)
        {
            return unsupported("equality deletes; skade does not read both together");
        }
        if task.predicate.is_some() {
            return unsupported("a row filter; skade applies vectors to unfiltered reads only");
        }
        let whole = task.start == 0 && (task.length == 0 || task.length >= task.file_size_in_bytes);
        if !whole {
            return unsupported("a scan task covering part of the file");
        }
        task.deletes.clear();
        if !planned.is_empty() {
            reads.push(Read::Planned(std::mem::take(&mut planned)));
        }
        reads.push(Read::WithVector {
            task: Box::new(task),
            vector: Box::new(vector.clone()),
        });
    }
    if !planned.is_empty() {
        reads.push(Read::Planned(planned));
    }
    Ok(reads)
}

/// Streams `reads` one after the other, each data file whole before the next.
fn read_tasks(table: &Table, reads: Vec<Read>) -> iceberg::Result<ArrowRecordBatchStream> {
    let table = table.clone();
    Ok(Box::pin(
        futures::stream::iter(reads)
            .then(move |read| {
                let table = table.clone();
                async move { open(&table, read).await }
            })
            .try_flatten(),
    ))
}

/// The stream of one [`Read`].
async fn open(table: &Table, read: Read) -> iceberg::Result<ArrowRecordBatchStream> {
    let reader = || {
        table
            .reader_builder()
            .with_data_file_concurrency_limit(1)
            .with_batch_size(READ_BATCH_ROWS)
            .build()
    };
    match read {
        Read::Planned(tasks) => Ok(reader()
            .read(Box::pin(futures::stream::iter(tasks.into_iter().map(Ok))))?
            .stream()),
        Read::WithVector { task, vector } => {
            let path = task.data_file_path.clone();
            let positions =
                deleted_positions(table.file_io(), &path, std::slice::from_ref(&*vector)).await?;
            let rows = task.record_count;
            let batches = reader()
                .read(Box::pin(futures::stream::once(async { Ok(*task) })))?
                .stream();
            Ok(drop_positions(batches, positions, rows, path))
        }
    }
}

/// `batches` — the rows of the data file `path` in file order from position 0 — without
/// the rows at `positions`. When `rows` (the file's record count) is known, a stream
/// that ends at another count is an error: the positions would have been misapplied.
fn drop_positions(
    batches: ArrowRecordBatchStream,
    positions: RoaringTreemap,
    rows: Option<u64>,
    path: String,
) -> ArrowRecordBatchStream {
    let positions = std::sync::Arc::new(positions);
    let path: std::sync::Arc<str> = path.into();
    Box::pin(futures::stream::try_unfold(
        (batches, 0u64),
        move |(mut batches, mut offset)| {
            let positions = std::sync::Arc::clone(&positions);
            let path = std::sync::Arc::clone(&path);
            async move {
                while let Some(batch) = batches.try_next().await? {
                    let kept = without_positions(&batch, offset, &positions)?;
                    offset += batch.num_rows() as u64;
                    if kept.num_rows() > 0 {
                        return Ok(Some((kept, (batches, offset))));
                    }
                }
                match rows {
                    Some(rows) if rows != offset => Err(Error::new(
                        ErrorKind::DataInvalid,
                        format!(
                            "data file {path}: read {offset} rows, its manifest entry says {rows}; its deletion vector cannot be applied"
                        ),
                    )),
                    _ => Ok(None),
                }
            }
        },
    ))
}

/// `batch`, whose first row is at position `offset` of its file, without the rows at
/// `positions`.
fn without_positions(
    batch: &RecordBatch,
    offset: u64,
    positions: &RoaringTreemap,
) -> iceberg::Result<RecordBatch> {
    let end = offset + batch.num_rows() as u64;
    if positions.range_cardinality(offset..end) == 0 {
        return Ok(batch.clone());
    }
    let keep: BooleanArray = (offset..end)
        .map(|p| Some(!positions.contains(p)))
        .collect();
    arrow_select::filter::filter_record_batch(batch, &keep).map_err(|e| {
        Error::new(ErrorKind::Unexpected, "drop deleted rows from a batch").with_source(e)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::scan::FileScanTaskDeleteFile;
    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, NestedField, PrimitiveType, Schema, Type,
    };

    use super::*;

    fn task(path: &str, deletes: &[(&str, DataContentType)]) -> FileScanTask {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .expect("schema");
        FileScanTask {
            file_size_in_bytes: 100,
            start: 0,
            length: 100,
            record_count: Some(10),
            data_file_path: path.to_string(),
            data_file_format: DataFileFormat::Parquet,
            schema: Arc::new(schema),
            project_field_ids: vec![1],
            predicate: None,
            deletes: deletes
                .iter()
                .map(|(p, kind)| FileScanTaskDeleteFile {
                    file_path: p.to_string(),
                    file_size_in_bytes: 1,
                    file_type: *kind,
                    partition_spec_id: 0,
                    equality_ids: None,
                })
                .collect(),
            partition: None,
            partition_spec: None,
            name_mapping: None,
            case_sensitive: true,
        }
    }

    fn vectors() -> LiveVectors {
        let mut vectors = LiveVectors::none();
        vectors
            .insert(
                DataFileBuilder::default()
                    .content(DataContentType::PositionDeletes)
                    .file_path("/t/dv.puffin".to_string())
                    .file_format(DataFileFormat::Puffin)
                    .record_count(1)
                    .file_size_in_bytes(50)
                    .referenced_data_file(Some("/t/b.parquet".to_string()))
                    .content_offset(Some(4))
                    .content_size_in_bytes(Some(30))
                    .build()
                    .expect("dv"),
            )
            .expect("insert");
        vectors
    }

    const POS: DataContentType = DataContentType::PositionDeletes;
    const EQ: DataContentType = DataContentType::EqualityDeletes;

    /// Catches a Puffin file left among a task's deletes (iceberg would read it as
    /// Parquet and fail), a position-delete file left on a task whose DV supersedes it
    /// (applied twice, or not per the spec), and the write order broken around a DV task.
    #[test]
    fn vectors_take_their_task_out_and_puffin_files_leave_every_task() {
        let tasks = vec![
            task(
                "/t/a.parquet",
                &[("/t/dv.puffin", POS), ("/t/a-del.parquet", POS)],
            ),
            task(
                "/t/b.parquet",
                &[("/t/dv.puffin", POS), ("/t/b-del.parquet", POS)],
            ),
            task(
                "/t/c.parquet",
                &[("/t/dv.puffin", POS), ("/t/eq.parquet", EQ)],
            ),
        ];
        let reads = plan_reads(tasks, &vectors()).expect("plan");
        let [
            Read::Planned(first),
            Read::WithVector { task, vector },
            Read::Planned(last),
        ] = reads.as_slice()
        else {
            panic!("three reads in order: {reads:?}");
        };
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].data_file_path, "/t/a.parquet");
        let paths = |t: &FileScanTask| -> Vec<String> {
            t.deletes.iter().map(|d| d.file_path.clone()).collect()
        };
        assert_eq!(paths(&first[0]), ["/t/a-del.parquet"]);
        assert_eq!(task.data_file_path, "/t/b.parquet");
        assert!(task.deletes.is_empty());
        assert_eq!(vector.file_path(), "/t/dv.puffin");
        assert_eq!(paths(&last[0]), ["/t/eq.parquet"]);
    }

    /// Catches a DV applied where rows would not arrive in file order from position 0
    /// (equality deletes, a row filter, part of a file): refused naming the data file.
    #[test]
    fn a_vector_task_that_cannot_be_read_in_file_order_is_refused() {
        let with_eq = task("/t/b.parquet", &[("/t/eq.parquet", EQ)]);
        let mut split = task("/t/b.parquet", &[]);
        split.start = 50;
        for bad in [with_eq, split] {
            let err = plan_reads(vec![bad], &vectors()).expect_err("refused");
            assert_eq!(err.kind(), ErrorKind::FeatureUnsupported);
            assert!(err.to_string().contains("/t/b.parquet"), "{err}");
        }
    }

    /// Catches positions applied off by a batch's offset.
    #[test]
    fn positions_are_dropped_by_their_place_in_the_file() {
        let batch = RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "id",
                arrow_schema::DataType::Int64,
                false,
            )])),
            vec![Arc::new(arrow_array::Int64Array::from(vec![10, 11, 12, 13])) as _],
        )
        .expect("batch");
        let positions = RoaringTreemap::from_iter([1u64, 101, 103, 200]);
        let kept = without_positions(&batch, 100, &positions).expect("filter");
        let ids = kept
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("longs");
        assert_eq!(ids.values(), &[10, 12]);
    }
}

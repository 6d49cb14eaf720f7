//! Reading a table's current snapshot back as Arrow, in write order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::BooleanArray;
use arrow_select::filter::filter_record_batch;
use futures::{StreamExt, TryStreamExt};
use iceberg::ErrorKind;
use iceberg::scan::{ArrowRecordBatchStream, FileScanTask};
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, ManifestContentType};
use iceberg::table::Table;
use roaring::RoaringTreemap;

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
/// snapshot's schema), in that order.
///
/// # Errors
/// iceberg's error for an unknown snapshot or column, or unreadable manifests; read
/// errors end the stream.
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
    let mut tasks: Vec<FileScanTask> = scan.build()?.plan_files().await?.try_collect().await?;
    tasks.sort_by(|a, b| a.data_file_path.cmp(&b.data_file_path));
    let snapshot = match snapshot_id {
        Some(id) => table.metadata().snapshot_by_id(id).cloned(),
        None => table.metadata().current_snapshot().cloned(),
    };
    let vectors = match snapshot {
        Some(snapshot) => deletion_vectors(table, &snapshot).await?,
        None => Vectors::default(),
    };
    let reader = table
        .reader_builder()
        .with_data_file_concurrency_limit(1)
        .with_batch_size(READ_BATCH_ROWS)
        .build();
    let file_io = table.file_io().clone();
    let vectors = Arc::new(vectors);
    let per_task = futures::stream::iter(tasks).then(move |mut task| {
        let reader = reader.clone();
        let file_io = file_io.clone();
        let vectors = vectors.clone();
        async move {
            let vector = vectors.by_data_file.get(&task.data_file_path).cloned();
            // iceberg 0.10.1 reads every delete file as Parquet: it never sees a DV, and
            // a file with a DV takes no position-delete file (the DV holds them).
            task.deletes.retain(|d| match d.file_type {
                DataContentType::PositionDeletes => {
                    vector.is_none() && !vectors.puffin_paths.contains(&d.file_path)
                }
                _ => true,
            });
            let Some(vector) = vector else {
                return Ok::<_, iceberg::Error>(
                    reader
                        .read(Box::pin(futures::stream::iter([Ok(task)])))?
                        .stream(),
                );
            };
            if task
                .deletes
                .iter()
                .any(|d| d.file_type == DataContentType::EqualityDeletes)
            {
                return Err(iceberg::Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!(
                        "data file {} has a deletion vector and equality deletes: skade does not \
                         read that combination",
                        task.data_file_path
                    ),
                ));
            }
            let path = task.data_file_path.clone();
            let deleted = crate::deletes::read_dv(&file_io, &path, &vector).await?;
            let batches = reader
                .read(Box::pin(futures::stream::iter([Ok(task)])))?
                .stream();
            Ok(without_positions(batches, deleted))
        }
    });
    Ok(per_task.try_flatten().boxed())
}

/// `batches` (a data file's rows in file order from position 0) without the rows at
/// `deleted`'s positions.
fn without_positions(
    batches: ArrowRecordBatchStream,
    deleted: RoaringTreemap,
) -> ArrowRecordBatchStream {
    let mut offset: u64 = 0;
    batches
        .map_ok(move |batch| {
            let rows = batch.num_rows() as u64;
            let keep: BooleanArray = (offset..offset + rows)
                .map(|p| Some(!deleted.contains(p)))
                .collect();
            offset += rows;
            filter_record_batch(&batch, &keep)
        })
        .and_then(|filtered| async move {
            filtered.map_err(|e| {
                iceberg::Error::new(
                    ErrorKind::Unexpected,
                    format!("applying a deletion vector: {e}"),
                )
            })
        })
        .boxed()
}

/// A snapshot's live deletion vectors.
#[derive(Default)]
struct Vectors {
    /// By the data file each names.
    by_data_file: HashMap<String, DataFile>,
    /// The Puffin files holding them.
    puffin_paths: HashSet<String>,
}

/// The live deletion vectors of `snapshot`, by the data file each names (table spec,
/// "Scan Planning": a DV applies to the data file its `referenced_data_file` names; the
/// file's data sequence number is never above it, since a DV names a file that exists).
///
/// # Errors
/// iceberg's error for a manifest list or delete manifest that cannot be read.
async fn deletion_vectors(
    table: &Table,
    snapshot: &iceberg::spec::SnapshotRef,
) -> iceberg::Result<Vectors> {
    let file_io = table.file_io();
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut vectors = Vectors::default();
    for manifest in list.entries() {
        if manifest.content != ManifestContentType::Deletes {
            continue;
        }
        for entry in manifest.load_manifest(file_io).await?.entries() {
            let file = entry.data_file();
            if entry.is_alive() && file.file_format() == DataFileFormat::Puffin {
                vectors.puffin_paths.insert(file.file_path().to_string());
                if let Some(path) = file.referenced_data_file() {
                    vectors.by_data_file.insert(path, file.clone());
                }
            }
        }
    }
    Ok(vectors)
}

//! Reading a table's current snapshot back as Arrow, in write order.

use futures::TryStreamExt;
use iceberg::scan::ArrowRecordBatchStream;
use iceberg::table::Table;

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
    let mut tasks: Vec<_> = scan.build()?.plan_files().await?.try_collect().await?;
    tasks.sort_by(|a, b| a.data_file_path.cmp(&b.data_file_path));
    Ok(table
        .reader_builder()
        .with_data_file_concurrency_limit(1)
        .with_batch_size(READ_BATCH_ROWS)
        .build()
        .read(Box::pin(futures::stream::iter(tasks.into_iter().map(Ok))))?
        .stream())
}

//! Lane 1, streaming put: a `DoPut` stream on a `PATH` descriptor appended to one table.
//!
//! Batches are conformed to the table's schema and gathered into groups of about
//! `target-file-size` in-memory bytes; each full group is encoded on all cores and written
//! as one data file; every `files-per-commit` files are committed as one snapshot, and the
//! stream's end commits the rest. After each commit the client gets a `PutResult` whose
//! `app_metadata` is a `skade.v1.CommitAck`; the stream ends with a final one.

use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_flight::PutResult;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_schema::SchemaRef;
use futures::StreamExt;
use iceberg::TableIdent;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use prost::Message;
use tokio::sync::mpsc;
use tonic::{Code, Status};
use tracing::{debug, info};

use super::Service;
use crate::error::Error;
use crate::metrics::LANE_STREAM;
use crate::proto::CommitAck;
use crate::write::{self, FileNames, IngestStats, WriteProps};

/// Sends acks back to the client.
pub(crate) type AckSender = mpsc::Sender<Result<PutResult, Status>>;

/// The state of one streaming put.
struct Put<'a> {
    svc: &'a Service,
    ident: TableIdent,
    table: Option<(Table, SchemaRef)>,
    group: Vec<RecordBatch>,
    group_bytes: u64,
    pending: Vec<DataFile>,
    names: FileNames,
    stats: IngestStats,
    snapshot_id: i64,
    acks: AckSender,
}

/// Runs one streaming put to the end: appends every batch of `batches` to `ident`.
///
/// # Errors
/// The first failure: a decode error, a schema mismatch naming the column, a storage or
/// catalog failure. Commits already acked stay; nothing else of the stream is visible.
pub(crate) async fn run(
    svc: &Service,
    ident: TableIdent,
    mut batches: FlightRecordBatchStream,
    acks: AckSender,
) -> Result<IngestStats, Error> {
    let mut put = Put {
        svc,
        ident,
        table: None,
        group: Vec::new(),
        group_bytes: 0,
        pending: Vec::new(),
        names: FileNames::new(),
        stats: IngestStats::default(),
        snapshot_id: 0,
        acks,
    };
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(|e| flight_error(e, svc.config.max_message_size))?;
        put.push(batch).await?;
    }
    if put.table.is_none() {
        if let Some(schema) = batches.schema().cloned() {
            put.open_table(&schema).await?;
        }
    }
    put.finish().await
}

impl Put<'_> {
    async fn open_table(&mut self, schema: &SchemaRef) -> Result<(), Error> {
        let table = write::ensure_table(self.svc.catalog.as_ref(), &self.ident, schema).await?;
        let arrow = write::table_arrow_schema(&table)?;
        self.table = Some((table, arrow));
        Ok(())
    }

    async fn push(&mut self, batch: RecordBatch) -> Result<(), Error> {
        if self.table.is_none() {
            self.open_table(&batch.schema()).await?;
        }
        let Some((_, arrow)) = &self.table else {
            unreachable!("open_table sets the table")
        };
        let batch = write::conform_batch(&self.ident.to_string(), &batch, arrow)?;
        debug!(table = %self.ident, rows = batch.num_rows(), "batch");
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.group_bytes += batch_bytes(&batch);
        self.group.push(batch);
        if self.group_bytes >= self.svc.config.target_file_size {
            self.flush_group().await?;
        }
        if self.pending.len() >= self.svc.config.files_per_commit.get() {
            self.commit().await?;
        }
        Ok(())
    }

    /// Encodes and writes the open group as one data file.
    async fn flush_group(&mut self) -> Result<(), Error> {
        let Some((table, _)) = &self.table else {
            return Ok(());
        };
        let group = std::mem::take(&mut self.group);
        self.group_bytes = 0;
        let encoded = write::encode(table, vec![group]).await?;
        let props = WriteProps {
            channel_depth: self.svc.config.channel_depth.get(),
        };
        let files = write::write_files(table, encoded, &mut self.names, &props).await?;
        self.pending.extend(files);
        Ok(())
    }

    /// Commits the written files as one snapshot and acks it.
    async fn commit(&mut self) -> Result<(), Error> {
        let Some((table, arrow)) = self.table.take() else {
            return Ok(());
        };
        if self.pending.is_empty() {
            self.table = Some((table, arrow));
            return Ok(());
        }
        let files = std::mem::take(&mut self.pending);
        let mut committed = IngestStats::default();
        committed.add_commit(&files);
        let started = Instant::now();
        let table = write::commit_files(self.svc.catalog.as_ref(), &table, files).await?;
        let seconds = started.elapsed().as_secs_f64();
        let name = self.ident.to_string();
        self.svc
            .metrics
            .record_commit(LANE_STREAM, &name, &committed, seconds);
        self.snapshot_id = table.metadata().current_snapshot_id().unwrap_or_default();
        self.stats.rows += committed.rows;
        self.stats.files += committed.files;
        self.stats.bytes += committed.bytes;
        self.stats.commits += 1;
        info!(
            table = %self.ident,
            snapshot_id = self.snapshot_id,
            rows = committed.rows,
            bytes = committed.bytes,
            seconds,
            "committed"
        );
        self.table = Some((table, arrow));
        self.ack(false).await
    }

    async fn ack(&self, last: bool) -> Result<(), Error> {
        let ack = CommitAck {
            table: self.ident.to_string(),
            snapshot_id: self.snapshot_id,
            committed_rows: self.stats.rows,
            committed_data_files: self.stats.files,
            commits: self.stats.commits,
            r#final: last,
        };
        let result = PutResult {
            app_metadata: ack.encode_to_vec().into(),
        };
        // A client that stopped reading acks still gets its data committed.
        let _ = self.acks.send(Ok(result)).await;
        Ok(())
    }

    async fn finish(mut self) -> Result<IngestStats, Error> {
        if !self.group.is_empty() {
            self.flush_group().await?;
        }
        self.commit().await?;
        self.ack(true).await?;
        Ok(self.stats)
    }
}

/// The bytes `batch`'s rows occupy. Unlike `get_array_memory_size`, this does not count a
/// shared IPC message buffer once per column that slices it.
fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

/// Maps a decode-side Flight error to skade's error; a message over the size limit
/// becomes `ResourceExhausted` naming the limit.
fn flight_error(e: FlightError, limit_bytes: u64) -> Error {
    match e {
        FlightError::Tonic(status)
            if matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted) =>
        {
            Error::Transport(Box::new(Status::resource_exhausted(format!(
                "a message exceeds the server's limit of {limit_bytes} bytes (--max-message-size): {}",
                status.message()
            ))))
        }
        FlightError::Tonic(status) => Error::Transport(status),
        other => Error::Decode {
            reason: other.to_string(),
        },
    }
}

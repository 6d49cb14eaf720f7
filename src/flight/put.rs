//! Lane 1, streaming put: a `DoPut` stream on a `PATH` descriptor appended to one table.
//!
//! The handler reads batches, conforms them to the table's schema, and fills data files
//! of about `target-file-size` Arrow bytes. A file's row groups start encoding on all
//! cores as soon as each is full ([`FileEncoder`]), while the stream is still arriving;
//! each full file goes to the overlapped pipeline (`write::run_overlapped`), which
//! finishes and writes it; its committer, beside the writer, commits every
//! `files-per-commit` files. When rows have waited `commit-interval` the open file is cut
//! and a commit is forced, so a slow stream becomes visible within the interval.
//!
//! Memory: each accepted batch holds a reservation on the server-wide
//! [`MemoryBudget`](crate::write::MemoryBudget) until its data file is written; when the
//! budget is spent the handler stops reading, and gRPC flow control slows the client.
//!
//! After each commit the client gets a `PutResult` whose `app_metadata` is a
//! `skade.v1.CommitAck`; the stream ends with a final one. A failure ends the stream with
//! a status; commits already acked stay, and nothing of the rest becomes visible.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::PutResult;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_schema::SchemaRef;
use futures::StreamExt;
use iceberg::{Catalog, TableIdent};
use parquet::file::properties::WriterProperties;
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::{Instant as Deadline, sleep_until};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status};
use tracing::{debug, info};

use super::Service;
use crate::error::Error;
use crate::metrics::LANE_STREAM;
use crate::proto::CommitAck;
use crate::write::parallel::FileEncoder;
use crate::write::{
    self, CommitReport, ConformOptions, IngestStats, Reservation, Segment, WriteError, WriteProps,
};

/// Sends acks back to the client. Unbounded: a client that reads acks only after it has
/// sent everything (as pyarrow's examples do) must never stall the committer; acks are a
/// few dozen bytes, one per commit.
pub(crate) type AckSender = mpsc::UnboundedSender<Result<PutResult, Status>>;

/// Runs one streaming put to the end: appends every batch of `batches` to `ident`.
///
/// # Errors
/// The first failure: a decode error, a schema mismatch naming the column, a storage or
/// catalog failure. Commits already acked stay; nothing else of the stream is visible.
///
/// # Cancel safety
/// Dropping the future cancels the put as a failure would.
pub(crate) async fn run(
    svc: &Service,
    ident: TableIdent,
    mut batches: FlightRecordBatchStream,
    acks: AckSender,
) -> Result<IngestStats, Error> {
    let limit = svc.config.max_message_size;
    let first = batches
        .next()
        .await
        .transpose()
        .map_err(|e| flight_error(e, limit))?;
    let schema = match (&first, batches.schema()) {
        (Some(batch), _) => batch.schema(),
        (None, Some(schema)) => schema.clone(),
        (None, None) => {
            return Err(Error::BadRequest {
                reason: "the DoPut stream carried no schema".to_string(),
            });
        }
    };
    let table = match svc.catalog.load_table(&ident).await {
        Ok(table) => table,
        Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => {
            // A new table: the whole schema and the first batch are checked before the
            // namespace or the table exists, so a refused first put leaves nothing.
            write::check_new_table(&ident.to_string(), &schema, first.as_ref())?;
            write::ensure_table(svc.catalog.as_ref(), &ident, &schema).await?
        }
        Err(e) => return Err(Error::catalog(&ident, e)),
    };
    let arrow = write::table_arrow_schema(&table)?;
    let file_props = write::encode::writer_properties(&table)?;

    let depth = svc.config.channel_depth.get();
    let (segments, segment_rx) = mpsc::channel::<Result<Segment, WriteError>>(depth);
    let mut reader = Reader {
        svc,
        table_name: ident.to_string(),
        arrow,
        conform: ConformOptions::for_table(&table),
        iceberg_schema: table.metadata().current_schema().clone(),
        file_props,
        file: None,
        group_bytes: 0,
        reservation: Reservation::empty(),
        deadline: None,
        segments,
    };
    let read = async move {
        if let Some(batch) = first {
            reader.push(batch).await?;
        }
        let mut stopped = false;
        loop {
            let deadline = reader.deadline;
            tokio::select! {
                _ = svc.shutdown.cancelled(), if !stopped => {
                    stopped = true;
                    break;
                }
                next = batches.next() => match next {
                    Some(batch) => reader.push(batch.map_err(|e| flight_error(e, limit))?).await?,
                    None => break,
                },
                _ = sleep_until(deadline.unwrap_or_else(Deadline::now)), if deadline.is_some() => {
                    reader.cut(true).await?;
                }
            }
        }
        reader.cut(false).await?;
        Ok::<bool, Error>(stopped)
        // `reader` drops here, closing the segment channel: the pipeline drains and
        // commits the rest.
    };

    let props = WriteProps {
        channel_depth: depth,
    };
    let name = ident.to_string();
    let mut on_commit = |report: &CommitReport| {
        let seconds = report.duration.as_secs_f64();
        svc.metrics
            .record_commit(LANE_STREAM, &name, &report.committed, seconds);
        let snapshot_id = report.table.metadata().current_snapshot_id().unwrap_or(0);
        info!(
            table = %name,
            snapshot_id,
            rows = report.committed.rows,
            bytes = report.committed.bytes,
            seconds,
            "committed"
        );
        // A client that went away still gets its data committed.
        let _ = acks.send(Ok(ack(&name, snapshot_id, &report.cumulative, false)));
    };
    let pipeline = async {
        let result = write::run_overlapped(
            svc.catalog.as_ref(),
            &table,
            ReceiverStream::new(segment_rx),
            svc.config.files_per_commit.get(),
            &props,
            &mut on_commit,
        )
        .await;
        result.map_err(Error::from)
    };
    let (stopped, (table, stats)) = tokio::try_join!(read, pipeline)?;
    if stopped {
        return Err(Error::ShuttingDown {
            committed_rows: stats.rows,
        });
    }
    // The final ack names this stream's last snapshot (0 when it committed nothing).
    let last_snapshot = table
        .metadata()
        .current_snapshot_id()
        .filter(|_| stats.commits > 0)
        .unwrap_or(0);
    let _ = acks.send(Ok(ack(&name, last_snapshot, &stats, true)));
    Ok(stats)
}

/// The reading half of a put: batches in, segments out.
struct Reader<'a> {
    svc: &'a Service,
    table_name: String,
    arrow: SchemaRef,
    conform: ConformOptions,
    iceberg_schema: Arc<iceberg::spec::Schema>,
    file_props: WriterProperties,
    /// The data file being filled; its full row groups are already encoding.
    file: Option<FileEncoder>,
    group_bytes: u64,
    reservation: Reservation,
    /// When the oldest row not yet sent for commit must be committed.
    deadline: Option<Deadline>,
    segments: mpsc::Sender<Result<Segment, WriteError>>,
}

impl Reader<'_> {
    async fn push(&mut self, batch: RecordBatch) -> Result<(), Error> {
        let batch = write::conform_batch_with(&self.table_name, &batch, &self.arrow, self.conform)?;
        debug!(table = %self.table_name, rows = batch.num_rows(), "batch");
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = batch_bytes(&batch);
        let reservation = match self.svc.budget.try_reserve(bytes as usize) {
            Some(r) => r,
            None => {
                // Budget spent: hand our own open group on (its bytes come back once it is
                // written), then wait for room. Waiting stops reading from the client.
                self.send_group().await?;
                self.svc.budget.reserve(bytes as usize).await
            }
        };
        self.reservation.merge(reservation);
        self.group_bytes += bytes;
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(
                FileEncoder::new(self.iceberg_schema.clone(), self.file_props.clone()).map_err(
                    |source| WriteError::Encode {
                        table: self.table_name.clone(),
                        source: Box::new(source),
                    },
                )?,
            ),
        };
        file.push(&batch);
        if self.deadline.is_none() {
            self.deadline = Some(Deadline::now() + self.svc.config.commit_interval);
        }
        if self.group_bytes >= self.svc.config.target_file_size {
            self.send_group().await?;
        }
        Ok(())
    }

    /// Sends the open group (if any) to be encoded and written as one data file.
    async fn send_group(&mut self) -> Result<(), Error> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        let reservation = std::mem::replace(&mut self.reservation, Reservation::empty());
        self.group_bytes = 0;
        self.send(Segment::File(Box::new(file), reservation)).await
    }

    /// Sends the open group and, when `commit` is set, a commit marker.
    async fn cut(&mut self, commit: bool) -> Result<(), Error> {
        self.send_group().await?;
        self.deadline = None;
        if commit {
            self.send(Segment::Commit).await?;
        }
        Ok(())
    }

    async fn send(&mut self, segment: Segment) -> Result<(), Error> {
        // A closed channel means the pipeline already failed; try_join reports its error.
        let _ = self.segments.send(Ok(segment)).await;
        Ok(())
    }
}

fn ack(table: &str, snapshot_id: i64, stats: &IngestStats, last: bool) -> PutResult {
    let ack = CommitAck {
        table: table.to_string(),
        snapshot_id,
        committed_rows: stats.rows,
        committed_data_files: stats.files,
        commits: stats.commits,
        r#final: last,
    };
    PutResult {
        app_metadata: ack.encode_to_vec().into(),
    }
}

/// The bytes `batch`'s rows occupy. Unlike `get_array_memory_size`, this does not count a
/// shared IPC message buffer once per column that slices it.
pub(crate) fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

/// Maps a decode-side Flight error to skade's error; a message over the size limit
/// becomes `ResourceExhausted` naming the limit.
pub(crate) fn flight_error(e: FlightError, limit_bytes: u64) -> Error {
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

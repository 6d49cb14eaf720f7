//! Lane 1, streaming put: a `DoPut` stream on a `PATH` descriptor appended to one table.
//!
//! The handler keeps only the select over shutdown, the next batch and the commit
//! deadline, and the acks. Batches go to a [`Batcher`], which conforms them, holds their
//! bytes against the server-wide memory budget (backpressure) and fills data files of
//! about `--target-file-size`, whose row groups encode on all cores as they fill; each
//! full file goes to `write::ingest_pipelined_overlap_stream`, which finishes and writes
//! it while its committer, beside the writer, commits every `--files-per-commit` files.
//! When rows have waited `--commit-interval` the open file is cut and a commit is forced,
//! so a slow stream becomes visible within the interval.
//!
//! After each commit the client gets a `PutResult` whose `app_metadata` is a
//! `skade.v1.CommitAck`; the stream ends with a final one. A failure ends the stream with
//! a status; commits already acked stay, and nothing of the rest becomes visible.

use arrow_flight::PutResult;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use futures::StreamExt;
use iceberg::{Catalog, TableIdent};
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
use crate::write::{
    self, BatchLimits, Batcher, CommitReport, IngestStats, Segment, WriteError, WriteProps,
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
    let limits = BatchLimits {
        budget: svc.budget.clone(),
        target_file_size_bytes: svc.config.target_file_size,
        commit_interval: Some(svc.config.commit_interval),
    };
    let mut batcher = Batcher::new(&table, limits)?;
    let depth = svc.config.channel_depth.get();
    let (mut segments, segment_rx) = mpsc::channel::<Result<Segment, WriteError>>(depth);
    let name = ident.to_string();
    let read = async move {
        if let Some(batch) = first {
            batcher.push(&batch, &mut segments).await?;
        }
        let mut stopped = false;
        loop {
            let deadline = batcher.deadline();
            tokio::select! {
                _ = svc.shutdown.cancelled(), if !stopped => {
                    stopped = true;
                    break;
                }
                next = batches.next() => match next {
                    Some(batch) => {
                        let batch = batch.map_err(|e| flight_error(e, limit))?;
                        let rows = batcher.push(&batch, &mut segments).await?;
                        debug!(table = %name, rows, "batch");
                    }
                    None => break,
                },
                _ = sleep_until(deadline.unwrap_or_else(Deadline::now)), if deadline.is_some() => {
                    batcher.cut(&mut segments).await?;
                    let _ = segments.send(Ok(Segment::Commit)).await;
                }
            }
        }
        batcher.cut(&mut segments).await?;
        Ok::<bool, Error>(stopped)
        // `segments` drops here, closing the channel: the pipeline drains and commits
        // the rest.
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
        let result = write::ingest_pipelined_overlap_stream(
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

/// Maps a decode-side Flight error to skade's error; a message over the size limit
/// becomes [`Error::MessageTooLarge`] naming the limit.
pub(crate) fn flight_error(e: FlightError, limit_bytes: u64) -> Error {
    match e {
        FlightError::Tonic(status)
            if matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted) =>
        {
            Error::MessageTooLarge {
                limit_bytes,
                detail: status.message().to_string(),
            }
        }
        FlightError::Tonic(status) => Error::Transport(status),
        other => Error::Decode {
            reason: other.to_string(),
        },
    }
}

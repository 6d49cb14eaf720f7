//! Lane 1, streaming put: a `DoPut` stream on a `PATH` descriptor appended to one table.
//!
//! The handler keeps only the select over shutdown, the next batch and the commit
//! deadline, and the acks. Batches go to a [`Batcher`], which conforms them, holds their
//! bytes against the server-wide memory budget (backpressure) and fills data files of
//! about `--target-file-size`, whose row groups encode on all cores as they fill; each
//! full file goes to `write::ingest_pipelined_overlap_stream_evolving`, which finishes
//! and writes it while its committer, beside the writer, commits every
//! `--files-per-commit` files (the first commit also evolving the table's schema when the
//! stream's schema asks for it and the table opted in). The stream is decoded by
//! [`super::decode::Batches`].
//! When rows have waited `--commit-interval` the open file is cut and a commit is forced,
//! so a slow stream becomes visible within the interval.
//!
//! After each commit the client gets a `PutResult` whose `app_metadata` is a
//! `skade.v1.CommitAck`; the stream ends with a final one. A failure ends the stream with
//! a status; commits already acked stay, and nothing of the rest becomes visible.

use arrow_array::RecordBatch;
use arrow_flight::PutResult;
use iceberg::{Catalog, TableIdent};
use prost::Message;
use tokio::sync::mpsc;
use tokio::time::{Instant as Deadline, sleep_until};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tracing::{debug, info};

use super::Service;
use super::decode::{Batch, Batches};
use super::exactly_once::{Admit, Sequencer};
use crate::catalog::marks::WriterMark;
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

/// Runs one streaming put to the end: appends every batch of `batches` to `ident`. With
/// `writer` set (the [`super::exactly_once::WRITER_ID_HEADER`] header), the put is exactly-once: see
/// [`super::exactly_once`].
///
/// # Errors
/// The first failure: a decode error, a schema mismatch naming the column, a sequence out
/// of order, a storage or catalog failure. Commits already acked stay; nothing else of
/// the stream is visible.
///
/// # Cancel safety
/// Dropping the future cancels the put as a failure would.
pub(crate) async fn run(
    svc: &Service,
    ident: TableIdent,
    mut data: Batches,
    writer: Option<String>,
    acks: AckSender,
) -> Result<IngestStats, Error> {
    let (schema, first) = data.first("DoPut stream").await?;
    let (table, created) = open_table(svc, &ident, &schema, first.as_ref().map(|(b, _)| b)).await?;
    let created_at = created
        .then(|| table.metadata_location().map(str::to_string))
        .flatten();
    let outcome = append(svc, &ident, table, &schema, data, first, writer, acks).await;
    if outcome.is_err()
        && let Some(location) = created_at
    {
        remove_created_table(svc, &ident, &location).await;
    }
    outcome
}

/// Drops `ident`, which this put created and then failed on, when nothing was
/// committed into it (its pointer is still the creation's `location`): a failed first
/// put leaves no empty table. Best effort: a failure to drop is logged.
async fn remove_created_table(svc: &Service, ident: &TableIdent, location: &str) {
    match svc.catalog.drop_table_if_unchanged(ident, location).await {
        Ok(true) => {
            info!(table = %ident, "dropped the table this failed put created: nothing was committed into it")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(table = %ident, error = %e, "cannot drop the empty table this failed put created")
        }
    }
}

/// The rest of [`run`] once `table` is open: reads `data` (whose first batch is
/// `first`) into it.
#[allow(clippy::too_many_arguments)]
async fn append(
    svc: &Service,
    ident: &TableIdent,
    table: iceberg::table::Table,
    schema: &arrow_schema::SchemaRef,
    data: Batches,
    first: Option<Batch>,
    writer: Option<String>,
    acks: AckSender,
) -> Result<IngestStats, Error> {
    let change = write::evolve::plan(&table, table.metadata().current_schema(), schema)?;
    let sequencer = sequencer_for(svc, writer, ident).await?;
    let start_mark = sequencer.as_ref().and_then(Sequencer::mark);
    let writer_id = sequencer.as_ref().map(|s| s.writer().to_string());
    let depth = svc.config.channel_depth.get();
    let (segments, segment_rx) = mpsc::channel::<Result<Segment, WriteError>>(depth);
    let intake = Intake::new(svc, &table, change.as_ref(), sequencer, segments)?;
    let read = intake.run(svc, data, first);

    let props = WriteProps {
        channel_depth: depth,
    };
    let mut acker = Acker {
        svc,
        name: ident.to_string(),
        acks,
        committed_sequence: start_mark.map(|m| m.sequence),
        committed_rows: 0,
    };
    let mut on_commit = |report: &CommitReport| acker.committed(report);
    let pipeline = async {
        write::ingest_pipelined_overlap_stream_evolving(
            svc.catalog.as_ref(),
            &table,
            ReceiverStream::new(segment_rx),
            svc.config.files_per_commit.get(),
            &props,
            writer_id.as_deref(),
            change,
            &mut on_commit,
        )
        .await
        .map_err(Error::from)
    };
    let ((stopped, replayed), (table, stats)) = match tokio::try_join!(read, pipeline) {
        Ok(done) => done,
        Err(Error::ClientGone { reason, .. }) => {
            return Err(Error::ClientGone {
                reason,
                committed_rows: acker.committed_rows,
            });
        }
        Err(e) => return Err(e),
    };
    if stopped {
        return Err(Error::ShuttingDown {
            committed_rows: stats.rows,
        });
    }
    acker.finished(&table, &stats, replayed, start_mark);
    Ok(stats)
}

/// The exactly-once sequencer of a put by `writer` (admitted against `--max-writers`,
/// starting from its high-water mark in `ident`); `None` for a put without a writer id.
///
/// # Errors
/// The writer limit's refusal, or the catalog's error reading the mark.
async fn sequencer_for(
    svc: &Service,
    writer: Option<String>,
    ident: &TableIdent,
) -> Result<Option<Sequencer>, Error> {
    let Some(writer) = writer else {
        return Ok(None);
    };
    super::exactly_once::admit_writer(svc, &writer).await?;
    let mark = svc
        .catalog
        .writer_mark(&writer, ident)
        .await
        .map_err(|e| Error::catalog(ident, e))?;
    Ok(Some(Sequencer::new(writer, mark)))
}

/// Acks a put's commits to its client, and records them.
struct Acker<'a> {
    svc: &'a Service,
    name: String,
    acks: AckSender,
    /// The writer's sequence the last commit made durable (or its mark at the start).
    committed_sequence: Option<u64>,
    /// Rows committed so far.
    committed_rows: u64,
}

impl Acker<'_> {
    /// One commit of the pipeline: counted, logged and acked.
    fn committed(&mut self, report: &CommitReport) {
        self.committed_rows = report.cumulative.rows;
        let seconds = report.duration.as_secs_f64();
        self.svc
            .metrics
            .record_commit(LANE_STREAM, &self.name, &report.committed, seconds);
        let snapshot_id = report.table.metadata().current_snapshot_id().unwrap_or(0);
        self.committed_sequence = report.last_sequence.or(self.committed_sequence);
        // As a string: snapshot ids exceed 2^53, which JSON readers turn into doubles.
        info!(
            table = %self.name,
            snapshot_id = %snapshot_id,
            rows = report.committed.rows,
            bytes = report.committed.bytes,
            seconds,
            "committed"
        );
        self.send(snapshot_id, &report.cumulative, false);
    }

    /// The end of a put that committed `stats` (leaving `table`) and skipped `replayed`
    /// batches as replays: counted, and the final ack sent. It names this stream's last
    /// snapshot; for a stream that was entirely a replay, the snapshot that committed it
    /// originally (`start_mark`'s); else 0 when nothing committed.
    fn finished(
        &self,
        table: &iceberg::table::Table,
        stats: &IngestStats,
        replayed: u64,
        start_mark: Option<WriterMark>,
    ) {
        self.svc.metrics.record_batches_replayed(replayed);
        let last_snapshot = match (stats.commits, start_mark) {
            (0, Some(mark)) if replayed > 0 => {
                self.svc.metrics.record_commit_replayed(LANE_STREAM);
                mark.snapshot_id
            }
            (0, _) => 0,
            _ => table.metadata().current_snapshot_id().unwrap_or(0),
        };
        self.send(last_snapshot, stats, true);
    }

    /// Sends an ack of `snapshot_id` with the stream's `stats` so far (`last` for the
    /// final one).
    fn send(&self, snapshot_id: i64, stats: &IngestStats, last: bool) {
        let ack = ack(
            &self.name,
            snapshot_id,
            stats,
            self.committed_sequence,
            last,
        );
        // A client that went away still gets its data committed.
        let _ = self.acks.send(Ok(ack));
    }
}

/// Loads `ident`, or creates it for a stream with `schema` whose first batch is `first`
/// (when puts may create tables, [`Service::may_create_on_put`]): the whole schema and
/// the first batch are checked before the namespace or the table exists, so a refused
/// first put leaves nothing. Returns the table and whether this put created it.
async fn open_table(
    svc: &Service,
    ident: &TableIdent,
    schema: &arrow_schema::Schema,
    first: Option<&RecordBatch>,
) -> Result<(iceberg::table::Table, bool), Error> {
    match svc.catalog.load_table(ident).await {
        Ok(table) => {
            // Refused before any file is written: the commit would be too.
            crate::catalog::check_file_paths(&ident.to_string(), table.metadata().properties())
                .map_err(|e| Error::catalog(ident, e))?;
            Ok((table, false))
        }
        Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => {
            svc.may_create_on_put(ident).await?;
            write::check_new_table(&ident.to_string(), schema, first)?;
            Ok(write::ensure_table_created(svc.catalog.as_ref(), ident, schema).await?)
        }
        Err(e) => Err(Error::catalog(ident, e)),
    }
}

/// The reading half of a put: batches in (sequence-checked when keyed), files out.
struct Intake {
    name: String,
    batcher: Batcher,
    sequencer: Option<Sequencer>,
    segments: mpsc::Sender<Result<Segment, WriteError>>,
}

impl Intake {
    /// The intake of a put into `table` (whose schema `change` evolves, when given),
    /// handing full files to `segments`.
    ///
    /// # Errors
    /// The batcher's error for a table whose schema cannot be written.
    fn new(
        svc: &Service,
        table: &iceberg::table::Table,
        change: Option<&crate::snapshot::schema_change::SchemaChange>,
        sequencer: Option<Sequencer>,
        segments: mpsc::Sender<Result<Segment, WriteError>>,
    ) -> Result<Self, Error> {
        let limits = BatchLimits {
            budget: svc.budget.clone(),
            target_file_size_bytes: svc.config.target_file_size,
            commit_interval: Some(svc.config.commit_interval),
        };
        Ok(Self {
            name: table.identifier().to_string(),
            batcher: match change {
                Some(change) => Batcher::with_schema(table, change.schema.clone(), limits)?,
                None => Batcher::new(table, limits)?,
            },
            sequencer,
            segments,
        })
    }

    /// Reads until the stream ends or the server shuts down, cutting a commit whenever
    /// the commit deadline passes. Returns whether shutdown stopped it, and the batches
    /// skipped as replays.
    async fn run(
        mut self,
        svc: &Service,
        mut data: Batches,
        first: Option<Batch>,
    ) -> Result<(bool, u64), Error> {
        if let Some((batch, metadata)) = first {
            self.take(&batch, &metadata).await?;
        }
        let mut stopped = false;
        loop {
            let deadline = self.batcher.deadline();
            tokio::select! {
                _ = svc.shutdown.cancelled(), if !stopped => {
                    stopped = true;
                    break;
                }
                next = data.next() => match next? {
                    Some((batch, metadata)) => self.take(&batch, &metadata).await?,
                    None => break,
                },
                _ = sleep_until(deadline.unwrap_or_else(Deadline::now)), if deadline.is_some() => {
                    self.batcher.cut(&mut self.segments).await?;
                    let _ = self.segments.send(Ok(Segment::Commit)).await;
                }
            }
        }
        self.batcher.cut(&mut self.segments).await?;
        let replayed = self.sequencer.map_or(0, |s| s.replayed);
        Ok((stopped, replayed))
        // `segments` drops here, closing the channel: the pipeline drains and commits
        // the rest.
    }

    async fn take(&mut self, batch: &RecordBatch, metadata: &[u8]) -> Result<(), Error> {
        let sequence = match &mut self.sequencer {
            None => None,
            Some(sequencer) => match sequencer.admit(metadata)? {
                Admit::Take(sequence) => Some(sequence),
                Admit::Replay => {
                    debug!(table = %self.name, writer = sequencer.writer(), "replayed batch skipped");
                    return Ok(());
                }
            },
        };
        let rows = self
            .batcher
            .push_sequenced(batch, sequence, &mut self.segments)
            .await?;
        debug!(table = %self.name, rows, "batch");
        Ok(())
    }
}

fn ack(
    table: &str,
    snapshot_id: i64,
    stats: &IngestStats,
    committed_sequence: Option<u64>,
    last: bool,
) -> PutResult {
    let ack = CommitAck {
        table: table.to_string(),
        snapshot_id,
        committed_rows: stats.rows,
        committed_data_files: stats.files,
        commits: stats.commits,
        r#final: last,
        committed_sequence: committed_sequence.unwrap_or(0),
    };
    PutResult {
        app_metadata: ack.encode_to_vec().into(),
    }
}

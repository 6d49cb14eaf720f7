//! Pipelined single-table ingest: many data files, one snapshot every `files_per_commit`
//! files (`docs/design/ingest_pipelined_overlap.md`).
//!
//! - [`encode_pipelined`]: the shared all-core encode; results in submission order.
//! - [`ingest_pipelined`]: encode → write (≤ `channel_depth` writes in flight) → a serial
//!   commit loop. The proven baseline.
//! - [`ingest_pipelined_overlap_stream`], its form whose first commit also evolves the
//!   schema [`ingest_pipelined_overlap_stream_evolving`] (what Lane 1's `DoPut` runs), and
//!   their collected-groups wrapper [`ingest_pipelined_overlap`]: the same files, grouping and
//!   snapshots, but the committer runs *beside* the writer: it consumes written files, in
//!   submission order, from a bounded channel while later files are still being encoded
//!   and written, so each commit's fsync overlaps the next files' writes (§f1).
//!
//! Every commit is the server's: a merge append through the catalog's commit driver
//! ([`super::ingest::commit_files_with`], or [`super::evolve`]'s commit for an evolving stream's first commit),
//! whichever entry point runs it — the design note's `ingest_pipelined_overlap` commits
//! exactly as Lane 1's `DoPut` does.
//!
//! Failure contract (§f3): not atomic across commits. Commits already made stay; an error
//! ends the pipeline at its next await, and an un-committed redb transaction rolls back,
//! so no partial snapshot is ever visible.

use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use futures::{Stream, StreamExt, TryStreamExt};
use iceberg::spec::DataFile;
use iceberg::table::Table;
use tokio::sync::mpsc;

use super::WriteError;
use super::batcher::{FileSink, FullFile};
use super::encode::{EncodedFile, WriteProps};
use super::file_out::finish_and_write;
use super::ingest::commit_append;
use super::ingest::{FileNames, IngestStats, commit_files, encode, write_file, write_files};
use crate::catalog::RedbCatalog;
use crate::catalog::WriterRange;
use crate::snapshot::append::AppendPart;
use crate::snapshot::schema_change::SchemaChange;

/// One step of a pipelined ingest's input, in order.
#[derive(Debug)]
pub enum Segment {
    /// One data file, its row groups already encoding on rayon as its rows arrived
    /// ([`super::parallel::FileEncoder`], from a [`super::Batcher`]). The reservation (its rows' bytes) is
    /// released once the file is written.
    File(FullFile),
    /// One data file already encoded (the design's collected-groups form).
    Encoded(Box<EncodedFile>),
    /// Commit every file written so far, even if fewer than `files_per_commit`
    /// (`--commit-interval` elapsed).
    Commit,
}

/// Lane 1's sink: a full file goes to the overlapped writer as a [`Segment::File`].
impl FileSink for mpsc::Sender<Result<Segment, WriteError>> {
    async fn accept(&mut self, file: FullFile) -> Result<(), WriteError> {
        // A closed channel means the pipeline already failed; its error is reported
        // where the pipeline is awaited.
        let _ = self.send(Ok(Segment::File(file))).await;
        Ok(())
    }
}

/// Lane 2's sink: each full file is finished and written at once under `table`, and its
/// `DataFile` kept in `files` for a later commit (staged, not visible).
#[derive(Debug)]
pub struct StageFiles<'a> {
    /// The table the files belong to (a catalog handle or a planned table).
    pub table: &'a Table,
    /// Names the files.
    pub names: &'a mut FileNames,
    /// The written files, in order.
    pub files: &'a mut Vec<DataFile>,
}

impl FileSink for StageFiles<'_> {
    async fn accept(&mut self, file: FullFile) -> Result<(), WriteError> {
        let FullFile {
            encoder,
            reservation,
            partition,
            ..
        } = file;
        if encoder.rows() > 0 {
            let path = self.names.next_path(self.table);
            if let Some(file) = finish_and_write(self.table, *encoder, path, partition).await? {
                self.files.push(file);
            }
        }
        drop(reservation);
        Ok(())
    }
}

/// One commit the pipeline made.
#[derive(Debug, Clone)]
pub struct CommitReport {
    /// The table after the commit.
    pub table: Table,
    /// What this commit made visible.
    pub committed: IngestStats,
    /// Everything this ingest made visible so far.
    pub cumulative: IngestStats,
    /// The highest producer sequence this ingest has committed so far (exactly-once);
    /// `None` without a writer id.
    pub last_sequence: Option<u64>,
    /// Wall time of the catalog commit.
    pub duration: Duration,
}

/// Encodes every group on all cores; `encoded[i]` is group `i` (groups without rows
/// produce no file). The shared encode stage of both pipelined lanes (§f2).
///
/// # Errors
/// As [`encode`].
pub async fn encode_pipelined(
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
) -> Result<Vec<EncodedFile>, WriteError> {
    encode(table, groups).await
}

/// The serial baseline: encode all groups, write all files (≤ `props.channel_depth` in
/// flight), then commit them in submission order, one snapshot per `files_per_commit`
/// files.
///
/// # Errors
/// The first encode, write or commit error; commits made before it stay.
pub async fn ingest_pipelined(
    catalog: &RedbCatalog,
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
    files_per_commit: usize,
    props: &WriteProps,
) -> Result<(Table, IngestStats), WriteError> {
    let encoded = encode_pipelined(table, groups).await?;
    let files = write_files(table, encoded, &mut FileNames::new(), props).await?;
    let mut table = table.clone();
    let mut stats = IngestStats::default();
    for chunk in files.chunks(files_per_commit.max(1)) {
        table = commit_files(catalog, &table, chunk.to_vec()).await?;
        stats.add_commit(chunk);
    }
    Ok((table, stats))
}

/// The overlapped lane over a fixed list of groups (the signature of `docs/design/ingest_pipelined_overlap.md`): a
/// thin wrapper that encodes them all ([`encode_pipelined`]) and runs
/// [`ingest_pipelined_overlap_stream`] over the encoded files. Identical files, grouping,
/// snapshots and stats to [`ingest_pipelined`]; only the timing differs (commits overlap
/// writes).
///
/// # Errors
/// As [`ingest_pipelined_overlap_stream`].
pub async fn ingest_pipelined_overlap(
    catalog: &RedbCatalog,
    table: &Table,
    groups: Vec<Vec<RecordBatch>>,
    files_per_commit: usize,
    props: &WriteProps,
) -> Result<(Table, IngestStats), WriteError> {
    let encoded = encode_pipelined(table, groups).await?;
    let segments = futures::stream::iter(
        encoded
            .into_iter()
            .map(|f| Ok(Segment::Encoded(Box::new(f)))),
    );
    ingest_pipelined_overlap_stream(
        catalog,
        table,
        segments,
        files_per_commit,
        props,
        None,
        &mut |_| {},
    )
    .await
}

/// The overlapped lane over a stream of [`Segment`]s — what Lane 1's `DoPut` runs. Each
/// file, whose row groups have been encoding since they filled, is finished (≤
/// `props.channel_depth` files at once) and written as it arrives; the committer, beside
/// the writer, commits every `files_per_commit` files and at each [`Segment::Commit`],
/// calling `on_commit` after each commit, and commits the rest when the stream ends.
/// With `writer_id` set (exactly-once), each snapshot's summary names the writer and the
/// sequence range of the files it commits, and the catalog advances the writer's
/// high-water mark in the same redb transaction (`catalog::marks`).
///
/// # Errors
/// The first error of the input stream, an encode, a write or a commit. Commits already
/// reported through `on_commit` stay; files written but not committed are orphans.
///
/// # Cancel safety
/// Dropping the future cancels the pipeline: commits already made stay, a commit whose
/// redb transaction had not committed is not visible.
pub async fn ingest_pipelined_overlap_stream(
    catalog: &RedbCatalog,
    table: &Table,
    segments: impl Stream<Item = Result<Segment, WriteError>> + Send,
    files_per_commit: usize,
    props: &WriteProps,
    writer_id: Option<&str>,
    on_commit: &mut (dyn FnMut(&CommitReport) + Send),
) -> Result<(Table, IngestStats), WriteError> {
    ingest_pipelined_overlap_stream_evolving(
        catalog,
        table,
        segments,
        files_per_commit,
        props,
        writer_id,
        None,
        on_commit,
    )
    .await
}

/// [`ingest_pipelined_overlap_stream`] whose first commit also makes `change` the table's
/// current schema (schema evolution on ingest, [`super::evolve`]): the schema change and
/// the first files are ONE catalog commit; later commits are plain appends. With
/// `change` `None` it is exactly [`ingest_pipelined_overlap_stream`].
///
/// # Errors
/// As [`ingest_pipelined_overlap_stream`]; the first commit also fails (nothing
/// committed) when the table's schema changed since `change` was planned.
///
/// # Cancel safety
/// As [`ingest_pipelined_overlap_stream`].
#[allow(clippy::too_many_arguments)]
pub async fn ingest_pipelined_overlap_stream_evolving(
    catalog: &RedbCatalog,
    table: &Table,
    segments: impl Stream<Item = Result<Segment, WriteError>> + Send,
    files_per_commit: usize,
    props: &WriteProps,
    writer_id: Option<&str>,
    change: Option<SchemaChange>,
    on_commit: &mut (dyn FnMut(&CommitReport) + Send),
) -> Result<(Table, IngestStats), WriteError> {
    let depth = props.channel_depth.max(1);
    let (tx, rx) = mpsc::channel::<Written>(depth);
    let writer = write_in_order(table, segments, depth, tx);
    let committer = commit_in_turn(
        catalog,
        table,
        rx,
        files_per_commit.max(1),
        writer_id,
        change,
        on_commit,
    );
    let ((), result) = tokio::try_join!(writer, committer)?;
    Ok(result)
}

/// The smallest range holding both.
fn widen(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some((f1, l1)), Some((f2, l2))) => Some((f1.min(f2), l1.max(l2))),
        (one, None) | (None, one) => one,
    }
}

/// What the writer hands the committer, in submission order.
enum Written {
    /// A written file, the producer sequences it holds, and whether a commit may end
    /// after it ([`FullFile::commit_boundary`]).
    File(Box<DataFile>, Option<(u64, u64)>, bool),
    Commit,
}

/// The writer half of [`ingest_pipelined_overlap_stream_evolving`]: ≤ `depth` encodes/writes in flight; `buffered`
/// re-sequences completions into submission order (the reorder buffer) before they enter
/// the bounded channel `tx`.
async fn write_in_order(
    table: &Table,
    input: impl Stream<Item = Result<Segment, WriteError>> + Send,
    depth: usize,
    tx: mpsc::Sender<Written>,
) -> Result<(), WriteError> {
    let mut names = FileNames::new();
    let written = input
        .map_ok(|item| {
            let path = match &item {
                Segment::File(..) | Segment::Encoded(_) => Some(names.next_path(table)),
                Segment::Commit => None,
            };
            prepare(table, item, path)
        })
        .try_buffered(depth);
    let mut written = std::pin::pin!(written);
    while let Some(item) = written.next().await {
        let Some(item) = item? else { continue };
        if tx.send(item).await.is_err() {
            break; // the committer failed; its error wins
        }
    }
    Ok(())
}

/// The committer half of [`ingest_pipelined_overlap_stream_evolving`]: one sequential consumer beside the writer, which
/// commits every `files_per_commit` files (at a commit boundary), at each
/// [`Written::Commit`] and at the end.
async fn commit_in_turn(
    catalog: &RedbCatalog,
    table: &Table,
    mut rx: mpsc::Receiver<Written>,
    files_per_commit: usize,
    writer_id: Option<&str>,
    mut evolve: Option<SchemaChange>,
    on_commit: &mut (dyn FnMut(&CommitReport) + Send),
) -> Result<(Table, IngestStats), WriteError> {
    let mut table = table.clone();
    let mut stats = IngestStats::default();
    let mut pending: Vec<DataFile> = Vec::new();
    let mut pending_sequences: Option<(u64, u64)> = None;
    let mut last_sequence: Option<u64> = None;
    loop {
        let item = rx.recv().await;
        let done = item.is_none();
        let commit_now = match item {
            Some(Written::File(file, sequences, boundary)) => {
                pending.push(*file);
                pending_sequences = widen(pending_sequences, sequences);
                boundary && pending.len() >= files_per_commit
            }
            Some(Written::Commit) | None => true,
        };
        if commit_now && !pending.is_empty() {
            let files = std::mem::take(&mut pending);
            let committed = IngestStats::of_commit(&files);
            let started = Instant::now();
            let mark = match (writer_id, pending_sequences.take()) {
                (Some(writer), Some((first, last))) => {
                    last_sequence = Some(last);
                    Some(WriterRange {
                        writer: writer.to_string(),
                        first,
                        last,
                    })
                }
                _ => None,
            };
            let part = AppendPart {
                files,
                change: evolve.take(),
                deletes: Vec::new(),
                replace: false,
            };
            table = commit_append(catalog, &table, part, mark).await?;
            stats.add(&committed);
            on_commit(&CommitReport {
                table: table.clone(),
                committed,
                cumulative: stats,
                last_sequence,
                duration: started.elapsed(),
            });
        }
        if done {
            return Ok((table, stats));
        }
    }
}

/// Finishes encoding (if needed) and writes one item; `None` for a file without rows.
async fn prepare(
    table: &Table,
    item: Segment,
    path: Option<String>,
) -> Result<Option<Written>, WriteError> {
    let Some(path) = path else {
        return Ok(Some(Written::Commit));
    };
    let (written, sequences, boundary) = match item {
        Segment::Commit => return Ok(Some(Written::Commit)),
        Segment::Encoded(file) => (Some(write_file(table, path, *file).await?), None, true),
        Segment::File(FullFile {
            encoder,
            reservation,
            sequences,
            partition,
            commit_boundary,
        }) => {
            // The reservation (the file's rows' bytes) is held until the file is written.
            let written = finish_and_write(table, *encoder, path, partition).await?;
            drop(reservation);
            (written, sequences, commit_boundary)
        }
    };
    Ok(written.map(|file| Written::File(Box::new(file), sequences, boundary)))
}

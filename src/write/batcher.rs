//! How a stream of record batches becomes data files, for both lanes.
//!
//! A [`Batcher`] conforms each batch to its table's schema, reserves its Arrow bytes
//! against the server-wide [`MemoryBudget`], splits it by the table's default partition
//! spec ([`super::partition`]; an unpartitioned table has one partition) and feeds each
//! part to its partition's open data file's [`FileEncoder`], whose row groups start
//! encoding on all cores as soon as each fills. A file is full at the target size (Arrow
//! bytes of its rows); the batcher then hands it to a [`FileSink`]: Lane 1's sink passes
//! it to the overlapped committer's writer ([`super::pipeline`]), Lane 2's finishes and
//! writes it at once, staged for the transaction. When the budget is spent, the batcher
//! hands its own open files on first (their bytes come back once they are written) and
//! then waits for room — waiting stops reading from the client, so gRPC flow control
//! pushes back on the sender (backpressure). However many partitions a batch fans out
//! to, its rows are held against the budget once.
//!
//! The batcher also keeps the commit deadline: the time by which the oldest row not yet
//! cut must be committed (`--commit-interval`, Lane 1 only).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use iceberg::table::Table;
use parquet::file::properties::WriterProperties;
use tokio::time::Instant;

use super::WriteError;
use super::budget::{MemoryBudget, Reservation};
use super::conform::ConformOptions;
use super::parallel::FileEncoder;
use super::partition::{PartitionTuple, Partitioner, unpartitioned};
use super::schema::conform_batch_with;

/// A data file the batcher filled: its row groups already encoding, and the budget its
/// rows hold until the file is written.
#[derive(Debug)]
pub struct FullFile {
    /// The file's encoder (call [`FileEncoder::finish`] on the blocking pool).
    pub encoder: Box<FileEncoder>,
    /// The Arrow bytes of its rows, held against the memory budget.
    pub reservation: Reservation,
    /// The first and last producer sequence of the batches in the file (exactly-once),
    /// `None` for batches without one — and for every file of a group but the last.
    pub sequences: Option<(u64, u64)>,
    /// The partition every row of the file belongs to.
    pub partition: PartitionTuple,
    /// Whether a commit may end after this file: `false` for every file but the last of
    /// a group handed on together (one cut of a partitioned table), so one commit holds
    /// the whole group — a producer's batch is never half committed.
    pub commit_boundary: bool,
}

/// Where a [`Batcher`] hands its full files, in order.
pub trait FileSink {
    /// Takes one full file.
    ///
    /// # Errors
    /// The sink's failure (e.g. writing the file); the batcher passes it up unchanged.
    fn accept(
        &mut self,
        file: FullFile,
    ) -> impl std::future::Future<Output = Result<(), WriteError>> + Send;
}

/// Iceberg's table property for the target size of a data file, in bytes (Iceberg spec,
/// "Table Properties", `write.target-file-size-bytes`). When a table sets it, skade's
/// batcher cuts that table's files at it (measured like `--target-file-size`, in Arrow
/// bytes of rows) and compaction aims at it (`docs/maintenance.md`, "Properties and
/// flags").
pub const TARGET_FILE_SIZE_PROPERTY: &str = "write.target-file-size-bytes";

/// `table`'s target data file size in bytes: its [`TARGET_FILE_SIZE_PROPERTY`] when that
/// is a positive integer, else `default` (`--target-file-size`).
pub fn target_file_size(table: &Table, default: u64) -> u64 {
    table
        .metadata()
        .properties()
        .get(TARGET_FILE_SIZE_PROPERTY)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&bytes| bytes > 0)
        .unwrap_or(default)
}

/// The limits a [`Batcher`] cuts by.
#[derive(Debug, Clone)]
pub struct BatchLimits {
    /// The budget every stream's rows in flight share.
    pub budget: MemoryBudget,
    /// A data file is full at this many Arrow bytes of rows (`--target-file-size`).
    pub target_file_size_bytes: u64,
    /// Rows must be committed within this time of arriving (`--commit-interval`); `None`
    /// keeps no deadline (a transaction commits when its client says so).
    pub commit_interval: Option<Duration>,
}

/// One partition's data file being filled.
#[derive(Debug)]
struct OpenFile {
    encoder: FileEncoder,
    bytes: u64,
    reservation: Reservation,
    /// Opening order, so files of one cut are handed on in a stable order.
    opened: u64,
    /// The stream's batch count when this file last took rows.
    last_batch: u64,
}

/// An unsequenced stream hands on a partition's open file once this many batches in a
/// row brought it no rows: a time-ordered stream has moved past that partition, so its
/// file is encoded, written and committed while the stream goes on instead of at the
/// end.
pub const IDLE_BATCHES: u64 = 8;

/// Cuts one stream's batches into data files of one table (see the module docs): one
/// open file per partition of the table's default spec (one in all for an unpartitioned
/// table).
#[derive(Debug)]
pub struct Batcher {
    table_name: String,
    arrow: SchemaRef,
    conform: ConformOptions,
    iceberg_schema: Arc<iceberg::spec::Schema>,
    file_props: WriterProperties,
    limits: BatchLimits,
    /// Splits batches by partition; `None` for an unpartitioned table.
    partitioner: Option<Partitioner>,
    spec_id: i32,
    /// The data files being filled, by partition; their full row groups are already
    /// encoding.
    files: HashMap<PartitionTuple, OpenFile>,
    opened: u64,
    /// Batches with rows taken so far.
    batches: u64,
    deadline: Option<Instant>,
    /// Producer sequences taken since the last group was handed on.
    sequences: Option<(u64, u64)>,
}

impl Batcher {
    /// A batcher for `table`'s current schema, default partition spec and Parquet
    /// properties; the table's [`TARGET_FILE_SIZE_PROPERTY`] overrides
    /// `limits.target_file_size_bytes`.
    ///
    /// # Errors
    /// [`WriteError::UnsupportedSchema`] when the table's schema has no Arrow form, or
    /// [`WriteError::Encode`] for an unusable Parquet property or partition spec.
    pub fn new(table: &Table, limits: BatchLimits) -> Result<Self, WriteError> {
        Self::with_schema(table, table.metadata().current_schema().clone(), limits)
    }

    /// [`Self::new`] conforming to `schema` instead of the table's current schema (a
    /// schema evolved for this stream, committed with its first data).
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_schema(
        table: &Table,
        schema: Arc<iceberg::spec::Schema>,
        mut limits: BatchLimits,
    ) -> Result<Self, WriteError> {
        limits.target_file_size_bytes = target_file_size(table, limits.target_file_size_bytes);
        let table_name = table.identifier().to_string();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).map_err(
            |source| WriteError::UnsupportedSchema {
                table: table_name.clone(),
                source: Box::new(source),
            },
        )?);
        let spec = table.metadata().default_partition_spec();
        Ok(Self {
            arrow,
            conform: ConformOptions::for_table(table),
            file_props: super::encode::writer_properties_for(table, &schema)?,
            partitioner: Partitioner::new(&table_name, spec, &schema)?,
            spec_id: spec.spec_id(),
            iceberg_schema: schema,
            table_name,
            limits,
            files: HashMap::new(),
            opened: 0,
            batches: 0,
            deadline: None,
            sequences: None,
        })
    }

    /// Conforms `batch` to the table and adds it to the open file, handing files to
    /// `sink` in order: the open file first when the budget is spent (then waits for
    /// room), and the file once it reaches the target size. Returns the rows taken.
    ///
    /// # Errors
    /// [`WriteError::Schema`] when the batch does not fit the table (nothing of it is
    /// taken), [`WriteError::Encode`] when a file cannot be started, or the sink's error.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped while waiting for room, the batch is lost (the stream
    /// fails anyway then).
    pub async fn push(
        &mut self,
        batch: &RecordBatch,
        sink: &mut impl FileSink,
    ) -> Result<u64, WriteError> {
        self.push_sequenced(batch, None, sink).await
    }

    /// [`Self::push`] for a batch the producer numbered `sequence` (exactly-once): the
    /// file that holds it carries the sequence range to its commit.
    ///
    /// A partitioned table's batch goes to the open file of each partition its rows fall
    /// in. The batch's bytes are reserved whole before it is split, and every hand-on
    /// happens between batches, so a commit never holds part of a batch: when the budget
    /// is spent every open file is handed on (one group), and a file that reaches the
    /// target size is handed on alone — or, for a sequenced stream, with all the others —
    /// and so is an unsequenced stream's file that [`IDLE_BATCHES`] batches in a row
    /// brought no rows.
    ///
    /// # Errors
    /// As [`Self::push`].
    pub async fn push_sequenced(
        &mut self,
        batch: &RecordBatch,
        sequence: Option<u64>,
        sink: &mut impl FileSink,
    ) -> Result<u64, WriteError> {
        let batch = conform_batch_with(&self.table_name, batch, &self.arrow, &self.conform)?;
        let rows = batch.num_rows() as u64;
        if rows == 0 {
            self.take_sequence(sequence);
            return Ok(0);
        }
        let parts = match &self.partitioner {
            None => vec![(unpartitioned(self.spec_id), batch)],
            Some(partitioner) => partitioner.split(&batch)?,
        };
        let bytes: u64 = parts
            .iter()
            .map(|(_, part)| super::budget::batch_bytes(part))
            .sum();
        let mut reservation = match self.limits.budget.try_reserve(bytes as usize) {
            Some(reservation) => reservation,
            None => {
                self.hand_on_all(sink).await?;
                self.limits.budget.reserve(bytes as usize).await
            }
        };
        self.batches += 1;
        let (batches, target) = (self.batches, self.limits.target_file_size_bytes);
        let mut full = Vec::new();
        for (partition, part) in parts {
            let part_bytes = super::budget::batch_bytes(&part);
            let file = self.open_file(partition)?;
            file.reservation
                .merge(reservation.split_off(part_bytes as usize));
            file.bytes += part_bytes;
            file.last_batch = batches;
            file.encoder.push(&part);
            if file.bytes >= target {
                full.push(file.opened);
            }
        }
        self.take_sequence(sequence);
        if let (None, Some(interval)) = (self.deadline, self.limits.commit_interval) {
            self.deadline = Some(Instant::now() + interval);
        }
        self.hand_on_full(full, sink).await?;
        Ok(rows)
    }

    /// The open file of `partition`, opened (empty) when there is none.
    ///
    /// # Errors
    /// [`WriteError::Encode`] when the encoder cannot be made.
    fn open_file(&mut self, partition: PartitionTuple) -> Result<&mut OpenFile, WriteError> {
        Ok(match self.files.entry(partition) {
            Entry::Occupied(file) => file.into_mut(),
            Entry::Vacant(slot) => {
                let encoder =
                    FileEncoder::new(self.iceberg_schema.clone(), self.file_props.clone())
                        .map_err(|source| WriteError::Encode {
                            table: self.table_name.clone(),
                            source: Box::new(source),
                        })?;
                self.opened += 1;
                slot.insert(OpenFile {
                    encoder,
                    bytes: 0,
                    reservation: Reservation::empty(),
                    opened: self.opened,
                    last_batch: 0,
                })
            }
        })
    }

    /// Hands on the files `full` names (by opening number) after a batch, with an
    /// unsequenced partitioned stream's idle files: all open files for a sequenced stream
    /// or a single file, else each alone.
    ///
    /// # Errors
    /// As [`Self::push`].
    async fn hand_on_full(
        &mut self,
        mut full: Vec<u64>,
        sink: &mut impl FileSink,
    ) -> Result<(), WriteError> {
        if self.sequences.is_none() && self.partitioner.is_some() {
            let batches = self.batches;
            full.extend(
                self.files
                    .values()
                    .filter(|f| batches - f.last_batch >= IDLE_BATCHES)
                    .map(|f| f.opened),
            );
        }
        if !full.is_empty() {
            if self.sequences.is_some() || self.files.len() == 1 {
                self.hand_on_all(sink).await?;
            } else {
                for opened in full {
                    self.hand_on_one(opened, sink).await?;
                }
            }
        }
        Ok(())
    }

    /// Hands every open file (if any) to `sink` and clears the deadline: everything
    /// taken so far is on its way to a commit.
    ///
    /// # Errors
    /// The sink's error.
    pub async fn cut(&mut self, sink: &mut impl FileSink) -> Result<(), WriteError> {
        self.deadline = None;
        self.hand_on_all(sink).await
    }

    /// When the oldest row not yet cut must be committed; `None` when nothing waits or no
    /// interval is set.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn take_sequence(&mut self, sequence: Option<u64>) {
        if let Some(sequence) = sequence {
            self.sequences = Some(match self.sequences {
                Some((first, _)) => (first, sequence),
                None => (sequence, sequence),
            });
        }
    }

    /// Hands on every open file as one group: the last carries the sequences and the
    /// commit boundary.
    async fn hand_on_all(&mut self, sink: &mut impl FileSink) -> Result<(), WriteError> {
        let mut files: Vec<(PartitionTuple, OpenFile)> = self.files.drain().collect();
        files.sort_by_key(|(_, file)| file.opened);
        let last = files.len();
        for (i, (partition, file)) in files.into_iter().enumerate() {
            let boundary = i + 1 == last;
            let sequences = if boundary {
                self.sequences.take()
            } else {
                None
            };
            sink.accept(FullFile {
                encoder: Box::new(file.encoder),
                reservation: file.reservation,
                sequences,
                partition,
                commit_boundary: boundary,
            })
            .await?;
        }
        Ok(())
    }

    /// Hands on the one open file opened `opened`-th (an unsequenced stream's full
    /// partition file).
    async fn hand_on_one(
        &mut self,
        opened: u64,
        sink: &mut impl FileSink,
    ) -> Result<(), WriteError> {
        let Some(partition) = self
            .files
            .iter()
            .find(|(_, file)| file.opened == opened)
            .map(|(partition, _)| partition.clone())
        else {
            return Ok(());
        };
        let Some(file) = self.files.remove(&partition) else {
            return Ok(());
        };
        sink.accept(FullFile {
            encoder: Box::new(file.encoder),
            reservation: file.reservation,
            sequences: None,
            partition,
            commit_boundary: true,
        })
        .await
    }
}

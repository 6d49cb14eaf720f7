//! How a stream of record batches becomes data files, for both lanes.
//!
//! A [`Batcher`] conforms each batch to its table's schema, reserves its Arrow bytes
//! against the server-wide [`MemoryBudget`], and feeds it to the open data file's
//! [`FileEncoder`], whose row groups start encoding on all cores as soon as each fills.
//! A file is full at the target size (Arrow bytes of its rows); the batcher then hands it
//! to a [`FileSink`]: Lane 1's sink passes it to the overlapped committer's writer
//! ([`super::pipeline`]), Lane 2's finishes and writes it at once, staged for the
//! transaction. When the budget is spent, the batcher hands its own open file on first
//! (its bytes come back once it is written) and then waits for room — waiting stops
//! reading from the client, so gRPC flow control pushes back on the sender
//! (backpressure).
//!
//! The batcher also keeps the commit deadline: the time by which the oldest row not yet
//! cut must be committed (`--commit-interval`, Lane 1 only).

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
use super::schema::{conform_batch_with, table_arrow_schema};

/// A data file the batcher filled: its row groups already encoding, and the budget its
/// rows hold until the file is written.
#[derive(Debug)]
pub struct FullFile {
    /// The file's encoder (call [`FileEncoder::finish`] on the blocking pool).
    pub encoder: Box<FileEncoder>,
    /// The Arrow bytes of its rows, held against the memory budget.
    pub reservation: Reservation,
    /// The first and last producer sequence of the batches in the file (exactly-once),
    /// `None` for batches without one.
    pub sequences: Option<(u64, u64)>,
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
/// bytes of rows) and compaction aims at it (README, "Table maintenance").
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

/// Cuts one stream's batches into data files of one table (see the module docs).
#[derive(Debug)]
pub struct Batcher {
    table_name: String,
    arrow: SchemaRef,
    conform: ConformOptions,
    iceberg_schema: Arc<iceberg::spec::Schema>,
    file_props: WriterProperties,
    limits: BatchLimits,
    /// The data file being filled; its full row groups are already encoding.
    file: Option<FileEncoder>,
    file_bytes: u64,
    reservation: Reservation,
    deadline: Option<Instant>,
    /// Producer sequences taken since the last file was handed on.
    sequences: Option<(u64, u64)>,
}

impl Batcher {
    /// A batcher for `table`'s current schema and Parquet properties; the table's
    /// [`TARGET_FILE_SIZE_PROPERTY`] overrides `limits.target_file_size_bytes`.
    ///
    /// # Errors
    /// [`WriteError::UnsupportedSchema`] when the table's schema has no Arrow form, or
    /// [`WriteError::Encode`] for an unusable Parquet property.
    pub fn new(table: &Table, mut limits: BatchLimits) -> Result<Self, WriteError> {
        limits.target_file_size_bytes = target_file_size(table, limits.target_file_size_bytes);
        Ok(Self {
            table_name: table.identifier().to_string(),
            arrow: table_arrow_schema(table)?,
            conform: ConformOptions::for_table(table),
            iceberg_schema: table.metadata().current_schema().clone(),
            file_props: super::encode::writer_properties(table)?,
            limits,
            file: None,
            file_bytes: 0,
            reservation: Reservation::empty(),
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
    /// # Errors
    /// As [`Self::push`].
    pub async fn push_sequenced(
        &mut self,
        batch: &RecordBatch,
        sequence: Option<u64>,
        sink: &mut impl FileSink,
    ) -> Result<u64, WriteError> {
        let batch = conform_batch_with(&self.table_name, batch, &self.arrow, self.conform)?;
        if let Some(sequence) = sequence {
            self.sequences = Some(match self.sequences {
                Some((first, _)) => (first, sequence),
                None => (sequence, sequence),
            });
        }
        let rows = batch.num_rows() as u64;
        if rows == 0 {
            return Ok(0);
        }
        let bytes = batch_bytes(&batch);
        let reservation = match self.limits.budget.try_reserve(bytes as usize) {
            Some(reservation) => reservation,
            None => {
                self.hand_on(sink).await?;
                self.limits.budget.reserve(bytes as usize).await
            }
        };
        self.reservation.merge(reservation);
        self.file_bytes += bytes;
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
        if let (None, Some(interval)) = (self.deadline, self.limits.commit_interval) {
            self.deadline = Some(Instant::now() + interval);
        }
        if self.file_bytes >= self.limits.target_file_size_bytes {
            self.hand_on(sink).await?;
        }
        Ok(rows)
    }

    /// Hands the open file (if any) to `sink` and clears the deadline: everything taken
    /// so far is on its way to a commit.
    ///
    /// # Errors
    /// The sink's error.
    pub async fn cut(&mut self, sink: &mut impl FileSink) -> Result<(), WriteError> {
        self.deadline = None;
        self.hand_on(sink).await
    }

    /// When the oldest row not yet cut must be committed; `None` when nothing waits or no
    /// interval is set.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    async fn hand_on(&mut self, sink: &mut impl FileSink) -> Result<(), WriteError> {
        let Some(encoder) = self.file.take() else {
            return Ok(());
        };
        let reservation = std::mem::replace(&mut self.reservation, Reservation::empty());
        self.file_bytes = 0;
        sink.accept(FullFile {
            encoder: Box::new(encoder),
            reservation,
            sequences: self.sequences.take(),
        })
        .await
    }
}

/// The bytes `batch`'s rows occupy. Unlike `get_array_memory_size`, this does not count a
/// shared IPC message buffer once per column that slices it.
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

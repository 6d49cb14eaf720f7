//! Column-parallel Parquet encoding of one data file.
//!
//! A 128 MiB data file encoded by one `ArrowWriter` uses one core; a streaming put has
//! only one or two files in flight, so the other cores idle while it is encoded
//! (`skade-bench -- ingest`; `docs/performance.md`, "Ingest (`ingest` arm)"). This
//! encoder cuts the file's batches into row groups exactly as `ArrowWriter::write` does
//! (at `max_row_group_row_count` rows, splitting batches), encodes every (row group,
//! top-level column) pair as its own rayon task with parquet-rs's `ArrowColumnWriter`s
//! (the parallel-encoding pattern parquet-rs documents on `ArrowColumnWriter`), and
//! appends the chunks in schema order.
//! The result is byte-identical to what iceberg's `ParquetWriter` (an `ArrowWriter` with
//! the same properties) writes for the same batches; `tests/integration/parallel_encode.rs` pins
//! that, and the file's Iceberg metrics come from its footer ([`super::file_stats`]).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, SchemaRef as ArrowSchemaRef};
use bytes::Bytes;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::spec::{DataFileBuilder, NestedField, Schema, Type};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::WriterProperties;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, sync_channel};

use super::file_stats::data_file_from_footer;

/// Encodes `batches` (conformed to `schema`'s Arrow form, see
/// [`super::conform_batch`]) as one Parquet file with `props`, using every core. Blocking
/// (CPU only); safe on rayon's pool (it runs queued work while it waits) and from
/// `spawn_blocking`.
///
/// Returns the file's bytes and its `DataFile` builder (metrics as iceberg computes them;
/// no path yet), or `None` when the batches hold no rows.
///
/// # Errors
/// As [`FileEncoder::finish`].
pub fn encode_file(
    schema: &Arc<Schema>,
    props: &WriterProperties,
    batches: &[RecordBatch],
) -> iceberg::Result<Option<(Bytes, DataFileBuilder)>> {
    let mut encoder = FileEncoder::new(schema.clone(), props.clone())?;
    for batch in batches {
        encoder.push(batch);
    }
    encoder.finish()
}

/// One data file being encoded while its rows arrive.
///
/// [`push`](Self::push) gathers rows into row groups of `max_row_group_row_count` rows
/// (cut exactly as `ArrowWriter::write` cuts them; with
/// [`with_row_group_arrow_bytes`](Self::with_row_group_arrow_bytes) also once a row
/// group holds that many Arrow bytes); each full row group is handed to rayon at once,
/// one task per top-level column plus one counting NaNs, so encoding overlaps the
/// arrival of the next rows. [`finish`](Self::finish) encodes the last, partial row
/// group the same way, waits, and assembles the file in schema order.
///
/// Every pushed batch's Arrow stays referenced until each task that reads it has run:
/// [`held_bytes`](Self::held_bytes) counts those bytes, and
/// [`wait_held_at_most`](Self::wait_held_at_most) lets a producer faster than the
/// encoder (compaction's Parquet reader) wait for them instead of queueing rows on
/// rayon without bound.
pub struct FileEncoder {
    schema: Arc<Schema>,
    props: WriterProperties,
    arrow: ArrowSchemaRef,
    factory: ArrowRowGroupWriterFactory,
    /// Parquet leaf columns per top-level field.
    leaves: Vec<usize>,
    /// Rows per row group (≥ 1).
    max_rows: usize,
    /// Row groups cut by estimated bytes (`max_row_group_bytes`) depend on the encoder's
    /// running state: such files keep `ArrowWriter`'s own sequential cut at `finish`.
    /// skade's writer properties never set it.
    sequential: bool,
    /// Rows of the row group still filling, and the pushed batches they slice.
    open: Vec<RecordBatch>,
    open_held: Vec<Arc<HeldBatch>>,
    open_rows: usize,
    /// Arrow bytes of the open row group's rows.
    open_bytes: u64,
    /// A row group is also cut once its rows hold this many Arrow bytes.
    max_row_group_bytes: u64,
    /// Arrow bytes of pushed batches that a task (or the open row group) still holds.
    held: Arc<Held>,
    /// Every batch pushed, for the sequential path only.
    all: Vec<RecordBatch>,
    rows: u64,
    row_groups: Vec<RowGroupTasks>,
    /// Whether the schema has float or double fields (whose NaNs Iceberg counts).
    has_floats: bool,
    /// NaN counts of each pushed batch, counted as iceberg's writer counts them: per
    /// batch as written, before any row-group slicing.
    nans: Vec<Receiver<HashMap<i32, u64>>>,
}

/// The in-flight encode of one row group: each column's chunks.
struct RowGroupTasks {
    columns: Vec<Receiver<Result<Vec<ArrowColumnChunk>, ParquetError>>>,
}

/// The rows of one row group, shared by its column tasks; the batches they slice stay
/// counted in [`Held`] until the last task drops this.
struct RowGroupRows {
    batches: Vec<RecordBatch>,
    _held: Vec<Arc<HeldBatch>>,
}

/// Reads one [`FileEncoder`]'s [`FileEncoder::held_bytes`]; cheap to clone.
#[derive(Clone)]
pub struct HeldBytes(Arc<Held>);

impl HeldBytes {
    /// The encoder's held Arrow bytes now.
    pub fn get(&self) -> u64 {
        *self.0.bytes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for HeldBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HeldBytes").field(&self.get()).finish()
    }
}

/// Arrow bytes an encoder's pushed batches still occupy, and the signal that they fell.
#[derive(Default)]
struct Held {
    bytes: Mutex<u64>,
    fell: Condvar,
}

/// One pushed batch's bytes in [`Held`]: taken off when the last task (and the open row
/// group) holding the batch drops it, which is when its memory can be freed.
struct HeldBatch {
    bytes: u64,
    held: Arc<Held>,
}

impl HeldBatch {
    fn new(bytes: u64, held: &Arc<Held>) -> Self {
        *held.bytes.lock().unwrap_or_else(PoisonError::into_inner) += bytes;
        Self {
            bytes,
            held: held.clone(),
        }
    }
}

impl Drop for HeldBatch {
    fn drop(&mut self) {
        let mut bytes = self
            .held
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *bytes -= self.bytes;
        drop(bytes);
        self.held.fell.notify_all();
    }
}

impl std::fmt::Debug for FileEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileEncoder")
            .field("rows", &self.rows)
            .field("row_groups_started", &self.row_groups.len())
            .finish_non_exhaustive()
    }
}

impl FileEncoder {
    /// An empty file for `schema` (Iceberg field ids on every column) written with
    /// `props`.
    ///
    /// # Errors
    /// An iceberg error when the schema has no Arrow/Parquet form.
    pub fn new(schema: Arc<Schema>, props: WriterProperties) -> iceberg::Result<Self> {
        let arrow = Arc::new(schema_to_arrow_schema(&schema)?);
        // A throwaway writer gives the Parquet schema and the column-writer factory; the
        // file itself is assembled at `finish` (chunks do not depend on the writer).
        let writer = ArrowWriter::try_new(std::io::sink(), arrow.clone(), Some(props.clone()))
            .map_err(parquet_error)?;
        let (file, factory) = writer.into_serialized_writer().map_err(parquet_error)?;
        let leaves = file
            .schema_descr()
            .root_schema()
            .get_fields()
            .iter()
            .map(|f| leaf_count(f))
            .collect();
        let has_floats = arrow
            .flattened_fields()
            .iter()
            .any(|f| matches!(f.data_type(), DataType::Float32 | DataType::Float64));
        Ok(Self {
            max_rows: props.max_row_group_row_count().unwrap_or(usize::MAX).max(1),
            sequential: props.max_row_group_bytes().is_some(),
            schema,
            props,
            arrow,
            factory,
            leaves,
            open: Vec::new(),
            open_held: Vec::new(),
            open_rows: 0,
            open_bytes: 0,
            max_row_group_bytes: u64::MAX,
            held: Arc::default(),
            all: Vec::new(),
            rows: 0,
            row_groups: Vec::new(),
            has_floats,
            nans: Vec::new(),
        })
    }

    /// Also cuts a row group once its rows hold `bytes` Arrow bytes (at the end of the
    /// batch slice that reaches it), besides `max_row_group_row_count` rows. Row groups
    /// cut so are smaller than `ArrowWriter` would make them; the rows and their order
    /// are the same.
    pub fn with_row_group_arrow_bytes(mut self, bytes: u64) -> Self {
        self.max_row_group_bytes = bytes.max(1);
        self
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Arrow bytes ([`super::budget::batch_bytes`]) of the pushed batches whose memory
    /// the encoder still holds: those in the open row group and those a queued or
    /// running encode (or NaN count) task has not finished with.
    pub fn held_bytes(&self) -> u64 {
        *self
            .held
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A handle reading [`held_bytes`](Self::held_bytes) from elsewhere (another thread,
    /// while the encoder is borrowed).
    pub fn held_bytes_handle(&self) -> HeldBytes {
        HeldBytes(self.held.clone())
    }

    /// Blocks until [`held_bytes`](Self::held_bytes) is at most `bytes`, starting the
    /// open row group's encode first when its rows alone hold more (so the wait always
    /// ends: it waits only for rayon tasks). On a rayon worker it runs other rayon work
    /// while it waits.
    pub fn wait_held_at_most(&mut self, bytes: u64) {
        if self.open_bytes > bytes && self.open_rows > 0 && !self.sequential {
            self.start_row_group();
        }
        let on_rayon = rayon::current_thread_index().is_some();
        let mut held = self
            .held
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *held > bytes {
            if on_rayon {
                drop(held);
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                held = self
                    .held
                    .bytes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
            } else {
                held = self
                    .held
                    .fell
                    .wait(held)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Adds `batch` (conformed to the schema) to the file; starts encoding every row
    /// group it completes. Does not block.
    pub fn push(&mut self, batch: &RecordBatch) {
        if batch.num_rows() == 0 {
            return;
        }
        self.rows += batch.num_rows() as u64;
        let bytes = super::budget::batch_bytes(batch);
        let held = Arc::new(HeldBatch::new(bytes, &self.held));
        if self.has_floats {
            let (schema, batch, held) = (self.schema.clone(), batch.clone(), held.clone());
            let count = move || {
                let counts = nan_value_counts(&schema, std::slice::from_ref(&batch));
                drop((batch, held));
                counts
            };
            self.nans.push(if bytes <= INLINE_NAN_COUNT_BYTES {
                run_here(count)
            } else {
                spawn_task(count)
            });
        }
        if self.sequential {
            self.all.push(batch.clone());
            self.open_held.push(held);
            return;
        }
        let rows = batch.num_rows();
        let mut offset = 0;
        while offset < rows {
            let take = (rows - offset).min(self.max_rows - self.open_rows);
            self.open.push(batch.slice(offset, take));
            self.open_held.push(held.clone());
            offset += take;
            self.open_rows += take;
            // The slice's share of the batch's bytes (rounded up).
            self.open_bytes += (bytes * take as u64).div_ceil(rows as u64);
            if self.open_rows == self.max_rows || self.open_bytes >= self.max_row_group_bytes {
                self.start_row_group();
            }
        }
    }

    /// Hands the open row group to rayon.
    fn start_row_group(&mut self) {
        self.start_row_group_on(false);
    }

    /// Starts the open row group's encode: its column tasks on rayon, or, when `here`,
    /// run at once on the calling thread.
    fn start_row_group_on(&mut self, here: bool) {
        let batches = Arc::new(RowGroupRows {
            batches: std::mem::take(&mut self.open),
            _held: std::mem::take(&mut self.open_held),
        });
        self.open_rows = 0;
        self.open_bytes = 0;
        let index = self.row_groups.len();
        let mut writers = match self.factory.create_column_writers(index) {
            Ok(writers) => writers.into_iter(),
            Err(e) => {
                // Reported at `finish`, in this row group's place.
                let (tx, rx) = sync_channel(1);
                let _ = tx.send(Err(e));
                self.row_groups.push(RowGroupTasks { columns: vec![rx] });
                return;
            }
        };
        let mut columns = Vec::with_capacity(self.leaves.len());
        for (column, &n) in self.leaves.iter().enumerate() {
            let mut writers: Vec<ArrowColumnWriter> = writers.by_ref().take(n).collect();
            let field = self.arrow.field(column).clone();
            let batches = batches.clone();
            let encode = move || {
                for batch in &batches.batches {
                    for (writer, leaf) in writers
                        .iter_mut()
                        .zip(compute_leaves(&field, batch.column(column))?)
                    {
                        writer.write(&leaf)?;
                    }
                }
                writers.into_iter().map(ArrowColumnWriter::close).collect()
            };
            columns.push(if here {
                run_here(encode)
            } else {
                spawn_task(encode)
            });
        }
        self.row_groups.push(RowGroupTasks { columns });
    }

    /// Encodes what is left, waits for every row group, and returns the file's bytes and
    /// `DataFile` builder (no path yet), or `None` if no rows were pushed. Blocking.
    ///
    /// The whole file is assembled in memory; [`Self::finish_into`] streams it instead.
    ///
    /// # Errors
    /// As [`Self::finish_into`].
    pub fn finish(self) -> iceberg::Result<Option<(Bytes, DataFileBuilder)>> {
        let mut buffer = Vec::new();
        Ok(self
            .finish_into(&mut buffer)?
            .map(|(_, builder)| (Bytes::from(buffer), builder)))
    }

    /// Encodes what is left and writes the file to `out` row group by row group, in
    /// schema order, as each row group's encode completes; returns the file's size in
    /// bytes and its `DataFile` builder (no path yet), or `None` (nothing written) if no
    /// rows were pushed. Blocking.
    ///
    /// Each column chunk is freed once it is written, so the file is never whole in
    /// memory: what this holds beyond the rows' encoded chunks is `out`'s own buffer
    /// (`docs/performance.md`, "Memory").
    ///
    /// # Errors
    /// An iceberg error wrapping the Parquet error (e.g. a batch column whose type does
    /// not match the schema) or `out`'s I/O error, or one from reading the footer's
    /// statistics.
    pub fn finish_into<W: std::io::Write + Send>(
        mut self,
        out: W,
    ) -> iceberg::Result<Option<(u64, DataFileBuilder)>> {
        if self.rows == 0 {
            return Ok(None);
        }
        let mut written = 0u64;
        let out = CountingWrite {
            inner: out,
            bytes: &mut written,
        };
        let writer = ArrowWriter::try_new(out, self.arrow.clone(), Some(self.props.clone()))
            .map_err(parquet_error)?;
        if self.sequential {
            let metadata = sequential(writer, &self.all)?;
            let nans = self.nan_counts()?;
            let builder = data_file_from_footer(&self.schema, &metadata, written, nans)?;
            return Ok(Some((written, builder)));
        }
        if self.open_rows > 0 {
            // A small last row group (all of a small put's file) is encoded here rather
            // than queued behind other streams' row groups on rayon.
            let here = self.open_bytes <= INLINE_ROW_GROUP_BYTES;
            self.start_row_group_on(here);
        }
        let (mut file, _) = writer.into_serialized_writer().map_err(parquet_error)?;
        let nans = self.nan_counts()?;
        for row_group in std::mem::take(&mut self.row_groups) {
            let mut out = file.next_row_group().map_err(parquet_error)?;
            for column in row_group.columns {
                for chunk in wait(column)?.map_err(parquet_error)? {
                    chunk.append_to_row_group(&mut out).map_err(parquet_error)?;
                }
            }
            out.close().map_err(parquet_error)?;
        }
        let metadata = file.close().map_err(parquet_error)?;
        let builder = data_file_from_footer(&self.schema, &metadata, written, nans)?;
        Ok(Some((written, builder)))
    }
}

/// A writer that counts the bytes it passes on.
struct CountingWrite<'a, W> {
    inner: W,
    bytes: &'a mut u64,
}

impl<W: std::io::Write> std::io::Write for CountingWrite<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        *self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl FileEncoder {
    /// The NaN counts of every pushed batch, summed per field id. Blocking.
    fn nan_counts(&mut self) -> iceberg::Result<HashMap<i32, u64>> {
        let mut total: HashMap<i32, u64> = HashMap::new();
        for rx in std::mem::take(&mut self.nans) {
            for (id, n) in wait(rx)? {
                *total.entry(id).or_default() += n;
            }
        }
        Ok(total)
    }
}

/// A last row group of at most this many Arrow bytes is encoded on the thread that
/// finishes the file (a blocking-pool thread, [`FileEncoder::finish_into`]) instead of on
/// rayon. Rayon's queue is first come, first served: a 10-row put's encode queued there
/// waits behind every row group a large stream has queued (seconds of work at a 2 GiB
/// budget), while encoding it here takes well under a millisecond and is scheduled by
/// the operating system beside rayon's threads.
const INLINE_ROW_GROUP_BYTES: u64 = 1 << 20;

/// A pushed batch of at most this many Arrow bytes has its NaNs counted at once on the
/// pushing thread (microseconds), for the same reason as [`INLINE_ROW_GROUP_BYTES`].
const INLINE_NAN_COUNT_BYTES: u64 = 64 << 10;

/// Runs `task` now on this thread; its result waits on the returned receiver, as
/// [`spawn_task`]'s does. A panic is caught the same way.
fn run_here<T: Send + 'static>(task: impl FnOnce() -> T) -> Receiver<T> {
    let (tx, rx) = sync_channel(1);
    if let Ok(value) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)) {
        let _ = tx.send(value);
    }
    rx
}

/// Runs `task` on rayon's pool; its result arrives on the returned receiver. A panic in
/// the task is caught (rayon would abort the process) and shows as a closed channel,
/// which [`wait`] reports as an error: one bad file fails its put, not the server.
fn spawn_task<T: Send + 'static>(task: impl FnOnce() -> T + Send + 'static) -> Receiver<T> {
    let (tx, rx) = sync_channel(1);
    rayon::spawn(move || {
        if let Ok(value) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)) {
            let _ = tx.send(value);
        }
    });
    rx
}

/// Receives a rayon task's result. On a rayon worker it runs other queued rayon work
/// while it waits (blocking there could starve the pool of the very task awaited);
/// elsewhere it blocks.
fn wait<T>(rx: Receiver<T>) -> iceberg::Result<T> {
    let lost = || {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            "a Parquet encode task ended without a result (it panicked)",
        )
    };
    if rayon::current_thread_index().is_none() {
        return rx.recv().map_err(|_| lost());
    }
    loop {
        match rx.try_recv() {
            Ok(value) => return Ok(value),
            Err(TryRecvError::Disconnected) => return Err(lost()),
            Err(TryRecvError::Empty) => {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    match rx.recv_timeout(std::time::Duration::from_micros(200)) {
                        Ok(value) => return Ok(value),
                        Err(RecvTimeoutError::Disconnected) => return Err(lost()),
                        Err(RecvTimeoutError::Timeout) => {}
                    }
                }
            }
        }
    }
}

/// The one-core path: `ArrowWriter::write` batch by batch; returns the footer.
fn sequential<W: std::io::Write + Send>(
    mut writer: ArrowWriter<W>,
    batches: &[RecordBatch],
) -> iceberg::Result<ParquetMetaData> {
    for batch in batches {
        writer.write(batch).map_err(parquet_error)?;
    }
    writer.close().map_err(parquet_error)
}

/// Parquet leaf columns under one schema node.
fn leaf_count(node: &parquet::schema::types::Type) -> usize {
    if node.is_primitive() {
        1
    } else {
        node.get_fields().iter().map(|f| leaf_count(f)).sum()
    }
}

/// NaN counts per field id over `batches`, as iceberg's `NanValueCountVisitor` (private
/// in iceberg 0.10.1) counts them: one entry, possibly 0, for every float and double field
/// (struct members, list elements, map keys and values included), counting non-null NaN
/// values of the field's whole child array.
fn nan_value_counts(schema: &Schema, batches: &[RecordBatch]) -> HashMap<i32, u64> {
    let mut counts = HashMap::new();
    for batch in batches.iter().filter(|b| b.num_rows() > 0) {
        for (field, column) in schema.as_struct().fields().iter().zip(batch.columns()) {
            count_nans(field, column, &mut counts);
        }
    }
    counts
}

fn count_nans(field: &NestedField, array: &ArrayRef, counts: &mut HashMap<i32, u64>) {
    match (field.field_type.as_ref(), array.data_type()) {
        (Type::Primitive(_), DataType::Float32) => {
            let nans = array
                .as_primitive::<Float32Type>()
                .iter()
                .flatten()
                .filter(|v| v.is_nan());
            *counts.entry(field.id).or_default() += nans.count() as u64;
        }
        (Type::Primitive(_), DataType::Float64) => {
            let nans = array
                .as_primitive::<Float64Type>()
                .iter()
                .flatten()
                .filter(|v| v.is_nan());
            *counts.entry(field.id).or_default() += nans.count() as u64;
        }
        (Type::Struct(st), DataType::Struct(_)) => {
            for (child, column) in st.fields().iter().zip(array.as_struct().columns()) {
                count_nans(child, column, counts);
            }
        }
        (Type::List(list), DataType::List(_)) => {
            count_nans(&list.element_field, array.as_list::<i32>().values(), counts);
        }
        (Type::List(list), DataType::LargeList(_)) => {
            count_nans(&list.element_field, array.as_list::<i64>().values(), counts);
        }
        (Type::Map(map), DataType::Map(..)) => {
            let entries = array.as_map();
            count_nans(&map.key_field, entries.keys(), counts);
            count_nans(&map.value_field, entries.values(), counts);
        }
        _ => {}
    }
}

fn parquet_error(e: ParquetError) -> iceberg::Error {
    iceberg::Error::new(iceberg::ErrorKind::Unexpected, "Parquet encode failed").with_source(e)
}

/// Test support: holds every worker of rayon's global pool until dropped, so nothing
/// queued there runs (an encoder far behind its producer).
#[cfg(test)]
pub(crate) struct RayonGate {
    release: Option<std::sync::mpsc::Sender<()>>,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

#[cfg(test)]
impl RayonGate {
    /// Returns once every global rayon worker is held.
    pub(crate) fn close() -> Self {
        // Two gates closing at once would each hold some workers and wait for the rest.
        static GATES: Mutex<()> = Mutex::new(());
        let one_at_a_time = GATES.lock().unwrap_or_else(PoisonError::into_inner);
        let workers = rayon::current_num_threads();
        let entered = Arc::new(std::sync::Barrier::new(workers + 1));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        for _ in 0..workers {
            let (entered, wait) = (entered.clone(), wait.clone());
            rayon::spawn(move || {
                entered.wait();
                // Each worker waits its turn on the lock, then for the channel to close.
                let _ = wait.lock().map(|rx| rx.recv());
            });
        }
        entered.wait();
        Self {
            release: Some(release),
            _one_at_a_time: one_at_a_time,
        }
    }
}

#[cfg(test)]
impl Drop for RayonGate {
    fn drop(&mut self) {
        drop(self.release.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array};
    use iceberg::spec::PrimitiveType;

    /// `id long, y long`, or with `doubles` `id long, x double` (whose batches a NaN
    /// count task also reads).
    fn schema(doubles: bool) -> Arc<Schema> {
        let second = match doubles {
            true => NestedField::optional(2, "x", Type::Primitive(PrimitiveType::Double)),
            false => NestedField::optional(2, "y", Type::Primitive(PrimitiveType::Long)),
        };
        Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    second.into(),
                ])
                .build()
                .expect("schema"),
        )
    }

    fn batch(arrow: &ArrowSchemaRef, first: i64, rows: i64) -> RecordBatch {
        let ids: Vec<i64> = (first..first + rows).collect();
        let second: ArrayRef = match arrow.field(1).data_type() {
            DataType::Float64 => Arc::new(Float64Array::from_iter_values(
                ids.iter().map(|&i| i as f64 / 3.0),
            )),
            _ => Arc::new(Int64Array::from(ids.clone())),
        };
        RecordBatch::try_new(arrow.clone(), vec![Arc::new(Int64Array::from(ids)), second])
            .expect("batch")
    }

    /// Catches a small put's file queued on rayon behind other streams' row groups: with
    /// every rayon worker held (standing for a large stream's queued encodes), a 10-row
    /// file — with doubles, so NaNs are counted too — must still finish, and read back.
    #[test]
    fn a_small_file_finishes_while_rayon_is_busy() {
        for doubles in [false, true] {
            let schema = schema(doubles);
            let arrow = Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"));
            let gate = RayonGate::close();
            let (tx, rx) = std::sync::mpsc::channel();
            let worker = std::thread::spawn(move || {
                let mut encoder =
                    FileEncoder::new(schema, WriterProperties::builder().build()).expect("encoder");
                encoder.push(&batch(&arrow, 0, 10));
                let _ = tx.send(encoder.finish());
            });
            // Far longer than a 10-row encode; without the inline path this waits until
            // the gate opens, i.e. forever.
            let finished = rx.recv_timeout(std::time::Duration::from_secs(30));
            drop(gate);
            worker.join().expect("worker");
            let (bytes, _) = finished
                .expect("the small file waited for rayon")
                .expect("encode")
                .expect("rows");
            let rows: usize =
                parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024)
                    .expect("reader")
                    .map(|b| b.expect("batch").num_rows())
                    .sum();
            assert_eq!(rows, 10);
        }
    }

    /// Catches rows the encoder still references but does not count (a task or the open
    /// row group keeping a batch past its count) and a count that never falls back.
    #[test]
    fn held_bytes_count_the_rows_until_their_tasks_ran() {
        for doubles in [false, true] {
            held_until_encoded(schema(doubles));
        }
    }

    fn held_until_encoded(schema: Arc<Schema>) {
        let arrow = Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"));
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(10_000))
            .build();
        let mut encoder = FileEncoder::new(schema, props).expect("encoder");
        let batches: Vec<RecordBatch> = (0..8).map(|i| batch(&arrow, i * 4_000, 4_000)).collect();
        let pushed: u64 = batches.iter().map(super::super::budget::batch_bytes).sum();
        {
            let _gate = RayonGate::close();
            for b in &batches {
                encoder.push(b);
            }
            drop(batches);
            // 32,000 rows: three row groups queued, 2,000 rows still open; nothing ran.
            assert_eq!(encoder.held_bytes(), pushed);
        }
        encoder.wait_held_at_most(0);
        assert_eq!(
            encoder.held_bytes(),
            0,
            "the open row group is started and encoded"
        );
        let (bytes, _) = encoder.finish().expect("finish").expect("rows");
        let reader = parquet::file::reader::SerializedFileReader::new(bytes).expect("parquet");
        let rows = parquet::file::reader::FileReader::metadata(&reader)
            .file_metadata()
            .num_rows();
        assert_eq!(rows, 32_000);
    }

    /// Catches a row-group cut by Arrow bytes that is ignored: without it a producer
    /// waiting on held bytes could wait on the open row group forever.
    #[test]
    fn row_groups_are_cut_at_the_arrow_byte_limit() {
        let schema = schema(false);
        let arrow = Arc::new(schema_to_arrow_schema(&schema).expect("arrow schema"));
        // 1,000 rows of two 8-byte columns: 16,000 bytes a batch; cut at 40,000 bytes.
        let mut encoder = FileEncoder::new(schema, WriterProperties::builder().build())
            .expect("encoder")
            .with_row_group_arrow_bytes(40_000);
        for i in 0..10 {
            encoder.push(&batch(&arrow, i * 1_000, 1_000));
        }
        let mut out = Vec::new();
        encoder
            .finish_into(&mut out)
            .expect("finish")
            .expect("rows");
        let reader =
            parquet::file::reader::SerializedFileReader::new(Bytes::from(out)).expect("parquet");
        let groups: Vec<i64> = parquet::file::reader::FileReader::metadata(&reader)
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        assert_eq!(groups, vec![3_000, 3_000, 3_000, 1_000]);
    }

    #[test]
    fn a_panicking_task_is_an_error_not_an_abort() {
        // RED once: with a bare `rayon::spawn`, this test aborted the test process.
        let rx = spawn_task(|| -> u32 { panic!("encoder bug") });
        assert!(wait(rx).is_err());
        assert_eq!(wait(spawn_task(|| 7)).ok(), Some(7));
    }
}

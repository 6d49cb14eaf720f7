//! Small-file compaction: a `replace` snapshot that swaps a run of small data files for
//! one file holding the same rows.
//!
//! A table fed by small or slow puts gets one small data file per commit, and every scan
//! opens each of them. Compaction picks, among the current snapshot's live data files
//! in name order, the first run of at least [`MIN_INPUT_FILES`] *adjacent* small files
//! (Parquet size under a quarter of `--target-file-size`) of the same size tier (tier =
//! ⌊log₄ size⌋, so files only merge with files of similar size and each row is rewritten
//! about log₄ of the table's size times, as in size-tiered compaction), at most
//! [`MAX_INPUT_FILES`] per run and [`MAX_RUNS`] runs (and one `--target-file-size` of
//! Parquet) per job. It reads each run's rows in order, writes them as one file through
//! skade's own encoder, named after the run's first input so the table still reads back
//! in the order it was written (files are read in name order), and commits one `replace`
//! snapshot for the job: the inputs `DELETED`, the new files `ADDED`, the totals
//! unchanged.
//!
//! The rows are read and the new file written *outside* the table's commit turn; then,
//! under it, the commit ([`crate::snapshot::replace`]) checks that every input is still
//! live in the current snapshot and that no delete file applies to one, and gives way
//! otherwise (the new file is then a leftover for cleanup) — so a compaction never
//! loses, doubles or brings back a row, whatever commits run beside it. Data files a
//! live delete file may apply to are never inputs ([`crate::snapshot::deletes`]).

use futures::StreamExt;
use iceberg::spec::{DataFile, FormatVersion, ManifestContentType, ManifestFile};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};
use tokio_util::task::AbortOnDropHandle;

use super::project::project;
use crate::catalog::manifest_cache::ManifestCache;
use crate::snapshot::deletes::DeleteIndex;
use crate::snapshot::manifests::entry_ids;
pub use crate::snapshot::replace::Rewrite;
use crate::write::{
    FileEncoder, MemoryBudget, finish_and_write, table_arrow_schema, unpartitioned,
    writer_properties,
};

/// Fewest adjacent small files of one tier worth a compaction (Iceberg Java's
/// `min-input-files` default).
pub const MIN_INPUT_FILES: usize = 5;
/// Most input files of one run (one output file).
pub const MAX_INPUT_FILES: usize = 64;
/// Most runs one job (one commit, one table, one pass) rewrites: with
/// [`MAX_INPUT_FILES`], at most 512 input files per table per pass.
pub const MAX_RUNS: usize = 8;
/// Inputs of a run fetched ahead of the one being decoded. On object storage each
/// input is a request round trip: read one after another, compaction falls behind a
/// busy table's small files (`docs/performance.md`, "Ten minutes on S3 with compaction
/// reading ahead").
pub const READ_AHEAD_FILES: usize = 8;
/// A compacted file's row groups are cut at this many Arrow bytes of rows (or at the
/// Parquet row-count limit, whichever comes first), and the reader of a run waits while
/// the encoder holds more than twice this: the Arrow a run holds is bounded by about
/// three times this (the row group filling, the one encoding, the batch just read),
/// however fast the reader is against the encoder.
pub const ROW_GROUP_ARROW_BYTES: u64 = 32 << 20;

/// Size tier of a file of `bytes`: ⌊log₄ bytes⌋.
fn tier(bytes: u64) -> u32 {
    bytes.max(1).ilog2() / 2
}

/// What [`rewrite`] did: the rewrite, when a run qualified, and how many live data
/// files it left alone because a live delete file may apply to them.
#[derive(Debug, Default)]
pub(crate) struct Rewriting {
    pub(crate) rewrite: Option<Rewrite>,
    /// Live data files of the default spec held back by delete files ([`DeleteIndex`]).
    pub(crate) held_by_deletes: usize,
}

/// Chooses the inputs of the next compaction of `table` (whose current manifests are
/// `manifests`) and writes their rows as one new file; no rewrite when no run qualifies
/// or the table is not a format v2 unpartitioned table. Only files of the current
/// (unpartitioned) spec are inputs, and never a file a live delete file may apply to
/// ([`DeleteIndex`]: rewritten, its deleted rows would come back).
///
/// With `budget`, each run holds [`run_reservation`] bytes of it while it is rewritten.
///
/// # Errors
/// iceberg's error for a manifest that cannot be read; a data file that cannot be read,
/// conformed, encoded or written.
pub(crate) async fn rewrite(
    table: &Table,
    manifests: &[ManifestFile],
    target_file_bytes: u64,
    cache: &mut ManifestCache,
    budget: Option<&MemoryBudget>,
) -> Result<Rewriting> {
    let metadata = table.metadata();
    // A partitioned table is not compacted (a rewritten file must never mix partitions);
    // neither are files an earlier spec wrote (their manifests carry that spec).
    if metadata.format_version() != FormatVersion::V2
        || !metadata.default_partition_spec().fields().is_empty()
    {
        return Ok(Rewriting::default());
    }
    let deletes = DeleteIndex::of_table(table, manifests, cache).await?;
    let (live, held_by_deletes) = live_files(table, manifests, &deletes, cache).await?;
    let runs = choose_runs(live, target_file_bytes);
    let target = table_arrow_schema(table).map_err(to_iceberg)?;
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for run in runs {
        if let Some(output) = rewrite_run(table, &target, &run, budget).await? {
            outputs.push(output);
            inputs.extend(run);
        }
    }
    let rewrite = (!outputs.is_empty()).then_some(Rewrite { inputs, outputs });
    Ok(Rewriting {
        rewrite,
        held_by_deletes,
    })
}

/// The live data files of the default spec that `manifests` list and no live delete
/// file may apply to, in path order (the order files were written in, so a run's rows
/// stay in write order), and how many were left out for a delete.
///
/// # Errors
/// iceberg's error for a manifest that cannot be read; `DataInvalid` for an entry
/// without a sequence number.
async fn live_files(
    table: &Table,
    manifests: &[ManifestFile],
    deletes: &DeleteIndex,
    cache: &mut ManifestCache,
) -> Result<(Vec<DataFile>, usize)> {
    let spec_id = table.metadata().default_partition_spec_id();
    let mut live: Vec<DataFile> = Vec::new();
    let mut held = 0;
    for manifest in manifests {
        if manifest.content != ManifestContentType::Data || manifest.partition_spec_id != spec_id {
            continue;
        }
        for entry in cache.manifest(table.file_io(), manifest).await?.entries() {
            if !entry.is_alive() {
                continue;
            }
            let (_, sequence) = entry_ids(entry, manifest)?;
            if deletes.may_apply(spec_id, sequence, entry.data_file()) {
                held += 1;
            } else {
                live.push(entry.data_file().clone());
            }
        }
    }
    live.sort_by(|a, b| a.file_path().cmp(b.file_path()));
    Ok((live, held))
}

/// The runs of the next compaction job among `live` (module docs): consecutive small
/// files (under a quarter of `target_file_bytes`) of one size tier, at least
/// [`MIN_INPUT_FILES`] and at most [`MAX_INPUT_FILES`] per run and half a target of bytes;
/// at most [`MAX_RUNS`] runs and one target of bytes per job.
fn choose_runs(live: Vec<DataFile>, target_file_bytes: u64) -> Vec<Vec<DataFile>> {
    let small = target_file_bytes / 4;
    // At most half a target of Parquet per run, and a whole target per job: the rate
    // limit beside the file caps.
    let (run_budget, job_budget) = (target_file_bytes / 2, target_file_bytes);
    let mut runs: Vec<Vec<DataFile>> = Vec::new();
    let mut run: Vec<DataFile> = Vec::new();
    let (mut run_bytes, mut job_bytes) = (0u64, 0u64);
    for file in live {
        let size = file.file_size_in_bytes();
        let joins = size < small
            && run_bytes + size <= run_budget
            && run.len() < MAX_INPUT_FILES
            && run
                .last()
                .is_none_or(|last| tier(last.file_size_in_bytes()) == tier(size));
        if joins {
            run_bytes += size;
            run.push(file);
            continue;
        }
        if run.len() >= MIN_INPUT_FILES {
            job_bytes += run_bytes;
            runs.push(std::mem::take(&mut run));
            if runs.len() == MAX_RUNS || job_bytes >= job_budget {
                return runs;
            }
        }
        run.clear();
        run_bytes = 0;
        if size < small {
            run_bytes = size;
            run.push(file);
        }
    }
    if run.len() >= MIN_INPUT_FILES && runs.len() < MAX_RUNS && job_bytes < job_budget {
        runs.push(run);
    }
    runs
}

/// Rewrites one run as one file: each input is read and decoded batch by batch, resolved
/// against the table's current schema by field id as a reader does ([`project`]: renamed
/// fields keep their values, dropped ones are gone, missing ones read their
/// `initial-default`), into a [`FileEncoder`] (row groups encode as they fill) of
/// `target`, that schema's Arrow form, and the file is written straight to storage
/// ([`finish_and_write`]), so the run is never whole in memory, as Arrow or as Parquet.
/// With `budget`, [`run_reservation`] bytes are held against `--memory-budget` while it
/// runs (waiting, as a put does, while the budget is spent). `None` for a run without
/// rows.
///
/// # Errors
/// A data file that cannot be read, projected, encoded or written.
async fn rewrite_run(
    table: &Table,
    target: &arrow_schema::SchemaRef,
    run: &[DataFile],
    budget: Option<&MemoryBudget>,
) -> Result<Option<DataFile>> {
    let name = table.identifier().to_string();
    let _held = match budget {
        Some(budget) => Some(budget.reserve(run_reservation(run) as usize).await),
        None => None,
    };
    let props = writer_properties(table).map_err(to_iceberg)?;
    let schema = table.metadata().current_schema().clone();
    let mut encoder =
        FileEncoder::new(schema.clone(), props)?.with_row_group_arrow_bytes(ROW_GROUP_ARROW_BYTES);
    // Inputs are fetched up to READ_AHEAD_FILES ahead of the one being decoded, each in
    // a task of its own (so it goes on while a decode runs; aborted if the run fails),
    // and decoded in run order (the new file keeps the rows' write order).
    let paths: Vec<String> = run.iter().map(|f| f.file_path().to_string()).collect();
    let mut reads = futures::stream::iter(paths)
        .map(|path| AbortOnDropHandle::new(tokio::spawn(read_input(table.file_io().clone(), path))))
        .buffered(READ_AHEAD_FILES);
    while let Some(read) = reads.next().await {
        let (path, bytes) = read.map_err(|e| {
            Error::new(ErrorKind::Unexpected, "compaction read task failed").with_source(e)
        })??;
        let (name, schema, target) = (name.clone(), schema.clone(), target.clone());
        encoder = crate::storage::blocking::run_blocking(move || {
            read_into(
                &bytes,
                &name,
                &schema,
                &target,
                &mut encoder,
                2 * ROW_GROUP_ARROW_BYTES,
            )
            .map(|()| encoder)
        })
        .await
        .map_err(|e| {
            Error::new(ErrorKind::Unexpected, "compaction read task failed").with_source(e)
        })?
        .map_err(|e| e.with_context("file", path))?;
    }
    let partition = unpartitioned(table.metadata().default_partition_spec_id());
    finish_and_write(table, encoder, output_path(run[0].file_path()), partition)
        .await
        .map_err(to_iceberg)
}

/// The bytes of input `path`, with it.
///
/// # Errors
/// iceberg's error for an object that cannot be read, with the path as context.
async fn read_input(file_io: iceberg::io::FileIO, path: String) -> Result<(String, bytes::Bytes)> {
    match file_io.new_input(&path)?.read().await {
        Ok(bytes) => Ok((path, bytes)),
        Err(e) => Err(e.with_context("file", path)),
    }
}

/// Bytes a compaction run holds against `--memory-budget`: its inputs' Parquet bytes
/// (the output's encoded column chunks, which stay in memory until the file is written,
/// are about as large), its [`READ_AHEAD_FILES`] + 1 largest inputs (the file being
/// decoded and those fetched ahead of it, each whole), and the Arrow its rows occupy
/// between the reader and the encoder, at most three [`ROW_GROUP_ARROW_BYTES`]
/// ([`read_into`] waits for the encoder).
pub(crate) fn run_reservation(run: &[DataFile]) -> u64 {
    let mut sizes: Vec<u64> = run.iter().map(DataFile::file_size_in_bytes).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let held: u64 = sizes.iter().take(READ_AHEAD_FILES + 1).sum();
    sizes.iter().sum::<u64>() + held + 3 * ROW_GROUP_ARROW_BYTES
}

/// `<data dir>/<first input's stem without an earlier -c suffix>-c<uuid v7>.parquet`:
/// sorts where the first input sorted.
fn output_path(first: &str) -> String {
    let stem = first.strip_suffix(".parquet").unwrap_or(first);
    let stem = match stem.rfind('/') {
        Some(slash) => match stem[slash..].find("-c") {
            Some(at) => &stem[..slash + at],
            None => stem,
        },
        None => stem,
    };
    format!("{stem}-c{}.parquet", uuid::Uuid::now_v7().simple())
}

/// Reads every row of the Parquet file `bytes`, conformed to `target` (table `name`'s
/// schema), into `encoder`, batch by batch. Before each batch it waits while the
/// encoder holds more than `max_held` bytes of rows not yet encoded (two
/// [`ROW_GROUP_ARROW_BYTES`] in a compaction):
/// decoding is faster than encoding, and rows read ahead would otherwise queue on rayon
/// (behind a put's encodes) without bound, outside the reservation. Blocking.
///
/// # Errors
/// `DataInvalid` when the bytes are not a readable Parquet file; a conform error.
fn read_into(
    bytes: &bytes::Bytes,
    name: &str,
    schema: &iceberg::spec::Schema,
    target: &arrow_schema::SchemaRef,
    encoder: &mut FileEncoder,
    max_held: u64,
) -> Result<()> {
    let invalid = |e: parquet::errors::ParquetError| {
        Error::new(ErrorKind::DataInvalid, format!("read a data file: {e}")).with_source(e)
    };
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .and_then(|b| b.build())
            .map_err(invalid)?;
    for batch in reader {
        let batch = batch.map_err(|e| {
            Error::new(ErrorKind::DataInvalid, format!("read a data file: {e}")).with_source(e)
        })?;
        let projected = project(&batch, schema, target).map_err(|e| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("table {name}: column {:?}: {}", e.path, e.reason),
            )
        })?;
        encoder.wait_held_at_most(max_held);
        encoder.push(&projected);
    }
    Ok(())
}

fn to_iceberg(e: crate::write::WriteError) -> Error {
    Error::new(ErrorKind::Unexpected, e.to_string()).with_source(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::parallel::RayonGate;
    use arrow_array::{Int64Array, RecordBatch};
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use parquet::file::properties::WriterProperties;
    use std::sync::Arc;

    /// Catches compaction's reader running ahead of a slow encoder: with rayon busy (here
    /// held), the rows it decoded queue behind the encodes without bound, outside the
    /// run's reservation, and the server's resident set passes its bound.
    #[test]
    fn the_reader_waits_for_the_encoder() {
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::required(2, "y", Type::Primitive(PrimitiveType::Long)).into(),
                ])
                .build()
                .expect("schema"),
        );
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).expect("arrow"));
        // 200,000 rows of two 8-byte columns: 3.2 MB of Arrow in one Parquet file.
        let ids: Vec<i64> = (0..200_000).collect();
        let batch = RecordBatch::try_new(
            target.clone(),
            vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(Int64Array::from(ids)),
            ],
        )
        .expect("batch");
        let mut file = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut file, target.clone(), None).expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        let bytes = bytes::Bytes::from(file);

        // Row groups of 64 KiB of Arrow; the reader may hold 128 KiB, plus the batch it
        // just read (1,024 rows, 16 KiB).
        let (cut, max_held, read_batch) = (64 << 10, 128 << 10, 16 << 10);
        let mut encoder = FileEncoder::new(schema.clone(), WriterProperties::builder().build())
            .expect("encoder")
            .with_row_group_arrow_bytes(cut);
        let held = encoder.held_bytes_handle();
        let gate = RayonGate::close();
        let reader = std::thread::spawn(move || {
            read_into(&bytes, "t.rows", &schema, &target, &mut encoder, max_held).map(|()| encoder)
        });
        // While nothing encodes, the held rows stop growing at the limit (or, without
        // the wait, reach the whole file's).
        let (mut seen, mut last, mut still) = (0u64, u64::MAX, 0);
        while still < 50 && !reader.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let now = held.get();
            seen = seen.max(now);
            still = if now == last { still + 1 } else { 0 };
            last = now;
        }
        seen = seen.max(held.get());
        drop(gate);
        let encoder = reader.join().expect("reader thread").expect("read_into");
        assert!(
            seen <= max_held + read_batch,
            "compaction's reader held {seen} bytes of rows while the encoder was stalled \
             (limit {max_held} + one batch)"
        );
        assert_eq!(encoder.rows(), 200_000);
    }
}

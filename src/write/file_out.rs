//! Finishing a filled data file straight into storage.
//!
//! A [`FileEncoder`]'s row groups are encoded in memory as its rows arrive (their
//! column chunks are what its rows' budget reservation covers once the Arrow is freed).
//! [`finish_and_write`] writes the file through the table's `FileIO` writer in segments
//! of [`SEGMENT_BYTES`], freeing each column chunk as it goes, instead of assembling the
//! whole file in one buffer first: that buffer (the file again, grown by doubling) was
//! the largest part of the memory a put held beyond its budget (`docs/performance.md`,
//! "Memory").

use crate::storage::blocking::{block_on_here, run_blocking};
use std::io::Write;

use bytes::Bytes;
use iceberg::io::FileWrite;
use iceberg::spec::DataFile;
use iceberg::table::Table;

use super::WriteError;
use super::parallel::FileEncoder;
use super::partition::PartitionTuple;

/// Bytes gathered before each write to storage, at most (an S3 writer gathers them into
/// its own parts); a larger single write (one Parquet page over this) goes on alone.
pub const SEGMENT_BYTES: usize = 8 << 20;

/// Finishes `encoder`'s file and writes it to `path` (on the blocking pool: encoding
/// waits and local writes block), returning its `DataFile` (path, partition tuple and
/// spec id set); `None`, with nothing written, for a file without rows.
///
/// Holds at most [`SEGMENT_BYTES`] of the file beyond its encoded column chunks, and
/// only as it is written: the segment buffer grows with the bytes in it (a file still
/// waiting for its row groups' encodes holds a few bytes, not a segment), and every
/// byte in it is one a freed column chunk held before.
///
/// # Errors
/// [`WriteError::Storage`] naming the file when storage refuses it,
/// [`WriteError::Encode`] when encoding fails, [`WriteError::Task`] when the blocking
/// task panicked.
///
/// # Cancel safety
/// Dropping the future may leave the file partly written (an orphan, never referenced).
pub async fn finish_and_write(
    table: &Table,
    encoder: FileEncoder,
    path: String,
    partition: PartitionTuple,
) -> Result<Option<DataFile>, WriteError> {
    if encoder.rows() == 0 {
        return Ok(None);
    }
    let name = table.identifier().to_string();
    let storage = |source: iceberg::Error| WriteError::Storage {
        table: name.clone(),
        path: path.clone(),
        source: Box::new(source),
    };
    let output = table.file_io().new_output(&path).map_err(storage)?;
    let writer = output.writer().await.map_err(storage)?;
    let finished = run_blocking(move || {
        let mut out = Segments {
            writer,
            pending: Vec::new(),
            failed: None,
        };
        let finished = encoder.finish_into(&mut out);
        let closed = match (&finished, out.failed.take()) {
            (_, Some(failed)) => Err(failed),
            (Ok(_), None) => block_on_here(out.writer.close()),
            (Err(_), None) => Ok(()),
        };
        (finished, closed)
    })
    .await
    .map_err(|e| WriteError::Task {
        table: name.clone(),
        reason: e.to_string(),
    })?;
    let builder = match finished {
        // A storage failure surfaces through the encoder as an I/O error: name the
        // storage's own.
        (_, Err(failed)) => return Err(storage(failed)),
        (Err(source), Ok(())) => {
            return Err(WriteError::Encode {
                table: name.clone(),
                source: Box::new(source),
            });
        }
        (Ok(None), Ok(())) => return Ok(None),
        (Ok(Some((_, builder))), Ok(())) => builder,
    };
    let mut builder = builder;
    builder
        .file_path(path.clone())
        .partition(partition.values)
        .partition_spec_id(partition.spec_id);
    builder.build().map(Some).map_err(|e| {
        storage(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("incomplete data file: {e}"),
        ))
    })
}

/// The encoder's output: gathers [`SEGMENT_BYTES`] and writes them to storage
/// (blocking on the `FileIO` writer; runs on the blocking pool).
struct Segments {
    writer: Box<dyn FileWrite>,
    pending: Vec<u8>,
    /// The first storage error; every later write fails at once.
    failed: Option<iceberg::Error>,
}

impl Segments {
    fn send(&mut self) -> std::io::Result<()> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("the data file's write failed"));
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let segment = Bytes::from(std::mem::take(&mut self.pending));
        self.write_segment(segment)
    }

    fn write_segment(&mut self, segment: Bytes) -> std::io::Result<()> {
        match block_on_here(self.writer.write(segment)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let message = e.to_string();
                self.failed = Some(e);
                Err(std::io::Error::other(message))
            }
        }
    }
}

impl Write for Segments {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("the data file's write failed"));
        }
        if self.pending.len() + buf.len() > SEGMENT_BYTES {
            self.send()?;
        }
        if buf.len() >= SEGMENT_BYTES {
            self.write_segment(Bytes::copy_from_slice(buf))?;
        } else {
            // Grows by doubling up to SEGMENT_BYTES, never past it.
            let want = self.pending.len() + buf.len();
            if want > self.pending.capacity() {
                let capacity = want.next_power_of_two().min(SEGMENT_BYTES);
                self.pending.reserve_exact(capacity - self.pending.len());
            }
            self.pending.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A storage writer that keeps every segment it is given.
    struct Keep(Arc<Mutex<Vec<Bytes>>>);

    #[async_trait::async_trait]
    impl FileWrite for Keep {
        async fn write(&mut self, bs: Bytes) -> iceberg::Result<()> {
            self.0.lock().expect("segments").push(bs);
            Ok(())
        }

        async fn close(&mut self) -> iceberg::Result<()> {
            Ok(())
        }
    }

    /// Catches a segment buffer that holds more than a segment (or is reserved whole
    /// before any bytes arrive) and bytes written out of order around a page larger
    /// than a segment.
    #[test]
    fn segments_hold_at_most_a_segment_and_keep_the_order() {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let mut out = Segments {
            writer: Box::new(Keep(kept.clone())),
            pending: Vec::new(),
            failed: None,
        };
        let mut expected = Vec::new();
        let mut write = |out: &mut Segments, len: usize, byte: u8| {
            let buf = vec![byte; len];
            out.write_all(&buf).expect("write");
            expected.extend_from_slice(&buf);
            assert!(
                out.pending.capacity() <= SEGMENT_BYTES,
                "buffer past a segment"
            );
        };
        write(&mut out, 4, 1);
        assert!(
            out.pending.capacity() < 4096,
            "a whole segment reserved up front"
        );
        for i in 0..40 {
            write(&mut out, 700_000, i);
        }
        write(&mut out, SEGMENT_BYTES + 5, 200);
        write(&mut out, 3, 201);
        out.flush().expect("flush");
        let kept = kept.lock().expect("segments");
        assert!(kept.iter().all(|s| s.len() <= SEGMENT_BYTES + 5));
        assert_eq!(kept.concat(), expected);
    }
}

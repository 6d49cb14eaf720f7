//! Producers' high-water marks: for each (writer id, table), the last batch sequence
//! committed, stored in redb and advanced in the SAME write transaction that moves the
//! table's pointer — so a commit and its mark are durable together or not at all, and
//! a mark outlives snapshot expiry.
//!
//! A commit names its writer and sequence range in its snapshot's summary
//! ([`WRITER_ID`], [`FIRST_SEQUENCE`], [`LAST_SEQUENCE`]), where Iceberg readers see
//! them too; the catalog reads them from the `add-snapshot` update. The committer
//! refuses a commit whose range does not start after the stored mark (a duplicate that
//! raced its original), so no sequence lands twice.

use iceberg::TableUpdate;
use iceberg::{Error, ErrorKind, Result};
use redb::{ReadableTable, TableDefinition};

/// `"{writer id}\u{1f}{table key}"` → [`WriterMark`] as 24 bytes (little-endian
/// `sequence: u64`, `snapshot_id: i64`, `committed_at_ms: u64`).
pub(super) const WRITER_MARKS: TableDefinition<&str, &[u8]> = TableDefinition::new("writer_marks");

/// Snapshot summary property: the writer id of the producer whose batches the snapshot
/// holds.
pub const WRITER_ID: &str = "skade.writer-id";
/// Snapshot summary property: the first batch sequence the snapshot holds.
pub const FIRST_SEQUENCE: &str = "skade.writer-first-sequence";
/// Snapshot summary property: the last batch sequence the snapshot holds.
pub const LAST_SEQUENCE: &str = "skade.writer-last-sequence";

/// The snapshot summary properties of a commit of `writer`'s sequences `first..=last`.
pub fn summary(writer: &str, first: u64, last: u64) -> std::collections::HashMap<String, String> {
    [
        (WRITER_ID, writer.to_string()),
        (FIRST_SEQUENCE, first.to_string()),
        (LAST_SEQUENCE, last.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The longest writer id, in bytes.
pub const MAX_WRITER_ID_BYTES: usize = 128;

/// A producer's committed position in one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterMark {
    /// The last batch sequence committed.
    pub sequence: u64,
    /// The snapshot that committed it.
    pub snapshot_id: i64,
    /// When, in milliseconds since the Unix epoch.
    pub committed_at_ms: u64,
}

impl WriterMark {
    fn encode(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.sequence.to_le_bytes());
        out[8..16].copy_from_slice(&self.snapshot_id.to_le_bytes());
        out[16..].copy_from_slice(&self.committed_at_ms.to_le_bytes());
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Self> {
        let word = |i: usize| bytes.get(i..i + 8)?.try_into().ok();
        Some(Self {
            sequence: u64::from_le_bytes(word(0)?),
            snapshot_id: i64::from_le_bytes(word(8)?),
            committed_at_ms: u64::from_le_bytes(word(16)?),
        })
    }
}

/// The redb key of `writer`'s mark in the table with key `table_key`.
pub(super) fn mark_key(writer: &str, table_key: &str) -> String {
    format!("{writer}\u{1f}{table_key}")
}

/// The mark a commit advances: read from its `add-snapshot` update's summary.
#[derive(Debug, Clone)]
pub(super) struct MarkAdvance {
    key: String,
    writer: String,
    table: String,
    first: u64,
    mark: WriterMark,
}

impl MarkAdvance {
    /// The advance `updates` carry for the table `table` (redb key `table_key`), if its
    /// new snapshot names a writer.
    ///
    /// # Errors
    /// `DataInvalid` when the summary names a writer with missing or bad sequences.
    pub(super) fn from_updates(
        table_key: &str,
        table: &str,
        updates: &[TableUpdate],
    ) -> Result<Option<Self>> {
        let Some(snapshot) = updates.iter().find_map(|u| match u {
            TableUpdate::AddSnapshot { snapshot } => Some(snapshot),
            _ => None,
        }) else {
            return Ok(None);
        };
        let props = &snapshot.summary().additional_properties;
        let Some(writer) = props.get(WRITER_ID) else {
            return Ok(None);
        };
        let sequence = |key: &str| {
            props
                .get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("snapshot of writer {writer} has no valid {key}"),
                    )
                })
        };
        let (first, last) = (sequence(FIRST_SEQUENCE)?, sequence(LAST_SEQUENCE)?);
        Ok(Some(Self {
            key: mark_key(writer, table_key),
            writer: writer.to_string(),
            table: table.to_string(),
            first,
            mark: WriterMark {
                sequence: last,
                snapshot_id: snapshot.snapshot_id(),
                committed_at_ms: snapshot.timestamp_ms().max(0) as u64,
            },
        }))
    }

    /// Checks the advance against the stored mark (as the open transaction sees it): the
    /// commit must start after it. The outer error is storage; the inner one this
    /// release's own failure (`PreconditionFailed`, not retryable).
    pub(super) fn check(
        &self,
        marks: &impl ReadableTable<&'static str, &'static [u8]>,
    ) -> std::result::Result<Result<()>, redb::Error> {
        let stored = marks
            .get(self.key.as_str())?
            .and_then(|v| WriterMark::decode(v.value()));
        match stored {
            Some(stored) if stored.sequence >= self.first => Ok(Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "writer {:?} already committed sequence {} to table {} (snapshot {}); \
                     this commit starts at {}",
                    self.writer, stored.sequence, self.table, stored.snapshot_id, self.first
                ),
            ))),
            _ => Ok(Ok(())),
        }
    }

    /// Stores the advanced mark.
    pub(super) fn apply(
        &self,
        marks: &mut redb::Table<'_, &'static str, &'static [u8]>,
    ) -> std::result::Result<(), redb::Error> {
        marks.insert(self.key.as_str(), self.mark.encode().as_slice())?;
        Ok(())
    }
}

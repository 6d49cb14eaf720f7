//! Producers' high-water marks: for each (writer id, table), the last batch sequence
//! committed, stored in the catalog's store and advanced in the SAME transaction that
//! moves the table's pointer (`store/`) — so a commit and its mark are durable together
//! or not at all, and a mark outlives snapshot expiry.
//!
//! A producer's commit carries its writer and sequence range ([`WriterRange`], from
//! the snapshot producer to the release), and names them in its snapshot's summary
//! ([`WRITER_ID`], [`FIRST_SEQUENCE`], [`LAST_SEQUENCE`]) where Iceberg readers see them
//! too. The committer refuses a commit whose range does not start after the stored mark
//! (a duplicate that raced its original), so no sequence lands twice.

use iceberg::{Error, ErrorKind, Result, TableIdent, TableUpdate};

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

/// A producer's writer and the batch sequences one commit holds: the catalog advances
/// the writer's high-water mark of the table to `last` in the same transaction, and
/// refuses the commit when the stored mark is at or past `first`. (The same range is
/// written into the snapshot's summary, [`summary`], for readers.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterRange {
    /// The writer id.
    pub writer: String,
    /// The first batch sequence the commit holds.
    pub first: u64,
    /// The last batch sequence the commit holds (at least `first`).
    pub last: u64,
}

impl WriterRange {
    /// The snapshot summary properties of this range ([`summary`]).
    pub fn summary(&self) -> std::collections::HashMap<String, String> {
        summary(&self.writer, self.first, self.last)
    }
}

/// The mark a commit advances: its producer's range and the snapshot that holds it.
#[derive(Debug, Clone)]
pub(crate) struct MarkAdvance {
    writer: String,
    table: TableIdent,
    first: u64,
    mark: WriterMark,
}

impl MarkAdvance {
    /// The advance of `range` in `table` by the snapshot `updates` add; `None` without a
    /// range.
    ///
    /// # Errors
    /// `DataInvalid` when the range runs backwards (a high-water mark never decreases),
    /// or `updates` add no snapshot to hold it.
    pub(crate) fn of(
        table: &TableIdent,
        range: Option<&WriterRange>,
        updates: &[TableUpdate],
    ) -> Result<Option<Self>> {
        let Some(range) = range else {
            return Ok(None);
        };
        let WriterRange {
            writer,
            first,
            last,
        } = range;
        // A range that runs backwards would move the mark back below `first`.
        if last < first {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "a commit of writer {writer} holds sequences {first}..={last}, a range \
                     that runs backwards: a high-water mark never decreases"
                ),
            ));
        }
        let Some(snapshot) = updates.iter().find_map(|u| match u {
            TableUpdate::AddSnapshot { snapshot } => Some(snapshot),
            _ => None,
        }) else {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("a commit of writer {writer} to {table} adds no snapshot"),
            ));
        };
        Ok(Some(Self {
            writer: writer.clone(),
            table: table.clone(),
            first: *first,
            mark: WriterMark {
                sequence: *last,
                snapshot_id: snapshot.snapshot_id(),
                committed_at_ms: snapshot.timestamp_ms().max(0) as u64,
            },
        }))
    }

    /// Checks the advance against `stored`, the writer's mark in the table as the
    /// committing transaction sees it: the commit must start after it.
    ///
    /// # Errors
    /// `PreconditionFailed` (not retryable) naming the writer, the table and the
    /// sequence already committed.
    pub(crate) fn check_against(&self, stored: Option<WriterMark>) -> Result<()> {
        match stored {
            Some(stored) if stored.sequence >= self.first => Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "writer {:?} already committed sequence {} to table {} (snapshot {}); \
                     this commit starts at {}",
                    self.writer, stored.sequence, self.table, stored.snapshot_id, self.first
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The writer id.
    pub(crate) fn writer(&self) -> &str {
        &self.writer
    }

    /// The table.
    pub(crate) fn table(&self) -> &TableIdent {
        &self.table
    }

    /// The mark stored once the commit lands.
    pub(crate) fn mark(&self) -> WriterMark {
        self.mark
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit whose summary runs backwards (`first = u64::MAX, last = 1`)
    /// is refused, so the mark it would store never steps back. Catches a mark moved
    /// from `u64::MAX` to 1.
    #[test]
    fn a_backwards_range_is_refused() {
        let snapshot = |first: u64, last: u64| {
            iceberg::spec::Snapshot::builder()
                .with_snapshot_id(9)
                .with_sequence_number(1)
                .with_timestamp_ms(0)
                .with_manifest_list("m.avro")
                .with_summary(iceberg::spec::Summary {
                    operation: iceberg::spec::Operation::Append,
                    additional_properties: summary("w", first, last),
                })
                .build()
        };
        let updates = |first, last| {
            vec![TableUpdate::AddSnapshot {
                snapshot: snapshot(first, last),
            }]
        };
        let table = TableIdent::from_strs(["ns", "t"]).unwrap();
        let range = |first, last| WriterRange {
            writer: "w".into(),
            first,
            last,
        };
        let err =
            MarkAdvance::of(&table, Some(&range(u64::MAX, 1)), &updates(u64::MAX, 1)).unwrap_err();
        assert!(err.message().contains("never decreases"), "{err}");
        let ok = MarkAdvance::of(&table, Some(&range(3, 3)), &updates(3, 3))
            .unwrap()
            .unwrap();
        assert_eq!((ok.first, ok.mark.sequence, ok.mark.snapshot_id), (3, 3, 9));
    }
}

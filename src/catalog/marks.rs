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
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};

use super::KEY_SEP;

/// `"{writer id}\u{1f}{table key}"` → [`WriterMark`] as 24 bytes (little-endian
/// `sequence: u64`, `snapshot_id: i64`, `committed_at_ms: u64`).
pub(super) const WRITER_MARKS: TableDefinition<&str, &[u8]> = TableDefinition::new("writer_marks");

/// Writer id → when it last committed (milliseconds since the Unix epoch): one row per
/// writer id that has a mark in [`WRITER_MARKS`], so the writer count is this table's
/// length and idle writers are found without a scan of every mark.
pub(super) const WRITERS: TableDefinition<&str, u64> = TableDefinition::new("writers");

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
    format!("{writer}{KEY_SEP}{table_key}")
}

/// The open mark tables of one redb write transaction.
pub(super) struct MarkTables<'txn> {
    /// [`WRITER_MARKS`].
    pub(super) marks: redb::Table<'txn, &'static str, &'static [u8]>,
    /// [`WRITERS`].
    writers: redb::Table<'txn, &'static str, u64>,
}

impl<'txn> MarkTables<'txn> {
    /// Opens both tables in `txn`.
    pub(super) fn open(txn: &'txn WriteTransaction) -> std::result::Result<Self, redb::Error> {
        Ok(Self {
            marks: txn.open_table(WRITER_MARKS)?,
            writers: txn.open_table(WRITERS)?,
        })
    }
}

/// Creates the mark tables if absent, and gives every writer id that has marks but no
/// [`WRITERS`] row (a catalog written before that table existed) one, dated by its
/// latest mark.
pub(super) fn init(txn: &WriteTransaction) -> std::result::Result<(), redb::Error> {
    let mut tables = MarkTables::open(txn)?;
    if !tables.writers.is_empty()? || tables.marks.is_empty()? {
        return Ok(());
    }
    let mut latest = std::collections::BTreeMap::<String, u64>::new();
    for entry in tables.marks.iter()? {
        let (key, value) = entry?;
        let Some((writer, _)) = key.value().split_once(KEY_SEP) else {
            continue;
        };
        let at = WriterMark::decode(value.value()).map_or(0, |m| m.committed_at_ms);
        let slot = latest.entry(writer.to_string()).or_default();
        *slot = (*slot).max(at);
    }
    for (writer, at) in latest {
        tables.writers.insert(writer.as_str(), at)?;
    }
    Ok(())
}

/// The number of writer ids with a committed mark, and whether `writer` (when given) is
/// one of them.
pub(super) fn writers(
    txn: &redb::ReadTransaction,
    writer: Option<&str>,
) -> std::result::Result<(u64, bool), redb::Error> {
    let writers = txn.open_table(WRITERS)?;
    let known = match writer {
        Some(writer) => writers.get(writer)?.is_some(),
        None => false,
    };
    Ok((writers.len()?, known))
}

/// Forgets every writer id whose last commit is older than `cutoff_ms` (milliseconds
/// since the Unix epoch): its row in [`WRITERS`] and all its marks. Returns the writer
/// ids forgotten, in order.
pub(super) fn forget_idle(
    txn: &WriteTransaction,
    cutoff_ms: u64,
) -> std::result::Result<Vec<String>, redb::Error> {
    let mut tables = MarkTables::open(txn)?;
    let mut idle = Vec::new();
    for entry in tables.writers.iter()? {
        let (writer, at) = entry?;
        if at.value() < cutoff_ms {
            idle.push(writer.value().to_string());
        }
    }
    for writer in &idle {
        tables.writers.remove(writer.as_str())?;
        let start = format!("{writer}{KEY_SEP}");
        // The separator is U+001F; U+0020 is the next character, so this range holds
        // exactly the writer's marks.
        let end = format!("{writer}\u{20}");
        tables
            .marks
            .retain_in::<&str, _>(start.as_str()..end.as_str(), |_, _| false)?;
    }
    Ok(idle)
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
    /// `DataInvalid` when the summary names a writer with missing or bad sequences, or a
    /// last sequence below the first (the mark would decrease).
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
        // A range that runs backwards would move the mark back below `first`.
        if last < first {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "snapshot of writer {writer} holds sequences {first}..={last}, a range \
                     that runs backwards: a high-water mark never decreases"
                ),
            ));
        }
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
        Ok(self.check_against(stored))
    }

    /// Checks the advance against `stored`, the writer's mark in the table as the
    /// committing transaction sees it: the commit must start after it.
    ///
    /// # Errors
    /// `PreconditionFailed` (not retryable) naming the writer, the table and the
    /// sequence already committed.
    pub(super) fn check_against(&self, stored: Option<WriterMark>) -> Result<()> {
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
    pub(super) fn writer(&self) -> &str {
        &self.writer
    }

    /// The mark stored once the commit lands.
    pub(super) fn mark(&self) -> WriterMark {
        self.mark
    }

    /// Stores the advanced mark, and the writer's last commit time.
    pub(super) fn apply(
        &self,
        tables: &mut MarkTables<'_>,
    ) -> std::result::Result<(), redb::Error> {
        tables
            .marks
            .insert(self.key.as_str(), self.mark.encode().as_slice())?;
        let at = tables
            .writers
            .get(self.writer.as_str())?
            .map_or(0, |v| v.value());
        tables
            .writers
            .insert(self.writer.as_str(), at.max(self.mark.committed_at_ms))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::ReadableDatabase;

    fn advance(writer: &str, table: &str, at: u64) -> MarkAdvance {
        MarkAdvance {
            key: mark_key(writer, table),
            writer: writer.to_string(),
            table: table.to_string(),
            first: 1,
            mark: WriterMark {
                sequence: 1,
                snapshot_id: 1,
                committed_at_ms: at,
            },
        }
    }

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
        let err =
            MarkAdvance::from_updates("ns\u{1f}t", "ns.t", &updates(u64::MAX, 1)).unwrap_err();
        assert!(err.message().contains("never decreases"), "{err}");
        let ok = MarkAdvance::from_updates("ns\u{1f}t", "ns.t", &updates(3, 3))
            .unwrap()
            .unwrap();
        assert_eq!((ok.first, ok.mark.sequence), (3, 3));
    }

    /// Forgetting an idle writer removes its row and every mark it has, and nothing of
    /// a busy writer whose id it prefixes. Catches a key range that spills into another
    /// writer's marks.
    #[test]
    fn forgetting_a_writer_takes_its_marks_only() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("c.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        init(&txn).unwrap();
        {
            let mut tables = MarkTables::open(&txn).unwrap();
            for (writer, table, at) in [
                ("a", "ns\u{1f}t", 10),
                ("a", "ns\u{1f}u", 20),
                ("ab", "ns\u{1f}t", 500),
            ] {
                advance(writer, table, at).apply(&mut tables).unwrap();
            }
        }
        assert_eq!(forget_idle(&txn, 100).unwrap(), vec!["a".to_string()]);
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        assert_eq!(writers(&read, Some("ab")).unwrap(), (1, true));
        let marks = read.open_table(WRITER_MARKS).unwrap();
        let keys: Vec<String> = marks
            .iter()
            .unwrap()
            .map(|e| e.unwrap().0.value().to_string())
            .collect();
        assert_eq!(keys, vec![mark_key("ab", "ns\u{1f}t")]);
    }
}

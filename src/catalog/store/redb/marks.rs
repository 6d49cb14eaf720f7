//! Producers' high-water marks in the redb file (`catalog/marks.rs` says what they are):
//! two tables, advanced inside the group-commit transaction that moves the pointers.

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};

use super::{KEY_SEP, table_key};
use crate::catalog::marks::{MarkAdvance, WriterMark};

/// `"{writer id}\u{1f}{table key}"` → [`WriterMark`] as 24 bytes (little-endian
/// `sequence: u64`, `snapshot_id: i64`, `committed_at_ms: u64`).
pub(super) const WRITER_MARKS: TableDefinition<&str, &[u8]> = TableDefinition::new("writer_marks");

/// Writer id → when it last committed (milliseconds since the Unix epoch): one row per
/// writer id that has a mark in [`WRITER_MARKS`], so the writer count is this table's
/// length and idle writers are found without a scan of every mark.
pub(super) const WRITERS: TableDefinition<&str, u64> = TableDefinition::new("writers");

/// `mark` as stored in [`WRITER_MARKS`].
fn encode(mark: &WriterMark) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..8].copy_from_slice(&mark.sequence.to_le_bytes());
    out[8..16].copy_from_slice(&mark.snapshot_id.to_le_bytes());
    out[16..].copy_from_slice(&mark.committed_at_ms.to_le_bytes());
    out
}

/// A mark as stored in [`WRITER_MARKS`]; `None` for bytes of another shape.
pub(super) fn decode(bytes: &[u8]) -> Option<WriterMark> {
    let word = |i: usize| bytes.get(i..i + 8)?.try_into().ok();
    Some(WriterMark {
        sequence: u64::from_le_bytes(word(0)?),
        snapshot_id: i64::from_le_bytes(word(8)?),
        committed_at_ms: u64::from_le_bytes(word(16)?),
    })
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
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Self {
            marks: txn.open_table(WRITER_MARKS)?,
            writers: txn.open_table(WRITERS)?,
        })
    }

    /// Checks `advance` against the stored mark (as the open transaction sees it): the
    /// commit must start after it. The outer error is storage; the inner one the
    /// release's own failure (`PreconditionFailed`, not retryable).
    pub(super) fn check(&self, advance: &MarkAdvance) -> Result<iceberg::Result<()>, redb::Error> {
        let key = advance_key(advance);
        let stored = self
            .marks
            .get(key.as_str())?
            .and_then(|v| decode(v.value()));
        Ok(advance.check_against(stored))
    }

    /// Stores the advanced mark, and the writer's last commit time.
    pub(super) fn apply(&mut self, advance: &MarkAdvance) -> Result<(), redb::Error> {
        let mark = advance.mark();
        self.marks
            .insert(advance_key(advance).as_str(), encode(&mark).as_slice())?;
        let at = self.writers.get(advance.writer())?.map_or(0, |v| v.value());
        self.writers
            .insert(advance.writer(), at.max(mark.committed_at_ms))?;
        Ok(())
    }
}

/// The [`WRITER_MARKS`] key of `advance`'s writer and table.
fn advance_key(advance: &MarkAdvance) -> String {
    mark_key(
        advance.writer(),
        &table_key(advance.table()).unwrap_or_default(),
    )
}

/// Creates the mark tables if absent, and gives every writer id that has marks but no
/// [`WRITERS`] row (a catalog written before that table existed) one, dated by its
/// latest mark.
pub(super) fn init(txn: &WriteTransaction) -> Result<(), redb::Error> {
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
        let at = decode(value.value()).map_or(0, |m| m.committed_at_ms);
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
) -> Result<(u64, bool), redb::Error> {
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
) -> Result<Vec<String>, redb::Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::TableIdent;
    use iceberg::TableUpdate;
    use redb::ReadableDatabase;

    /// An advance of `writer` in table `ns.<table>` committed at `at`.
    fn advance(writer: &str, table: &str, at: u64) -> MarkAdvance {
        let snapshot = iceberg::spec::Snapshot::builder()
            .with_snapshot_id(1)
            .with_sequence_number(1)
            .with_timestamp_ms(at as i64)
            .with_manifest_list("m.avro")
            .with_summary(iceberg::spec::Summary {
                operation: iceberg::spec::Operation::Append,
                additional_properties: crate::catalog::marks::summary(writer, 1, 1),
            })
            .build();
        let ident = TableIdent::from_strs(["ns", table]).unwrap();
        let range = crate::catalog::marks::WriterRange {
            writer: writer.to_string(),
            first: 1,
            last: 1,
        };
        MarkAdvance::of(
            &ident,
            Some(&range),
            &[TableUpdate::AddSnapshot { snapshot }],
        )
        .unwrap()
        .unwrap()
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
            for (writer, table, at) in [("a", "t", 10), ("a", "u", 20), ("ab", "t", 500)] {
                tables.apply(&advance(writer, table, at)).unwrap();
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

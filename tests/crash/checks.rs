//! The checks run on a stopped server's data dir against what the clients recorded, and
//! pyiceberg's view of every table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use futures::{StreamExt, TryStreamExt};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent};

use crate::clients::*;
use crate::common;
use crate::server::*;

/// What the checks accumulate across kills.
#[derive(Default)]
pub(crate) struct Verifier {
    /// Per data file path: the ids it holds (files are immutable: read once).
    pub(crate) file_ids: HashMap<String, Vec<i64>>,
}

/// The outcome of one check.
#[derive(Debug, Default)]
pub(crate) struct Check {
    pub(crate) violations: Vec<String>,
    pub(crate) acked_commits: usize,
    pub(crate) acked_commits_found: usize,
    pub(crate) acked_rows: u64,
    pub(crate) rows_lost: u64,
    pub(crate) snapshots: usize,
    pub(crate) rows: usize,
    /// Tables with a commit cut by the kill (metadata written, pointer not flipped).
    pub(crate) commits_cut: usize,
    /// Retained snapshots made by maintenance (a merge or compaction: not an append).
    pub(crate) maintenance_snapshots: usize,
    /// Per table: rows and the sum of their ids (compared with pyiceberg).
    pub(crate) tables: BTreeMap<String, (usize, i128)>,
}

impl Verifier {
    /// Checks the data dir of a stopped server against what the clients recorded.
    pub(crate) async fn check(
        &mut self,
        dir: &Path,
        streams: &[StreamRecord],
        txns: &[TxnRecord],
        finished: bool,
        s3: Option<&S3Store>,
    ) -> Check {
        let catalog = open_catalog(dir, s3);
        let mut check = Check::default();
        let ns = NamespaceIdent::new(NS.to_string());
        let idents = if catalog.namespace_exists(&ns).await.unwrap() {
            catalog.list_tables(&ns).await.unwrap()
        } else {
            Vec::new()
        };
        let mut ids_of: HashMap<String, Vec<i64>> = HashMap::new();
        let mut snapshots_of: HashMap<String, BTreeSet<i64>> = HashMap::new();
        for ident in idents {
            let name = ident.name().to_string();
            // A pointer to metadata that is not there (written after its commit was
            // acked, or lost) loses the whole table: its acked rows count as missing below.
            let table = match catalog.load_table(&ident).await {
                Ok(table) => table,
                Err(e) => {
                    check
                        .violations
                        .push(format!("{name}: the table does not load: {e}"));
                    continue;
                }
            };
            let (ids, snapshots) = self.check_table(&name, &table, finished, &mut check).await;
            check.commits_cut += usize::from(commit_cut_by_kill(&table, s3).await);
            check.tables.insert(
                name.clone(),
                (ids.len(), ids.iter().map(|&i| i as i128).sum()),
            );
            check.rows += ids.len();
            check.snapshots += snapshots.len();
            ids_of.insert(name.clone(), ids);
            snapshots_of.insert(name, snapshots);
        }
        drop(catalog);

        // Streams: acked rows present; present rows a prefix of what was sent.
        let mut owned: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        for s in streams {
            owned
                .entry(s.table.clone())
                .or_default()
                .push((s.start, s.sent_end));
            let ids = ids_of.get(&s.table).map(Vec::as_slice).unwrap_or(&[]);
            let present = in_range(ids, s.start, s.sent_end);
            let prefix = present
                .iter()
                .enumerate()
                .take_while(|(k, id)| **id == s.start + *k as i64)
                .count();
            if prefix != present.len() {
                check.violations.push(format!(
                    "{}: stream from {:#x}: {} rows present but only the first {prefix} form a prefix (hole or doubled row)",
                    s.table,
                    s.start,
                    present.len()
                ));
            }
            check.acked_rows += s.acked_rows;
            let rows_kept = present.len() as u64 >= s.acked_rows;
            if !rows_kept {
                check.rows_lost += s.acked_rows - present.len() as u64;
                check.violations.push(format!(
                    "{}: stream from {:#x}: {} rows acked, {} present: acked rows missing",
                    s.table,
                    s.start,
                    s.acked_rows,
                    present.len()
                ));
            }
            if finished && s.keyed && !s.finished {
                check.violations.push(format!(
                    "{}: exactly-once stream from {:#x} never finished: it was resent after every kill",
                    s.table, s.start
                ));
            }
            if finished && s.finished && present.len() as i64 != s.sent_end - s.start {
                check.violations.push(format!(
                    "{}: finished stream from {:#x}: {} rows sent, {} present",
                    s.table,
                    s.start,
                    s.sent_end - s.start,
                    present.len()
                ));
            }
            let snapshots = snapshots_of.get(&s.table);
            for id in &s.acked_snapshots {
                check.acked_commits += 1;
                // An acked snapshot may have been expired since; its rows must not.
                if rows_kept || snapshots.is_some_and(|set| set.contains(id)) {
                    check.acked_commits_found += 1;
                } else {
                    check
                        .violations
                        .push(format!("{}: acked snapshot {id} is missing", s.table));
                }
            }
        }

        // Transactions: committed → in both tables; not committed → in neither; unknown
        // → all or nothing.
        for t in txns {
            owned
                .entry("txa".into())
                .or_default()
                .push((t.first, t.first + t.rows));
            owned
                .entry("txb".into())
                .or_default()
                .push((t.first + TXB_OFFSET, t.first + TXB_OFFSET + t.rows));
            let count = |table: &str, from: i64| {
                let ids = ids_of.get(table).map(Vec::as_slice).unwrap_or(&[]);
                in_range(ids, from, from + t.rows).len() as i64
            };
            let seen = (count("txa", t.first), count("txb", t.first + TXB_OFFSET));
            let ok = match t.outcome {
                TxnOutcome::Committed => seen == (t.rows, t.rows),
                TxnOutcome::NotCommitted => seen == (0, 0),
                TxnOutcome::Unknown => seen == (0, 0) || seen == (t.rows, t.rows),
            };
            if finished && t.outcome == TxnOutcome::Unknown {
                check.violations.push(format!(
                    "transaction {:#x}: its COMMIT was never answered, though it was retried after every kill",
                    t.first
                ));
            }
            if t.outcome == TxnOutcome::Committed {
                check.acked_commits += 1;
                check.acked_rows += 2 * t.rows as u64;
                if ok {
                    check.acked_commits_found += 1;
                } else {
                    check.rows_lost += (2 * t.rows - seen.0 - seen.1).max(0) as u64;
                }
            }
            if !ok {
                check.violations.push(format!(
                    "transaction {:#x} ({:?}, {} rows a table): (txa, txb) rows present {seen:?}",
                    t.first, t.outcome, t.rows
                ));
            }
        }

        // Nothing present that no client sent, nothing doubled.
        for (table, ids) in &ids_of {
            let mut ranges = owned.remove(table).unwrap_or_default();
            ranges.sort_unstable();
            let mut covered = 0;
            for (from, to) in &ranges {
                covered += in_range(ids, *from, *to).len();
            }
            if covered != ids.len() {
                check.violations.push(format!(
                    "{table}: {} rows outside every range a client sent",
                    ids.len() - covered
                ));
            }
            if ids.windows(2).any(|w| w[0] == w[1]) {
                check
                    .violations
                    .push(format!("{table}: a row is present twice"));
            }
        }
        check
    }

    /// Checks one table; returns its ids (sorted) and snapshot ids.
    pub(crate) async fn check_table(
        &mut self,
        name: &str,
        table: &Table,
        finished: bool,
        check: &mut Check,
    ) -> (Vec<i64>, BTreeSet<i64>) {
        let metadata = table.metadata();
        let snapshots: BTreeSet<i64> = metadata.snapshots().map(|s| s.snapshot_id()).collect();
        let oldest = metadata.snapshots().map(|s| s.sequence_number()).min();

        // Every retained snapshot (expiry keeps few): its files exist with their
        // recorded size and hold the summary's row count, and its parent is retained
        // unless it is the oldest (expiry removes from the old end).
        for &id in &snapshots {
            let snapshot = metadata.snapshot_by_id(id).expect("listed snapshot");
            if snapshot.summary().operation != iceberg::spec::Operation::Append {
                check.maintenance_snapshots += 1;
            }
            if let Some(parent) = snapshot.parent_snapshot_id()
                && !snapshots.contains(&parent)
                && Some(snapshot.sequence_number()) != oldest
            {
                check.violations.push(format!(
                    "{name}: snapshot {id}'s parent {parent} is missing"
                ));
            }
            let tasks = match plan(table, id).await {
                Ok(tasks) => tasks,
                Err(e) => {
                    check
                        .violations
                        .push(format!("{name}: snapshot {id} cannot be planned: {e}"));
                    continue;
                }
            };
            let expected: u64 = snapshot
                .summary()
                .additional_properties
                .get("total-records")
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX);
            let planned: u64 = tasks.iter().filter_map(|t| t.record_count).sum();
            if planned != expected {
                check.violations.push(format!(
                    "{name}: snapshot {id} plans {planned} rows, its summary says {expected}"
                ));
            }
            for task in &tasks {
                // Through the table's FileIO: a local file or an S3 object alike.
                let size = match table.file_io().new_input(&task.data_file_path) {
                    Ok(input) => input.metadata().await.map(|m| m.size),
                    Err(e) => Err(e),
                };
                if size.as_ref().ok() != Some(&task.file_size_in_bytes) {
                    check.violations.push(format!(
                        "{name}: snapshot {id}: data file {} is missing or truncated ({size:?}, recorded {})",
                        task.data_file_path, task.file_size_in_bytes
                    ));
                }
            }
        }

        // The current snapshot holds every data file (fast appends only); each is read
        // once, and must hold its manifest's row count of well-formed rows.
        let Some(current) = metadata.current_snapshot_id() else {
            return (Vec::new(), snapshots);
        };
        let tasks = match plan(table, current).await {
            Ok(tasks) => tasks,
            Err(e) => {
                check
                    .violations
                    .push(format!("{name}: current snapshot cannot be planned: {e}"));
                return (Vec::new(), snapshots);
            }
        };
        let unread: Vec<_> = tasks
            .iter()
            .filter(|t| !self.file_ids.contains_key(&t.data_file_path))
            .cloned()
            .collect();
        let reader = table.reader_builder().build();
        let read = futures::stream::iter(unread)
            .map(|task| {
                let reader = reader.clone();
                async move {
                    let path = task.data_file_path.clone();
                    let rows = task.record_count;
                    let batches: Result<Vec<RecordBatch>, String> =
                        match reader.read(futures::stream::iter([Ok(task)]).boxed()) {
                            Ok(result) => result
                                .stream()
                                .try_collect()
                                .await
                                .map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        };
                    (path, rows, batches)
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        for (path, rows, batches) in read {
            match batches
                .map_err(|e| e.to_string())
                .and_then(|b| ids_of_batches(&b))
            {
                Ok(ids) if Some(ids.len() as u64) == rows => {
                    self.file_ids.insert(path, ids);
                }
                Ok(ids) => check.violations.push(format!(
                    "{name}: data file {path} holds {} rows, its manifest says {rows:?}",
                    ids.len()
                )),
                Err(e) => check
                    .violations
                    .push(format!("{name}: data file {path} does not read back: {e}")),
            }
        }
        let mut ids: Vec<i64> = tasks
            .iter()
            .filter_map(|t| self.file_ids.get(&t.data_file_path))
            .flatten()
            .copied()
            .collect();
        ids.sort_unstable();

        if finished {
            // The whole current snapshot through iceberg's own scan, once at the end.
            let rows: usize = match table.scan().snapshot_id(current).build() {
                Ok(scan) => match scan.to_arrow().await {
                    Ok(stream) => stream
                        .try_collect::<Vec<_>>()
                        .await
                        .map(|b| common::count(&b))
                        .unwrap_or(usize::MAX),
                    Err(_) => usize::MAX,
                },
                Err(_) => usize::MAX,
            };
            if rows != ids.len() {
                check.violations.push(format!(
                    "{name}: a full scan of the current snapshot reads {rows} rows, its files {}",
                    ids.len()
                ));
            }
        }
        (ids, snapshots)
    }
}

/// The file scan tasks of `snapshot_id` (`table.scan().snapshot_id(..)`).
pub(crate) async fn plan(
    table: &Table,
    snapshot_id: i64,
) -> iceberg::Result<Vec<iceberg::scan::FileScanTask>> {
    table
        .scan()
        .snapshot_id(snapshot_id)
        .build()?
        .plan_files()
        .await?
        .try_collect()
        .await
}

/// The ids of `batches`, after checking every row's other columns against its id (as
/// `synthetic_batch` makes them).
pub(crate) fn ids_of_batches(batches: &[RecordBatch]) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for batch in batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| format!("no column {name}"))
        };
        let ids = column("id")?;
        let ids = ids
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or("id is not int64")?;
        let scores = column("score")?;
        let scores = scores
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or("score is not float64")?;
        let names = column("name")?;
        let names = names
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or("name is not utf8")?;
        for row in 0..batch.num_rows() {
            let id = ids.value(row);
            if scores.value(row) != id as f64 * 0.5
                || names.value(row) != format!("name-{:04}", id % 1000)
            {
                return Err(format!("row {id:#x} does not match its id"));
            }
            out.push(id);
        }
    }
    Ok(out)
}

/// The ids of sorted `ids` in `from..to`.
pub(crate) fn in_range(ids: &[i64], from: i64, to: i64) -> &[i64] {
    let lo = ids.partition_point(|&i| i < from);
    let hi = ids.partition_point(|&i| i < to);
    &ids[lo..hi]
}

/// Whether a commit to `table` was cut by the kill: a metadata JSON newer than the
/// current pointer's (its version is higher) exists, so a commit wrote it and its pointer
/// flip never happened. (A later commit after the restart reuses that version, so only
/// the latest kill can leave one.)
pub(crate) async fn commit_cut_by_kill(table: &Table, s3: Option<&S3Store>) -> bool {
    let version = |name: &str| name.split('-').next().and_then(|v| v.parse::<u64>().ok());
    let Some(current) = table
        .metadata_location()
        .and_then(|l| Path::new(l).file_name())
        .and_then(|n| version(&n.to_string_lossy()))
    else {
        return false;
    };
    let dir = format!("{}/metadata", table.metadata().location());
    let names: Vec<String> = match s3 {
        None => std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default(),
        Some(s3) => s3
            .storage()
            .list(&dir)
            .await
            .expect("list metadata objects")
            .into_iter()
            .filter_map(|o| o.location.rsplit('/').next().map(str::to_string))
            .collect(),
    };
    names
        .iter()
        .any(|name| name.ends_with(".metadata.json") && version(name).is_some_and(|v| v > current))
}

/// pyiceberg's view of every table through the REST catalog at `metrics`: per table the
/// rows and id sum of the current snapshot, after checking its first and middle snapshot
/// against their `total-records` (every snapshot is checked in Rust).
pub(crate) const PYICEBERG_CHECK: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import load_catalog
cat = load_catalog("skade", type="rest", uri=sys.argv[1])
out = {}
for ident in cat.list_tables("crash"):
    t = cat.load_table(ident)
    snaps = t.metadata.snapshots
    for s in ([snaps[0], snaps[len(snaps) // 2]] if snaps else []):
        n = t.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows
        assert n == int(s.summary["total-records"]), (ident, s.snapshot_id, n)
    data = t.scan(selected_fields=("id",)).to_arrow()
    total = pc.sum(data["id"].cast(pa.decimal128(38, 0))).as_py() if data.num_rows else 0
    out[ident[-1]] = [data.num_rows, str(total)]
print(json.dumps(out))
"#;

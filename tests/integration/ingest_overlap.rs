//! The overlapped committer pinned to the serial one by direct equality
//! (`docs/design/ingest_pipelined_overlap.md` §f4): any drop, duplicate, reorder or
//! mis-grouping in the overlap pipeline makes the two diverge.

use crate::common;

use std::sync::Arc;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use skade::catalog::RedbCatalog;
use skade::write::{self, IngestStats, WriteProps};

fn open() -> (tempfile::TempDir, Arc<RedbCatalog>) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = RedbCatalog::open(
        &dir.path().join("catalog.redb"),
        &dir.path().join("warehouse"),
    )
    .unwrap();
    (dir, Arc::new(catalog))
}

async fn table(catalog: &RedbCatalog, name: &str) -> Table {
    let ident = TableIdent::new(NamespaceIdent::new("ns".into()), name.into());
    write::ensure_table(catalog, &ident, &common::synthetic_schema())
        .await
        .unwrap()
}

/// `files` groups of `rows` rows each, conformed to `table`.
fn groups(table: &Table, files: usize, rows: usize) -> Vec<Vec<RecordBatch>> {
    (0..files)
        .map(|f| vec![common::conformed(table, (f * rows) as i64, rows)])
        .collect()
}

/// `id → (score bits, name)` in read-back order.
async fn rows(catalog: &RedbCatalog, table: &Table) -> Vec<(i64, u64, Option<String>)> {
    let table = catalog.load_table(table.identifier()).await.unwrap();
    let batches: Vec<RecordBatch> = skade::read::scan_in_write_order(&table)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let id = b
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        let score = b
            .column_by_name("score")
            .unwrap()
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap();
        let name = b
            .column_by_name("name")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        for i in 0..b.num_rows() {
            out.push((
                id.value(i),
                score.value(i).to_bits(),
                name.is_valid(i).then(|| name.value(i).to_string()),
            ));
        }
    }
    out
}

async fn snapshots(catalog: &RedbCatalog, table: &Table) -> usize {
    catalog
        .load_table(table.identifier())
        .await
        .unwrap()
        .metadata()
        .snapshots()
        .count()
}

/// RED once: a committer that never flushed mid-loop (only at the end) made 1 commit
/// instead of 10 and failed the commit/snapshot assertions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_matches_serial() {
    let (_dir, c) = open();
    let props = WriteProps { channel_depth: 4 };
    let serial = table(&c, "serial").await;
    let overlap = table(&c, "overlap").await;

    let (_, s_stats) =
        write::ingest_pipelined(c.as_ref(), &serial, groups(&serial, 40, 50), 4, &props)
            .await
            .unwrap();
    let (_, o_stats) =
        write::ingest_pipelined_overlap(c.as_ref(), &overlap, groups(&overlap, 40, 50), 4, &props)
            .await
            .unwrap();

    assert_eq!(s_stats.commits, 10);
    assert_eq!(o_stats, s_stats, "same rows, files, bytes and commits");
    assert_eq!(snapshots(&c, &serial).await, 10);
    assert_eq!(snapshots(&c, &overlap).await, 10);
    let s_rows = rows(&c, &serial).await;
    assert_eq!(s_rows.len(), 2000);
    assert_eq!(
        rows(&c, &overlap).await,
        s_rows,
        "same rows in the same order"
    );
    let ids: Vec<i64> = s_rows.iter().map(|r| r.0).collect();
    assert_eq!(ids, (0..2000).collect::<Vec<_>>(), "submission order kept");
}

/// RED once: with the committer's end-of-input commit removed, the single-file case made
/// 0 snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_commits_nothing_and_single_file_is_one_snapshot() {
    let (_dir, c) = open();
    let empty = table(&c, "empty").await;
    let (_, stats) = common::within(
        30,
        write::ingest_pipelined_overlap(c.as_ref(), &empty, Vec::new(), 4, &WriteProps::default()),
    )
    .await
    .unwrap();
    assert_eq!(stats, IngestStats::default());
    assert_eq!(snapshots(&c, &empty).await, 0);

    let single = table(&c, "single").await;
    let props = WriteProps { channel_depth: 1 };
    let (_, stats) = common::within(
        30,
        write::ingest_pipelined_overlap(c.as_ref(), &single, groups(&single, 1, 123), 4, &props),
    )
    .await
    .unwrap();
    assert_eq!((stats.commits, stats.files, stats.rows), (1, 1, 123));
    assert_eq!(snapshots(&c, &single).await, 1);
    assert_eq!(rows(&c, &single).await.len(), 123);
}

/// Manifests each snapshot of `table` lists, oldest snapshot first.
async fn manifests_per_snapshot(catalog: &RedbCatalog, table: &Table) -> Vec<usize> {
    let table = catalog.load_table(table.identifier()).await.unwrap();
    let mut snapshots: Vec<_> = table.metadata().snapshots().cloned().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    let mut out = Vec::new();
    for snapshot in snapshots {
        // Read with iceberg's own parser, not skade's manifest cache.
        let bytes = table
            .file_io()
            .new_input(snapshot.manifest_list())
            .unwrap()
            .read()
            .await
            .unwrap();
        let list = iceberg::spec::ManifestList::parse_with_version(
            &bytes,
            table.metadata().format_version(),
        )
        .unwrap();
        out.push(list.entries().len());
    }
    out
}

/// The design's overlap lane commits as Lane 1 does — a merge append through the
/// catalog's commit driver — so this test pins the server's committer: with
/// `commit.manifest.min-count-to-merge=2`, Java's merge rule (`ManifestMergeManager`:
/// the bin holding the new manifest merges once it has at least min-count manifests)
/// leaves every snapshot listing exactly one manifest, for the serial lane and the
/// overlap alike. A committer that skips the merge (iceberg's fast append) lists one
/// manifest more on every commit: 1, 2, ..., 10.
/// RED once: with `commit_files_with` staging iceberg's fast append instead of the merge
/// append, the overlap table listed [1, 2, 3, ..., 10] manifests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_commits_the_servers_merge_append() {
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    let (_dir, c) = open();
    let props = WriteProps { channel_depth: 4 };
    let mut tables = Vec::new();
    for name in ["serial_merged", "overlap_merged"] {
        let t = table(&c, name).await;
        let tx = Transaction::new(&t);
        let tx = tx
            .update_table_properties()
            .set("commit.manifest.min-count-to-merge".into(), "2".into())
            .apply(tx)
            .unwrap();
        tables.push(tx.commit(c.as_ref()).await.unwrap());
    }
    let (serial, overlap) = (&tables[0], &tables[1]);
    write::ingest_pipelined(c.as_ref(), serial, groups(serial, 40, 50), 4, &props)
        .await
        .unwrap();
    write::ingest_pipelined_overlap(c.as_ref(), overlap, groups(overlap, 40, 50), 4, &props)
        .await
        .unwrap();
    assert_eq!(manifests_per_snapshot(&c, overlap).await, vec![1; 10]);
    assert_eq!(manifests_per_snapshot(&c, serial).await, vec![1; 10]);
    assert_eq!(rows(&c, overlap).await, rows(&c, serial).await);
}

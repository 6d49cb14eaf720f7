//! The append both lanes commit (issue #14, `write::append`): Iceberg Java's merge
//! append, inline, so a table's manifest list stays short however many appends it saw
//! without waiting for table maintenance.

use std::collections::BTreeSet;

use arrow_array::Int64Array;
use iceberg::Catalog;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use skade::write::{self, WriteProps};

use crate::common;

fn ident(name: &str) -> iceberg::TableIdent {
    iceberg::TableIdent::from_strs(["default", name]).unwrap()
}

async fn manifests(table: &Table) -> usize {
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .unwrap()
        .entries()
        .len()
}

fn summary(table: &Table, key: &str) -> Option<u64> {
    table
        .metadata()
        .current_snapshot()?
        .summary()
        .additional_properties
        .get(key)?
        .parse()
        .ok()
}

/// Every id of `table` at `snapshot` (the current one for `None`), each read once.
async fn ids(table: &Table, snapshot: Option<i64>) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for batch in common::scan(table, snapshot).await {
        let col = batch
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        for id in col.values() {
            assert!(out.insert(*id), "id {id} read twice");
        }
    }
    out
}

/// 40 puts of 5 rows into one table over Flight, table maintenance off: after every put
/// the current snapshot lists at most 16 manifests (skade's default
/// `commit.manifest.min-count-to-merge`), its summary totals count every row and file
/// so far, every snapshot reads back exactly the rows acked up to it, and each row is
/// read once. A second table with `commit.manifest-merge.enabled=false` gets one more
/// manifest per put.
/// Catches: an append that carries every manifest on (iceberg's fast append: 40), a
/// merge that loses or doubles a file, summary totals that do not add up, sequence
/// numbers a merged entry does not keep, the merge property ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_put_keeps_the_manifest_list_short() {
    let server = common::TestServer::start_with(|c| c.maintenance.enabled = false).await;
    let catalog = server.running.service.catalog.clone();
    let mut client = server.client().await;
    for name in ["t", "unmerged"] {
        common::put(&mut client, &[name], vec![common::synthetic_batch(0, 5)])
            .await
            .unwrap();
    }
    let unmerged = catalog.load_table(&ident("unmerged")).await.unwrap();
    let tx = Transaction::new(&unmerged);
    let tx = tx
        .update_table_properties()
        .set("commit.manifest-merge.enabled".into(), "false".into())
        .apply(tx)
        .unwrap();
    tx.commit(catalog.as_ref()).await.unwrap();

    let mut most = 0;
    for i in 1..40i64 {
        for name in ["t", "unmerged"] {
            common::put(
                &mut client,
                &[name],
                vec![common::synthetic_batch(i * 5, 5)],
            )
            .await
            .unwrap();
        }
        let table = catalog.load_table(&ident("t")).await.unwrap();
        most = most.max(manifests(&table).await);
        assert_eq!(summary(&table, "total-records"), Some(5 * (i as u64 + 1)));
        assert_eq!(summary(&table, "total-data-files"), Some(i as u64 + 1));
        assert_eq!(summary(&table, "added-records"), Some(5));
    }
    assert!(most <= 16, "{most} manifests in one list");
    let table = catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, (0..200).collect());
    for snapshot in table.metadata().snapshots() {
        let puts = snapshot.sequence_number();
        assert_eq!(
            ids(&table, Some(snapshot.snapshot_id())).await,
            (0..5 * puts).collect(),
            "snapshot {} (sequence {puts})",
            snapshot.snapshot_id()
        );
    }
    let unmerged = catalog.load_table(&ident("unmerged")).await.unwrap();
    assert_eq!(manifests(&unmerged).await, 40);
    assert_eq!(ids(&unmerged, None).await, (0..200).collect());
    server.stop().await;
}

/// Lane 2's form: 20 one-table `ingest_multi` calls (each one redb transaction) keep the
/// list at most 16 manifests too, and read back every row once.
/// Catches: the multi-table commit staging iceberg's fast append (20 manifests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_multi_table_commit_keeps_the_manifest_list_short() {
    let c = common::open_catalog();
    common::synthetic_table(&c.catalog, "ns", "t").await;
    let t = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
    let mut most = 0;
    for i in 0..20i64 {
        let table = c.catalog.load_table(&t).await.unwrap();
        let batch = common::conformed(&table, i * 5, 5);
        write::ingest_multi(
            &c.catalog,
            vec![(table, vec![vec![batch]])],
            &WriteProps::default(),
        )
        .await
        .unwrap();
        let table = c.catalog.load_table(&t).await.unwrap();
        most = most.max(manifests(&table).await);
    }
    assert!(most <= 16, "{most} manifests in one list");
    let table = c.catalog.load_table(&t).await.unwrap();
    assert_eq!(ids(&table, None).await, (0..100).collect());
    assert_eq!(summary(&table, "total-records"), Some(100));
}

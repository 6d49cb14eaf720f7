//! The redb catalog against real redb files and a real warehouse on disk: commit
//! conflicts, the commit counter, and `atomic_release_raw`'s all-or-nothing contract.

use crate::common;

use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableIdent, TableRequirement};
use skade::catalog::RedbCatalog;
use skade::snapshot::fast_append::stage_fast_append;
use skade::write::{self, WriteProps};

use common::open_catalog as open;

fn ident(name: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new("ns".into()), name.into())
}

async fn table(catalog: &RedbCatalog, name: &str) -> Table {
    common::synthetic_table(catalog, "ns", name).await
}

/// Encodes and writes one file of `rows` rows for `table`, not committed.
async fn files(table: &Table, first_id: i64, rows: usize) -> Vec<iceberg::spec::DataFile> {
    let batch = common::conformed(table, first_id, rows);
    let encoded = write::encode(table, vec![vec![batch]]).await.unwrap();
    write::write_files(
        table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap()
}

async fn row_count(catalog: &RedbCatalog, name: &str) -> usize {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let batches: Vec<_> = common::scan(&table, None).await;
    common::count(&batches)
}

async fn snapshots(catalog: &RedbCatalog, name: &str) -> usize {
    catalog
        .load_table(&ident(name))
        .await
        .unwrap()
        .metadata()
        .snapshots()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_does_not_count_and_each_data_commit_counts_one() {
    let f = open();
    let c = &f.catalog;
    let t = table(c, "a").await;
    c.update_namespace(
        &NamespaceIdent::new("ns".into()),
        [("k".into(), "v".into())].into(),
    )
    .await
    .unwrap();
    c.rename_table(&ident("a"), &ident("b")).await.unwrap();
    c.rename_table(&ident("b"), &ident("a")).await.unwrap();
    assert_eq!(c.commit_count(), 0, "DDL must not count as a data commit");

    let global_before = skade::redb_commit_count();
    let data = files(&t, 0, 10).await;
    let t = write::commit_files(c.as_ref(), &t, data).await.unwrap();
    assert_eq!(c.commit_count(), 1);
    let data = files(&t, 10, 10).await;
    write::commit_files(c.as_ref(), &t, data).await.unwrap();
    assert_eq!(c.commit_count(), 2);
    assert!(skade::redb_commit_count() >= global_before + 2);
    assert_eq!(row_count(c, "a").await, 20);
}

/// `skade_file_syncs_total` (the catalog's sync counter): one warehouse sync per data
/// commit, beside the commit counter; DDL and a conflict caught before the flip add none.
/// Both metrics read the catalog's own counts at scrape time (`Metrics::count_catalog`).
/// RED once: with the `counter.inc()` after `sync_warehouse` in `release` removed, the
/// metric stayed 0 ("left: 0, right: 1").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_counter_advances_once_per_data_commit() {
    let dir = tempfile::tempdir().unwrap();
    let c = RedbCatalog::open(
        &dir.path().join("catalog.redb"),
        &dir.path().join("warehouse"),
    )
    .unwrap();
    let metrics = skade::metrics::Metrics::new();
    metrics.count_catalog(c.commit_counts());
    let syncs = || common::metric(&metrics.render(), "skade_file_syncs_total") as u64;
    let commits = || common::metric(&metrics.render(), "skade_catalog_commits_total") as u64;
    let t = table(&c, "s").await;
    assert_eq!((syncs(), c.sync_count()), (0, 0), "DDL is not counted");

    let data = files(&t, 0, 5).await;
    let t2 = write::commit_files(&c, &t, data).await.unwrap();
    assert_eq!(syncs(), 1);
    let data = files(&t2, 5, 5).await;
    write::commit_files(&c, &t2, data).await.unwrap();
    assert_eq!((syncs(), commits(), c.sync_count()), (2, 2, 2));

    // A stale base fails its requirements before the sync: nothing counts.
    let data = files(&t, 10, 5).await;
    let (requirements, updates) = stage_fast_append(&t, data).await.unwrap();
    c.atomic_release_raw(vec![(ident("s"), requirements, updates)])
        .await
        .unwrap_err();
    assert_eq!((syncs(), commits()), (2, 2));
    assert!(skade::storage::durable::warehouse_sync_count() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_base_is_a_retryable_conflict_and_transactions_retry_it() {
    let f = open();
    let c = &f.catalog;
    let stale = table(c, "t").await;
    // Someone else commits first.
    let data = files(&stale, 0, 5).await;
    write::commit_files(c.as_ref(), &stale, data).await.unwrap();

    // A commit built on the stale base is rejected as a retryable conflict.
    let data = files(&stale, 5, 5).await;
    let (requirements, updates) = stage_fast_append(&stale, data.clone()).await.unwrap();
    let err = c
        .atomic_release_raw(vec![(ident("t"), requirements, updates)])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts);
    assert!(
        err.retryable(),
        "conflicts must be retryable so iceberg retries: {err}"
    );
    assert_eq!(snapshots(c, "t").await, 1);

    // iceberg's Transaction::commit rebases on the new base and retries.
    write::commit_files(c.as_ref(), &stale, data).await.unwrap();
    assert_eq!(snapshots(c, "t").await, 2);
    assert_eq!(row_count(c, "t").await, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_release_of_three_tables_is_one_commit() {
    let f = open();
    let c = &f.catalog;
    let mut batch = Vec::new();
    for (i, name) in ["x", "y", "z"].into_iter().enumerate() {
        let t = table(c, name).await;
        let data = files(&t, 0, 3 + i).await;
        let (req, upd) = stage_fast_append(&t, data).await.unwrap();
        batch.push((ident(name), req, upd));
    }
    let before = c.commit_count();
    let tables = c.atomic_release_raw(batch).await.unwrap();
    assert_eq!(
        c.commit_count() - before,
        1,
        "3 tables, one redb transaction"
    );
    assert_eq!(tables.len(), 3);
    for (i, name) in ["x", "y", "z"].into_iter().enumerate() {
        assert_eq!(snapshots(c, name).await, 1, "{name} advanced once");
        assert_eq!(row_count(c, name).await, 3 + i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failed_requirement_commits_nothing() {
    let f = open();
    let c = &f.catalog;
    let mut batch = Vec::new();
    for name in ["x", "y", "z"] {
        let t = table(c, name).await;
        let data = files(&t, 0, 4).await;
        let (mut req, upd) = stage_fast_append(&t, data).await.unwrap();
        if name == "z" {
            req.push(TableRequirement::UuidMatch {
                uuid: uuid::Uuid::new_v4(),
            });
        }
        batch.push((ident(name), req, upd));
    }
    let before = c.commit_count();
    let err = c.atomic_release_raw(batch).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts);
    assert_eq!(c.commit_count(), before, "no redb commit");
    for name in ["x", "y", "z"] {
        assert_eq!(snapshots(c, name).await, 0, "{name} must not advance");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_ident_and_empty_batch_write_nothing() {
    let f = open();
    let c = &f.catalog;
    let t = table(c, "x").await;
    let a = stage_fast_append(&t, files(&t, 0, 2).await).await.unwrap();
    let b = stage_fast_append(&t, files(&t, 2, 2).await).await.unwrap();
    let err = c
        .atomic_release_raw(vec![(ident("x"), a.0, a.1), (ident("x"), b.0, b.1)])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DataInvalid);
    assert!(err.to_string().contains("ns.x"), "{err}");
    let empty: Vec<skade::catalog::ReleaseEntry> = Vec::new();
    assert!(c.atomic_release_raw(empty).await.unwrap().is_empty());
    assert_eq!(c.commit_count(), 0);
    assert_eq!(snapshots(c, "x").await, 0);
}

/// The case that breaks naive optimistic checks: concurrent first commits into a table
/// with no snapshot yet. Every commit must succeed and be visible. RED once: without the
/// per-table commit lock, 8 racing commits exhausted iceberg's 4 retries and some
/// returned `CatalogCommitConflicts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_commits_lose_no_rows() {
    let f = open();
    let c = &f.catalog;
    let t = table(c, "fresh").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let data = files(&t, i * 100, 7).await;
            write::commit_files(c.as_ref(), &t, data).await.map(|_| ())
        }));
    }
    let mut ok = 0;
    for task in tasks {
        if task.await.unwrap().is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 8, "every concurrent commit lands");
    assert_eq!(row_count(c, "fresh").await, ok * 7);
    assert_eq!(snapshots(c, "fresh").await, ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.redb");
    let wh = dir.path().join("warehouse");
    {
        let c = RedbCatalog::open(&path, &wh).unwrap();
        let t = table(&c, "keep").await;
        let data = files(&t, 0, 9).await;
        write::commit_files(&c, &t, data).await.unwrap();
    }
    let c = RedbCatalog::open(&path, &wh).unwrap();
    assert_eq!(row_count(&c, "keep").await, 9);
    assert_eq!(
        c.list_tables(&NamespaceIdent::new("ns".into()))
            .await
            .unwrap(),
        vec![ident("keep")]
    );
    let err = c
        .drop_namespace(&NamespaceIdent::new("ns".into()))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::PreconditionFailed,
        "non-empty namespace"
    );
}

// Group commit: concurrent releases share one warehouse sync and one redb transaction.

/// Waits (≤ 30 s) until `n` releases are queued behind a [`RedbCatalog::pause_commits`].
async fn until_queued(catalog: &RedbCatalog, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while catalog.queued_commits() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {n} commits queued",
            catalog.queued_commits()
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// 16 streams' commits into 16 tables, released together by a barrier: every commit
/// lands (one snapshot and its rows per table), and the commits shared redb
/// transactions — fewer transactions (= fsyncs) than commits, one warehouse sync each.
///
/// RED once: with the committer taking one queued release per batch instead of all of
/// them, "16 concurrent commits made 16 redb transactions; expected fewer than 16".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_commits_share_redb_transactions() {
    let f = open();
    let c = &f.catalog;
    let mut prepared = Vec::new();
    for k in 0..16 {
        let t = table(c, &format!("g{k}")).await;
        let data = files(&t, k * 100, 5).await;
        prepared.push((t, data));
    }
    let (commits, syncs) = (c.commit_count(), c.sync_count());
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(16));
    let mut tasks = Vec::new();
    for (t, data) in prepared {
        let (c, barrier) = (c.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            write::commit_files(c.as_ref(), &t, data).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for k in 0..16 {
        let name = format!("g{k}");
        assert_eq!(snapshots(c, &name).await, 1, "{name}");
        assert_eq!(row_count(c, &name).await, 5, "{name}");
    }
    let transactions = c.commit_count() - commits;
    assert!(
        (1..16).contains(&transactions),
        "16 concurrent commits made {transactions} redb transactions; expected fewer than 16"
    );
    assert_eq!(
        c.sync_count() - syncs,
        transactions,
        "one warehouse sync per shared transaction"
    );
}

/// Ten releases queued behind a pause commit as ONE transaction; two of them were built
/// on the same base of one table, so the second one's compare-and-swap fails — as a
/// retryable conflict of its own, while the other nine commit.
///
/// RED once: with a failed compare-and-swap failing (and rolling back) the whole batch,
/// as the one-transaction-per-commit code did for its single commit, the first release
/// of ns.s failed too ("CatalogCommitConflicts ... table ns.s was committed
/// concurrently"), and with it every release of the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_release_in_a_shared_batch_fails_alone() {
    let f = open();
    let c = &f.catalog;
    let s = table(c, "s").await;
    let first = stage_fast_append(&s, files(&s, 0, 3).await).await.unwrap();
    let second = stage_fast_append(&s, files(&s, 3, 4).await).await.unwrap();
    let mut others = Vec::new();
    for k in 0..8 {
        let t = table(c, &format!("c{k}")).await;
        let (req, upd) = stage_fast_append(&t, files(&t, 0, 2).await).await.unwrap();
        others.push((ident(&format!("c{k}")), req, upd));
    }
    let (commits, syncs) = (c.commit_count(), c.sync_count());
    let pause = c.pause_commits();
    let release = |entry: skade::catalog::ReleaseEntry| {
        let c = c.clone();
        tokio::spawn(async move { c.atomic_release_raw(vec![entry]).await })
    };
    let first = release((ident("s"), first.0, first.1));
    until_queued(c, 1).await;
    let second = release((ident("s"), second.0, second.1));
    until_queued(c, 2).await;
    let others: Vec<_> = others.into_iter().map(release).collect();
    until_queued(c, 10).await;
    drop(pause);

    first.await.unwrap().unwrap();
    let err = second.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts, "{err}");
    assert!(err.retryable(), "{err}");
    for (k, task) in others.into_iter().enumerate() {
        let result = task.await.unwrap();
        assert!(result.is_ok(), "release of c{k}: {result:?}");
        assert_eq!(snapshots(c, &format!("c{k}")).await, 1);
    }
    assert_eq!(snapshots(c, "s").await, 1);
    assert_eq!(row_count(c, "s").await, 3, "the first release's rows only");
    assert_eq!(c.commit_count() - commits, 1, "one shared transaction");
    assert_eq!(c.sync_count() - syncs, 1, "one shared warehouse sync");
}

/// A multi-table release that shares its batch with single-table releases stays all or
/// nothing: its second table's base was moved by a release queued before it, so none of
/// its tables advances — while the single-table releases of the batch commit.
///
/// RED once: with each flip checked and written in turn (instead of checking all of a
/// release's flips before writing any), the multi-table release's first table advanced
/// although the release failed ("m.q must not advance — left: 1, right: 0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_table_release_in_a_shared_batch_stays_all_or_nothing() {
    let f = open();
    let c = &f.catalog;
    let p = table(c, "p").await;
    let q = table(c, "q").await;
    let r = table(c, "r").await;
    let on_p = stage_fast_append(&p, files(&p, 0, 3).await).await.unwrap();
    let also_on_p = stage_fast_append(&p, files(&p, 3, 3).await).await.unwrap();
    let on_q = stage_fast_append(&q, files(&q, 0, 3).await).await.unwrap();
    let on_r = stage_fast_append(&r, files(&r, 0, 3).await).await.unwrap();
    let commits = c.commit_count();
    let pause = c.pause_commits();
    let release = |batch: Vec<skade::catalog::ReleaseEntry>| {
        let c = c.clone();
        tokio::spawn(async move { c.atomic_release_raw(batch).await })
    };
    let single_p = release(vec![(ident("p"), on_p.0, on_p.1)]);
    until_queued(c, 1).await;
    let multi = release(vec![
        (ident("q"), on_q.0, on_q.1),
        (ident("p"), also_on_p.0, also_on_p.1),
    ]);
    until_queued(c, 2).await;
    let single_r = release(vec![(ident("r"), on_r.0, on_r.1)]);
    until_queued(c, 3).await;
    drop(pause);

    single_p.await.unwrap().unwrap();
    single_r.await.unwrap().unwrap();
    let err = multi.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts, "{err}");
    assert_eq!(snapshots(c, "q").await, 0, "m.q must not advance");
    assert_eq!(snapshots(c, "p").await, 1);
    assert_eq!(snapshots(c, "r").await, 1);
    assert_eq!(c.commit_count() - commits, 1, "one shared transaction");
}

/// The metadata cache never outlives the pointer: a table dropped and re-registered at an
/// older metadata location loads that location's metadata, not the cached newer one.
///
/// RED once: with the cache answering without comparing the location and `drop_table`
/// not forgetting the table, the load returned the cached metadata with its snapshot
/// ("load reads the re-registered location — left: 1, right: 0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_follows_the_pointer_not_the_cache() {
    let f = open();
    let c = &f.catalog;
    let t = table(c, "m").await;
    let old_location = t.metadata_location().unwrap().to_string();
    let data = files(&t, 0, 4).await;
    let t = write::commit_files(c.as_ref(), &t, data).await.unwrap();
    assert_eq!(t.metadata().snapshots().count(), 1);
    c.drop_table(&ident("m")).await.unwrap();
    let registered = c.register_table(&ident("m"), old_location).await.unwrap();
    assert_eq!(registered.metadata().snapshots().count(), 0);
    assert_eq!(
        snapshots(c, "m").await,
        0,
        "load reads the re-registered location"
    );
}

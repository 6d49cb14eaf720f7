//! Many clients at once through the real server on 127.0.0.1:0: 16 streams into one
//! table, 16 into 16 tables, 8 puts into a fresh table with no snapshot, and a multi-table
//! Flight SQL transaction racing a streaming put on one of its tables. Each checks that
//! no row is lost or doubled (ids unique and complete), that every commit is exactly one
//! snapshot, and that `/metrics` agrees with what a reader sees.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::EndTransaction;
use common::{
    TestServer, ingest_cmd, metric, put, put_with_schema, sql_client, synthetic_batch,
    synthetic_schema, within,
};
use futures::{StreamExt, TryStreamExt};
use iceberg::{Catalog, TableIdent};
use prost::Message;
use skade::proto::CommitAck;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Rows per batch; every batch is one data file (`--target-file-size 1`).
const ROWS: usize = 50;

/// A server whose every batch is one data file and every 2 files one commit.
async fn small_commits_server() -> TestServer {
    TestServer::start_with(|c| {
        c.ingest.target_file_size = 1;
        c.ingest.files_per_commit = 2.try_into().unwrap();
        c.ingest.commit_interval = Duration::from_secs(3600);
    })
    .await
}

fn ident(ns: &str, table: &str) -> TableIdent {
    TableIdent::from_strs([ns, table]).unwrap()
}

/// `batches` batches of [`ROWS`] rows with ids from `first_id` on.
fn batches(first_id: i64, batches: usize) -> Vec<RecordBatch> {
    (0..batches)
        .map(|b| synthetic_batch(first_id + (b * ROWS) as i64, ROWS))
        .collect()
}

/// What a reader sees in a table: its ids (sorted, duplicates kept), its snapshot count,
/// and the data files of the current snapshot.
struct Seen {
    ids: Vec<i64>,
    snapshots: usize,
    data_files: usize,
}

async fn seen(server: &TestServer, table: &TableIdent) -> Seen {
    let table = server
        .running
        .service
        .catalog
        .load_table(table)
        .await
        .unwrap();
    let scan = table.scan().build().unwrap();
    let data_files = scan
        .plan_files()
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await;
    let batches: Vec<RecordBatch> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut ids = Vec::new();
    for batch in &batches {
        let column = batch.column_by_name("id").unwrap();
        let column = column.as_any().downcast_ref::<Int64Array>().unwrap();
        ids.extend(column.values().iter().copied());
    }
    ids.sort_unstable();
    Seen {
        ids,
        snapshots: table.metadata().snapshots().count(),
        data_files: data_files.unwrap().len(),
    }
}

/// Asserts `ids` holds every id of `expected` exactly once and nothing else.
fn assert_exactly(ids: &[i64], expected: &BTreeSet<i64>, what: &str) {
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "{what}: doubled rows");
    let lost = expected.difference(&unique).count();
    let extra = unique.difference(expected).count();
    assert_eq!((lost, extra), (0, 0), "{what}: lost rows, unexpected rows");
}

async fn metrics(server: &TestServer) -> String {
    server.http_get("/metrics").await.1
}

/// 16 streams at once into ONE table, each 6 files = 3 commits: all 4800 rows there once,
/// 48 snapshots, and `/metrics` commits, syncs, rows and files equal what a reader sees.
///
/// RED once: with the catalog's compare-and-swap disabled (`release` no longer comparing
/// the stored pointer with the commit's base) and the per-table commit lock removed from
/// `commit_files`, concurrent commits overwrote each other's pointer and rows were lost
/// ("conc.one: lost rows, unexpected rows — left: (1100, 0)").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_streams_into_one_table_lose_and_double_nothing() {
    let server = small_commits_server().await;
    let mut tasks = Vec::new();
    for k in 0..16i64 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            put(&mut client, &["conc", "one"], batches(k * 1_000_000, 6)).await
        }));
    }
    let mut commits = 0;
    let mut expected = BTreeSet::new();
    for (k, task) in tasks.into_iter().enumerate() {
        let acks = within(120, task).await.unwrap().unwrap();
        let last = acks.last().unwrap();
        assert!(last.r#final);
        assert_eq!(last.committed_rows, 6 * ROWS as u64, "stream {k}");
        assert_eq!(last.commits, 3, "stream {k}: 6 files, 2 per commit");
        assert_eq!(
            acks.len(),
            4,
            "stream {k}: one ack per commit and a final one"
        );
        commits += last.commits;
        let first = k as i64 * 1_000_000;
        expected.extend(first..first + 6 * ROWS as i64);
    }
    let seen = seen(&server, &ident("conc", "one")).await;
    assert_exactly(&seen.ids, &expected, "conc.one");
    assert_eq!(seen.snapshots as u64, commits, "one snapshot per commit");
    assert_eq!(seen.data_files, 16 * 6);

    let body = metrics(&server).await;
    assert_eq!(metric(&body, "skade_catalog_commits_total"), commits as f64);
    assert_eq!(
        metric(&body, "skade_file_syncs_total"),
        commits as f64,
        "one warehouse sync per commit: no commit lost a race in-process"
    );
    assert_eq!(
        metric(&body, r#"skade_rows_committed_total{table="conc.one"}"#),
        seen.ids.len() as f64
    );
    assert_eq!(
        metric(
            &body,
            r#"skade_data_files_committed_total{table="conc.one"}"#
        ),
        seen.data_files as f64
    );
    assert_eq!(
        metric(
            &body,
            r#"skade_commit_duration_seconds_count{lane="stream"}"#
        ),
        commits as f64
    );
    assert_eq!(metric(&body, "skade_put_streams_active"), 0.0);
    server.stop().await;
}

/// 16 streams at once into 16 tables: each table holds exactly its stream's rows in 3
/// snapshots, and the per-table counters match; the commits shared redb transactions
/// (at most one per commit, one warehouse sync each).
///
/// RED once: with `record_commit` counting every table's rows under one fixed label
/// (`"conc.t0"`), the check of t0 failed ("t0 — left: 4800.0, right: 300.0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_streams_into_sixteen_tables_lose_and_double_nothing() {
    let server = small_commits_server().await;
    let mut tasks = Vec::new();
    for k in 0..16i64 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            let table = format!("t{k}");
            put(&mut client, &["conc", &table], batches(k * 1_000_000, 6)).await
        }));
    }
    let mut commits = 0;
    for task in tasks {
        let acks = within(120, task).await.unwrap().unwrap();
        commits += acks.last().unwrap().commits;
    }
    assert_eq!(commits, 16 * 3);
    let body = metrics(&server).await;
    for k in 0..16i64 {
        let name = format!("t{k}");
        let seen = seen(&server, &ident("conc", &name)).await;
        let first = k * 1_000_000;
        assert_exactly(
            &seen.ids,
            &(first..first + 6 * ROWS as i64).collect(),
            &name,
        );
        assert_eq!(seen.snapshots, 3, "{name}: one snapshot per commit");
        let label = format!("{{table=\"conc.{name}\"}}");
        assert_eq!(
            metric(&body, &format!("skade_rows_committed_total{label}")),
            seen.ids.len() as f64,
            "{name}"
        );
        assert_eq!(
            metric(&body, &format!("skade_data_files_committed_total{label}")),
            seen.data_files as f64,
            "{name}"
        );
    }
    // Commits of different tables that run at the same time share one redb transaction
    // (group commit): the counter counts transactions (= fsyncs), at most one per commit,
    // each with its one warehouse sync.
    let transactions = metric(&body, "skade_catalog_commits_total");
    assert!(
        (1.0..=commits as f64).contains(&transactions),
        "{transactions} transactions for {commits} commits"
    );
    assert_eq!(metric(&body, "skade_file_syncs_total"), transactions);
    server.stop().await;
}

/// The case that breaks naive optimistic checks, through the server: a table created by
/// a schema-only put (no snapshot yet), then 8 puts at once, each one commit. Every put
/// returns OK and all their rows are there, in 8 snapshots.
///
/// RED once: with the per-table commit lock removed from `commit_files` and the catalog's
/// pointer compare-and-swap disabled (so only iceberg's requirement check, made before
/// the flip, guards the race), first commits overwrote each other ("conc.fresh: lost
/// rows, unexpected rows — left: (300, 0)"). (Without the lock alone, iceberg's retries
/// still landed every put.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_puts_into_a_fresh_table_without_a_snapshot_all_land() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acks = put_with_schema(&mut client, &["conc", "fresh"], synthetic_schema(), vec![])
        .await
        .unwrap();
    assert_eq!(acks.last().unwrap().commits, 0);
    assert_eq!(seen(&server, &ident("conc", "fresh")).await.snapshots, 0);

    let mut tasks = Vec::new();
    for k in 0..8i64 {
        let mut client = server.client().await;
        tasks.push(tokio::spawn(async move {
            put(&mut client, &["conc", "fresh"], batches(k * 1_000_000, 3)).await
        }));
    }
    let mut expected = BTreeSet::new();
    for (k, task) in tasks.into_iter().enumerate() {
        let acks = within(120, task).await.unwrap().unwrap();
        assert_eq!(acks.last().unwrap().commits, 1, "put {k}");
        let first = k as i64 * 1_000_000;
        expected.extend(first..first + 3 * ROWS as i64);
    }
    let seen = seen(&server, &ident("conc", "fresh")).await;
    assert_exactly(&seen.ids, &expected, "conc.fresh");
    assert_eq!(seen.snapshots, 8);
    let body = metrics(&server).await;
    assert_eq!(metric(&body, "skade_catalog_commits_total"), 8.0);
    server.stop().await;
}

/// A two-table Flight SQL transaction committing while a streaming put commits to one
/// of its tables every batch, five rounds: the transaction and the put both land every
/// time, the transaction's tables each gain exactly one snapshot per round, and no row
/// is lost or doubled.
///
/// RED once: before `commit_staged` took the tables' commit turns, its four re-stages
/// all lost to the put, which kept moving the pointer: round 1's COMMIT failed `Aborted`
/// ("CatalogCommitConflicts ... Branch or tag `main`'s snapshot has changed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_racing_a_put_on_one_of_its_tables_both_land() {
    let server = TestServer::start_with(|c| {
        c.ingest.target_file_size = 1;
        c.ingest.files_per_commit = 1.try_into().unwrap();
        // Counts snapshots and commits exactly: no expiry, merge or compaction commits.
        c.maintenance.enabled = false;
    })
    .await;
    // Both tables exist (without snapshots) before the race: a transaction that creates
    // a table another writer creates meanwhile fails `AlreadyExists` (`docs/SERVICE.md`,
    // "Lane 2 — atomic multi-table flush (Flight SQL, ADBC-compatible)").
    let mut client = server.client().await;
    for table in ["a", "b"] {
        put_with_schema(&mut client, &["race", table], synthetic_schema(), vec![])
            .await
            .unwrap();
    }
    let mut expected_a = BTreeSet::new();
    let mut expected_b = BTreeSet::new();
    let mut put_commits = 0;
    for round in 0..5i64 {
        let base = round * 10_000_000;
        // Stage the transaction: rows in race.a and race.b.
        let mut sql = sql_client(&server).await;
        let txn = sql.begin_transaction().await.unwrap();
        for (table, first) in [("a", base), ("b", base + 1_000_000)] {
            let rows = within(
                60,
                sql.execute_ingest(
                    ingest_cmd("race", table, Some(&txn)),
                    futures::stream::iter([Ok(synthetic_batch(first, 100))]),
                ),
            )
            .await
            .unwrap();
            assert_eq!(rows, 100);
        }
        expected_a.extend(base..base + 100);
        expected_b.extend(base + 1_000_000..base + 1_000_100);

        // A streaming put into race.a that commits every batch while the COMMIT runs.
        let mut client = server.client().await;
        let (batch_tx, batch_rx) = mpsc::channel::<RecordBatch>(2);
        let data = FlightDataEncoderBuilder::new()
            .with_schema(synthetic_schema())
            .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
                "race".into(),
                "a".into(),
            ])))
            .build(ReceiverStream::new(batch_rx).map(Ok));
        let put = tokio::spawn(async move {
            let results: Vec<_> = client.do_put(data).await?.try_collect().await?;
            Ok::<_, arrow_flight::error::FlightError>(results)
        });
        let first_put_id = base + 5_000_000;
        batch_tx
            .send(synthetic_batch(first_put_id, 10))
            .await
            .unwrap();
        let feeder = tokio::spawn(async move {
            let mut next = first_put_id + 10;
            for _ in 0..30 {
                if batch_tx.send(synthetic_batch(next, 10)).await.is_err() {
                    break;
                }
                next += 10;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            next
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let committed = within(60, sql.end_transaction(txn, EndTransaction::Commit)).await;
        assert!(committed.is_ok(), "round {round}: COMMIT {committed:?}");
        let end = within(60, feeder).await.unwrap();
        let results = within(60, put).await.unwrap().unwrap();
        let last = CommitAck::decode(results.last().unwrap().app_metadata.clone()).unwrap();
        assert!(last.r#final);
        assert_eq!(
            last.committed_rows as i64,
            end - first_put_id,
            "round {round}"
        );
        put_commits += last.commits;
        expected_a.extend(first_put_id..end);
    }
    let a = seen(&server, &ident("race", "a")).await;
    let b = seen(&server, &ident("race", "b")).await;
    assert_exactly(&a.ids, &expected_a, "race.a");
    assert_exactly(&b.ids, &expected_b, "race.b");
    assert_eq!(
        a.snapshots as u64,
        put_commits + 5,
        "puts' commits + one per round"
    );
    assert_eq!(b.snapshots, 5);
    let body = metrics(&server).await;
    assert_eq!(
        metric(&body, "skade_catalog_commits_total"),
        (put_commits + 5) as f64
    );
    assert_eq!(
        metric(&body, r#"skade_rows_committed_total{table="race.a"}"#),
        a.ids.len() as f64
    );
    assert_eq!(
        metric(&body, r#"skade_rows_committed_total{table="race.b"}"#),
        b.ids.len() as f64
    );
    server.stop().await;
}

//! Lane 2 over the wire: the Flight SQL subset through arrow-flight's own
//! `FlightSqlServiceClient` against a real server on 127.0.0.1:0 — transactions by id and
//! by session, commit as ONE catalog commit, rollback, idle timeout, failed ingests,
//! table definition options, concurrent transactions on one table, `GetSqlInfo`, and the
//! `--max-streams` slot an abandoned ingest keeps until it ends.

use crate::common;

use std::time::Duration;

use arrow_array::{Array, BooleanArray, Int32Array, RecordBatch, UInt32Array, UnionArray};
use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandStatementIngest, EndTransaction, SqlInfo, TableDefinitionOptions, TableExistsOption,
    TableNotExistOption,
};
use bytes::Bytes;
use common::{TestServer, ingest_cmd, metric, sql_client, status_of, synthetic_batch, within};
use futures::{StreamExt, TryStreamExt};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use tonic::Code;
use tonic::transport::Channel;

async fn ingest(
    client: &mut FlightSqlServiceClient<Channel>,
    cmd: CommandStatementIngest,
    batches: Vec<RecordBatch>,
) -> Result<i64, FlightError> {
    client
        .execute_ingest(cmd, futures::stream::iter(batches.into_iter().map(Ok)))
        .await
}

fn ident(ns: &str, table: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(ns.into()), table.into())
}

async fn commits(server: &TestServer) -> f64 {
    metric(
        &server.http_get("/metrics").await.1,
        "skade_catalog_commits_total",
    )
}

async fn active(server: &TestServer) -> f64 {
    metric(
        &server.http_get("/metrics").await.1,
        "skade_transactions_active",
    )
}

/// Rows of the table's current snapshot, or `None` when the table does not exist.
async fn rows(server: &TestServer, ns: &str, table: &str) -> Option<usize> {
    let catalog = &server.running.service.catalog;
    let table = match catalog.load_table(&ident(ns, table)).await {
        Ok(table) => table,
        Err(_) => return None,
    };
    let batches: Vec<RecordBatch> = common::scan(&table, None).await;
    Some(common::count(&batches))
}

async fn snapshots(server: &TestServer, ns: &str, table: &str) -> usize {
    let catalog = &server.running.service.catalog;
    catalog
        .load_table(&ident(ns, table))
        .await
        .unwrap()
        .metadata()
        .snapshots()
        .count()
}

/// Three tables (one of them ingested twice) staged in one transaction by explicit id:
/// invisible until COMMIT, then ONE catalog commit; each table gains exactly one snapshot
/// (the table ingested twice holds both ingests' rows in it). A second COMMIT of the same
/// id is FailedPrecondition; an id never given out is NotFound.
///
/// RED once: with `Transactions::commit` temporarily committing each staged table through
/// its own `commit_staged` call, the counter advanced by 3 ("left: 3.0, right: 1.0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_commits_every_table_in_one_catalog_commit() {
    let server = TestServer::start().await;
    let mut client = sql_client(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    assert_eq!(txn.len(), 16, "a UUID");
    assert_eq!(active(&server).await, 1.0);

    for (table, first) in [("a", 0), ("b", 1000), ("c", 2000), ("a", 3000)] {
        let n = within(
            60,
            ingest(
                &mut client,
                ingest_cmd("multi", table, Some(&txn)),
                vec![synthetic_batch(first, 100)],
            ),
        )
        .await
        .unwrap();
        assert_eq!(n, 100, "DoPutUpdateResult.record_count");
    }
    assert_eq!(
        commits(&server).await,
        0.0,
        "nothing committed before COMMIT"
    );
    for table in ["a", "b", "c"] {
        assert_eq!(rows(&server, "multi", table).await, None, "{table} visible");
    }

    within(
        60,
        client.end_transaction(txn.clone(), EndTransaction::Commit),
    )
    .await
    .unwrap();
    assert_eq!(
        commits(&server).await,
        1.0,
        "one catalog commit for 3 tables"
    );
    assert_eq!(active(&server).await, 0.0);
    for (table, n) in [("a", 200), ("b", 100), ("c", 100)] {
        assert_eq!(rows(&server, "multi", table).await, Some(n), "{table}");
        assert_eq!(snapshots(&server, "multi", table).await, 1, "{table}");
    }
    let body = server.http_get("/metrics").await.1;
    assert!(
        body.contains("skade_commit_duration_seconds_count{lane=\"multi\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("skade_rows_committed_total{table=\"multi.a\"} 200"),
        "{body}"
    );

    let err = client
        .end_transaction(txn.clone(), EndTransaction::Commit)
        .await
        .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(message.contains("was committed"), "{message}");
    let err = client
        .end_transaction(Bytes::from_static(&[7; 16]), EndTransaction::Commit)
        .await
        .unwrap_err();
    assert_eq!(code_of(err), Code::NotFound);
    let err = ingest(
        &mut client,
        ingest_cmd("multi", "a", Some(&Bytes::from_static(&[7; 16]))),
        vec![synthetic_batch(0, 1)],
    )
    .await
    .unwrap_err();
    assert_eq!(
        code_of(err),
        Code::NotFound,
        "unknown id is never an autocommit"
    );
    assert_eq!(rows(&server, "multi", "a").await, Some(200));
    server.stop().await;
}

fn code_of(err: FlightError) -> Code {
    status_of(err).0
}

/// ROLLBACK: nothing visible (not even the new tables), the staged files are deleted, the
/// commit counter does not move; an ingest naming the finished id is FailedPrecondition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_makes_nothing_visible_and_deletes_the_staged_files() {
    let server = TestServer::start().await;
    let mut client = sql_client(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    for table in ["x", "y"] {
        ingest(
            &mut client,
            ingest_cmd("rb", table, Some(&txn)),
            vec![synthetic_batch(0, 50)],
        )
        .await
        .unwrap();
    }
    assert_eq!(common::parquet_files(&server.warehouse()).len(), 2);
    client
        .end_transaction(txn.clone(), EndTransaction::Rollback)
        .await
        .unwrap();
    assert!(common::parquet_files(&server.warehouse()).is_empty());
    assert_eq!(commits(&server).await, 0.0);
    assert_eq!(rows(&server, "rb", "x").await, None);
    assert!(
        !server
            .running
            .service
            .catalog
            .namespace_exists(&NamespaceIdent::new("rb".into()))
            .await
            .unwrap()
    );
    let err = ingest(
        &mut client,
        ingest_cmd("rb", "x", Some(&txn)),
        vec![synthetic_batch(0, 1)],
    )
    .await
    .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(message.contains("rolled back"), "{message}");
    server.stop().await;
}

/// The ADBC driver's way: no transaction id on the ingest. The ingest joins the
/// connection's open transaction; after COMMIT (and no new BeginTransaction) an ingest
/// without id is an autocommit again. `CloseSession` rolls back the open one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_without_id_joins_its_connections_transaction() {
    let server = TestServer::start().await;
    let mut client = sql_client(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    ingest(
        &mut client,
        ingest_cmd("s", "t", None),
        vec![synthetic_batch(0, 10)],
    )
    .await
    .unwrap();
    // Another connection has no transaction: its ingest is an autocommit.
    let mut other = sql_client(&server).await;
    ingest(
        &mut other,
        ingest_cmd("s", "u", None),
        vec![synthetic_batch(0, 5)],
    )
    .await
    .unwrap();
    assert_eq!(rows(&server, "s", "u").await, Some(5), "autocommit");
    assert_eq!(rows(&server, "s", "t").await, None, "still staged");
    assert_eq!(commits(&server).await, 1.0);

    client
        .end_transaction(txn, EndTransaction::Commit)
        .await
        .unwrap();
    assert_eq!(rows(&server, "s", "t").await, Some(10));
    assert_eq!(commits(&server).await, 2.0);
    ingest(
        &mut client,
        ingest_cmd("s", "t", None),
        vec![synthetic_batch(10, 10)],
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&server, "s", "t").await,
        Some(20),
        "autocommit after commit"
    );

    // CloseSession rolls back the session's open transaction.
    client.begin_transaction().await.unwrap();
    ingest(
        &mut client,
        ingest_cmd("s", "t", None),
        vec![synthetic_batch(20, 10)],
    )
    .await
    .unwrap();
    let results: Vec<_> = client
        .do_action(arrow_flight::Action::new("CloseSession", Bytes::new()))
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(active(&server).await, 0.0);
    assert_eq!(rows(&server, "s", "t").await, Some(20));
    server.stop().await;
}

/// A transaction whose third ingest fails (schema mismatch with an existing table): the
/// ingest is InvalidArgument naming the column, COMMIT is Aborted, nothing of the
/// transaction is visible and its staged files are gone. Until the client rolls back, an
/// ingest without id on that connection is refused rather than autocommitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ingest_aborts_the_whole_transaction() {
    let server = TestServer::start().await;
    let mut client = sql_client(&server).await;
    let existing = arrow_array::record_batch!(("id", Int64, [1, 2, 3])).unwrap();
    ingest(
        &mut client,
        ingest_cmd("f", "existing", None),
        vec![existing],
    )
    .await
    .unwrap();
    assert_eq!(commits(&server).await, 1.0);
    let files_before = common::parquet_files(&server.warehouse()).len();

    let txn = client.begin_transaction().await.unwrap();
    for table in ["one", "two"] {
        ingest(
            &mut client,
            ingest_cmd("f", table, None),
            vec![synthetic_batch(0, 10)],
        )
        .await
        .unwrap();
    }
    let err = ingest(
        &mut client,
        ingest_cmd("f", "existing", None),
        vec![synthetic_batch(0, 10)],
    )
    .await
    .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.contains("column \"ts\""), "{message}");

    let err = ingest(
        &mut client,
        ingest_cmd("f", "three", None),
        vec![synthetic_batch(0, 10)],
    )
    .await
    .unwrap_err();
    assert_eq!(code_of(err), Code::Aborted, "no autocommit after a failure");
    let err = client
        .end_transaction(txn.clone(), EndTransaction::Commit)
        .await
        .unwrap_err();
    let (code, message) = status_of(err);
    assert!(
        matches!(code, Code::Aborted | Code::FailedPrecondition),
        "{code:?} {message}"
    );
    assert_eq!(commits(&server).await, 1.0);
    for table in ["one", "two", "three"] {
        assert_eq!(rows(&server, "f", table).await, None, "{table}");
    }
    assert_eq!(rows(&server, "f", "existing").await, Some(3));
    assert_eq!(
        common::parquet_files(&server.warehouse()).len(),
        files_before,
        "staged files deleted"
    );
    // Still tied to the failed transaction until it rolls back.
    let err = ingest(
        &mut client,
        ingest_cmd("f", "three", None),
        vec![synthetic_batch(0, 10)],
    )
    .await
    .unwrap_err();
    assert_eq!(code_of(err), Code::FailedPrecondition);
    client
        .end_transaction(txn, EndTransaction::Rollback)
        .await
        .unwrap();
    ingest(
        &mut client,
        ingest_cmd("f", "three", None),
        vec![synthetic_batch(0, 10)],
    )
    .await
    .unwrap();
    assert_eq!(rows(&server, "f", "three").await, Some(10));
    server.stop().await;
}

/// An idle transaction is rolled back after `--transaction-timeout`: the gauge drops to
/// 0, its files are deleted, COMMIT says it timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_transaction_times_out_and_rolls_back() {
    let server = TestServer::start_with(|c| {
        c.ingest.transaction_timeout = Duration::from_millis(300);
    })
    .await;
    let mut client = sql_client(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    ingest(
        &mut client,
        ingest_cmd("idle", "t", None),
        vec![synthetic_batch(0, 10)],
    )
    .await
    .unwrap();
    within(10, async {
        while active(&server).await != 0.0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(common::parquet_files(&server.warehouse()).is_empty());
    let err = client
        .end_transaction(txn, EndTransaction::Commit)
        .await
        .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(message.contains("idle timeout"), "{message}");
    assert_eq!(rows(&server, "idle", "t").await, None);
    assert_eq!(commits(&server).await, 0.0);
    server.stop().await;
}

/// `table_definition_options`: FAIL on a missing table is NotFound, FAIL on an existing
/// one AlreadyExists, REPLACE replaces the rows of the same table; `temporary` and a
/// catalog are refused; bad names are InvalidArgument. Nothing is written by a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_definition_options_are_honoured() {
    let server = TestServer::start().await;
    let mut client = sql_client(&server).await;
    let with = |if_not_exist: TableNotExistOption, if_exists: TableExistsOption, table: &str| {
        let mut cmd = ingest_cmd("opt", table, None);
        cmd.table_definition_options = Some(TableDefinitionOptions {
            if_not_exist: if_not_exist as i32,
            if_exists: if_exists as i32,
        });
        cmd
    };
    let batch = || vec![synthetic_batch(0, 3)];
    let err = ingest(
        &mut client,
        with(TableNotExistOption::Fail, TableExistsOption::Append, "t"),
        batch(),
    )
    .await
    .unwrap_err();
    assert_eq!(code_of(err), Code::NotFound);
    ingest(
        &mut client,
        with(TableNotExistOption::Create, TableExistsOption::Fail, "t"),
        batch(),
    )
    .await
    .unwrap();
    let err = ingest(
        &mut client,
        with(TableNotExistOption::Create, TableExistsOption::Fail, "t"),
        batch(),
    )
    .await
    .unwrap_err();
    assert_eq!(code_of(err), Code::AlreadyExists);
    // REPLACE: the table's rows are the stream's (3 replace 3).
    let uuid = server.table(&["opt", "t"]).await.metadata().uuid();
    ingest(
        &mut client,
        with(TableNotExistOption::Create, TableExistsOption::Replace, "t"),
        batch(),
    )
    .await
    .unwrap();
    assert_eq!(rows(&server, "opt", "t").await, Some(3));
    assert_eq!(server.table(&["opt", "t"]).await.metadata().uuid(), uuid);
    ingest(
        &mut client,
        with(TableNotExistOption::Fail, TableExistsOption::Append, "t"),
        batch(),
    )
    .await
    .unwrap();
    assert_eq!(rows(&server, "opt", "t").await, Some(6));

    let mut temporary = ingest_cmd("opt", "tmp", None);
    temporary.temporary = true;
    assert_eq!(
        code_of(ingest(&mut client, temporary, batch()).await.unwrap_err()),
        Code::Unimplemented
    );
    let mut catalog = ingest_cmd("opt", "cat", None);
    catalog.catalog = Some("other".into());
    assert_eq!(
        code_of(ingest(&mut client, catalog, batch()).await.unwrap_err()),
        Code::InvalidArgument
    );
    for (ns, table) in [("opt", "bad name"), ("..", "t"), ("opt", "")] {
        let err = ingest(&mut client, ingest_cmd(ns, table, None), batch())
            .await
            .unwrap_err();
        assert_eq!(code_of(err), Code::InvalidArgument, "{ns}.{table}");
    }
    // The create, the replace and the append.
    assert_eq!(commits(&server).await, 3.0);
    server.stop().await;
}

/// Two transactions committing to the same table at once: appends commute, so the
/// loser re-stages on the winner's snapshot. No row is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_on_one_table_both_land() {
    let server = TestServer::start().await;
    let mut setup = sql_client(&server).await;
    ingest(
        &mut setup,
        ingest_cmd("c", "t", None),
        vec![synthetic_batch(0, 1)],
    )
    .await
    .unwrap();
    let mut clients = Vec::new();
    for i in 0..4 {
        let mut client = sql_client(&server).await;
        let txn = client.begin_transaction().await.unwrap();
        ingest(
            &mut client,
            ingest_cmd("c", "t", Some(&txn)),
            vec![synthetic_batch(i * 100, 25)],
        )
        .await
        .unwrap();
        ingest(
            &mut client,
            ingest_cmd("c", &format!("side{i}"), Some(&txn)),
            vec![synthetic_batch(0, 5)],
        )
        .await
        .unwrap();
        clients.push((client, txn));
    }
    let commits_before = commits(&server).await;
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|(mut client, txn)| {
            tokio::spawn(async move { client.end_transaction(txn, EndTransaction::Commit).await })
        })
        .collect();
    for task in tasks {
        within(60, task).await.unwrap().unwrap();
    }
    assert_eq!(commits(&server).await - commits_before, 4.0);
    assert_eq!(rows(&server, "c", "t").await, Some(1 + 4 * 25));
    assert_eq!(snapshots(&server, "c", "t").await, 5);
    server.stop().await;
}

/// `GetSqlInfo` advertises what the ADBC driver checks (it asks for
/// FLIGHT_SQL_SERVER_TRANSACTION only, in 1.13) and the rest of the ingest support.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_info_advertises_ingest_and_transactions() {
    let server = TestServer::start().await;
    let mut client = sql_client(&server).await;
    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerTransaction,
            SqlInfo::FlightSqlServerBulkIngestion,
            SqlInfo::FlightSqlServerIngestTransactionsSupported,
        ])
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let batches: Vec<RecordBatch> = client
        .do_get(ticket)
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let batch = arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap();
    assert_eq!(batch.num_rows(), 3);
    let names = batch
        .column(0)
        .as_any()
        .downcast_ref::<UInt32Array>()
        .unwrap();
    let values = batch
        .column(1)
        .as_any()
        .downcast_ref::<UnionArray>()
        .unwrap();
    let mut seen = Vec::new();
    for row in 0..batch.num_rows() {
        let value = values.value(row);
        let shown = if let Some(v) = value.as_any().downcast_ref::<Int32Array>() {
            format!("int32 {}", v.value(0))
        } else if let Some(v) = value.as_any().downcast_ref::<BooleanArray>() {
            format!("bool {}", v.value(0))
        } else {
            format!("{:?}", value.data_type())
        };
        seen.push((names.value(row), shown));
    }
    // 8 = FLIGHT_SQL_SERVER_TRANSACTION → 1 (TRANSACTION); 10, 11 → true.
    assert_eq!(
        seen,
        vec![
            (8, "int32 1".to_string()),
            (10, "bool true".to_string()),
            (11, "bool true".to_string()),
        ]
    );
    server.stop().await;
}

/// Polls `cond` every 10 ms until it holds (the enclosing `within` bounds the wait).
async fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A Flight SQL ingest keeps its `--max-streams` slot until the server has finished it,
/// even after its client went away: the limit counts the ingests the server still runs.
/// Ingest A holds the transaction open; ingest B of the same transaction waits for A, and
/// B's client gives up; while B's ingest still waits, a third put is over the limit.
/// RED once: with the handler (not the ingest task) holding the permit, B's slot came
/// back when its client left, and the third put was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_ingest_keeps_its_stream_slot_until_it_ends() {
    let server = TestServer::start_with(|c| {
        c.ingest.max_streams = 2.try_into().expect("non-zero");
    })
    .await;
    let streams = server.running.service.streams.clone();
    within(60, async {
        let mut client = sql_client(&server).await;
        let txn = client.begin_transaction().await.unwrap();

        // A: its stream stays open, so its ingest holds the transaction.
        let (a_batches, a_rx) = tokio::sync::mpsc::channel(4);
        let (mut a_client, a_cmd) = (client.clone(), ingest_cmd("slot", "a", Some(&txn)));
        let a = tokio::spawn(async move {
            a_client
                .execute_ingest(
                    a_cmd,
                    tokio_stream::wrappers::ReceiverStream::new(a_rx).map(Ok),
                )
                .await
        });
        a_batches.send(synthetic_batch(0, 10)).await.unwrap();
        until(|| streams.available_permits() == 1).await;
        // Let A's task take the transaction before B asks for it.
        tokio::time::sleep(Duration::from_millis(500)).await;

        // B: same transaction, so its ingest waits for A; its client then goes away.
        let (b_batches, b_rx) = tokio::sync::mpsc::channel(4);
        let (mut b_client, b_cmd) = (client.clone(), ingest_cmd("slot", "b", Some(&txn)));
        let b = tokio::spawn(async move {
            b_client
                .execute_ingest(
                    b_cmd,
                    tokio_stream::wrappers::ReceiverStream::new(b_rx).map(Ok),
                )
                .await
        });
        b_batches.send(synthetic_batch(0, 10)).await.unwrap();
        until(|| streams.available_permits() == 0).await;
        b.abort();
        let _ = b.await;
        drop(b_batches);
        // Give the server time to notice B's reset (the handler is dropped at once).
        tokio::time::sleep(Duration::from_millis(300)).await;

        // B's ingest still waits for A: its slot is still taken.
        let mut third = sql_client(&server).await;
        let (code, message) = status_of(
            ingest(
                &mut third,
                ingest_cmd("slot", "c", None),
                vec![synthetic_batch(0, 10)],
            )
            .await
            .expect_err("a third stream over --max-streams 2"),
        );
        assert_eq!(code, Code::ResourceExhausted, "{message}");

        // A ends; B's ingest then sees its client gone and ends too: both slots return.
        drop(a_batches);
        let _ = a.await;
        until(|| streams.available_permits() == 2).await;
        ingest(
            &mut third,
            ingest_cmd("slot", "c", None),
            vec![synthetic_batch(0, 10)],
        )
        .await
        .expect("a put once the slots are back");
    })
    .await;
    server.stop().await;
}

//! The service end to end: a real server on 127.0.0.1:0, the Rust Flight client, real
//! files on disk; restart on the same data dir.

use crate::common;

use common::{TestServer, count, get, metric, put, rows_of, synthetic_batch, within};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_returns_the_same_rows_and_survives_restart() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let batches: Vec<_> = (0..5).map(|i| synthetic_batch(i * 1000, 1000)).collect();
    let acks = within(60, put(&mut client, &["ns", "events"], batches.clone()))
        .await
        .unwrap();
    let last = acks.last().unwrap();
    assert!(last.r#final);
    assert_eq!(last.committed_rows, 5000);
    assert_eq!(last.commits, 1);

    let expected = rows_of(&batches);
    let got = within(60, get(&mut client, &["ns", "events"])).await;
    assert_eq!(rows_of(&got), expected, "read back row by row");

    let (status, body) = server.http_get("/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(metric(&body, "skade_catalog_commits_total"), 1.0);
    assert_eq!(metric(&body, "skade_put_streams_active"), 0.0);
    assert!(
        body.contains("skade_rows_committed_total{table=\"ns.events\"} 5000"),
        "{body}"
    );

    let dir = server.stop().await;
    let server = TestServer::start_in(dir, |_| {}).await;
    let mut client = server.client().await;
    let got = within(60, get(&mut client, &["ns", "events"])).await;
    assert_eq!(rows_of(&got), expected, "read back after restart");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_commit_is_acked_with_cumulative_counts() {
    // Tiny files, one file per commit: 4 batches → 4 commits + the final ack.
    let server = TestServer::start_with(|c| {
        c.ingest.target_file_size = 1;
        c.ingest.files_per_commit = 1.try_into().unwrap();
    })
    .await;
    let mut client = server.client().await;
    let batches: Vec<_> = (0..4).map(|i| synthetic_batch(i * 100, 100)).collect();
    let acks = within(60, put(&mut client, &["t"], batches)).await.unwrap();
    assert_eq!(acks.len(), 5, "{acks:?}");
    for (i, ack) in acks[..4].iter().enumerate() {
        assert!(!ack.r#final);
        assert_eq!(ack.commits, i as u64 + 1);
        assert_eq!(ack.committed_rows, (i as u64 + 1) * 100);
        assert_eq!(ack.committed_data_files, i as u64 + 1);
        assert_eq!(ack.table, "default.t");
    }
    assert!(acks[4].r#final);
    assert_eq!(acks[4].committed_rows, 400);
    assert_eq!(acks[4].snapshot_id, acks[3].snapshot_id);
    let got = get(&mut client, &["default", "t"]).await;
    assert_eq!(count(&got), 400);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_table_names_are_invalid_argument_and_write_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for path in [&["ns", ".."][..], &["a/b"], &["bad name"], &[""], &["x\0"]] {
        let err = put(&mut client, path, vec![synthetic_batch(0, 10)])
            .await
            .unwrap_err();
        let arrow_flight::error::FlightError::Tonic(status) = err else {
            panic!("{path:?}: not a gRPC status: {err}");
        };
        assert_eq!(status.code(), Code::InvalidArgument, "{path:?}: {status}");
        assert!(status.message().contains("invalid table name"), "{status}");
    }
    assert!(common::parquet_files(&server.warehouse()).is_empty());
    let (_, body) = server.http_get("/metrics").await;
    assert_eq!(metric(&body, "skade_catalog_commits_total"), 0.0);
    // The server keeps serving.
    put(&mut client, &["ok"], vec![synthetic_batch(0, 3)])
        .await
        .unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_stream_commits_nothing_and_still_gets_the_final_ack() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let acks = common::put_with_schema(
        &mut client,
        &["ns", "empty"],
        common::synthetic_schema(),
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(acks.len(), 1);
    assert!(acks[0].r#final);
    assert_eq!(acks[0].commits, 0);
    let got = get(&mut client, &["ns", "empty"]).await;
    assert_eq!(count(&got), 0);
    let (_, body) = server.http_get("/metrics").await;
    assert_eq!(metric(&body, "skade_catalog_commits_total"), 0.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_and_unknown_tables_are_not_found() {
    let server = TestServer::start().await;
    assert_eq!(server.http_get("/healthz").await.0, 200);
    let mut client = server.client().await;
    let err = client
        .get_flight_info(arrow_flight::FlightDescriptor::new_path(vec![
            "nope".into(),
        ]))
        .await
        .unwrap_err();
    let arrow_flight::error::FlightError::Tonic(status) = err else {
        panic!("not a status: {err}")
    };
    assert_eq!(status.code(), Code::NotFound, "{status}");
    server.stop().await;
}

/// `ListFlights` lists tables in name order, and its criteria expression is a prefix of
/// the dotted table name: `demo.` is namespace `demo`, `demo.b` its tables starting with
/// `b`, an empty expression every table; a non-UTF-8 one is `InvalidArgument`.
/// Catches: the criteria ignored (every table listed) and tables listed in the order the
/// catalog walk happened to visit them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_flights_filters_by_name_prefix_in_name_order() {
    use futures::TryStreamExt;
    let server = TestServer::start().await;
    let mut client = server.client().await;
    within(60, async {
        for path in [
            ["other", "c"],
            ["demo", "b2"],
            ["demo2", "x"],
            ["demo", "a"],
            ["demo", "b1"],
        ] {
            put(&mut client, &path, vec![synthetic_batch(0, 1)])
                .await
                .expect("put");
        }
        let mut names = async |criteria: &'static [u8]| -> Vec<String> {
            client
                .list_flights(criteria)
                .await
                .expect("list")
                .try_collect::<Vec<_>>()
                .await
                .expect("list")
                .iter()
                .map(|info| {
                    info.flight_descriptor
                        .as_ref()
                        .expect("descriptor")
                        .path
                        .join(".")
                })
                .collect()
        };
        assert_eq!(
            names(b"").await,
            ["demo.a", "demo.b1", "demo.b2", "demo2.x", "other.c"]
        );
        assert_eq!(names(b"demo.").await, ["demo.a", "demo.b1", "demo.b2"]);
        assert_eq!(names(b"demo.b").await, ["demo.b1", "demo.b2"]);
        assert_eq!(names(b"demo").await.len(), 4);
        assert!(names(b"nothing").await.is_empty());
        let e = client
            .list_flights(&b"\xff"[..])
            .await
            .err()
            .expect("non-UTF-8 criteria");
        let arrow_flight::error::FlightError::Tonic(status) = e else {
            panic!("not a status: {e}");
        };
        assert_eq!(status.code(), Code::InvalidArgument, "{status}");
    })
    .await;
    server.stop().await;
}

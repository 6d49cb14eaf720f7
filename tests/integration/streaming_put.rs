//! Lane 1 through the real server: commits as the stream goes, commit interval, a client
//! that disconnects mid-stream, backpressure under a small memory budget.

use crate::common;

use std::time::Duration;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightDescriptor, PutResult};
use common::{TestServer, count, get, metric, synthetic_batch, synthetic_schema, within};
use futures::StreamExt;
use prost::Message;
use skade::proto::CommitAck;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Opens a put whose batches are fed through the returned sender; acks arrive on the
/// returned receiver as the server sends them.
async fn open_put(
    server: &TestServer,
    path: &[&str],
) -> (
    mpsc::Sender<arrow_array::RecordBatch>,
    mpsc::UnboundedReceiver<Result<CommitAck, tonic::Status>>,
    tokio::task::JoinHandle<()>,
) {
    open_put_via(server.running.flight_addr, path).await
}

/// As [`open_put`], connecting to `addr` (e.g. a relay in front of the server).
async fn open_put_via(
    addr: std::net::SocketAddr,
    path: &[&str],
) -> (
    mpsc::Sender<arrow_array::RecordBatch>,
    mpsc::UnboundedReceiver<Result<CommitAck, tonic::Status>>,
    tokio::task::JoinHandle<()>,
) {
    let mut client = common::client_at(addr).await;
    let (batch_tx, batch_rx) = mpsc::channel(4);
    let (ack_tx, ack_rx) = mpsc::unbounded_channel();
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    let task = tokio::spawn(async move {
        let data = FlightDataEncoderBuilder::new()
            .with_schema(synthetic_schema())
            .with_flight_descriptor(Some(descriptor))
            .build(ReceiverStream::new(batch_rx).map(Ok));
        let mut results = match client.do_put(data).await {
            Ok(r) => r,
            Err(e) => {
                let _ = ack_tx.send(Err(tonic::Status::unknown(e.to_string())));
                return;
            }
        };
        while let Some(r) = results.next().await {
            let ack = r
                .map(|r: PutResult| CommitAck::decode(r.app_metadata).expect("ack"))
                .map_err(|e| tonic::Status::unknown(e.to_string()));
            if ack_tx.send(ack).is_err() {
                return;
            }
        }
    });
    (batch_tx, ack_rx, task)
}

/// Rows a reader sees in `path` right now (0 if the table does not exist yet).
async fn visible_rows(server: &TestServer, path: &[&str]) -> i64 {
    let mut client = server.client().await;
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    client
        .get_flight_info(descriptor)
        .await
        .map(|i| i.total_records)
        .unwrap_or(0)
}

/// RED once: with the reader's commit-interval branch disabled, the rows of the idle
/// open stream never became visible and the poll timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_interval_makes_rows_of_an_idle_open_stream_visible() {
    let server = TestServer::start_with(|c| {
        c.ingest.commit_interval = Duration::from_millis(200);
    })
    .await;
    let (batches, mut acks, task) = open_put(&server, &["ns", "slow"]).await;
    batches.send(synthetic_batch(0, 100)).await.unwrap();
    // The stream stays open and idle; the interval must commit its rows.
    let ack = within(30, acks.recv()).await.unwrap().unwrap();
    assert!(!ack.r#final);
    assert_eq!(ack.committed_rows, 100);
    within(30, async {
        while visible_rows(&server, &["ns", "slow"]).await != 100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    batches.send(synthetic_batch(100, 50)).await.unwrap();
    drop(batches); // half-close: a normal end
    let mut last = ack;
    while let Some(ack) = within(30, acks.recv()).await {
        last = ack.unwrap();
    }
    assert!(last.r#final);
    assert_eq!(last.committed_rows, 150);
    task.await.unwrap();
    let got = get(&mut server.client().await, &["ns", "slow"]).await;
    assert_eq!(count(&got), 150);
    server.stop().await;
}

/// A client killed mid-stream: its acked commits stay, every snapshot is complete, and
/// the server keeps serving. RED once: when the reader treated the reset like a normal
/// end, the pending fifth file was committed after the disconnect (3 snapshots, 500 rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_mid_stream_keeps_only_complete_snapshots() {
    let server = TestServer::start_with(|c| {
        c.ingest.target_file_size = 1;
        c.ingest.files_per_commit = 2.try_into().unwrap();
        c.ingest.commit_interval = Duration::from_secs(3600);
    })
    .await;
    let (relay_addr, relay) = common::relay(server.running.flight_addr).await;
    let (batches, mut acks, task) = open_put_via(relay_addr, &["ns", "cut"]).await;
    for i in 0..4 {
        batches.send(synthetic_batch(i * 100, 100)).await.unwrap();
    }
    // Two commits of two files each.
    let mut acked = 0;
    while acked < 400 {
        acked = within(30, acks.recv())
            .await
            .unwrap()
            .unwrap()
            .committed_rows;
    }
    // One more file reaches the server but waits for a second one to fill its commit.
    batches.send(synthetic_batch(400, 100)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Kill the client: its connection closes mid-stream, with no half-close. (Dropping the
    // batch sender instead would end the request normally: a half-close is a normal end.)
    relay.abort();
    let _ = relay.await;
    task.abort();
    within(30, async {
        loop {
            let (_, body) = server.http_get("/metrics").await;
            if metric(&body, "skade_put_streams_active") == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let catalog = &server.running.service.catalog;
    let ident = iceberg::TableIdent::from_strs(["ns", "cut"]).unwrap();
    let table = iceberg::Catalog::load_table(catalog.as_ref(), &ident)
        .await
        .unwrap();
    assert_eq!(
        table.metadata().snapshots().count(),
        2,
        "only the acked commits"
    );
    for snapshot in table.metadata().snapshots() {
        let rows: Vec<_> = common::scan(&table, Some(snapshot.snapshot_id())).await;
        let expected: u64 = snapshot.summary().additional_properties["total-records"]
            .parse()
            .unwrap();
        assert_eq!(
            count(&rows) as u64,
            expected,
            "snapshot reads back completely"
        );
    }
    assert_eq!(visible_rows(&server, &["ns", "cut"]).await, 400);
    // The server keeps serving.
    let mut client = server.client().await;
    common::put(&mut client, &["ns", "cut"], vec![synthetic_batch(1000, 10)])
        .await
        .unwrap();
    assert_eq!(visible_rows(&server, &["ns", "cut"]).await, 410);
    drop(batches);
    server.stop().await;
}

/// A stream far larger than the memory budget completes, and the budget is whole again
/// afterwards (every reservation released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_larger_than_the_budget_completes() {
    let server = TestServer::start_with(|c| {
        c.ingest.memory_budget = 256 * 1024;
        c.ingest.target_file_size = 128 * 1024;
    })
    .await;
    let batches: Vec<_> = (0..40).map(|i| synthetic_batch(i * 2000, 2000)).collect();
    let mut client = server.client().await;
    let acks = within(120, common::put(&mut client, &["ns", "big"], batches))
        .await
        .unwrap();
    assert_eq!(acks.last().unwrap().committed_rows, 80_000);
    assert_eq!(visible_rows(&server, &["ns", "big"]).await, 80_000);
    let budget = &server.running.service.budget;
    assert_eq!(budget.available_bytes(), budget.total_bytes());
    server.stop().await;
}

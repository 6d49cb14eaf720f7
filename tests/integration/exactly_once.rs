//! Exactly-once on the streaming put: a producer that names itself (`x-skade-writer-id`)
//! and numbers its batches (`app_metadata`) can resend anything and every row lands
//! once; the writer's high-water mark is in the catalog, the snapshot summary and the
//! acks, and the `skade.v1.WriterMarks` action (JSON) tells a restarted producer where to
//! resume.

use crate::common;

use arrow_array::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightClient, FlightData, FlightDescriptor};
use common::{TestServer, count, get, metric, status_of, synthetic_batch};
use futures::TryStreamExt;
use iceberg::{Catalog, TableIdent};
use prost::Message;
use skade::proto::CommitAck;
use tonic::Code;

const PATH: [&str; 2] = ["eo", "t"];

/// One keyed put of `batches`, batch `i` numbered `first + i`; returns the acks.
async fn keyed_put(
    client: &mut FlightClient,
    writer: &str,
    first: u64,
    batches: Vec<RecordBatch>,
) -> Result<Vec<CommitAck>, FlightError> {
    let sequences = (0..batches.len() as u64).map(|i| first + i).collect();
    keyed_put_numbered(client, writer, sequences, batches).await
}

/// One keyed put of `batches`, batch `i` numbered `sequences[i]`; returns the acks.
async fn keyed_put_numbered(
    client: &mut FlightClient,
    writer: &str,
    sequences: Vec<u64>,
    batches: Vec<RecordBatch>,
) -> Result<Vec<CommitAck>, FlightError> {
    keyed_put_to(client, &PATH, writer, sequences, batches).await
}

/// [`keyed_put_numbered`] into the table `path`.
pub(crate) async fn keyed_put_to(
    client: &mut FlightClient,
    path: &[&str],
    writer: &str,
    sequences: Vec<u64>,
    batches: Vec<RecordBatch>,
) -> Result<Vec<CommitAck>, FlightError> {
    client
        .add_header("x-skade-writer-id", writer)
        .expect("header");
    let schema = batches[0].schema();
    let mut data: Vec<FlightData> = FlightDataEncoderBuilder::new()
        .with_max_flight_data_size(usize::MAX)
        .with_schema(schema)
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .try_collect()
        .await?;
    data[0].flight_descriptor = Some(FlightDescriptor::new_path(
        path.iter().map(|s| s.to_string()).collect(),
    ));
    for (message, sequence) in data.iter_mut().skip(1).zip(sequences) {
        message.app_metadata = sequence.to_string().into_bytes().into();
    }
    let results: Vec<_> = client
        .do_put(futures::stream::iter(data.into_iter().map(Ok)))
        .await?
        .try_collect()
        .await?;
    Ok(results
        .iter()
        .map(|r| CommitAck::decode(r.app_metadata.as_ref()).expect("ack"))
        .collect())
}

fn batches(first_id: i64, n: usize) -> Vec<RecordBatch> {
    (0..n)
        .map(|i| synthetic_batch(first_id + 10 * i as i64, 10))
        .collect()
}

async fn commits(server: &TestServer) -> f64 {
    metric(
        &server.http_get("/metrics").await.1,
        "skade_catalog_commits_total",
    )
}

async fn snapshots(server: &TestServer) -> usize {
    let table = server.table(&PATH).await;
    table.metadata().snapshots().count()
}

/// The same keyed put sent three times lands its rows once, in one snapshot and one
/// catalog commit; the replays answer success with the original snapshot id. Catches a
/// retry doubling rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_put_sent_three_times_lands_once() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let before = commits(&server).await;
    let acks = keyed_put(&mut client, "w1", 1, batches(0, 3))
        .await
        .unwrap();
    let first = acks.last().unwrap().clone();
    assert_eq!((first.committed_rows, first.committed_sequence), (30, 3));
    for _ in 0..2 {
        let acks = keyed_put(&mut client, "w1", 1, batches(0, 3))
            .await
            .unwrap();
        let last = acks.last().unwrap();
        assert_eq!(last.committed_rows, 0, "a replay writes nothing");
        assert_eq!(last.snapshot_id, first.snapshot_id, "the original snapshot");
        assert_eq!(last.committed_sequence, 3);
    }
    assert_eq!(count(&get(&mut client, &PATH).await), 30);
    assert_eq!(snapshots(&server).await, 1);
    assert_eq!(commits(&server).await - before, 1.0);
    let metrics = server.http_get("/metrics").await.1;
    assert_eq!(metric(&metrics, "skade_batches_replayed_total"), 6.0);
    assert_eq!(
        metric(&metrics, "skade_commits_replayed_total{lane=\"stream\"}"),
        2.0
    );
    // The snapshot summary names the writer and its range for Iceberg readers.
    let ident = TableIdent::from_strs(PATH).unwrap();
    let table = server
        .running
        .service
        .catalog
        .load_table(&ident)
        .await
        .unwrap();
    let summary = &table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_eq!(
        summary.get("skade.writer-id").map(String::as_str),
        Some("w1")
    );
    assert_eq!(
        summary
            .get("skade.writer-last-sequence")
            .map(String::as_str),
        Some("3")
    );
    server.stop().await;
}

/// A producer that resumes from the mark the `skade.v1.WriterMarks` action reports —
/// resending a tail that partly landed — gets every row exactly once; unkeyed puts of
/// the same table are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_resumes_from_its_high_water_mark() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    keyed_put(&mut client, "w2", 1, batches(0, 4))
        .await
        .unwrap();
    let marks = common::writer_marks_reply(&mut client, "w2").await;
    assert_eq!(marks["writer_id"], "w2");
    assert_eq!(marks["marks"][0]["table"], "eo.t");
    assert_eq!(marks["marks"][0]["sequence"], 4);
    assert_eq!(marks["marks"].as_array().unwrap().len(), 1);
    // Resend from 3 (3 and 4 are replays), then 5 and 6 are new.
    let mut client = server.client().await;
    keyed_put(&mut client, "w2", 3, batches(20, 4))
        .await
        .unwrap();
    let mut plain = server.client().await;
    common::put(&mut plain, &PATH, vec![synthetic_batch(1000, 5)])
        .await
        .unwrap();
    assert_eq!(count(&get(&mut client, &PATH).await), 60 + 5);
    server.stop().await;
}

/// A gap or a step back inside a keyed stream is FailedPrecondition naming the expected
/// sequence, and nothing of the stream lands. Catches silently accepting out-of-order
/// batches (which would make the mark lie).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_is_refused_naming_the_expected_sequence() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    keyed_put(&mut client, "w3", 1, batches(0, 2))
        .await
        .unwrap();
    let mut client = server.client().await;
    let err = keyed_put(&mut client, "w3", 5, batches(0, 1))
        .await
        .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(message.contains("expected 3"), "{message}");
    assert_eq!(count(&get(&mut client, &PATH).await), 20);
    server.stop().await;
}

/// Two copies of the same keyed put racing each other land once: whichever commits
/// second is refused by the catalog's check of the mark in the commit's own redb
/// transaction (or skips as a replay). Catches a check done only at stream start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_duplicates_land_once() {
    let server = TestServer::start().await;
    let (mut a, mut b) = (server.client().await, server.client().await);
    let (ra, rb) = tokio::join!(
        keyed_put(&mut a, "w4", 1, batches(0, 3)),
        keyed_put(&mut b, "w4", 1, batches(0, 3)),
    );
    for result in [ra, rb] {
        if let Err(e) = result {
            let (code, message) = status_of(e);
            assert_eq!(code, Code::FailedPrecondition, "{message}");
        }
    }
    let mut client = server.client().await;
    assert_eq!(count(&get(&mut client, &PATH).await), 30);
    server.stop().await;
}

/// The marks `writer` has, as the `skade.v1.WriterMarks` action reports them.
async fn marks_of(client: &mut FlightClient, writer: &str) -> Vec<serde_json::Value> {
    let reply = common::writer_marks_reply(client, writer).await;
    reply["marks"].as_array().cloned().unwrap_or_default()
}

/// At `--max-writers`, a new writer id is refused with `ResourceExhausted` naming the
/// flag and lands nothing, while writer ids already kept go on. Catches unbounded
/// exactly-once state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_ids_past_max_writers_are_refused() {
    let server = TestServer::start_with(|c| {
        c.ingest.max_writers = std::num::NonZeroUsize::new(2).unwrap();
    })
    .await;
    let mut client = server.client().await;
    keyed_put(&mut client, "a", 1, batches(0, 1)).await.unwrap();
    keyed_put(&mut client, "b", 1, batches(10, 1))
        .await
        .unwrap();
    let err = keyed_put(&mut client, "c", 1, batches(20, 1))
        .await
        .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(message.contains("--max-writers"), "{message}");
    keyed_put(&mut client, "a", 2, batches(30, 1))
        .await
        .unwrap();
    assert_eq!(
        count(&get(&mut client, &PATH).await),
        30,
        "a, b, a: c landed nothing"
    );
    let metrics = server.http_get("/metrics").await.1;
    assert_eq!(metric(&metrics, "skade_writers"), 2.0);
    assert_eq!(metric(&metrics, "skade_writers_max"), 2.0);
    server.stop().await;
}

/// A writer id idle longer than `--writer-retention` is forgotten with its marks (and
/// counted), so the catalog's exactly-once state does not grow with every producer ever
/// seen; a writer that keeps committing is kept. Catches marks that are never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_writer_ids_are_forgotten_after_the_retention() {
    let server = TestServer::start_with(|c| {
        c.ingest.writer_retention = std::time::Duration::from_secs(2);
    })
    .await;
    let mut client = server.client().await;
    keyed_put(&mut client, "idle", 1, batches(0, 1))
        .await
        .unwrap();
    assert_eq!(marks_of(&mut client, "idle").await.len(), 1);
    let mut sequence = 1;
    let forgotten = common::within(30, async {
        loop {
            // "busy" commits every 500 ms, well inside the retention.
            sequence += 1;
            keyed_put(
                &mut client,
                "busy",
                sequence,
                batches(10 * sequence as i64, 1),
            )
            .await
            .unwrap();
            if marks_of(&mut client, "idle").await.is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    });
    forgotten.await;
    assert_eq!(marks_of(&mut client, "busy").await.len(), 1, "busy is kept");
    let metrics = server.http_get("/metrics").await.1;
    assert_eq!(metric(&metrics, "skade_writers_forgotten_total"), 1.0);
    assert_eq!(metric(&metrics, "skade_writers"), 1.0);
    server.stop().await;
}

/// `u64::MAX` is the last usable sequence: a keyed put numbered `u64::MAX` then `1`
/// fails `FailedPrecondition` naming the limit and the writer's mark is never 1; a put of `u64::MAX` alone lands and leaves the mark at
/// `u64::MAX`, after which `1` is a replay. Catches the mark stepping back from
/// `u64::MAX` to 1 (both batches were committed, summary first = u64::MAX, last = 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_lands_after_the_last_sequence() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let err = keyed_put_numbered(&mut client, "max", vec![u64::MAX, 1], batches(0, 2))
        .await
        .unwrap_err();
    let (code, message) = status_of(err);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(message.contains(&u64::MAX.to_string()), "{message}");
    let mut client = server.client().await;
    let reply = common::writer_marks_reply(&mut client, "max").await;
    // Whether the failed stream committed its first batch or not, the mark is never 1.
    for mark in reply["marks"].as_array().unwrap() {
        assert_eq!(mark["sequence"], serde_json::json!(u64::MAX), "{reply}");
    }

    let mut client = server.client().await;
    keyed_put_numbered(&mut client, "max", vec![u64::MAX], batches(0, 1))
        .await
        .unwrap();
    let mut client = server.client().await;
    keyed_put_numbered(&mut client, "max", vec![1], batches(100, 1))
        .await
        .unwrap();
    let mut client = server.client().await;
    let reply = common::writer_marks_reply(&mut client, "max").await;
    assert_eq!(
        reply["marks"][0]["sequence"],
        serde_json::json!(u64::MAX),
        "{reply}"
    );
    assert_eq!(count(&get(&mut client, &PATH).await), 10);
    server.stop().await;
}

//! Operating skade: `/readyz`, the limits on open streams and transactions, and the logs
//! of the real binary (JSON lines, one span per RPC, one `committed` event per commit,
//! errors once, tokens never, the token file re-read on SIGHUP).

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandStatementIngest, EndTransaction, TableDefinitionOptions, TableExistsOption,
    TableNotExistOption,
};
use common::{
    TestServer, client_at, count, get, put, status_of, synthetic_batch, synthetic_schema, within,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

/// `/readyz` is 200 while the catalog reads and the warehouse takes a file, 503 naming
/// the warehouse when it cannot, and 503 once shutdown has begun; `/healthz` stays 200.
/// RED once: with `check_ready` skipping the warehouse write, the broken warehouse still
/// answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_checks_the_catalog_the_warehouse_and_shutdown() {
    let server = TestServer::start().await;
    within(30, async {
        assert_eq!(
            server.http_get("/readyz").await,
            (200, "ready\n".to_string())
        );

        // A warehouse that is no directory (root ignores permission bits, so no chmod).
        let warehouse = server.warehouse();
        let aside = server.data_dir().join("warehouse.aside");
        std::fs::rename(&warehouse, &aside).expect("move warehouse");
        std::fs::write(&warehouse, b"not a directory").expect("file in its place");
        let (status, body) = server.http_get("/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("warehouse"), "{body}");
        assert_eq!(server.http_get("/healthz").await.0, 200);
        std::fs::remove_file(&warehouse).expect("rm file");
        std::fs::rename(&aside, &warehouse).expect("restore warehouse");
        assert_eq!(server.http_get("/readyz").await.0, 200);
        assert!(
            std::fs::read_dir(&warehouse)
                .expect("warehouse")
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with(".skade-readyz")),
            "the probe file is removed"
        );

        server.running.service.shutdown.cancel();
        let (status, body) = server.http_get("/readyz").await;
        assert_eq!((status, body.as_str()), (503, "not ready: shutting down\n"));
    })
    .await;
    server.stop().await;
}

/// With `--max-streams 1`, a second DoPut while one is open — streaming put or Flight
/// SQL ingest — is `ResourceExhausted` naming the flag and writes nothing; once the
/// first ends, a new one is accepted.
/// RED once: with `stream_permit` always granting, the second put succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_over_max_streams_is_resource_exhausted() {
    let server = TestServer::start_with(|c| {
        c.ingest.max_streams = 1.try_into().expect("non-zero");
    })
    .await;
    within(60, async {
        let mut first = server.client().await;
        let (batch_tx, batch_rx) = mpsc::channel(4);
        let data = FlightDataEncoderBuilder::new()
            .with_schema(synthetic_schema())
            .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
                "lim".into(),
                "open".into(),
            ])))
            .build(ReceiverStream::new(batch_rx).map(Ok));
        let results = first.do_put(data).await.expect("first put");
        batch_tx.send(synthetic_batch(0, 10)).await.expect("send");

        let mut second = server.client().await;
        let (code, message) = status_of(
            put(&mut second, &["lim", "other"], vec![synthetic_batch(0, 10)])
                .await
                .expect_err("second put"),
        );
        assert_eq!(code, Code::ResourceExhausted, "{message}");
        assert!(message.contains("--max-streams"), "{message}");
        assert!(message.contains("limit of 1"), "{message}");

        let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let mut sql = FlightSqlServiceClient::new(channel);
        let cmd = CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: TableNotExistOption::Create as i32,
                if_exists: TableExistsOption::Append as i32,
            }),
            table: "sqlother".to_string(),
            schema: Some("lim".to_string()),
            catalog: None,
            temporary: false,
            transaction_id: None,
            options: Default::default(),
        };
        let (code, _) = status_of(
            sql.execute_ingest(
                cmd.clone(),
                futures::stream::iter([Ok(synthetic_batch(0, 10))]),
            )
            .await
            .expect_err("ingest over the limit"),
        );
        assert_eq!(code, Code::ResourceExhausted);

        drop(batch_tx);
        let acks: Vec<_> = results.try_collect().await.expect("first put ends");
        assert!(!acks.is_empty());
        // The permit is back once the first stream's task ends.
        let started = Instant::now();
        loop {
            match put(&mut second, &["lim", "other"], vec![synthetic_batch(0, 10)]).await {
                Ok(_) => break,
                Err(e) => {
                    assert!(started.elapsed() < Duration::from_secs(10), "{e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        sql.execute_ingest(cmd, futures::stream::iter([Ok(synthetic_batch(0, 10))]))
            .await
            .expect("ingest after the first ended");
        assert_eq!(count(&get(&mut second, &["lim", "open"]).await), 10);
        assert_eq!(count(&get(&mut second, &["lim", "other"]).await), 10);
    })
    .await;
    server.stop().await;
}

/// With `--max-transactions 2`, a third `BeginTransaction` is `ResourceExhausted` naming
/// the flag; ending one makes room again.
/// RED once: with the check in `Transactions::begin` removed, the third begin succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_over_max_transactions_is_resource_exhausted() {
    let server = TestServer::start_with(|c| {
        c.ingest.max_transactions = 2.try_into().expect("non-zero");
    })
    .await;
    within(30, async {
        let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let mut sql = FlightSqlServiceClient::new(channel);
        let a = sql.begin_transaction().await.expect("first");
        sql.begin_transaction().await.expect("second");
        let (code, message) = status_of(sql.begin_transaction().await.expect_err("third"));
        assert_eq!(code, Code::ResourceExhausted, "{message}");
        assert!(message.contains("--max-transactions"), "{message}");
        assert_eq!(server.running.service.transactions.open_count(), 2);
        sql.end_transaction(a, EndTransaction::Rollback)
            .await
            .expect("rollback");
        sql.begin_transaction().await.expect("room again");
    })
    .await;
    server.stop().await;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

async fn wait_healthy(metrics: std::net::SocketAddr, child: &mut std::process::Child) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("skade exited early: {status}");
        }
        if tokio::net::TcpStream::connect(metrics).await.is_ok()
            && common::http_get(metrics, "/healthz").await.0 == 200
        {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The real binary with `--log-format json`, `RUST_LOG=debug` and a token file: every
/// stderr line is one JSON object; the put's `committed` event (once) carries table,
/// snapshot id, rows, bytes and seconds inside the `rpc` span of `DoPut` with the table;
/// a refused call is an `unauthenticated` event; a failed read is logged once; SIGHUP
/// re-reads the token file; and no token value appears anywhere in the log.
/// RED once: with the `rpc` span's `table` never recorded (the `auth::record` call in
/// `do_put` removed), the `committed` event's span list had no table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_one_span_per_rpc_one_commit_event_and_no_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens");
    let (first, second) = ("first-token-5b1e", "second-token-a07c");
    std::fs::write(&tokens, format!("{first}\n")).expect("tokens");
    let (flight, metrics) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_skade"))
        .args(["serve", "--log-format", "json", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--flight-addr", &format!("127.0.0.1:{flight}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .arg("--auth-token-file")
        .arg(&tokens)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skade");
    let stderr = child.stderr.take().expect("stderr");
    let lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let flight_addr = format!("127.0.0.1:{flight}").parse().expect("addr");
    let metrics_addr = format!("127.0.0.1:{metrics}").parse().expect("addr");
    within(60, async {
        wait_healthy(metrics_addr, &mut child).await;
        let mut client = client_at(flight_addr).await;
        client
            .add_header("authorization", &format!("Bearer {first}"))
            .expect("header");
        put(&mut client, &["logs", "t"], vec![synthetic_batch(0, 100)])
            .await
            .expect("put");
        let e = client
            .get_flight_info(FlightDescriptor::new_path(vec![
                "logs".into(),
                "nope".into(),
            ]))
            .await
            .expect_err("missing table");
        assert_eq!(status_of(e).0, Code::NotFound);

        let mut wrong = client_at(flight_addr).await;
        wrong
            .add_header("authorization", &format!("Bearer {second}"))
            .expect("header");
        assert_eq!(
            status_of(wrong.list_flights("").await.err().expect("refused")).0,
            Code::Unauthenticated
        );

        // SIGHUP re-reads the file: the second token works from then on.
        std::fs::write(&tokens, format!("{first}\n{second}\n")).expect("tokens");
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
        let started = Instant::now();
        loop {
            match wrong.list_flights("").await {
                Ok(stream) => {
                    let infos: Vec<_> = stream.try_collect().await.expect("list");
                    assert_eq!(infos.len(), 1);
                    break;
                }
                Err(e) => {
                    assert!(started.elapsed() < Duration::from_secs(10), "{e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await;
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    let lines = lines.join().expect("stderr reader");

    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for line in &lines {
        assert!(
            !line.contains(first) && !line.contains(second),
            "a token in the log: {line}"
        );
    }
    let message = |e: &serde_json::Value| e["message"].as_str().unwrap_or_default().to_string();
    let rpc_of = |e: &serde_json::Value| {
        e["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == "rpc").cloned())
    };

    let committed: Vec<_> = events
        .iter()
        .filter(|e| message(e) == "committed")
        .collect();
    assert_eq!(committed.len(), 1, "one commit, one event: {committed:?}");
    let c = committed[0];
    assert_eq!(c["table"], "logs.t");
    assert_eq!(c["rows"], 100);
    assert!(c["snapshot_id"].as_i64().is_some_and(|id| id != 0), "{c}");
    assert!(c["bytes"].as_u64().is_some_and(|b| b > 0), "{c}");
    assert!(c["seconds"].as_f64().is_some(), "{c}");
    let rpc = rpc_of(c).expect("committed inside an rpc span");
    assert_eq!(rpc["method"], "DoPut", "{rpc}");
    assert_eq!(rpc["table"], "logs.t", "{rpc}");

    let refused: Vec<_> = events
        .iter()
        .filter(|e| message(e) == "unauthenticated")
        .collect();
    // One per refused call: the first, and any retries before SIGHUP took effect.
    assert!(!refused.is_empty());
    assert!(
        refused.iter().all(|e| e["header"] == "invalid"),
        "{refused:?}"
    );

    let not_found: Vec<_> = events.iter().filter(|e| e["code"] == "NotFound").collect();
    assert_eq!(
        not_found.len(),
        1,
        "a failed RPC is logged once: {not_found:?}"
    );
    let rpc = rpc_of(not_found[0]).expect("inside an rpc span");
    assert_eq!(rpc["method"], "GetFlightInfo");
    assert_eq!(rpc["table"], "logs.nope");

    assert!(
        events
            .iter()
            .any(|e| message(e) == "token file re-read" && e["tokens"] == 2),
        "SIGHUP re-read"
    );
}

/// A `grpc.health.v1` Watch sees `SERVING`, then `NOT_SERVING` when shutdown begins,
/// then its stream ends — so a watcher does not hold the graceful stop open until
/// `--shutdown-timeout`.
/// RED once: without `clear_service_status` in `shutdown_and_wait`, the watch stream
/// never ended (the 30 s `within` around it timed out; the server had given up waiting
/// for it after its 20 s shutdown timeout and left the connection open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_watch_turns_not_serving_and_ends_on_shutdown() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let server =
        TestServer::start_with(|c| c.ingest.shutdown_timeout = Duration::from_secs(20)).await;
    let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "arrow.flight.protocol.FlightService".to_string(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = within(10, watch.message())
        .await
        .expect("status")
        .expect("one");
    assert_eq!(first.status(), ServingStatus::Serving);

    let started = Instant::now();
    let stopping = tokio::spawn(server.running.shutdown_and_wait());
    let mut seen = Vec::new();
    while let Ok(Some(reply)) = within(30, watch.message()).await {
        seen.push(reply.status());
    }
    assert_eq!(seen, vec![ServingStatus::NotServing]);
    within(30, stopping)
        .await
        .expect("join")
        .expect("clean stop");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:.1?}",
        started.elapsed()
    );
}

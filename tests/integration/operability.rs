//! Operating skade: `/readyz`, the limits on open streams and transactions, and the logs
//! of the real binary (JSON lines, one span per RPC, one `committed` event per commit,
//! errors once, a client that left at info, tokens never, the token file re-read on
//! SIGHUP).

use crate::common;

use std::time::{Duration, Instant};

use arrow_flight::FlightDescriptor;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandStatementIngest, EndTransaction, TableDefinitionOptions, TableExistsOption,
    TableNotExistOption,
};
use common::{
    Binary, TestServer, client_at, count, get, message_of, put, status_of, synthetic_batch, within,
};
use futures::{StreamExt, TryStreamExt};
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
        // A result is reused for READY_CACHE_TTL: wait it out before each change shows.
        tokio::time::sleep(skade::http::READY_CACHE_TTL).await;
        let (status, body) = server.http_get("/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("warehouse"), "{body}");
        assert_eq!(server.http_get("/healthz").await.0, 200);
        std::fs::remove_file(&warehouse).expect("rm file");
        std::fs::rename(&aside, &warehouse).expect("restore warehouse");
        tokio::time::sleep(skade::http::READY_CACHE_TTL).await;
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
        let (batch_tx, results) = common::open_stream(&mut first, &["lim", "open"]).await;
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

/// Begins a Flight SQL transaction at `flight` and rolls it back with nothing staged, as
/// the ADBC driver does on every connect and `close()`; `token` is the bearer token.
async fn begin_and_roll_back(flight: std::net::SocketAddr, token: Option<&str>) {
    let channel = Channel::from_shared(format!("http://{flight}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut sql = FlightSqlServiceClient::new(channel);
    if let Some(token) = token {
        sql.set_header("authorization", format!("Bearer {token}"));
    }
    let id = sql.begin_transaction().await.expect("begin");
    sql.end_transaction(id, EndTransaction::Rollback)
        .await
        .expect("rollback");
}

/// The real binary with `--log-format json`, `RUST_LOG=debug` and a token file: every
/// stderr line is one JSON object; the start-up line names both addresses, the data dir,
/// the warehouse, auth and TLS; the put's `committed` event (once) carries table, snapshot
/// id (a string: ids exceed 2^53, which JSON readers round), rows, bytes and seconds
/// inside the `rpc` span of `DoPut` with the table; a refused Flight call and a refused
/// REST call are each one `unauthenticated` event; a failed read is logged once; SIGHUP
/// re-reads the token file; no `Some(...)` and no token value appears anywhere.
/// Catches: the `rpc` span's `table` never recorded (the `auth::record` call in `do_put`
/// removed), a numeric `snapshot_id`, a start-up line without auth/TLS, a REST 401 that
/// is counted but not logged, and a session logged as `Some("peer:...")`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_one_span_per_rpc_one_commit_event_and_no_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens");
    let (first, second) = ("first-token-5b1e", "second-token-a07c");
    std::fs::write(&tokens, format!("{first}\n")).expect("tokens");
    let token_flag = tokens.to_str().expect("utf-8 path");
    let binary = Binary::serve(
        &dir.path().join("data"),
        "debug",
        &["--auth-token-file", token_flag],
    )
    .await;
    within(60, async {
        let mut client = client_at(binary.flight).await;
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

        // A transaction begun and rolled back (the session is logged at debug).
        begin_and_roll_back(binary.flight, Some(first)).await;

        let (status, _) = common::http_get(binary.metrics, "/v1/config").await;
        assert_eq!(status, 401);

        let mut wrong = client_at(binary.flight).await;
        wrong
            .add_header("authorization", &format!("Bearer {second}"))
            .expect("header");
        assert_eq!(
            status_of(wrong.list_flights("").await.err().expect("refused")).0,
            Code::Unauthenticated
        );

        // SIGHUP re-reads the file: the second token works from then on.
        std::fs::write(&tokens, format!("{first}\n{second}\n")).expect("tokens");
        binary.signal(libc::SIGHUP);
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
    let (flight, metrics) = (binary.flight, binary.metrics);
    let events = binary.stop();

    for event in &events {
        let line = event.to_string();
        assert!(
            !line.contains(first) && !line.contains(second),
            "a token in the log: {line}"
        );
        assert!(!line.contains("Some("), "a Debug dump in the log: {line}");
    }
    let span_of = |e: &serde_json::Value, name: &str| {
        e["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["name"] == name).cloned())
    };

    let serving: Vec<_> = events
        .iter()
        .filter(|e| message_of(e) == "serving")
        .collect();
    assert_eq!(serving.len(), 1, "one start-up line: {serving:?}");
    let s = serving[0];
    assert_eq!(s["flight_addr"], flight.to_string(), "{s}");
    assert_eq!(s["metrics_addr"], metrics.to_string(), "{s}");
    assert!(
        s["data_dir"].as_str().is_some_and(|d| d.ends_with("data")),
        "{s}"
    );
    assert!(
        s["warehouse"]
            .as_str()
            .is_some_and(|w| w.ends_with("warehouse")),
        "{s}"
    );
    assert_eq!(s["auth"], "bearer tokens", "{s}");
    assert_eq!(s["tls"], "off", "{s}");

    let committed: Vec<_> = events
        .iter()
        .filter(|e| message_of(e) == "committed")
        .collect();
    assert_eq!(committed.len(), 1, "one commit, one event: {committed:?}");
    let c = committed[0];
    assert_eq!(c["table"], "logs.t");
    assert_eq!(c["rows"], 100);
    assert!(
        c["snapshot_id"]
            .as_str()
            .and_then(|id| id.parse::<i64>().ok())
            .is_some_and(|id| id != 0),
        "snapshot_id is a string of the id: {c}"
    );
    assert!(c["bytes"].as_u64().is_some_and(|b| b > 0), "{c}");
    assert!(c["seconds"].as_f64().is_some(), "{c}");
    let rpc = span_of(c, "rpc").expect("committed inside an rpc span");
    assert_eq!(rpc["method"], "DoPut", "{rpc}");
    assert_eq!(rpc["table"], "logs.t", "{rpc}");

    let begun: Vec<_> = events
        .iter()
        .filter(|e| message_of(e) == "transaction begun")
        .collect();
    assert_eq!(begun.len(), 1, "{begun:?}");
    assert!(
        begun[0]["session"]
            .as_str()
            .is_some_and(|s| s.starts_with("peer:127.0.0.1:")),
        "the session as plain text: {}",
        begun[0]
    );

    let refused: Vec<_> = events
        .iter()
        .filter(|e| message_of(e) == "unauthenticated")
        .collect();
    // Flight: the first refusal and any retries before SIGHUP took effect; REST: one.
    assert!(
        refused
            .iter()
            .all(|e| e["header"] == "invalid" || e["header"] == "missing"),
        "{refused:?}"
    );
    let rest: Vec<_> = refused
        .iter()
        .filter_map(|e| span_of(e, "rest").map(|span| (e, span)))
        .collect();
    assert_eq!(rest.len(), 1, "one refused REST call: {refused:?}");
    assert_eq!(rest[0].0["header"], "missing");
    assert_eq!(rest[0].1["path"], "/v1/config");
    assert!(
        rest[0].0["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{:?}",
        rest[0]
    );
    assert!(
        refused.iter().any(|e| span_of(e, "rpc").is_some()),
        "the refused Flight call: {refused:?}"
    );

    let not_found: Vec<_> = events.iter().filter(|e| e["code"] == "NotFound").collect();
    assert_eq!(
        not_found.len(),
        1,
        "a failed RPC is logged once: {not_found:?}"
    );
    let rpc = span_of(not_found[0], "rpc").expect("inside an rpc span");
    assert_eq!(rpc["method"], "GetFlightInfo");
    assert_eq!(rpc["table"], "logs.nope");

    assert!(
        events
            .iter()
            .any(|e| message_of(e) == "token file re-read" && e["tokens"] == 2),
        "SIGHUP re-read"
    );
}

/// A client killed mid-put (its connection closes under an open stream) is not a server
/// failure: one `client left` event at info with the rows committed before, counted as
/// `skade_ingest_errors_total{code="Cancelled"}`; no WARN line and no `Unknown` anywhere.
/// The ADBC open/close churn (an empty transaction begun and rolled back) logs nothing at
/// info. Catches: the reset logged `WARN request failed code=Unknown` with a hyper `Debug`
/// dump and counted under `code="Unknown"`; "transaction begun"/"rolled back" at info.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_put_is_an_info_event_counted_as_cancelled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = Binary::serve(
        &dir.path().join("data"),
        "info",
        &["--commit-interval", "100ms"],
    )
    .await;
    within(60, async {
        let (relay_addr, relay) = common::relay(binary.flight).await;
        let mut client = client_at(relay_addr).await;
        let (batch_tx, mut results) = common::open_stream(&mut client, &["gone", "t"]).await;
        batch_tx.send(synthetic_batch(0, 100)).await.expect("send");
        // The commit interval commits the first 100 rows while the stream stays open.
        let ack = results.next().await.expect("an ack").expect("ack");
        let ack = <skade::proto::CommitAck as prost::Message>::decode(ack.app_metadata)
            .expect("CommitAck");
        assert_eq!(ack.committed_rows, 100);
        batch_tx
            .send(synthetic_batch(100, 100))
            .await
            .expect("send");
        // Kill the client: every relayed connection closes at once, mid-stream.
        relay.abort();
        let _ = relay.await;
        drop(results);
        let started = Instant::now();
        loop {
            let (_, body) = common::http_get(binary.metrics, "/metrics").await;
            if common::metric(&body, "skade_ingest_errors_total{code=\"Cancelled\"}") == 1.0 {
                assert!(!body.contains("code=\"Unknown\""), "{body}");
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // ADBC's churn: BeginTransaction on connect, an empty rollback on close.
        begin_and_roll_back(binary.flight, None).await;
    })
    .await;
    let events = binary.stop();
    for event in &events {
        let line = event.to_string();
        assert_ne!(event["level"], "WARN", "{line}");
        assert!(!line.contains("Unknown"), "{line}");
        assert!(
            !message_of(event).starts_with("transaction "),
            "ADBC churn at info: {line}"
        );
    }
    let left: Vec<_> = events
        .iter()
        .filter(|e| message_of(e) == "client left")
        .collect();
    assert_eq!(left.len(), 1, "{events:?}");
    assert_eq!(left[0]["level"], "INFO");
    assert_eq!(left[0]["code"], "Cancelled");
    assert_eq!(left[0]["committed_rows"], 100, "{}", left[0]);
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

/// A stream open when the server is stopped (SIGTERM) gets `Unavailable` and is logged as
/// one `request ended by shutdown` event at info: a planned stop is no server failure.
/// Catches: every stream open at a restart logged as `WARN request failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_a_shutdown_ends_is_an_info_event() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = Binary::serve(
        &dir.path().join("data"),
        "info",
        &["--commit-interval", "100ms"],
    )
    .await;
    let mut client = client_at(binary.flight).await;
    let (batch_tx, mut results) = common::open_stream(&mut client, &["stop", "t"]).await;
    within(30, async {
        batch_tx.send(synthetic_batch(0, 100)).await.expect("send");
        results.next().await.expect("an ack").expect("ack");
    })
    .await;
    let events = binary.stop();
    let ended: Vec<_> = events
        .iter()
        .filter(|e| message_of(e) == "request ended by shutdown")
        .collect();
    assert_eq!(ended.len(), 1, "{events:?}");
    assert_eq!(ended[0]["level"], "INFO");
    assert!(
        events.iter().all(|e| e["level"] != "WARN"),
        "{:?}",
        events
            .iter()
            .filter(|e| e["level"] == "WARN")
            .collect::<Vec<_>>()
    );
    drop(batch_tx);
}

/// The shortest readiness probe `timeoutSeconds` of the manifests operators apply:
/// `deploy/statefulset.yaml` and `deploy/shared/deployment.yaml`.
fn readiness_probe_timeout() -> Duration {
    ["deploy/statefulset.yaml", "deploy/shared/deployment.yaml"]
        .iter()
        .map(|path| {
            let manifest = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path),
            )
            .unwrap_or_else(|e| panic!("{path}: {e}"));
            let probe = manifest
                .split("readinessProbe:")
                .nth(1)
                .unwrap_or_else(|| panic!("a readiness probe in {path}"));
            let seconds = probe
                .lines()
                .find_map(|l| l.trim().strip_prefix("timeoutSeconds:"))
                .unwrap_or_else(|| panic!("timeoutSeconds in {path}"))
                .trim()
                .parse()
                .expect("seconds");
            Duration::from_secs(seconds)
        })
        .min()
        .expect("two manifests")
}

/// The real binary on an S3 warehouse whose endpoint nothing listens on (the object
/// store is down), with AWS credentials in its environment so that every request is
/// tried (and retried) against the endpoint; `extra` flags and env added. Returns the
/// child (stderr piped) and its metrics address, once `/healthz` answers.
async fn serve_on_a_dead_object_store(
    dir: &std::path::Path,
    extra_env: &[(&str, &str)],
) -> (std::process::Child, std::net::SocketAddr) {
    let (flight, metrics) = (common::free_port(), common::free_port());
    let endpoint = format!("http://127.0.0.1:{}", common::free_port());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_skade"))
        .args(["serve", "--log-format", "text", "--data-dir"])
        .arg(dir)
        .args(["--flight-addr", &format!("127.0.0.1:{flight}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--warehouse", "s3://lake/skade", "--s3-endpoint", &endpoint])
        .args(["--s3-path-style-access", "true", "--maintenance", "false"])
        .env("RUST_LOG", "info")
        .env("AWS_ACCESS_KEY_ID", "demo")
        .env("AWS_SECRET_ACCESS_KEY", "demo")
        .env("AWS_REGION", "us-east-1")
        .envs(extra_env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn skade");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], metrics).into();
    within(30, async {
        while tokio::net::TcpStream::connect(addr).await.is_err()
            || common::http_get(addr, "/healthz").await.0 != 200
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    (child, addr)
}

/// SIGTERMs `child`, checks it exits 0, and returns its stderr.
fn stop_and_read_stderr(mut child: std::process::Child) -> String {
    use std::io::Read;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert!(child.wait().expect("wait").success());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    stderr
}

/// With the object store down (nothing listens on its endpoint), `/readyz` answers 503
/// within the readiness probe's timeout, with one short line naming the warehouse, and
/// the next probe gets the same answer from the cache. Catches: a probe that times out
/// (the storage client's retries take many seconds) instead of showing why, or a reason
/// of a kilobyte repeating the same context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_within_the_probe_timeout_when_storage_is_down() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, addr) = serve_on_a_dead_object_store(dir.path(), &[]).await;
    let bound = readiness_probe_timeout();
    let started = Instant::now();
    let (status, body) = within(30, common::http_get(addr, "/readyz")).await;
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(
        took < bound,
        "/readyz took {took:?}, the probe gives up after {bound:?}"
    );
    assert!(body.contains("s3://lake/skade"), "{body}");
    assert_eq!(body.trim_end().lines().count(), 1, "one line: {body}");
    assert!(body.len() < 400, "{} bytes: {body}", body.len());
    let again = within(30, common::http_get(addr, "/readyz")).await;
    assert_eq!(again, (503, body), "the cached result");
    let (status, index) = within(30, common::http_get(addr, "/")).await;
    assert_eq!(status, 200);
    assert!(
        index.contains("/readyz") && index.contains("/v1/config"),
        "{index}"
    );
    stop_and_read_stderr(child);
}

/// Storage retry warnings are one log line each, without a backtrace, even with
/// `RUST_BACKTRACE=1`. Catches: OpenDAL's multi-line `{:?}` error (context, source and a
/// ~40-line backtrace) spilling into the log on every retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_retry_warnings_are_one_line_without_a_backtrace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, addr) = serve_on_a_dead_object_store(dir.path(), &[("RUST_BACKTRACE", "1")]).await;
    assert_eq!(within(30, common::http_get(addr, "/readyz")).await.0, 503);
    let stderr = stop_and_read_stderr(child);
    assert!(
        stderr.lines().any(|l| l.contains("will retry")),
        "a retry warning: {stderr}"
    );
    for line in stderr.lines() {
        let stamped = line.len() > 5
            && line.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && line.as_bytes()[4] == b'-';
        assert!(
            stamped,
            "a line that is no log event of its own: {line:?}\n{stderr}"
        );
        assert!(!line.contains("Backtrace"), "a backtrace: {line}");
    }
}

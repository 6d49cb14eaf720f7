//! Process lifecycle with the real binary and the in-process server: one process per data
//! dir, clean shutdown on SIGTERM, open streams ended cleanly on shutdown.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestServer, count, free_port, get, synthetic_batch, within};
use futures::StreamExt;
use prost::Message;
use skade::proto::CommitAck;

fn serve(dir: &std::path::Path, flight: u16, metrics: u16) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_skade"))
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--flight-addr", &format!("127.0.0.1:{flight}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skade")
}

async fn wait_healthy(metrics: u16) {
    let addr = format!("127.0.0.1:{metrics}").parse().unwrap();
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok()
            && common::http_get(addr, "/healthz").await.0 == 200
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "skade never became healthy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The second process says so in one line naming `--data-dir`, without iceberg's error
/// wrapper. Catches: `main` returning success on a start error; the error printed twice
/// (an ERROR line and a plain line); the lock error inside `Unexpected, context: ...`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_process_on_the_same_data_dir_fails_naming_the_lock_and_sigterm_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let (f1, m1) = (free_port(), free_port());
    let mut first = serve(dir.path(), f1, m1);
    wait_healthy(m1).await;

    let second = serve(dir.path(), 0, 0)
        .wait_with_output()
        .expect("second process");
    assert!(
        !second.status.success(),
        "the second process must exit non-zero"
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    let lines: Vec<_> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line per start-up error: {stderr}");
    assert!(stderr.contains("Cannot acquire lock"), "{stderr}");
    assert!(stderr.contains("--data-dir"), "names the flag: {stderr}");
    assert!(
        !stderr.contains("Unexpected") && !stderr.contains("context"),
        "no iceberg error wrapper: {stderr}"
    );

    // SIGTERM: clean exit 0.
    let pid = first.id() as i32;
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = first.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

/// Shutdown during an open stream: the stream's rows read so far are committed and acked,
/// it ends with Unavailable, shutdown completes, and a restart sees the acked rows.
/// RED once: without the shutdown branch in the put reader, the open stream never ended
/// and the test timed out waiting for its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_commits_what_open_streams_sent_and_ends_them_unavailable() {
    let server =
        TestServer::start_with(|c| c.ingest.commit_interval = Duration::from_secs(3600)).await;
    let mut client = server.client().await;
    let (batch_tx, mut results) = common::open_stream(&mut client, &["ns", "open"]).await;
    batch_tx.send(synthetic_batch(0, 100)).await.unwrap();
    batch_tx.send(synthetic_batch(100, 100)).await.unwrap();
    // Let the batches reach the server (no ack comes before a commit).
    within(30, async {
        loop {
            let (_, body) = server.http_get("/metrics").await;
            if common::metric(&body, "skade_put_streams_active") == 1.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let dir = server.dir.clone();
    let shutdown = tokio::spawn(server.running.shutdown_and_wait());
    let mut acked = 0;
    let mut end = None;
    while let Some(item) = within(30, results.next()).await {
        match item {
            Ok(r) => acked = CommitAck::decode(r.app_metadata).unwrap().committed_rows,
            Err(e) => {
                end = Some(e);
                break;
            }
        }
    }
    let Some(arrow_flight::error::FlightError::Tonic(status)) = end else {
        panic!("the stream must end with a status, got {end:?}");
    };
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
    assert_eq!(acked, 200);
    within(30, shutdown).await.unwrap().unwrap();
    drop(batch_tx);

    let server = TestServer::start_in(dir, |_| {}).await;
    let got = get(&mut server.client().await, &["ns", "open"]).await;
    assert_eq!(count(&got), 200);
    server.stop().await;
}

/// `skade serve` with `args` (after `serve`), its output captured, run to its exit.
fn serve_once(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_skade"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run skade")
}

/// An address in use stops the start with ONE line naming the flag and the address, the
/// exit status is non-zero, and nothing is created on disk (the data dir stays absent).
/// Catches: "Address already in use" without the flag, the error printed twice, and the
/// data dir created before the failing bind.
#[test]
fn an_address_in_use_is_one_line_naming_the_flag_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    for (flag, other) in [
        ("--flight-addr", "--metrics-addr"),
        ("--metrics-addr", "--flight-addr"),
    ] {
        let out = serve_once(&[
            "--data-dir",
            data.to_str().unwrap(),
            flag,
            &taken_addr,
            other,
            "127.0.0.1:0",
        ]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(stderr.contains(flag), "names {flag}: {stderr}");
        assert!(stderr.contains(&taken_addr), "names the address: {stderr}");
        assert!(stderr.contains("in use"), "says why: {stderr}");
        assert!(!data.exists(), "a failed start created {}", data.display());
    }
    drop(taken);
}

/// Host names are accepted as listen addresses: `localhost:PORT` serves on 127.0.0.1.
/// Catches: `--flight-addr localhost:50051` refused as "invalid socket address syntax".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_are_accepted_as_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_skade"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--flight-addr", "localhost:0"])
        .args(["--metrics-addr", &format!("localhost:{metrics}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn skade");
    wait_healthy(metrics).await;
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = within(30, async {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(status.success(), "{status}");
}

/// A data dir whose tables live in one warehouse, served with another (the S3 quickstart,
/// `docs/object-storage.md`, "Quickstart", run on the README's first example's
/// `./skade-data`): the start is refused naming the data dir, the warehouse and the
/// table, instead of serving `ready` while every load of that table fails. Catches: a
/// server that starts (and reports ready) with tables it cannot load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_outside_the_configured_warehouse_stops_the_start_naming_it() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    common::put(
        &mut client,
        &["demo", "people"],
        vec![synthetic_batch(0, 3)],
    )
    .await
    .expect("put");
    let dir = server.stop().await;
    let other = tempfile::tempdir().expect("temp dir");
    let s3 = "s3://lake/skade".to_string();
    for warehouse in [other.path().to_string_lossy().into_owned(), s3.clone()] {
        let mut config = skade::Config::for_tests(dir.path());
        config.storage.warehouse = Some(warehouse.clone());
        config.storage.s3_endpoint = Some("http://127.0.0.1:1".into());
        let message = match skade::start(config).await {
            Ok(_) => panic!("started with a table outside the warehouse {warehouse}"),
            Err(e) => e.to_string(),
        };
        assert!(
            message.contains("demo.people"),
            "names the table: {message}"
        );
        assert!(
            message.contains(&dir.path().display().to_string()),
            "names the data dir: {message}"
        );
        let shown = if warehouse == s3 {
            warehouse.clone()
        } else {
            std::fs::canonicalize(&warehouse)
                .expect("canonical")
                .display()
                .to_string()
        };
        assert!(message.contains(&shown), "names the warehouse: {message}");
        assert!(message.contains("--warehouse"), "names the flag: {message}");
    }
    // The warehouse it was written to still serves it.
    let server = TestServer::start_in(dir, |_| {}).await;
    let mut client = server.client().await;
    assert_eq!(count(&get(&mut client, &["demo", "people"]).await), 3);
    server.stop().await;
}

// Catches a SIGTERM handler installed only once the server's start has returned: a
// SIGTERM that arrives as soon as /healthz answers (what a supervisor may send) killed the
// process by signal 15 instead of stopping it cleanly. The fault holds the process
// between its start and its watch for shutdown, where the old handler did not exist yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_as_soon_as_the_server_is_healthy_stops_it_cleanly() {
    let dir = tempfile::tempdir().expect("dir");
    let server = common::Binary::serve_with_env(
        dir.path(),
        "info",
        &[],
        &[(skade::HOLD_AFTER_START_MS, "1500")],
    )
    .await;
    // `stop` sends SIGTERM at once and requires exit status 0.
    let events = server.stop();
    assert!(
        events
            .iter()
            .any(|e| common::message_of(e) == "shutting down"),
        "the server stopped without shutting down"
    );
}

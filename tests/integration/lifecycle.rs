//! Process lifecycle with the real binary and the in-process server: one process per data
//! dir, clean shutdown on SIGTERM, open streams ended cleanly on shutdown.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use common::{TestServer, count, get, synthetic_batch, synthetic_schema, within};
use futures::StreamExt;
use prost::Message;
use skade::proto::CommitAck;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

/// RED once: with `main` returning success on a start error, the second process exited 0
/// and the exit-status assertion failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_process_on_the_same_data_dir_fails_naming_the_lock_and_sigterm_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let (f1, m1) = (free_port(), free_port());
    let mut first = serve(dir.path(), f1, m1);
    wait_healthy(m1).await;

    let second = serve(dir.path(), free_port(), free_port())
        .wait_with_output()
        .expect("second process");
    assert!(
        !second.status.success(),
        "the second process must exit non-zero"
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("Cannot acquire lock"), "{stderr}");

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
    let (batch_tx, batch_rx) = mpsc::channel(4);
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            "ns".into(),
            "open".into(),
        ])))
        .build(ReceiverStream::new(batch_rx).map(Ok));
    let mut results = client.do_put(data).await.unwrap();
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

//! Scenario: a kill between a keyed put's durable commit and its ack, then a resend.

use std::net::SocketAddr;

use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use futures::StreamExt;
use prost::Message;
use skade::proto::CommitAck;

use crate::checks::*;
use crate::clients::*;
use crate::common;
use crate::common::{synthetic_batch, synthetic_schema};
use crate::server::*;

/// One keyed put of `batches` (`(first id, rows)`, numbered from 1) as `writer` into
/// `crash.<table>`: the acks received, and how the put ended.
pub(crate) async fn keyed_put(
    flight: SocketAddr,
    table: &str,
    writer: &str,
    batches: &[(i64, i64)],
) -> (Vec<CommitAck>, Result<(), String>) {
    let mut client = common::client_at(flight).await;
    client.add_header("x-skade-writer-id", writer).unwrap();
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            NS.to_string(),
            table.to_string(),
        ])))
        .build(futures::stream::iter(
            batches
                .iter()
                .map(|&(id, rows)| Ok(synthetic_batch(id, rows as usize)))
                .collect::<Vec<_>>(),
        ))
        .enumerate()
        .map(|(i, data)| {
            data.map(|mut data| {
                if i > 0 {
                    data.app_metadata = i.to_string().into();
                }
                data
            })
        });
    let mut acks = Vec::new();
    let mut results = match client.do_put(data).await {
        Ok(results) => results,
        Err(e) => return (acks, Err(e.to_string())),
    };
    while let Some(result) = results.next().await {
        match result {
            Ok(result) => acks.push(CommitAck::decode(result.app_metadata).expect("ack")),
            Err(e) => return (acks, Err(e.to_string())),
        }
    }
    (acks, Ok(()))
}

/// A keyed put whose server dies right after its second commit became durable and
/// before that commit's ack (the `SKADE_FAULT_KILL_AFTER_COMMITS` hook, a SIGKILL from
/// inside): after a restart the `skade.v1.WriterMarks` action reports the sequence the
/// unacked commit made durable, and a resend of the whole stream lands every row exactly
/// once — the durable part skipped as replays, the rest in one more snapshot. Catches a
/// retry doubling the rows of a commit whose ack was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "crash test: run by tests/run.sh"]
async fn a_kill_between_commit_and_ack_then_a_resend_lands_once() {
    let dir = tempfile::tempdir().unwrap();
    let (data_dir, log) = (dir.path().join("data"), dir.path().join("skade.log"));
    // 6 batches, 2 per commit: commits end at sequences 2, 4 and 6.
    let batches: Vec<(i64, i64)> = (0..6).map(|i| (i * 10, 10)).collect();
    let quiet = ["--maintenance", "false"];
    let fault = [(skade::catalog::fault::KILL_AFTER_COMMITS, "2")];
    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, None, &fault, &quiet);
    wait_healthy(&mut server, metrics).await;
    let (acks, ended) = keyed_put(flight, "acks", "w", &batches).await;
    assert!(ended.is_err(), "the server died mid-put");
    let status = server.0.wait().expect("reap skade");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "killed by the fault hook: {status}"
    );
    assert!(
        acks.iter().all(|a| a.committed_sequence <= 2),
        "the second commit's ack never left: {acks:?}"
    );
    drop(server);

    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, None, &[], &quiet);
    wait_healthy(&mut server, metrics).await;
    let mut client = common::client_at(flight).await;
    let reply = common::writer_marks_reply(&mut client, "w").await;
    assert_eq!(
        reply["marks"][0]["sequence"], 4,
        "the unacked commit is durable: {reply}"
    );
    let (acks, ended) = keyed_put(flight, "acks", "w", &batches).await;
    ended.expect("the resend succeeds");
    let last = acks.last().expect("a final ack");
    assert_eq!((last.committed_rows, last.committed_sequence), (20, 6));
    let read = common::get(&mut client, &[NS, "acks"]).await;
    let mut ids = ids_of_batches(&read).unwrap();
    ids.sort_unstable();
    assert_eq!(ids, (0..60).collect::<Vec<i64>>(), "every row exactly once");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    server.0.wait().expect("reap skade");
}

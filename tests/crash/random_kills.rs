//! Scenario: SIGKILLs at random moments under the whole workload (see the crate docs).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::checks::*;
use crate::clients::*;
use crate::server::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "crash test: run by tests/run.sh (SKADE_CRASH_KILLS=3) or by hand for long runs"]
async fn sigkill_at_random_moments_loses_no_acked_commit() {
    let kills = env_u64("SKADE_CRASH_KILLS").unwrap_or(3);
    let seed = env_u64("SKADE_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });
    let started = Instant::now();
    let mut dir = tempfile::Builder::new()
        .prefix("skade-crash-")
        .tempdir()
        .unwrap();
    // SKADE_CRASH_KEEP=1 keeps the data dir and the server log for inspection.
    dir.disable_cleanup(std::env::var_os("SKADE_CRASH_KEEP").is_some());
    let data_dir = dir.path().join("data");
    let log = dir.path().join("skade.log");
    let s3 = start_s3();
    println!(
        "crash test: {kills} kills, SKADE_CRASH_SEED={seed}, data in {}, warehouse {}",
        data_dir.display(),
        if s3.is_some() { S3_WAREHOUSE } else { "local" }
    );

    precreate_tables(&data_dir, s3.as_ref()).await;
    let (server_tx, _) = watch::channel(None);
    let (parked_tx, mut parked_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        server: server_tx,
        stop: AtomicBool::new(false),
        streams: Mutex::new(Vec::new()),
        txns: Mutex::new(Vec::new()),
        parked: parked_tx,
        errors: Mutex::new(Vec::new()),
        status: Mutex::new(Vec::new()),
    });
    let clients = STREAM_TABLES.len() + 1;
    let mut tasks = Vec::new();
    for client in 0..STREAM_TABLES.len() {
        tasks.push(tokio::spawn(stream_client(client, shared.clone(), seed)));
    }
    tasks.push(tokio::spawn(txn_client(
        STREAM_TABLES.len(),
        shared.clone(),
        seed,
    )));

    let mut tasks = tasks;
    let mut rng = Rng(seed);
    let mut verifier = Verifier::default();
    let mut mid_commit_kills = 0;
    let mut last = Check::default();
    for kill in 1..=kills {
        let (mut server, flight, metrics) = spawn_server(&data_dir, &log, s3.as_ref(), &[], &[]);
        wait_healthy(&mut server, metrics).await;
        shared
            .server
            .send_replace(Some(Generation { n: kill, flight }));
        let run = Duration::from_millis(rng.range(300, 1500));
        tokio::time::sleep(run).await;
        server.0.kill().expect("SIGKILL skade");
        server.0.wait().expect("reap skade");
        shared.server.send_replace(None);
        // Every client must have seen the kill before the data dir is checked.
        let mut seen = BTreeSet::new();
        while seen.len() < clients {
            let parked = tokio::time::timeout(Duration::from_secs(60), parked_rx.recv()).await;
            if let Some(i) = tasks.iter().position(|t| t.is_finished()) {
                let ended = tasks.remove(i).await;
                panic!("client task ended during generation {kill}: {ended:?}");
            }
            let Ok(Some((client, generation))) = parked else {
                panic!(
                    "clients {:?} did not notice kill {kill}; seen {seen:?}; status {:?}",
                    (0..clients)
                        .filter(|c| !seen.contains(c))
                        .collect::<Vec<_>>(),
                    lock(&shared.status)
                );
            };
            if generation == kill {
                seen.insert(client);
            }
        }
        let parked_at = Instant::now();
        let streams = lock(&shared.streams).clone();
        let txns = lock(&shared.txns).clone();
        let check = verifier
            .check(&data_dir, &streams, &txns, false, s3.as_ref())
            .await;
        let checked_in = parked_at.elapsed();
        if check.commits_cut > 0 {
            mid_commit_kills += 1;
        }
        println!(
            "kill {kill} after {run:?}: {} acked commits ({} found), {} rows acked, {} lost; {} snapshots ({} by maintenance), {} rows; {} kills mid-commit so far; checked in {checked_in:.1?}",
            check.acked_commits,
            check.acked_commits_found,
            check.acked_rows,
            check.rows_lost,
            check.snapshots,
            check.maintenance_snapshots,
            check.rows,
            mid_commit_kills
        );
        assert!(
            check.violations.is_empty(),
            "after kill {kill} (seed {seed}, log {}):\n{}",
            log.display(),
            check.violations.join("\n")
        );
        last = check;
    }

    // The end: a last server; the clients finish their streams cleanly and stop.
    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, s3.as_ref(), &[], &[]);
    wait_healthy(&mut server, metrics).await;
    shared.server.send_replace(Some(Generation {
        n: kills + 1,
        flight,
    }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    shared.stop.store(true, Ordering::SeqCst);
    shared.server.send_modify(|_| {}); // wake clients waiting for a server
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("clients finish")
            .expect("client task");
    }
    println!("clients finished at {:.1?}", started.elapsed());
    let errors = lock(&shared.errors).clone();
    let unexpected: Vec<_> = errors.iter().filter(|e| e.1 > kills).collect();
    assert!(
        unexpected.is_empty(),
        "client failures with no kill to blame: {unexpected:?}"
    );
    // pyiceberg reads every table through the REST catalog of the running server.
    let pyiceberg = match python() {
        Some(python) => {
            let out = Command::new(&python)
                .args(["-c", PYICEBERG_CHECK, &format!("http://{metrics}")])
                .output()
                .expect("run python");
            assert!(
                out.status.success(),
                "pyiceberg check failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let parsed: BTreeMap<String, (usize, String)> =
                serde_json::from_slice(&out.stdout).expect("pyiceberg's JSON");
            Some(parsed)
        }
        None => {
            println!("pyiceberg check skipped: no SKADE_PYTHON and no .venv/bin/python");
            None
        }
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let status = server.0.wait().expect("reap skade");
    assert!(status.success(), "skade exit after SIGTERM: {status}");

    println!("pyiceberg done at {:.1?}", started.elapsed());
    let streams = lock(&shared.streams).clone();
    let txns = lock(&shared.txns).clone();
    let check = verifier
        .check(&data_dir, &streams, &txns, true, s3.as_ref())
        .await;
    println!("final check done at {:.1?}", started.elapsed());
    assert!(
        check.violations.is_empty(),
        "at the end (seed {seed}, log {}):\n{}",
        log.display(),
        check.violations.join("\n")
    );
    if let Some(pyiceberg) = pyiceberg {
        let ours: BTreeMap<String, (usize, String)> = check
            .tables
            .iter()
            .map(|(t, (rows, sum))| (t.clone(), (*rows, sum.to_string())))
            .collect();
        assert_eq!(pyiceberg, ours, "pyiceberg and iceberg-rust disagree");
    }
    let finished_streams = streams.iter().filter(|s| s.finished).count();
    println!(
        "CRASH RESULT: kills {kills}, commits acked {}, acked commits found {}, rows acked {}, rows lost {}, snapshots {}, rows {}, streams {} ({finished_streams} finished), transactions {} ({} committed), kills mid-commit {mid_commit_kills}, seed {seed}, {:.0?}",
        check.acked_commits,
        check.acked_commits_found,
        check.acked_rows,
        check.rows_lost,
        check.snapshots,
        check.rows,
        streams.len(),
        txns.len(),
        txns.iter()
            .filter(|t| t.outcome == TxnOutcome::Committed)
            .count(),
        started.elapsed()
    );
    assert_eq!(check.rows_lost, 0);
    assert_eq!(check.acked_commits, check.acked_commits_found);
    assert!(check.acked_commits >= last.acked_commits);
    assert!(
        kills == 0 || last.acked_commits > 0,
        "the workload committed nothing"
    );
}

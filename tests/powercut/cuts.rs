//! Scenario: power cuts at random moments under the crash test's workload (see the crate
//! docs), and the negative control with every sync turned into a no-op.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::checks::*;
use crate::clients::*;
use crate::ddl::*;
use crate::disk::*;
use crate::server::*;

/// What a run of cuts counted.
#[derive(Debug, Default)]
struct Totals {
    cuts_none: u64,
    cuts_subset: u64,
    pages_pending: u64,
    pages_dropped: u64,
    fsck_clean: u64,
    cuts_mid_commit: u64,
    cuts_at_write: u64,
    /// DDL requests applied (acked, or found applied after a cut) by the last check.
    ddl_acked: usize,
}

/// A run's directory: the disk images, the crash image of each cut (the last kept), the
/// logs. Removed at the end of a passing run; kept (and named) when a check fails, or
/// always with `SKADE_POWERCUT_KEEP=1`.
struct RunDir {
    dir: tempfile::TempDir,
}

impl RunDir {
    fn new(prefix: &str) -> Self {
        let mut dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        dir.disable_cleanup(std::env::var_os("SKADE_POWERCUT_KEEP").is_some());
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Keeps the directory (a check failed) and says where it is.
    fn keep(&mut self) -> String {
        self.dir.disable_cleanup(true);
        self.dir.path().display().to_string()
    }
}

fn seed_from_env() -> u64 {
    env_u64("SKADE_POWERCUT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    })
}

/// Waits until the group stop of `pid` (after SIGSTOP) has begun: one of its threads is
/// stopped. The thread that takes SIGSTOP marks every other thread to stop before it
/// stops itself, so from then on no thread runs user code again: no ack can be sent
/// whose sync had not returned by now. A thread inside a syscall (a `syncfs` or fsync in
/// flight) goes on in the kernel until the syscall returns, so a cut taken now can land
/// in the middle of a sync, as power loss does.
fn wait_stop_begun(pid: u32) {
    let started = Instant::now();
    loop {
        let one_stopped = std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("skade's threads")
            .flatten()
            .any(|task| {
                std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                    stat.rsplit_once(") ")
                        .and_then(|(_, rest)| rest.chars().next())
                        .is_some_and(|state| state == 'T' || state == 't')
                })
            });
        if one_stopped {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "skade did not stop after SIGSTOP"
        );
        std::thread::yield_now();
    }
}

/// The checks of one cut, with a panic inside them (a catalog or table that does not
/// load) reported as a failed check rather than ending the test.
async fn check_cut(
    verifier: &mut Verifier,
    data_dir: &Path,
    streams: &[StreamRecord],
    txns: &[TxnRecord],
    finished: bool,
) -> Result<Check, String> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(verifier.check(data_dir, streams, txns, finished, None))
        .catch_unwind()
        .await
        .map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            format!("the checks panicked: {why}")
        })
}

/// Every table of `expected` read back through the server at `flight` (GetFlightInfo +
/// DoGet): per table its rows and id sum, after checking each row against its id.
async fn doget_tables(
    flight: std::net::SocketAddr,
    expected: &BTreeMap<String, (usize, i128)>,
) -> BTreeMap<String, (usize, i128)> {
    let mut client = crate::common::client_at(flight).await;
    let mut out = BTreeMap::new();
    for table in expected.keys() {
        let batches = crate::common::get(&mut client, &[NS, table]).await;
        let ids = ids_of_batches(&batches).unwrap_or_else(|e| panic!("DoGet {table}: {e}"));
        out.insert(
            table.clone(),
            (ids.len(), ids.iter().map(|&i| i as i128).sum()),
        );
    }
    out
}

/// How one run ends: every cut checked clean, or the first cut whose checks failed.
enum Ending {
    Clean {
        totals: Totals,
        last: Check,
        verifier: Verifier,
    },
    Failed {
        cut: u64,
        report: String,
        lost_rows: u64,
    },
}

/// Runs `cuts` power cuts under the workload; with `nosync` the server runs with the
/// `LD_PRELOAD` shim that makes every sync a no-op (the negative control).
async fn run_cuts(
    run: &mut RunDir,
    cuts: u64,
    seed: u64,
    nosync: Option<&Path>,
    workload: &mut Workload,
) -> (Ending, Option<Stack>) {
    let Workload {
        shared,
        parked_rx,
        tasks,
        rest,
        ddl_ops,
    } = workload;
    let fuse_dir = run.path("fuse");
    let mount_dir = run.path("mnt");
    let data_dir = mount_dir.join("data");
    let (log, fuse_log) = (run.path("skade.log"), run.path("fuse.log"));
    let preload = nosync.map(|p| p.to_string_lossy().into_owned());
    let env: Vec<(&str, &str)> = preload
        .as_deref()
        .map(|p| vec![("LD_PRELOAD", p)])
        .unwrap_or_default();

    let backing = run.path("base-1.img");
    mkfs(&backing);
    let mut stack = Some(Stack::start(&backing, &fuse_dir, &mount_dir, &fuse_log));
    precreate_tables(&data_dir, None).await;
    let clients = CLIENTS;
    let mut rng = Rng(seed);
    let mut verifier = Verifier::default();
    let mut totals = Totals::default();
    let mut last = Check::default();
    for cut in 1..=cuts {
        let (mut server, flight, metrics) = spawn_server(&data_dir, &log, None, &env, &[]);
        wait_healthy(&mut server, metrics).await;
        if cut > 1 {
            // skade started on the last crash image and serves what the checks found.
            let served = doget_tables(flight, &last.tables).await;
            assert_eq!(
                served,
                last.tables,
                "after cut {}: DoGet of the restarted server and the checks disagree (rows, id sum)",
                cut - 1
            );
        }
        shared
            .server
            .send_replace(Some(Generation { n: cut, flight }));
        rest.send_replace(Some((cut, metrics)));
        let ran = Duration::from_millis(rng.range(500, 2500));
        let policy = if rng.range(0, 2) == 0 {
            Policy::None
        } else {
            Policy::Subset
        };
        let page_seed = rng.next() >> 1;
        // Half the cuts at a random instant (SIGSTOP first, then the image: skade's
        // syscalls in flight go on meanwhile); half taken by the disk itself at the k-th
        // write after a random instant, i.e. inside a flush interval, mostly mid-sync
        // (then the disk blocks every later write and fsync until the kill).
        let at_write = (rng.range(0, 2) == 1).then(|| rng.range(1, 64));
        tokio::time::sleep(ran).await;
        let image = run.path(&format!("cut-{cut}.img"));
        let pid = server.0.id();
        let disk = &mut stack.as_mut().expect("a mounted disk").disk;
        let armed = match at_write {
            Some(k) => tokio::task::block_in_place(|| {
                disk.arm(k, &image, policy, page_seed);
                disk.wait_armed(Duration::from_secs(3))
            }),
            None => None,
        };
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        tokio::task::block_in_place(|| wait_stop_begun(pid));
        let (stats, moment) = match (armed, at_write) {
            (Some(stats), Some(k)) => (stats, format!("at write {k}")),
            (None, k) => {
                let stats = tokio::task::block_in_place(|| disk.cut(&image, policy, page_seed));
                let moment = match k {
                    Some(k) => format!("at an instant (write {k} never came)"),
                    None => "at an instant".to_string(),
                };
                (stats, moment)
            }
            (Some(_), None) => unreachable!("armed only with a write count"),
        };
        if at_write.is_some() && moment.starts_with("at write") {
            totals.cuts_at_write += 1;
        }
        // Acks already on the wire arrive (each was sent after its sync returned, so
        // before the image); then the disk lets blocked I/O finish, and skade is killed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::task::block_in_place(|| disk.release());
        server.0.kill().expect("SIGKILL skade");
        server.0.wait().expect("reap skade");
        shared.server.send_replace(None);
        rest.send_replace(None);
        let mut seen = BTreeSet::new();
        while seen.len() < clients {
            let parked = tokio::time::timeout(Duration::from_secs(60), parked_rx.recv()).await;
            if let Some(i) = tasks.iter().position(|t| t.is_finished()) {
                let ended = tasks.remove(i).await;
                panic!("client task ended during generation {cut}: {ended:?}");
            }
            let Ok(Some((client, generation))) = parked else {
                panic!(
                    "clients did not notice cut {cut}; seen {seen:?}; status {:?}",
                    lock(&shared.status)
                );
            };
            if generation == cut {
                seen.insert(client);
            }
        }
        let streams = lock(&shared.streams).clone();
        let txns = lock(&shared.txns).clone();
        let ddl = lock(ddl_ops).clone();
        match policy {
            Policy::None => totals.cuts_none += 1,
            Policy::Subset => totals.cuts_subset += 1,
        }
        totals.pages_pending += stats.pending;
        totals.pages_dropped += stats.pending - stats.kept;
        let recipe = format!(
            "cut {cut}: seed {seed}, after {ran:?} {moment}, policy {policy:?}, page seed {page_seed}, {} pages pending, {} kept",
            stats.pending, stats.kept
        );

        // Power back on: the crash image on a fresh loop device (journal recovery,
        // e2fsck -fn), then as the next generation's disk.
        drop(stack.take());
        let next = run.path(&format!("base-{}.img", cut + 1));
        let mut problems = Vec::new();
        tokio::task::block_in_place(|| {
            copy_image(&image, &next);
            match recover_and_fsck(&next, &run.path("check")) {
                Ok(fsck) if fsck.status == 0 => totals.fsck_clean += 1,
                Ok(fsck) => problems.push(format!(
                    "e2fsck -fn exited {}:\n{}",
                    fsck.status, fsck.output
                )),
                Err(e) => problems.push(format!("the crash image does not mount: {e}")),
            }
        });
        let _ = std::fs::remove_file(run.path(&format!("base-{cut}.img")));
        let mut lost_rows = 0;
        if problems.is_empty() {
            stack = Some(tokio::task::block_in_place(|| {
                Stack::start(&next, &fuse_dir, &mount_dir, &fuse_log)
            }));
            match check_cut(&mut verifier, &data_dir, &streams, &txns, false).await {
                Ok(check) => {
                    println!(
                        "{recipe}: {} acked commits ({} found), {} rows acked, {} lost; {} snapshots ({} by maintenance), {} rows",
                        check.acked_commits,
                        check.acked_commits_found,
                        check.acked_rows,
                        check.rows_lost,
                        check.snapshots,
                        check.maintenance_snapshots,
                        check.rows,
                    );
                    lost_rows = check.rows_lost;
                    if check.commits_cut > 0 {
                        totals.cuts_mid_commit += 1;
                    }
                    problems.extend(check.violations.iter().cloned());
                    last = check;
                    let catalog = open_catalog(&data_dir, None);
                    problems.extend(check_ddl(&catalog, &ddl).await);
                    totals.ddl_acked = ddl
                        .iter()
                        .filter(|o| o.outcome == DdlOutcome::Applied)
                        .count();
                }
                Err(e) => {
                    // Nothing acked can be read back (the catalog does not open): all of
                    // it counts as lost.
                    lost_rows = streams.iter().map(|s| s.acked_rows).sum::<u64>()
                        + txns
                            .iter()
                            .filter(|t| t.outcome == TxnOutcome::Committed)
                            .map(|t| 2 * t.rows as u64)
                            .sum::<u64>();
                    problems.push(e)
                }
            }
        }
        if problems.is_empty() {
            // skade starts on what the cut left (checked by the next generation's start;
            // after the last cut, by the final server).
            if cut > 1 {
                let _ = std::fs::remove_file(run.path(&format!("cut-{}.img", cut - 1)));
            }
            continue;
        }
        std::fs::write(
            run.path("records.txt"),
            format!("{recipe}\nstreams: {streams:#?}\ntransactions: {txns:#?}\nddl: {ddl:#?}\n"),
        )
        .expect("write the records");
        let report = format!(
            "{recipe}:\n{}\n(crash image {}, logs and records in {})",
            problems.join("\n"),
            image.display(),
            run.keep()
        );
        return (
            Ending::Failed {
                cut,
                report,
                lost_rows,
            },
            stack,
        );
    }
    (
        Ending::Clean {
            totals,
            last,
            verifier,
        },
        stack,
    )
}

/// The crash test's clients plus the DDL client, and what the orchestrator needs of them.
struct Workload {
    shared: Arc<Shared>,
    parked_rx: mpsc::UnboundedReceiver<(usize, u64)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    rest: Arc<RestAddr>,
    ddl_ops: Arc<Mutex<Vec<DdlOp>>>,
}

/// Streaming clients, the transaction client and the DDL client.
const CLIENTS: usize = STREAM_TABLES.len() + 2;

impl Workload {
    fn start(seed: u64) -> Self {
        let (server_tx, _) = watch::channel(None);
        let (parked_tx, parked_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            server: server_tx,
            stop: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            txns: Mutex::new(Vec::new()),
            parked: parked_tx,
            errors: Mutex::new(Vec::new()),
            status: Mutex::new(Vec::new()),
        });
        let rest = Arc::new(watch::channel(None).0);
        let ddl_ops = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for client in 0..STREAM_TABLES.len() {
            tasks.push(tokio::spawn(stream_client(client, shared.clone(), seed)));
        }
        tasks.push(tokio::spawn(txn_client(
            STREAM_TABLES.len(),
            shared.clone(),
            seed,
        )));
        tasks.push(tokio::spawn(ddl_client(
            STREAM_TABLES.len() + 1,
            shared.clone(),
            rest.clone(),
            ddl_ops.clone(),
            seed,
        )));
        Self {
            shared,
            parked_rx,
            tasks,
            rest,
            ddl_ops,
        }
    }

    /// Tells the clients to stop and wakes those waiting for a server.
    fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.server.send_modify(|_| {});
        self.rest.send_modify(|_| {});
    }

    /// Stops the clients (no server comes any more) and waits for them.
    async fn abandon(self) {
        self.shared.server.send_replace(None);
        self.rest.send_replace(None);
        self.stop();
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(120), task).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "power-cut test: needs root, /dev/fuse and loop devices; run by tests/run.sh (SKADE_POWERCUT_CUTS=10) or by hand for long runs"]
async fn power_cuts_lose_no_acked_commit() {
    if !available() {
        return;
    }
    let cuts = env_u64("SKADE_POWERCUT_CUTS").unwrap_or(10);
    let seed = seed_from_env();
    let started = Instant::now();
    let mut run = RunDir::new("skade-powercut-");
    println!(
        "power-cut test: {cuts} cuts, SKADE_POWERCUT_SEED={seed}, in {}",
        run.dir.path().display()
    );
    let mut workload = Workload::start(seed);
    let (ending, stack) = run_cuts(&mut run, cuts, seed, None, &mut workload).await;
    let (totals, last, verifier) = match ending {
        Ending::Clean {
            totals,
            last,
            verifier,
        } => (totals, last, verifier),
        Ending::Failed { cut, report, .. } => {
            workload.abandon().await;
            drop(stack);
            panic!("power cut {cut} lost what was acked or broke the disk: {report}");
        }
    };
    let stack = stack.expect("the last cut's disk");
    let data_dir = stack.mount.as_ref().expect("mounted").dir.join("data");

    // The end: a last server on the last crash image; the clients finish their streams
    // cleanly (every exactly-once stream and transaction completes) and stop.
    let log = run.path("skade.log");
    let (mut server, flight, metrics) = spawn_server(&data_dir, &log, None, &[], &[]);
    wait_healthy(&mut server, metrics).await;
    let shared = workload.shared.clone();
    shared.server.send_replace(Some(Generation {
        n: cuts + 1,
        flight,
    }));
    workload.rest.send_replace(Some((cuts + 1, metrics)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    workload.stop();
    for task in std::mem::take(&mut workload.tasks) {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("clients finish")
            .expect("client task");
    }
    let errors = lock(&shared.errors).clone();
    let unexpected: Vec<_> = errors
        .iter()
        .filter(|e| e.1 > cuts || e.2.starts_with(REFUSED))
        .collect();
    assert!(
        unexpected.is_empty(),
        "client failures with no cut to blame: {unexpected:?}"
    );
    let pyiceberg = python_with_pyiceberg().map(|python| {
        let out = Command::new(&python)
            .args(["-c", PYICEBERG_CHECK, &format!("http://{metrics}")])
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "pyiceberg check failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<BTreeMap<String, (usize, String)>>(&out.stdout)
            .expect("pyiceberg's JSON")
    });
    let tables = lock(&shared.streams)
        .iter()
        .map(|s| (s.table.clone(), (0, 0)))
        .chain([("txb".to_string(), (0, 0))])
        .collect();
    let served = doget_tables(flight, &tables).await;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let status = server.0.wait().expect("reap skade");
    assert!(status.success(), "skade exit after SIGTERM: {status}");
    let streams = lock(&shared.streams).clone();
    let txns = lock(&shared.txns).clone();
    let ddl = lock(&workload.ddl_ops).clone();
    let mut verifier = verifier;
    let check = check_cut(&mut verifier, &data_dir, &streams, &txns, true)
        .await
        .unwrap_or_else(|e| panic!("at the end (seed {seed}): {e}"));
    if !check.violations.is_empty() {
        let kept = run.keep();
        panic!(
            "at the end (seed {seed}, logs in {kept}):\n{}",
            check.violations.join("\n")
        );
    }
    assert_eq!(
        served, check.tables,
        "DoGet and the checks disagree (rows, id sum)"
    );
    let ddl_violations = check_ddl(&open_catalog(&data_dir, None), &ddl).await;
    assert!(
        ddl_violations.is_empty(),
        "DDL at the end: {}",
        ddl_violations.join("\n")
    );
    assert!(
        ddl.iter().all(|o| o.outcome != DdlOutcome::Unknown),
        "a DDL request left unknown at the end"
    );
    if let Some(pyiceberg) = pyiceberg {
        let ours: BTreeMap<String, (usize, String)> = check
            .tables
            .iter()
            .map(|(t, (rows, sum))| (t.clone(), (*rows, sum.to_string())))
            .collect();
        assert_eq!(pyiceberg, ours, "pyiceberg and iceberg-rust disagree");
    } else {
        println!("pyiceberg check skipped: no python with pyiceberg (SKADE_PYTHON)");
    }
    drop(stack);
    println!(
        "POWERCUT RESULT: cuts {cuts} (policy none {}, subset {}; {} taken by the disk at a write), commits acked {}, acked commits found {}, rows acked {}, rows lost {}, e2fsck -fn clean {}/{cuts}, pages pending at the cuts {} ({} dropped), cuts mid-commit {}, snapshots {}, rows {}, transactions {} ({} committed), DDL requests {} ({} applied; {} applied at the last cut), seed {seed}, {:.0?}",
        totals.cuts_none,
        totals.cuts_subset,
        totals.cuts_at_write,
        check.acked_commits,
        check.acked_commits_found,
        check.acked_rows,
        check.rows_lost,
        totals.fsck_clean,
        totals.pages_pending,
        totals.pages_dropped,
        totals.cuts_mid_commit,
        check.snapshots,
        check.rows,
        txns.len(),
        txns.iter()
            .filter(|t| t.outcome == TxnOutcome::Committed)
            .count(),
        ddl.len(),
        ddl.iter()
            .filter(|o| o.outcome == DdlOutcome::Applied)
            .count(),
        totals.ddl_acked,
        started.elapsed()
    );
    assert_eq!(check.rows_lost, 0);
    assert_eq!(check.acked_commits, check.acked_commits_found);
    assert!(check.acked_commits >= last.acked_commits);
    assert!(
        cuts == 0 || last.acked_commits > 0,
        "the workload committed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "power-cut test: needs root, /dev/fuse and loop devices; run by tests/run.sh"]
async fn power_cuts_without_syncs_lose_acked_rows() {
    negative_control(NoSync::All).await;
}

/// The failure a SIGKILL can never show: the warehouse's `syncfs` missing (the catalog's
/// fsyncs intact), so a commit's pointer is durable before its files are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "power-cut test: needs root, /dev/fuse and loop devices; run by tests/run.sh"]
async fn power_cuts_without_syncfs_lose_acked_rows() {
    negative_control(NoSync::Syncfs).await;
}

/// Runs cuts with the server under the `which` shim until one loses acked rows; fails
/// if `SKADE_POWERCUT_CONTROL_CUTS` (default 5) cuts lose none, or a cut fails otherwise.
async fn negative_control(which: NoSync) {
    if !available() {
        return;
    }
    let cuts = env_u64("SKADE_POWERCUT_CONTROL_CUTS").unwrap_or(5);
    let seed = seed_from_env();
    let mut run = RunDir::new("skade-powercut-control-");
    let shim = build_nosync_shim(run.dir.path(), which);
    println!(
        "power-cut negative control: up to {cuts} cuts with {which:?} syncs no-ops, SKADE_POWERCUT_SEED={seed}"
    );
    let mut workload = Workload::start(seed);
    let (ending, stack) = run_cuts(&mut run, cuts, seed, Some(&shim), &mut workload).await;
    workload.abandon().await;
    drop(stack);
    match ending {
        Ending::Failed {
            cut,
            report,
            lost_rows,
        } => {
            let lines: Vec<&str> = report.lines().collect();
            println!(
                "POWERCUT CONTROL ({which:?}): cut {cut} caught it ({lost_rows} acked rows lost); first of {} lines:\n{}",
                lines.len(),
                lines.iter().take(8).copied().collect::<Vec<_>>().join("\n")
            );
            assert!(
                lost_rows > 0,
                "the control failed, but not by losing acked rows: {report}"
            );
            // A caught control is the expected outcome: nothing to keep.
            run.dir
                .disable_cleanup(std::env::var_os("SKADE_POWERCUT_KEEP").is_some());
        }
        Ending::Clean { .. } => panic!(
            "with {which:?} syncs no-ops, {cuts} power cuts lost no acked row (seed {seed}): the harness cannot see a missing sync"
        ),
    }
}

/// The python for the pyiceberg check: `SKADE_PYTHON` or `.venv`, when it has pyiceberg.
fn python_with_pyiceberg() -> Option<PathBuf> {
    let python = python()?;
    Command::new(&python)
        .args(["-c", "import pyiceberg"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| python)
}

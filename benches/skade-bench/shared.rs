//! `shared`: the PostgreSQL catalog (`--catalog postgres://…`) against the embedded redb
//! catalog in one run, and three instances sharing one database and one warehouse.
//!
//! The arm starts a private PostgreSQL cluster (`tests/pg/cluster.sh start`, in a temp
//! dir directly under the system temp dir; fsync and `synchronous_commit` on) and stops it
//! at the end. Every lane on PostgreSQL gets a database of its own (`CREATE DATABASE`), as
//! every redb lane gets a fresh data dir. Lanes:
//! - one stream of tiny puts (10 rows, one commit each; `commit`'s one-stream lane) on an
//!   in-process server, redb vs PostgreSQL: commits/s, target postgres/redb ≥ 0.7;
//! - one large put (`ingest`'s end-to-end lane, `SKADE_SHARED_ROWS` rows, 2,000,000),
//!   redb vs PostgreSQL: rows/s, target postgres/redb ≥ 0.95;
//! - three and six in-process instances (`skade::start`, one database, one warehouse
//!   dir), one stream of tiny puts each, into ONE table and into a table each, under both
//!   `--catalog-commit-turn`s (`database`: an advisory lock per table across instances;
//!   `instance`: compare-and-swap with re-stage): total commits/s, compare-and-swap
//!   retries per commit (`skade_commit_conflicts_total` summed over the instances, per
//!   acknowledged put) and puts aborted after the server's re-stages;
//! - PostgreSQL's own floor: raw one-row `UPDATE` autocommit transactions over
//!   tokio-postgres, one connection; three connections on one row; 16 connections on 16
//!   rows (the database's commit rate with group commit in its WAL).
//!
//! `SKADE_SHARED_PUTS` (200, at least 10) tiny puts per stream. Each stream's first put
//! (which creates its table) is not timed. The two orders (redb first, PostgreSQL first)
//! alternate from run to run. All instances share this process's cores.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use skade::catalog::store::postgres::turns::CommitTurn;
use skade::metrics::{CATALOG_COMMITS_TOTAL, COMMIT_CONFLICTS_TOTAL, COMMIT_TURN_SKIPPED_TOTAL};

use crate::common::*;
use crate::multi::Scrape;

/// The private cluster: its directory and the URL of its `skade` database.
struct Cluster {
    dir: tempfile::TempDir,
    url: String,
    /// Databases created so far (each lane's name is unique).
    created: usize,
}

/// `tests/pg/cluster.sh` in this checkout.
fn cluster_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pg/cluster.sh")
}

impl Cluster {
    /// Starts a cluster (about 2 s); the watcher cluster.sh leaves (`PG_CLUSTER_OWNER`)
    /// stops it if this process dies first.
    fn start() -> Self {
        // Directly under the temp dir: as root, cluster.sh runs the server as `postgres`,
        // which must reach DIR.
        let dir = tempfile::Builder::new()
            .prefix("skade-bench-pg-")
            .tempdir_in(std::env::temp_dir())
            .expect("temp dir for the PostgreSQL cluster");
        let out = Self::cluster_sh(dir.path(), &["start"]);
        Self {
            url: out.trim().to_string(),
            dir,
            created: 0,
        }
    }

    fn cluster_sh(dir: &Path, args: &[&str]) -> String {
        let out = Command::new(cluster_sh())
            .arg(args[0])
            .arg(dir)
            .args(&args[1..])
            .env("PG_CLUSTER_OWNER", std::process::id().to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {} ({e})", cluster_sh().display()));
        assert!(
            out.status.success(),
            "tests/pg/cluster.sh {} failed ({}): {}\n(is PostgreSQL installed? run tests/pg/install-postgres.sh)",
            args[0],
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A fresh database; returns its URL.
    async fn database(&mut self) -> String {
        self.created += 1;
        let name = format!("bench_{}", self.created);
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect to the bench cluster");
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("CREATE DATABASE");
        drop(client);
        let _ = connection.await;
        let (base, _) = self.url.rsplit_once('/').expect("URL has a database");
        format!("{base}/{name}")
    }

    /// Stops the server (fast) and removes its directory.
    fn stop(self) {
        Self::cluster_sh(self.dir.path(), &["stop", "fast"]);
        drop(self.dir);
    }
}

/// Instances in the fleet lanes.
const FLEET_SIZES: [usize; 2] = [3, 6];

/// A server on a fresh data dir: the redb catalog when `catalog` is `None`, else that
/// PostgreSQL database with commit turns `turn`; the warehouse `warehouse` or the
/// default under the data dir.
async fn start_server(
    catalog: Option<&str>,
    turn: CommitTurn,
    warehouse: Option<&Path>,
) -> (skade::Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = skade::Config::for_tests(dir.path());
    config.catalog.url = catalog.map(str::to_string);
    config.catalog.commit_turn = turn;
    config.storage.warehouse = warehouse.map(|w| w.to_string_lossy().into_owned());
    let running = skade::start(config).await.expect("server");
    (running, dir)
}

/// `puts` tiny puts (10 rows each, one commit each) by one client into `bench.<table>`,
/// ids from `first_id`. A put the server ends with `Aborted` (its commit lost the
/// compare-and-swap more times than the server re-stages it; nothing was committed) is
/// sent again, as a producer would. Returns the seconds they took and the aborted tries.
async fn tiny_puts(
    client: &mut FlightClient,
    table: &str,
    puts: usize,
    first_id: i64,
) -> (f64, usize) {
    let started = Instant::now();
    let mut aborted = 0;
    for i in 0..puts {
        let rows = batch(first_id + (i * 10) as i64, 10);
        loop {
            let data = FlightDataEncoderBuilder::new()
                .with_schema(schema())
                .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
                    "bench".into(),
                    table.into(),
                ])))
                .build(futures::stream::iter([Ok(rows.clone())]));
            let acks: Result<Vec<_>, _> = match client.do_put(data).await {
                Ok(stream) => stream.try_collect().await,
                Err(e) => Err(e),
            };
            match acks {
                Ok(_) => break,
                Err(arrow_flight::error::FlightError::Tonic(status))
                    if status.code() == tonic::Code::Aborted =>
                {
                    aborted += 1;
                }
                Err(e) => panic!("tiny put into bench.{table}: {e}"),
            }
        }
    }
    (started.elapsed().as_secs_f64(), aborted)
}

/// One stream of tiny puts into one table of a fresh server: commits/s (after one
/// untimed put that creates the table).
async fn one_stream(catalog: Option<&str>, puts: usize) -> f64 {
    settle().await;
    let (running, dir) = start_server(catalog, CommitTurn::default(), None).await;
    let mut client = connect(running.flight_addr).await;
    tiny_puts(&mut client, "one", 1, 0).await;
    let (secs, aborted) = tiny_puts(&mut client, "one", puts, 10).await;
    assert_eq!(aborted, 0, "a lone stream's commit conflicted");
    running.shutdown_and_wait().await.expect("shutdown");
    drop(dir);
    puts as f64 / secs
}

/// One large put of `batches` into a fresh server: rows/s.
async fn one_large_put(catalog: Option<&str>, batches: &[RecordBatch]) -> f64 {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    settle().await;
    let (running, dir) = start_server(catalog, CommitTurn::default(), None).await;
    let mut client = connect(running.flight_addr).await;
    let started = Instant::now();
    let acks = put(&mut client, "large", batches[0].schema(), batches.to_vec()).await;
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    assert!(!acks.is_empty(), "the large put was acknowledged");
    running.shutdown_and_wait().await.expect("shutdown");
    drop(dir);
    rate
}

/// What one run of the three-instance lane measured.
struct Fleet {
    commits_per_s: f64,
    /// Acknowledged timed puts (each one commit).
    commits: usize,
    /// `skade_commit_conflicts_total` summed over the instances, over the timed puts.
    conflicts: f64,
    /// `skade_catalog_commits_total` summed likewise (PostgreSQL transactions).
    transactions: f64,
    /// Puts the server ended with `Aborted` (sent again), over the timed puts.
    aborted: usize,
    /// `skade_commit_turn_skipped_total` summed likewise.
    skipped: f64,
}

/// `count` instances on database `url` with commit turns `turn` and one new warehouse
/// dir, one stream of `puts` tiny puts each, into one table (`one_table`) or a table per
/// stream.
async fn fleet(url: &str, count: usize, turn: CommitTurn, puts: usize, one_table: bool) -> Fleet {
    settle().await;
    let warehouse = tempfile::tempdir().expect("warehouse dir");
    let mut instances = Vec::new();
    for _ in 0..count {
        instances.push(start_server(Some(url), turn, Some(warehouse.path())).await);
    }
    let table = |i: usize| {
        if one_table {
            "shared".to_string()
        } else {
            format!("own_{i}")
        }
    };
    let mut clients = Vec::new();
    for (i, (running, _)) in instances.iter().enumerate() {
        let mut client = connect(running.flight_addr).await;
        // Untimed, one after another: creates the table(s) and warms each instance.
        tiny_puts(&mut client, &table(i), 1, (i * 1_000_000_000) as i64).await;
        clients.push(client);
    }
    let counts = |scrapes: &[Scrape], name: &str| -> f64 {
        scrapes.iter().map(|s| s.value(name, &[])).sum::<f64>()
    };
    let mut before = Vec::new();
    for (running, _) in &instances {
        before.push(Scrape::take(running.metrics_addr).await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, mut client) in clients.into_iter().enumerate() {
        let table = table(i);
        tasks.push(tokio::spawn(async move {
            tiny_puts(&mut client, &table, puts, (i * 1_000_000_000 + 10) as i64).await
        }));
    }
    let mut aborted = 0;
    for task in tasks {
        aborted += task.await.expect("stream").1;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut after = Vec::new();
    for (running, _) in &instances {
        after.push(Scrape::take(running.metrics_addr).await);
    }
    for (running, dir) in instances {
        running.shutdown_and_wait().await.expect("shutdown");
        drop(dir);
    }
    drop(warehouse);
    Fleet {
        commits_per_s: (count * puts) as f64 / secs,
        commits: count * puts,
        conflicts: counts(&after, COMMIT_CONFLICTS_TOTAL) - counts(&before, COMMIT_CONFLICTS_TOTAL),
        transactions: counts(&after, CATALOG_COMMITS_TOTAL)
            - counts(&before, CATALOG_COMMITS_TOTAL),
        aborted,
        skipped: counts(&after, COMMIT_TURN_SKIPPED_TOTAL)
            - counts(&before, COMMIT_TURN_SKIPPED_TOTAL),
    }
}

/// PostgreSQL's own commit rate on database `url`: `connections` connections, each
/// running `per_connection` autocommit `UPDATE`s of one row (all the same row when
/// `one_row`, else a row each). Returns commits/s.
async fn pg_floor(url: &str, connections: usize, per_connection: usize, one_row: bool) -> f64 {
    let mut clients = Vec::new();
    for _ in 0..connections {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        clients.push(client);
    }
    clients[0]
        .batch_execute(
            "DROP TABLE IF EXISTS floor; \
             CREATE TABLE floor (id int PRIMARY KEY, v bigint NOT NULL); \
             INSERT INTO floor SELECT g, 0 FROM generate_series(0, 15) g",
        )
        .await
        .expect("floor table");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let row = if one_row { 0 } else { i as i32 };
        tasks.push(tokio::spawn(async move {
            let update = client
                .prepare("UPDATE floor SET v = v + 1 WHERE id = $1")
                .await
                .expect("prepare");
            for _ in 0..per_connection {
                client.execute(&update, &[&row]).await.expect("update");
            }
        }));
    }
    for task in tasks {
        task.await.expect("floor connection");
    }
    (connections * per_connection) as f64 / started.elapsed().as_secs_f64()
}

pub(crate) async fn shared(runs: usize) {
    let puts = env_usize("SKADE_SHARED_PUTS", 200).max(10);
    let rows = env_usize("SKADE_SHARED_ROWS", 2_000_000).max(1);
    let mut cluster = tokio::task::spawn_blocking(Cluster::start)
        .await
        .expect("cluster start");
    let large: Vec<RecordBatch> = (0..rows.div_ceil(65_536))
        .map(|i| batch((i * 65_536) as i64, 65_536.min(rows - i * 65_536)))
        .collect();

    let (mut redb_commits, mut pg_commits) = (Vec::new(), Vec::new());
    let (mut redb_rows, mut pg_rows) = (Vec::new(), Vec::new());
    // Fleet lanes, keyed (instances, one table, turn); the order alternates by run.
    let mut lanes: Vec<((usize, bool, CommitTurn), Vec<Fleet>)> = Vec::new();
    for count in FLEET_SIZES {
        for one in [true, false] {
            for turn in [CommitTurn::Database, CommitTurn::Instance] {
                lanes.push(((count, one, turn), Vec::new()));
            }
        }
    }
    for run in 0..runs {
        for pg_lane in [run % 2 == 1, run % 2 == 0] {
            if pg_lane {
                let url = cluster.database().await;
                pg_commits.push(one_stream(Some(&url), puts).await);
            } else {
                redb_commits.push(one_stream(None, puts).await);
            }
        }
        for pg_lane in [run % 2 == 1, run % 2 == 0] {
            if pg_lane {
                let url = cluster.database().await;
                pg_rows.push(one_large_put(Some(&url), &large).await);
            } else {
                redb_rows.push(one_large_put(None, &large).await);
            }
        }
        let order: Vec<usize> = if run % 2 == 0 {
            (0..lanes.len()).collect()
        } else {
            (0..lanes.len()).rev().collect()
        };
        for lane in order {
            let (count, one, turn) = lanes[lane].0;
            let url = cluster.database().await;
            let result = fleet(&url, count, turn, puts, one).await;
            lanes[lane].1.push(result);
        }
    }
    let url = cluster.database().await;
    let floor_one = pg_floor(&url, 1, puts, true).await;
    let floor_row = pg_floor(&url, 3, puts, true).await;
    let floor_db = pg_floor(&url, 16, puts, false).await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("cluster stop");

    let (rc, rc_min, rc_max) = summary(&redb_commits);
    let (pc, pc_min, pc_max) = summary(&pg_commits);
    let (rr, rr_min, rr_max) = summary(&redb_rows);
    let (pr, pr_min, pr_max) = summary(&pg_rows);
    let fleet_summary = |lane: &[Fleet]| {
        let rates: Vec<f64> = lane.iter().map(|f| f.commits_per_s).collect();
        let retries: Vec<f64> = lane
            .iter()
            .map(|f| f.conflicts / f.commits as f64)
            .collect();
        let per_txn: Vec<f64> = lane
            .iter()
            .map(|f| f.commits as f64 / f.transactions.max(1.0))
            .collect();
        let aborted: Vec<String> = lane.iter().map(|f| f.aborted.to_string()).collect();
        let skipped: f64 = lane.iter().map(|f| f.skipped).sum();
        (
            summary(&rates),
            summary(&retries),
            summary(&per_txn).0,
            aborted.join(", "),
            skipped,
        )
    };
    // The flag's own value names (`--catalog-commit-turn`).
    let turn_name = |turn: CommitTurn| {
        clap::ValueEnum::to_possible_value(&turn)
            .map(|value| value.get_name().to_string())
            .unwrap_or_default()
    };
    let met = |ok: bool| if ok { "met" } else { "not met" };
    println!(
        "shared: redb vs PostgreSQL catalog (private cluster, fsync and synchronous_commit on), {runs} runs, medians (min–max); {puts} tiny puts (10 rows) per stream, large put {rows} rows"
    );
    println!(
        "| lane | commits/s | min–max | retries per commit (min–max) | commits per catalog transaction | puts aborted and sent again (per run) |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    println!("| redb, 1 instance, 1 stream | {rc:.0} | {rc_min:.0}–{rc_max:.0} | | | |");
    println!("| postgres, 1 instance, 1 stream | {pc:.0} | {pc_min:.0}–{pc_max:.0} | | | |");
    for ((count, one, turn), results) in &lanes {
        let ((c, c_min, c_max), (r, r_min, r_max), txn, ab, skipped) = fleet_summary(results);
        let tables = if *one { "1 table" } else { "a table each" };
        println!(
            "| postgres, {count} instances, 1 stream each, {tables}, turn {} | {c:.0} | {c_min:.0}–{c_max:.0} | {r:.2} ({r_min:.2}–{r_max:.2}) | {txn:.2} | {ab} (turns skipped: {skipped:.0}) |",
            turn_name(*turn)
        );
    }
    println!("| raw PostgreSQL one-row UPDATE, 1 connection | {floor_one:.0} | | | | |");
    println!("| raw PostgreSQL one-row UPDATE, 3 connections, same row | {floor_row:.0} | | | | |");
    println!("| raw PostgreSQL one-row UPDATE, 16 connections, 16 rows | {floor_db:.0} | | | | |");
    println!("| lane | rows/s | min–max | | | |");
    println!("| redb, 1 large put | {rr:.0} | {rr_min:.0}–{rr_max:.0} | | | |");
    println!("| postgres, 1 large put | {pr:.0} | {pr_min:.0}–{pr_max:.0} | | | |");
    println!(
        "shared: postgres/redb commits = {:.2} (target ≥ 0.7: {}); postgres {pc:.0} commits/s, redb {rc:.0} commits/s",
        pc / rc,
        met(pc / rc >= 0.7)
    );
    println!(
        "shared: postgres/redb rows = {:.2} (target ≥ 0.95: {}); postgres {:.2} M rows/s, redb {:.2} M rows/s",
        pr / rr,
        met(pr / rr >= 0.95),
        pr / 1e6,
        rr / 1e6
    );
    for count in FLEET_SIZES {
        for one in [true, false] {
            let lane = |turn| {
                lanes
                    .iter()
                    .find(|(key, _)| *key == (count, one, turn))
                    .map(|(_, results)| fleet_summary(results))
                    .expect("every lane ran")
            };
            let ((d, ..), (d_r, ..), _, d_ab, _) = lane(CommitTurn::Database);
            let ((i, ..), (i_r, ..), _, i_ab, _) = lane(CommitTurn::Instance);
            let tables = if one { "1 table" } else { "a table each" };
            println!(
                "shared: {count} instances, {tables}: turn database/instance commits = {:.2}; database {d:.0} commits/s, {d_r:.2} retries per commit, aborted {d_ab}; instance {i:.0} commits/s, {i_r:.2} retries per commit, aborted {i_ab}",
                d / i
            );
        }
    }
    println!(
        "shared: PostgreSQL floor: {floor_one:.0} commits/s on 1 connection, {floor_row:.0} on one row from 3, {floor_db:.0} on 16 rows from 16"
    );
}

//! `table_age`: one stream of tiny puts into one table at the server's default settings
//! (table maintenance on), with the table's cost measured at several ages: put p50, the
//! metadata JSON bytes, the manifests and live data files of the current snapshot,
//! pyiceberg's REST load + plan time and the process RSS; and one-stream commits/s
//! against a floor measured in the same run (4 small file creates, one `syncfs`, one
//! redb `Durability::Immediate` commit, no Iceberg work).
//!
//! The machine drifts over the few minutes a run takes (the disk's writeback above all:
//! one run measured a floor of 169/s and a young put p50 of 9.6 ms right after another
//! run's 80,000 files were removed), so each baseline is measured twice — at the start,
//! and again at the end in the same server (the floor after it stops, in a fresh
//! directory; the first ten puts into a fresh table `bench.young`) — and the one that
//! makes the ratio harsher is kept: the
//! faster young put p50 and load + plan, the higher floor. Both are printed. The end
//! also alternates 400 puts between the old table and the fresh one and prints their
//! p50 ratio: the cost of the table's age alone, at one moment of the machine.

use std::path::Path;
use std::process::Command;

use iceberg::Catalog;

use crate::common::*;

/// What was measured at one age.
struct Figures {
    age: usize,
    put_p50: f64,
    json_bytes: u64,
    manifests: usize,
    data_files: usize,
    load_plan: Option<f64>,
    rss: u64,
}

/// Resident set size of this process now (`VmRSS`), bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Puts the `i`-th 10-row batch (ids `10 i ..`) into `bench.<table>`; returns the put's
/// seconds.
async fn timed_put(client: &mut FlightClient, table: &str, i: usize) -> f64 {
    let started = Instant::now();
    put(client, table, schema(), vec![batch((i * 10) as i64, 10)]).await;
    started.elapsed().as_secs_f64()
}

/// The floor: `n` rounds of 4 small file creates + one `syncfs` + one redb commit.
fn floor_commits_per_s(dir: &Path, n: usize) -> f64 {
    let db = redb::Database::create(dir.join("floor.redb")).expect("redb");
    const T: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("t");
    let started = Instant::now();
    for i in 0..n as u64 {
        for f in 0..4 {
            std::fs::write(dir.join(format!("f{i}-{f}")), [0u8; 1024]).expect("file");
        }
        skade::storage::durable::sync_warehouse(dir).expect("syncfs");
        let txn = db.begin_write().expect("txn");
        txn.open_table(T)
            .expect("table")
            .insert(i, i)
            .expect("insert");
        txn.commit().expect("commit");
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// pyiceberg's REST `load_table` + `scan().plan_files()` in seconds (best of 3, Python
/// start excluded), or why it could not run.
fn load_plan(python: &Path, rest: std::net::SocketAddr, table: &str) -> Result<f64, String> {
    let script = format!(
        "import time\nfrom pyiceberg.catalog import load_catalog\nc = load_catalog('skade', type='rest', uri='http://{rest}')\nbest = 1e9\nfor _ in range(3):\n    t = time.perf_counter()\n    list(c.load_table('bench.{table}').scan().plan_files())\n    best = min(best, time.perf_counter() - t)\nprint(best)\n"
    );
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string());
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("{e}"))
}

pub(crate) async fn table_age() {
    let ages = [
        10usize,
        1_000,
        5_000,
        env_usize("SKADE_AGE_COMMITS", 20_000).max(5_001),
    ];
    let last = ages[ages.len() - 1];
    settle().await;
    let floor_dir = tempfile::tempdir().expect("temp dir");
    let floor_start = floor_commits_per_s(floor_dir.path(), 500);
    let python = crate::peers::python();
    if let Err(why) = &python {
        println!("table_age: pyiceberg unavailable, load + plan not measured: {why}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let running = skade::start(skade::Config::for_tests(dir.path()))
        .await
        .expect("server");
    let mut client = connect(running.flight_addr).await;
    let ident = iceberg::TableIdent::from_strs(["bench", "aging"]).expect("ident");
    let mut lat = Vec::with_capacity(last);
    let mut figures = Vec::new();
    let mut window_started = Instant::now();
    let mut rates = Vec::new();
    for i in 0..last {
        lat.push(timed_put(&mut client, "aging", i).await);
        let age = i + 1;
        if age % 1_000 == 0 {
            rates.push(1_000.0 / window_started.elapsed().as_secs_f64());
        }
        if ages.contains(&age) {
            let window = &lat[age.saturating_sub(10.min(age).max(age / 10).min(500))..];
            let table = running
                .service
                .catalog
                .load_table(&ident)
                .await
                .expect("load");
            let location = table.metadata_location().expect("location").to_string();
            let snapshot = table
                .metadata()
                .current_snapshot()
                .expect("snapshot")
                .clone();
            let manifests = table
                .manifest_list_reader(&snapshot)
                .load()
                .await
                .expect("manifest list")
                .entries()
                .len();
            let data_files = snapshot
                .summary()
                .additional_properties
                .get("total-data-files")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            figures.push(Figures {
                age,
                put_p50: percentile(window, 0.5),
                json_bytes: std::fs::metadata(&location).map_or(0, |m| m.len()),
                manifests,
                data_files,
                load_plan: python
                    .as_ref()
                    .ok()
                    .and_then(|p| load_plan(p, running.metrics_addr, "aging").ok()),
                rss: rss_bytes(),
            });
        }
        if age % 1_000 == 0 {
            window_started = Instant::now();
        }
    }
    // The young baseline again, under the machine's state at the end: puts alternate
    // between the old table and a fresh one, so both see the same moment; the fresh
    // table's first 10 are its age-10 figure.
    let (mut young, mut old) = (Vec::with_capacity(400), Vec::with_capacity(400));
    for i in 0..400 {
        old.push(timed_put(&mut client, "aging", last + i).await);
        young.push(timed_put(&mut client, "young", i).await);
    }
    let young_load_plan = python
        .as_ref()
        .ok()
        .and_then(|p| load_plan(p, running.metrics_addr, "young").ok());
    running.shutdown_and_wait().await.expect("shutdown");
    settle().await;
    // A fresh directory: the same names again would be rewrites, not creates.
    let floor_dir_end = tempfile::tempdir().expect("temp dir");
    let floor_end = floor_commits_per_s(floor_dir_end.path(), 500);
    let floor = floor_start.max(floor_end);
    let young_p50_end = percentile(&young[..10], 0.5);
    println!(
        "table_age: interleaved at the end, old table ({last}+ commits) / fresh table (its first 400 commits) put p50 = {:.2} ({:.2} vs {:.2} ms): what the table's age alone costs a put",
        percentile(&old, 0.5) / percentile(&young, 0.5),
        percentile(&old, 0.5) * 1e3,
        percentile(&young, 0.5) * 1e3,
    );
    println!(
        "table_age: baselines at the start / at the end: young put p50 {:.2} / {:.2} ms, young load + plan {} / {} ms, floor {floor_start:.0} / {floor_end:.0} commits/s (the harsher of each is used)",
        figures.first().map_or(f64::NAN, |f| f.put_p50 * 1e3),
        young_p50_end * 1e3,
        figures
            .first()
            .and_then(|f| f.load_plan)
            .map_or("n/a".to_string(), |s| format!("{:.0}", s * 1e3)),
        young_load_plan.map_or("n/a".to_string(), |s| format!("{:.0}", s * 1e3)),
    );
    if let Some(first) = figures.first_mut() {
        first.put_p50 = first.put_p50.min(young_p50_end);
        first.load_plan = match (first.load_plan, young_load_plan) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    println!(
        "table_age: one stream of 10-row puts into one table, default settings (maintenance on)"
    );
    println!(
        "| age (commits) | put p50 ms | metadata JSON bytes | manifests | live data files | pyiceberg load + plan ms | RSS MiB |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for f in &figures {
        println!(
            "| {} | {:.2} | {} | {} | {} | {} | {:.1} |",
            f.age,
            f.put_p50 * 1e3,
            f.json_bytes,
            f.manifests,
            f.data_files,
            f.load_plan
                .map_or("n/a".to_string(), |s| format!("{:.0}", s * 1e3)),
            f.rss as f64 / (1 << 20) as f64
        );
    }
    let at = |age: usize| figures.iter().find(|f| f.age == age);
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    if let (Some(young), Some(old), Some(k)) = (at(10), at(last), at(1_000)) {
        let put = old.put_p50 / young.put_p50;
        println!(
            "table_age: put p50 at {last} / at 10 = {put:.2} ({:.2} vs {:.2} ms; ≤ 1.2: {})",
            old.put_p50 * 1e3,
            young.put_p50 * 1e3,
            verdict(put <= 1.2)
        );
        match (young.load_plan, old.load_plan) {
            (Some(y), Some(o)) => println!(
                "table_age: pyiceberg load + plan at {last} / at 10 = {:.2} ({:.0} vs {:.0} ms; ≤ 1.5: {})",
                o / y,
                o * 1e3,
                y * 1e3,
                verdict(o / y <= 1.5)
            ),
            _ => println!("table_age: pyiceberg load + plan not measured"),
        }
        let rss = old.rss as f64 / k.rss as f64;
        println!(
            "table_age: RSS at {last} / at 1000 = {rss:.2} ({:.1} vs {:.1} MiB; ≤ 1.2: {})",
            old.rss as f64 / (1 << 20) as f64,
            k.rss as f64 / (1 << 20) as f64,
            verdict(rss <= 1.2)
        );
    }
    let steady = percentile(&rates, 0.5);
    println!(
        "table_age: one-stream commits/s = {steady:.0} (median of 1,000-put windows) vs floor {floor:.0}/s (4 file creates + syncfs + redb commit) = {:.2} (≥ 0.8: {})",
        steady / floor,
        verdict(steady / floor >= 0.8)
    );
}

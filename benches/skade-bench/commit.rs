//! `commit`: tiny commits vs the redb fsync floor, how many redb transactions (fsyncs)
//! 16 concurrent streams' commits took (group commit), an 8-table release's latency vs a
//! single-table commit's, and commit latency vs table age.

use crate::common::*;

pub(crate) async fn commit(runs: usize) {
    // At least one put per stream of the 16-stream lane.
    let puts = env_usize("SKADE_COMMIT_PUTS", 200).max(16);
    settle().await;
    // The fsync floor: raw redb Durability::Immediate write transactions, same disk.
    let dir = tempfile::tempdir().expect("temp dir");
    let db = redb::Database::create(dir.path().join("floor.redb")).expect("redb");
    const T: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("t");
    let started = Instant::now();
    for i in 0..puts as u64 {
        let txn = db.begin_write().expect("txn");
        txn.open_table(T)
            .expect("table")
            .insert(i, i)
            .expect("insert");
        txn.commit().expect("commit");
    }
    let floor = puts as f64 / started.elapsed().as_secs_f64();

    let mut single = Vec::new();
    let mut keyed = Vec::new();
    let mut multi = Vec::new();
    let mut latencies = Vec::new();
    // Per 16-stream run: (commits, redb transactions) — the server runs in-process, so
    // the process-global transaction count is the server's.
    let mut shared = Vec::new();
    // Put latencies of every stream of the 16-stream lane.
    let mut many_latencies = Vec::new();
    for run in 0..runs {
        // The one-stream lanes, unkeyed and keyed, each on a fresh server (maintenance
        // of one lane's table must not slow the other), in alternating order.
        for keyed_first in [run % 2 == 1, run % 2 == 0] {
            let (rate, lat) = one_stream(puts, keyed_first).await;
            if keyed_first {
                keyed.push(rate);
            } else {
                single.push(rate);
                latencies.extend(lat);
            }
        }
        let server_dir = tempfile::tempdir().expect("temp dir");
        let running = skade::start(skade::Config::for_tests(server_dir.path()))
            .await
            .expect("server");
        let tiny = |client: FlightClient, table: String, n: usize| async move {
            let mut client = client;
            let mut lat = Vec::with_capacity(n);
            for i in 0..n {
                let tiny_batch = vec![batch((i * 10) as i64, 10)];
                let started = Instant::now();
                put(&mut client, &table, schema(), tiny_batch).await;
                lat.push(started.elapsed().as_secs_f64());
            }
            lat
        };
        let started = Instant::now();
        let transactions = skade::redb_commit_count();
        let mut tasks = Vec::new();
        for t in 0..16 {
            let client = connect(running.flight_addr).await;
            tasks.push(tokio::spawn(tiny(client, format!("many_{t}"), puts / 16)));
        }
        for task in tasks {
            many_latencies.extend(task.await.expect("stream"));
        }
        multi.push((puts / 16 * 16) as f64 / started.elapsed().as_secs_f64());
        shared.push((puts / 16 * 16, skade::redb_commit_count() - transactions));
        running.shutdown_and_wait().await.expect("shutdown");
    }
    let (s, s_min, s_max) = summary(&single);
    let (m, m_min, m_max) = summary(&multi);
    println!("commit: tiny puts of 10 rows, each one commit; {runs} runs");
    println!("| lane | commits/s | min–max |");
    println!("| --- | --- | --- |");
    println!("| raw redb Immediate write txn (fsync floor) | {floor:.0} | |");
    println!("| 1 stream, 1 table | {s:.0} | {s_min:.0}–{s_max:.0} |");
    println!("| 16 streams, 16 tables | {m:.0} | {m_min:.0}–{m_max:.0} |");
    println!(
        "commit: single-stream put latency p50 {:.1} ms, p99 {:.1} ms",
        percentile(&latencies, 0.5) * 1e3,
        percentile(&latencies, 0.99) * 1e3
    );
    println!(
        "commit: 16-stream put latency p50 {:.1} ms, p99 {:.1} ms",
        percentile(&many_latencies, 0.5) * 1e3,
        percentile(&many_latencies, 0.99) * 1e3
    );
    println!(
        "commit: skade/fsync_floor = {:.2} (skade {s:.0} commits/s, redb floor {floor:.0} commits/s); 16 streams = {m:.0} commits/s",
        s / floor
    );
    let (k, k_min, k_max) = summary(&keyed);
    println!(
        "commit: keyed/unkeyed = {:.2} (exactly-once, 1 stream: {k:.0} commits/s, {k_min:.0}–{k_max:.0}; unkeyed {s:.0}); target ≥ 0.95: {}",
        k / s,
        if k / s >= 0.95 { "met" } else { "not met" }
    );
    let per_txn: Vec<f64> = shared.iter().map(|&(c, t)| c as f64 / t as f64).collect();
    let (g, g_min, g_max) = summary(&per_txn);
    println!(
        "commit: 16 streams/1 stream = {:.2}; group commit: {g:.1} commits per redb transaction ({g_min:.1}–{g_max:.1}; runs: {})",
        m / s,
        shared
            .iter()
            .map(|(c, t)| format!("{c} commits in {t} txns"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    release_latency().await;

    // Commit latency as a table ages: library commits of 10 rows.
    // Two disjoint windows of 10 commits: the youngest and the oldest.
    let age = env_usize("SKADE_COMMIT_AGE", 2000).max(20);
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &dir.path().join("wh"))
        .expect("catalog");
    let mut table = new_table(&catalog, "aging").await;
    let arrow = write::table_arrow_schema(&table).expect("schema");
    let mut lat = Vec::with_capacity(age);
    for i in 0..age {
        let b =
            write::conform_batch("bench", &batch((i * 10) as i64, 10), &arrow).expect("conform");
        let encoded = write::encode(&table, vec![vec![b]]).await.expect("encode");
        let files = write::write_files(
            &table,
            encoded,
            &mut write::FileNames::new(),
            &WriteProps::default(),
        )
        .await
        .expect("write");
        let started = Instant::now();
        table = write::commit_files(&catalog, &table, files)
            .await
            .expect("commit");
        lat.push(started.elapsed().as_secs_f64());
    }
    let young = percentile(&lat[..10.min(age)], 0.5);
    let old = percentile(&lat[age.saturating_sub(10)..], 0.5);
    println!(
        "commit: latency at age 10 = {:.1} ms, at age {age} = {:.1} ms (ratio {:.2})",
        young * 1e3,
        old * 1e3,
        old / young
    );
}

/// Library commit latency of one release of 8 tables (one staged fast append each, one
/// redb transaction) vs one single-table commit, on young tables (`SKADE_RELEASE_ROUNDS`
/// rounds, 30): the target "multi-table flush commit latency ≤ 2× one single-table
/// commit". Both include staging the fast appends (manifest + manifest list) and the
/// catalog commit; not the data files' encode and write.
async fn release_latency() {
    let rounds = env_usize("SKADE_RELEASE_ROUNDS", 30);
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &dir.path().join("wh"))
        .expect("catalog");
    let mut tables = Vec::new();
    for t in 0..8 {
        tables.push(new_table(&catalog, &format!("release_{t}")).await);
    }
    let mut one = new_table(&catalog, "release_one").await;
    let (mut eight_lat, mut one_lat) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut staged = Vec::new();
        for table in &tables {
            staged.push(write::StagedTable {
                schema_change: None,
                table: table.clone(),
                create: false,
                data_files: tiny_files(table, round).await,
                deletes: Vec::new(),
                replace: false,
            });
        }
        let started = Instant::now();
        let (advanced, _) = write::ingest_multi_commit(&catalog, staged, None)
            .await
            .expect("8-table release");
        eight_lat.push(started.elapsed().as_secs_f64());
        tables = advanced;

        let files = tiny_files(&one, round).await;
        let started = Instant::now();
        one = write::commit_files(&catalog, &one, files)
            .await
            .expect("commit");
        one_lat.push(started.elapsed().as_secs_f64());
    }
    let (eight, one) = (percentile(&eight_lat, 0.5), percentile(&one_lat, 0.5));
    println!(
        "commit: 8-table release/1-table commit latency = {:.2} (p50 {:.1} ms vs {:.1} ms, {rounds} rounds)",
        eight / one,
        eight * 1e3,
        one * 1e3
    );
}

/// One written (uncommitted) data file of 10 rows for `table`.
async fn tiny_files(table: &Table, round: usize) -> Vec<iceberg::spec::DataFile> {
    let arrow = write::table_arrow_schema(table).expect("schema");
    let b =
        write::conform_batch("bench", &batch((round * 10) as i64, 10), &arrow).expect("conform");
    let encoded = write::encode(table, vec![vec![b]]).await.expect("encode");
    write::write_files(
        table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .expect("write")
}

/// `puts` tiny puts (10 rows, one commit each) by one stream into one table of a fresh
/// server, as an exactly-once producer when `keyed` (writer id + sequences): the
/// commits/s and each put's latency in seconds.
async fn one_stream(puts: usize, keyed: bool) -> (f64, Vec<f64>) {
    let server_dir = tempfile::tempdir().expect("temp dir");
    let running = skade::start(skade::Config::for_tests(server_dir.path()))
        .await
        .expect("server");
    let mut client = connect(running.flight_addr).await;
    if keyed {
        client
            .add_header("x-skade-writer-id", "bench-writer")
            .expect("header");
    }
    let mut latencies = Vec::with_capacity(puts);
    let (started, mut sequence) = (Instant::now(), 1);
    for i in 0..puts {
        let tiny_batch = vec![batch((i * 10) as i64, 10)];
        let put_started = Instant::now();
        if keyed {
            sequence = put_keyed(&mut client, "one", schema(), tiny_batch, sequence)
                .await
                .1;
        } else {
            put(&mut client, "one", schema(), tiny_batch).await;
        }
        latencies.push(put_started.elapsed().as_secs_f64());
    }
    let rate = puts as f64 / started.elapsed().as_secs_f64();
    running.shutdown_and_wait().await.expect("shutdown");
    (rate, latencies)
}

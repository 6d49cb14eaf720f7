//! Two in-process servers on one PostgreSQL catalog and one warehouse directory (README,
//! "Running several instances"), and what `--catalog` refuses at start.

use std::sync::Arc;

use arrow_flight::FlightClient;

use crate::common::postgres::{PgCluster, psql};
use crate::common::{TestServer, count, get, metric, put, synthetic_batch};

const PATH: [&str; 2] = ["shared", "events"];

async fn on_database(url: &str, warehouse: &std::path::Path) -> TestServer {
    let (url, warehouse) = (url.to_string(), warehouse.display().to_string());
    TestServer::start_with(move |config| {
        config.catalog.url = Some(url);
        config.storage.warehouse = Some(warehouse);
    })
    .await
}

/// One exactly-once put of `sequences` (one batch of 10 rows each, ids from the
/// sequence) by `writer`; the highest durable sequence acked.
async fn keyed_put(
    client: &mut FlightClient,
    writer: &str,
    sequences: std::ops::RangeInclusive<u64>,
) -> u64 {
    let batches = sequences
        .clone()
        .map(|s| synthetic_batch(1_000_000 + 10 * s as i64, 10))
        .collect();
    crate::exactly_once::keyed_put_to(client, &PATH, writer, sequences.collect(), batches)
        .await
        .expect("keyed put")
        .iter()
        .map(|ack| ack.committed_sequence)
        .max()
        .unwrap_or(0)
}

// Catches a lost update between instances (a commit built on a pointer another instance
// moved, flipped anyway) and exactly-once that does not hold across instances (a resent
// prefix landing twice on the other instance).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_commit_one_table_in_turn_and_a_producer_fails_over_once() {
    let pg = PgCluster::start();
    let url = pg.create_database("two_instances");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let a = Arc::new(on_database(&url, warehouse.path()).await);
    let b = Arc::new(on_database(&url, warehouse.path()).await);

    // 2 × 15 tiny puts into one table, half through each instance, at once.
    let mut tasks = Vec::new();
    for (n, server) in [a.clone(), b.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut client = server.client().await;
            for i in 0..15 {
                let first = (n as i64 * 1000 + i) * 10;
                put(&mut client, &PATH, vec![synthetic_batch(first, 10)])
                    .await
                    .expect("put");
            }
        }));
    }
    for task in tasks {
        task.await.expect("putter");
    }
    // A producer lands sequences 1..=4 on A, fails over and resends 1..=8 to B.
    let mut on_a = a.client().await;
    assert_eq!(keyed_put(&mut on_a, "failover", 1..=4).await, 4);
    let mut on_b = b.client().await;
    assert_eq!(keyed_put(&mut on_b, "failover", 1..=8).await, 8);

    for server in [&a, &b] {
        let mut client = server.client().await;
        assert_eq!(count(&get(&mut client, &PATH).await), 300 + 80);
    }
    // One JDBC-catalog row for the table, created once though both instances' first puts
    // raced to create it.
    let rows = psql(
        &url,
        "SELECT count(*) FROM iceberg_tables WHERE table_namespace = 'shared'",
    );
    assert_eq!(rows, "1");
    let mut conflicts = 0.0;
    for server in [&a, &b] {
        conflicts += metric(
            &server.http_get("/metrics").await.1,
            "skade_commit_conflicts_total",
        );
    }
    println!("commit conflicts over both instances: {conflicts}");
    for server in [a, b] {
        Arc::into_inner(server).expect("one owner").stop().await;
    }
}

// Catches a bad --catalog that starts anyway, leaves a data dir behind, or fails with a
// message that does not name the flag.
#[tokio::test]
async fn a_bad_catalog_is_one_start_up_line_naming_the_flag_and_creates_nothing() {
    let pg = PgCluster::start();
    let port = pg
        .url()
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(port, _)| port.to_string())
        .expect("port");
    let cases = [
        ("mysql://db/lake".to_string(), "not a PostgreSQL URL"),
        (
            "postgres://postgres@127.0.0.1:1/skade".to_string(),
            "Connection refused",
        ),
        (
            format!("postgres://nobody@127.0.0.1:{port}/skade"),
            "role \"nobody\" does not exist",
        ),
        (
            format!("postgres://postgres@127.0.0.1:{port}/nodb"),
            "database \"nodb\" does not exist",
        ),
    ];
    for (url, reason) in cases {
        let dir = tempfile::tempdir().expect("dir");
        let data_dir = dir.path().join("data");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_skade"))
            .args(["serve", "--data-dir"])
            .arg(&data_dir)
            .args([
                "--flight-addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .args(["--catalog", &url])
            .env("RUST_LOG", "error")
            .output()
            .expect("run skade");
        assert!(!out.status.success(), "{url}: started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{url}: {stderr}");
        assert!(
            lines[0].contains("--catalog") && lines[0].contains(reason),
            "{url}: {stderr}"
        );
        assert!(!data_dir.exists(), "{url}: created {}", data_dir.display());
    }
}

// Catches a schema creation that is not safe when instances start together (a duplicate
// table or version row, or an instance failing on the other's half-made schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_starting_together_create_the_schema_once() {
    let pg = PgCluster::start();
    let url = pg.create_database("start_together");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let opens = (0..4).map(|_| {
        skade::catalog::RedbCatalog::open_postgres(
            &url,
            "skade",
            2,
            skade::catalog::Warehouse::Local(warehouse.path().to_path_buf()),
        )
    });
    let catalogs = futures::future::join_all(opens).await;
    for catalog in &catalogs {
        assert!(catalog.is_ok(), "{:?}", catalog.as_ref().err());
    }
    assert_eq!(psql(&url, "SELECT count(*) FROM skade_schema_version"), "1");
    assert_eq!(
        psql(
            &url,
            "SELECT count(*) FROM skade_instances WHERE catalog_name = 'skade'"
        ),
        "4"
    );
}

// Catches an instance serving a shared catalog through another warehouse than the one
// its tables are in (it would answer ready while their puts and reads fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_with_another_warehouse_is_refused_at_start() {
    let pg = PgCluster::start();
    let url = pg.create_database("other_warehouse");
    let (one, other) = (
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    );
    let first = on_database(&url, one.path()).await;
    let mut client = first.client().await;
    put(&mut client, &PATH, vec![synthetic_batch(0, 10)])
        .await
        .expect("put");
    let dir = tempfile::tempdir().expect("dir");
    let mut config = skade::config::Config::for_tests(dir.path());
    config.catalog.url = Some(url.clone());
    config.storage.warehouse = Some(other.path().display().to_string());
    let Err(refused) = skade::start(config).await else {
        panic!("an instance with another warehouse started");
    };
    let refused = refused.to_string();
    assert!(
        refused.contains("shared.events") && refused.contains("the same --warehouse"),
        "{refused}"
    );
    first.stop().await;
}

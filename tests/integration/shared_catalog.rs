//! Two in-process servers on one PostgreSQL catalog and one warehouse directory
//! (`docs/several-instances.md`), and what `--catalog` refuses at start.

use std::sync::Arc;

use arrow_flight::FlightClient;

use skade::catalog::store::postgres::turns::CommitTurn;

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
// moved, flipped anyway), exactly-once that does not hold across instances (a resent
// prefix landing twice on the other instance), and instances that do not take turns on
// the table (their commits conflict: 7 conflicts in one run with `instance` turns).
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
    // The instances took turns on the table in the database (the default
    // `--catalog-commit-turn database`): no commit was staged on a pointer the other
    // moved, and none went ahead without its turn.
    for server in [&a, &b] {
        let body = server.http_get("/metrics").await.1;
        assert_eq!(metric(&body, "skade_commit_conflicts_total"), 0.0);
        assert_eq!(metric(&body, "skade_commit_turn_skipped_total"), 0.0);
    }
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
            skade::catalog::store::postgres::turns::CommitTurn::Database,
            skade::storage::Warehouse::Local(warehouse.path().to_path_buf()),
        )
    });
    let catalogs = futures::future::join_all(opens).await;
    for catalog in &catalogs {
        assert!(catalog.is_ok(), "{:?}", catalog.as_ref().err());
    }
    // One row per step (two steps), none twice.
    assert_eq!(
        psql(
            &url,
            "SELECT count(*) || '/' || count(DISTINCT version) FROM skade_schema_version"
        ),
        "2/2"
    );
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

/// Two catalogs (instances) on database `url` and the warehouse `warehouse`, with commit
/// turns across instances, and the table `turns.t` (one long column) created by the first.
async fn two_catalogs_and_a_table(
    url: &str,
    warehouse: &std::path::Path,
) -> (
    Arc<skade::catalog::RedbCatalog>,
    Arc<skade::catalog::RedbCatalog>,
    iceberg::TableIdent,
) {
    two_catalogs_turning(url, warehouse, CommitTurn::Database).await
}

/// [`two_catalogs_and_a_table`] with the catalogs' commit turn `turn`.
async fn two_catalogs_turning(
    url: &str,
    warehouse: &std::path::Path,
    turn: CommitTurn,
) -> (
    Arc<skade::catalog::RedbCatalog>,
    Arc<skade::catalog::RedbCatalog>,
    iceberg::TableIdent,
) {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use iceberg::{Catalog, NamespaceIdent, TableCreation};
    let open = || {
        skade::catalog::RedbCatalog::open_postgres(
            url,
            "skade",
            4,
            turn,
            skade::storage::Warehouse::Local(warehouse.to_path_buf()),
        )
    };
    let a = open().await.expect("open A");
    let b = open().await.expect("open B");
    let ns = NamespaceIdent::new("turns".into());
    a.create_namespace(&ns, Default::default())
        .await
        .expect("namespace");
    let schema = Schema::builder()
        .with_fields(vec![Arc::new(NestedField::required(
            1,
            "id",
            Type::Primitive(PrimitiveType::Long),
        ))])
        .build()
        .expect("schema");
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .build();
    a.create_table(&ns, creation).await.expect("create");
    (a, b, iceberg::TableIdent::new(ns, "t".into()))
}

/// Sets the table property `k` = `value` through `catalog`'s commit driver.
async fn set_property(
    catalog: &skade::catalog::RedbCatalog,
    table: &iceberg::table::Table,
    value: &str,
) -> iceberg::table::Table {
    set_properties(catalog, table, &[("k", value)]).await
}

/// Sets the table properties `pairs` through `catalog`'s commit driver.
async fn set_properties(
    catalog: &skade::catalog::RedbCatalog,
    table: &iceberg::table::Table,
    pairs: &[(&str, &str)],
) -> iceberg::table::Table {
    let target = skade::catalog::CommitTarget::metadata(table);
    let mut update = skade::catalog::MetadataUpdate::new(
        Vec::new(),
        vec![iceberg::TableUpdate::SetProperties {
            updates: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }],
    );
    catalog
        .commit_one(&target, &mut update)
        .await
        .expect("commit")
}

// Catches commits of one table from two instances that do not take turns across the
// instances (B's commit landing while A holds the table's turn: they would stage at once
// and one would lose the compare-and-swap), and a turn kept for ever by a holder that
// goes quiet without closing its connection (it must pass on after TURN_IDLE_TIMEOUT).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_turn_is_one_across_instances_and_passes_on_when_its_holder_goes_quiet() {
    use iceberg::Catalog;
    use skade::catalog::store::postgres::turns::TURN_IDLE_TIMEOUT;
    let pg = PgCluster::start();
    let url = pg.create_database("turns");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let (a, b, ident) = two_catalogs_and_a_table(&url, warehouse.path()).await;
    let on_a = a.load_table(&ident).await.expect("load on A");

    // A holds the turn: B's commit waits for it, and lands once A hands it back.
    let held = a.commit_turns([&on_a]).await;
    let on_b = b.load_table(&ident).await.expect("load on B");
    let commit = {
        let b = b.clone();
        tokio::spawn(async move { set_property(&b, &on_b, "1").await })
    };
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(
        !commit.is_finished(),
        "B committed the table while A held its turn"
    );
    drop(held);
    let after = commit.await.expect("B's commit");
    assert_eq!(
        after.metadata().properties().get("k").map(String::as_str),
        Some("1")
    );

    // A takes the turn and goes quiet (never hands it back, keeps its connection open):
    // B commits once the database ends A's idle transaction — after waiting for it,
    // not by giving up on the turn.
    let on_a = a.load_table(&ident).await.expect("load on A");
    std::mem::forget(a.commit_turns([&on_a]).await);
    let started = std::time::Instant::now();
    let after = set_property(&b, &after, "2").await;
    assert_eq!(
        after.metadata().properties().get("k").map(String::as_str),
        Some("2")
    );
    assert!(
        started.elapsed() + std::time::Duration::from_secs(1) >= TURN_IDLE_TIMEOUT,
        "B committed after {:?}, before A's turn was ended",
        started.elapsed()
    );
    let counts = b.commit_counts();
    assert_eq!(counts.turns_skipped(), 0, "B went ahead without its turn");
    assert_eq!(counts.conflicts(), 0, "B's commits conflicted");
}

// Catches a dropped table's maintenance lease kept by the instance that held it: a table
// created again under the name could then be maintained by that instance only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_tables_maintenance_lease_is_handed_back_by_the_next_pass() {
    use iceberg::Catalog;
    let pg = PgCluster::start();
    let url = pg.create_database("dropped_lease");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let (a, b, ident) = two_catalogs_and_a_table(&url, warehouse.path()).await;
    let config = skade::config::MaintenanceConfig {
        enabled: true,
        maintenance_interval: std::time::Duration::from_millis(50),
        max_snapshots: 100,
        cleanup_grace: std::time::Duration::from_secs(600),
        metadata_cleanup_grace: std::time::Duration::from_secs(600),
        cleanup_max_waiting: u64::MAX,
        compaction: false,
    };
    let on_a = skade::maintenance::Maintainer::new(
        a.clone(),
        config.clone(),
        skade::metrics::Metrics::new(),
    );
    let report = on_a.run_pass().await.expect("A's pass");
    assert_eq!(report.maintained, 1, "{report:?}");
    assert!(
        !b.maintains(&ident).await.expect("lease"),
        "B took A's lease"
    );

    b.drop_table(&ident).await.expect("drop");
    let report = on_a.run_pass().await.expect("A's pass after the drop");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(
        b.maintains(&ident).await.expect("lease"),
        "A kept the maintenance lease of the dropped table"
    );
}

/// A CA and a certificate it signed for `127.0.0.1` and `localhost`, written to `dir`:
/// (CA certificate, server certificate, server key) PEM paths.
fn test_ca_and_server_certificate(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "skade test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().expect("server key");
    let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .expect("server params")
        .signed_by(&server_key, &issuer)
        .expect("server certificate");
    let paths = (
        dir.join("ca.pem"),
        dir.join("server.crt"),
        dir.join("server.key"),
    );
    std::fs::write(&paths.0, ca.pem()).expect("write CA");
    std::fs::write(&paths.1, server.pem()).expect("write certificate");
    std::fs::write(&paths.2, server_key.serialize_pem()).expect("write key");
    (paths.0, paths.1, paths.2)
}

// Catches a `--catalog` that asks for TLS and connects in plaintext, or over TLS without
// checking whom it talks to: against a server that takes TCP connections only over TLS,
// skade with `sslmode=verify-full` and the test CA as `sslrootcert` serves puts with every
// connection encrypted; trusting only the system's roots, or asking for no TLS, the start
// is refused with one line naming --catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_catalog_asking_for_tls_connects_verified_or_not_at_all() {
    let pg = PgCluster::start();
    let url = pg.create_database("tls");
    let certs = tempfile::tempdir().expect("certificate dir");
    let (ca, cert, key) = test_ca_and_server_certificate(certs.path());
    let pg = tokio::task::spawn_blocking(move || {
        pg.require_tls(&cert, &key);
        pg
    })
    .await
    .expect("enable TLS");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let refused = |catalog: String| {
        let warehouse = warehouse.path().display().to_string();
        async move {
            let dir = tempfile::tempdir().expect("data dir");
            let mut config = skade::Config::for_tests(dir.path());
            config.catalog.url = Some(catalog);
            config.storage.warehouse = Some(warehouse);
            match skade::start(config).await {
                Ok(_) => panic!("the start is not refused"),
                Err(e) => e.to_string(),
            }
        }
    };
    // No TLS asked for: the server refuses the plaintext connection.
    let e = refused(url.clone()).await;
    assert!(e.contains("--catalog"), "{e}");
    // TLS, trusting the system's roots only: the test CA is not among them.
    let e = refused(format!("{url}?sslmode=verify-full")).await;
    assert!(
        e.contains("--catalog") && e.to_lowercase().contains("certificate"),
        "{e}"
    );

    let verified = format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display());
    let server = on_database(&verified, warehouse.path()).await;
    let mut client = server.client().await;
    put(&mut client, &PATH, vec![synthetic_batch(0, 10)])
        .await
        .expect("put over a TLS catalog");
    assert_eq!(count(&get(&mut client, &PATH).await), 10);
    let connections = |encrypted: bool| {
        psql(
            &url,
            &format!(
                "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.application_name = 'skade' AND s.ssl = {encrypted}"
            ),
        )
    };
    assert_eq!(
        connections(false),
        "0",
        "skade holds a connection without TLS"
    );
    assert_ne!(connections(true), "0", "skade holds no connection");
    server.stop().await;
    drop(pg);
}

/// A metadata commit (`mine` = `1`) that another instance overtakes before each of its
/// first `overtakes` attempts: that instance commits the table between this commit's load
/// and its release, so the release loses the compare-and-swap and is staged again.
struct Overtaken {
    other: Arc<skade::catalog::RedbCatalog>,
    ident: iceberg::TableIdent,
    overtakes: u32,
    attempts: u32,
}

#[async_trait::async_trait]
impl skade::catalog::Stage for Overtaken {
    type Out = ();
    type Error = iceberg::Error;

    async fn stage(
        &mut self,
        current: &[iceberg::table::Table],
    ) -> Result<Option<skade::catalog::Staged<()>>, iceberg::Error> {
        use iceberg::Catalog;
        self.attempts += 1;
        if self.attempts <= self.overtakes {
            let theirs = self.other.load_table(&self.ident).await?;
            let value = self.attempts.to_string();
            set_properties(&self.other, &theirs, &[("theirs", value.as_str())]).await;
        }
        let mut mine = skade::catalog::MetadataUpdate::new(
            Vec::new(),
            vec![iceberg::TableUpdate::SetProperties {
                updates: [("mine".to_string(), "1".to_string())].into(),
            }],
        );
        mine.stage(current).await
    }
}

// Catches a table's `commit.retry.num-retries` not honoured: capped at the store's
// default (12 re-stages on a shared catalog) instead of replacing it, or ignored when
// lower (the commit must then fail with the conflict after exactly that many re-stages).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tables_commit_retry_properties_replace_the_default_policy() {
    use iceberg::{Catalog, ErrorKind};
    use skade::catalog::CommitTarget;
    let pg = PgCluster::start();
    let url = pg.create_database("retries");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let (a, b, ident) = two_catalogs_turning(&url, warehouse.path(), CommitTurn::Instance).await;

    // More re-stages than the shared default allows: the commit lands on the 15th attempt.
    let table = a.load_table(&ident).await.expect("load");
    let table = set_properties(
        &a,
        &table,
        &[
            ("commit.retry.num-retries", "14"),
            ("commit.retry.min-wait-ms", "1"),
            ("commit.retry.max-wait-ms", "2"),
        ],
    )
    .await;
    let mut overtaken = Overtaken {
        other: b.clone(),
        ident: ident.clone(),
        overtakes: 14,
        attempts: 0,
    };
    let after = a
        .commit_one(&CommitTarget::metadata(&table), &mut overtaken)
        .await
        .expect("a commit overtaken 14 times with 14 re-stages allowed lands");
    assert_eq!(overtaken.attempts, 15);
    let properties = after.metadata().properties();
    assert_eq!(properties.get("mine").map(String::as_str), Some("1"));
    assert_eq!(properties.get("theirs").map(String::as_str), Some("14"));

    // Fewer: two re-stages, then the conflict is the commit's error and nothing of it lands.
    let table = set_properties(
        &a,
        &after,
        &[("commit.retry.num-retries", "2"), ("mine", "0")],
    )
    .await;
    let mut overtaken = Overtaken {
        other: b.clone(),
        ident: ident.clone(),
        overtakes: 3,
        attempts: 0,
    };
    let error = a
        .commit_one(&CommitTarget::metadata(&table), &mut overtaken)
        .await
        .expect_err("a commit overtaken 3 times with 2 re-stages allowed fails");
    assert_eq!(error.kind(), ErrorKind::CatalogCommitConflicts, "{error}");
    assert_eq!(overtaken.attempts, 3);
    let now = b.load_table(&ident).await.expect("load");
    let properties = now.metadata().properties();
    assert_eq!(properties.get("mine").map(String::as_str), Some("0"));
    assert_eq!(properties.get("theirs").map(String::as_str), Some("3"));
}

// Catches instance rows left behind (the reader found a row per killed instance
// and per `skade gc` run, for 24 hours) and rows without a host: an instance that stops
// and a gc that ends remove their own row; every row names this machine's host (as
// `hostname` prints it, a second reading of it), whatever HOSTNAME says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_rows_name_the_host_and_leave_with_their_instance() {
    let pg = PgCluster::start();
    let url = pg.create_database("instance_rows");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let open = || {
        skade::catalog::RedbCatalog::open_postgres(
            &url,
            "skade",
            2,
            skade::catalog::store::postgres::turns::CommitTurn::Instance,
            skade::storage::Warehouse::Local(warehouse.path().to_path_buf()),
        )
    };
    let rows = || psql(&url, "SELECT count(*) FROM skade_instances");
    let hostname = std::process::Command::new("hostname")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .expect("hostname");
    let first = open().await.expect("first instance");
    let second = open().await.expect("second instance");
    assert_eq!(rows(), "2");
    assert_eq!(
        psql(
            &url,
            "SELECT string_agg(DISTINCT host, ',') FROM skade_instances"
        ),
        hostname
    );
    drop(first);
    assert_eq!(rows(), "1", "a stopped instance keeps its row");
    drop(second);
    assert_eq!(rows(), "0");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skade"))
        .args(["gc", "--grace", "0s", "--catalog", &url, "--warehouse"])
        .arg(warehouse.path())
        .env("HOSTNAME", "")
        .output()
        .expect("run skade gc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rows(), "0", "skade gc left its row");
}

// Catches the start-up line naming a data dir an instance on a PostgreSQL catalog with
// its own warehouse does not use (the reader saw data_dir=./skade-data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_instance_with_its_own_warehouse_logs_no_data_dir() {
    let pg = PgCluster::start();
    let url = pg.create_database("no_data_dir");
    let dir = tempfile::tempdir().expect("dir");
    let warehouse = dir.path().join("wh").display().to_string();
    let server = crate::common::Binary::serve(
        &dir.path().join("data"),
        "info",
        &["--catalog", &url, "--warehouse", &warehouse],
    )
    .await;
    let events = server.stop();
    let serving = events
        .iter()
        .find(|e| crate::common::message_of(e) == "serving")
        .expect("serving event");
    assert_eq!(
        serving["data_dir"].as_str(),
        Some("none (unused)"),
        "{serving}"
    );
}

//! Scenario: three instances of the real binary on ONE PostgreSQL catalog and ONE local
//! warehouse directory (`docs/several-instances.md`). Six exactly-once producers
//! spread over all three — three into one shared table, three into tables of their own —
//! while one instance at a time is SIGKILLed and started again, and once the database
//! itself is stopped (`pg_ctl stop -m immediate`) and started again mid-run. A producer
//! whose put fails resends the stream whole to the next instance (its committed prefix is
//! skipped as replays, `x-skade-writer-id` and numbered batches). At the end every
//! producer's rows are in its table exactly once, every acked sequence is durable, and
//! every retained snapshot of every table reads back with its summary's row count.
//!
//! ```sh
//! SKADE_SHARED_KILLS=4 cargo test --test crash -- --ignored --nocapture shared_catalog
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array};
use arrow_flight::FlightDescriptor;
use arrow_flight::encode::FlightDataEncoderBuilder;
use futures::StreamExt;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use prost::Message;
use skade::catalog::RedbCatalog;
use skade::proto::CommitAck;
use skade::storage::Warehouse;

use crate::clients::{Rng, channel, lock, rpc};
use crate::common::{self, synthetic_batch, synthetic_schema};
use crate::server::*;

const NS: &str = "shared";
const INSTANCES: usize = 3;
const PRODUCERS: usize = 6;
const STREAMS: u64 = 6;
const BATCHES: u64 = 8;
const ROWS: u64 = 20;

/// The table producer `p` writes: producers 0..3 share one table, the others have their
/// own.
fn table_of(p: usize) -> String {
    if p < 3 {
        "same".to_string()
    } else {
        format!("own{p}")
    }
}

/// The first id of producer `p`'s batch with sequence `s` (1-based).
fn first_id(p: usize, s: u64) -> i64 {
    ((p as i64 + 1) << 40) + ((s as i64 - 1) * ROWS as i64)
}

/// The flight address of each instance slot; `None` while that instance is down.
type Live = Arc<Mutex<Vec<Option<SocketAddr>>>>;

struct Instance {
    server: Server,
    metrics: SocketAddr,
}

fn start_instance(
    base: &Path,
    slot: usize,
    warehouse: &Path,
    url: &str,
) -> (Server, SocketAddr, SocketAddr) {
    let dir = base.join(format!("instance{slot}"));
    let log = base.join(format!("instance{slot}.log"));
    let warehouse = warehouse.to_string_lossy().into_owned();
    spawn_server(
        &dir,
        &log,
        None,
        &[],
        &["--warehouse", &warehouse, "--catalog", url],
    )
}

/// One exactly-once producer: `STREAMS` streams of `BATCHES` numbered batches, each stream
/// sent to an instance in turn and resent whole to the next live one after a failure.
/// Returns (the highest sequence acked durable, resends).
async fn produce(p: usize, live: Live, seed: u64) -> Result<(u64, u64), String> {
    let writer = format!("shared-{p}");
    let table = table_of(p);
    let mut rng = Rng(seed ^ (p as u64 + 1));
    let mut durable = 0u64;
    let mut resends = 0u64;
    let mut slot = p % INSTANCES;
    for stream in 0..STREAMS {
        let first = stream * BATCHES + 1;
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let addr = lock(&live)[slot];
            let outcome = match addr {
                Some(addr) => put_stream(addr, &writer, &table, p, first, &mut rng).await,
                None => Err("instance down".to_string()),
            };
            match outcome {
                Ok(acked) => {
                    durable = durable.max(acked);
                    if acked >= first + BATCHES - 1 {
                        break;
                    }
                    return Err(format!(
                        "producer {p}: stream {stream} ended with sequence {acked} durable, \
                         not {}",
                        first + BATCHES - 1
                    ));
                }
                Err(e) => {
                    resends += 1;
                    if Instant::now() > deadline {
                        return Err(format!("producer {p}: stream {stream} never landed: {e}"));
                    }
                    slot = (slot + 1) % INSTANCES;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            }
        }
    }
    Ok((durable, resends))
}

/// One put of sequences `first..first + BATCHES`; the highest durable sequence acked.
async fn put_stream(
    addr: SocketAddr,
    writer: &str,
    table: &str,
    p: usize,
    first: u64,
    rng: &mut Rng,
) -> Result<u64, String> {
    let mut flight = arrow_flight::FlightClient::new(channel(addr).await?);
    flight
        .add_header("x-skade-writer-id", writer)
        .map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for s in first..first + BATCHES {
        batches.push(synthetic_batch(first_id(p, s), ROWS as usize));
    }
    let pause = Duration::from_millis(rng.range(0, 30));
    let data = FlightDataEncoderBuilder::new()
        .with_schema(synthetic_schema())
        .with_flight_descriptor(Some(FlightDescriptor::new_path(vec![
            NS.to_string(),
            table.to_string(),
        ])))
        .build(futures::stream::iter(batches.into_iter().map(Ok)))
        .enumerate()
        .then(move |(i, data)| async move {
            if i > 1 {
                tokio::time::sleep(pause).await;
            }
            data.map(|mut data| {
                if i > 0 {
                    data.app_metadata = (first + i as u64 - 1).to_string().into();
                }
                data
            })
        });
    let mut results = rpc("put", flight.do_put(data)).await?;
    let mut acked = 0;
    let mut finished = false;
    while let Some(result) = rpc("ack", async { results.next().await.transpose() }).await? {
        let ack = CommitAck::decode(result.app_metadata).map_err(|e| e.to_string())?;
        acked = acked.max(ack.committed_sequence);
        finished |= ack.r#final;
    }
    if !finished {
        return Err("the put ended without a final ack".to_string());
    }
    Ok(acked)
}

fn ids(batches: &[arrow_array::RecordBatch]) -> Vec<i64> {
    let mut out = Vec::new();
    for batch in batches {
        let column = batch
            .column_by_name("id")
            .expect("id column")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("id is int64");
        out.extend((0..column.len()).map(|i| column.value(i)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "shared-catalog crash test: run by tests/run.sh or by hand"]
async fn three_instances_on_one_postgres_catalog_lose_nothing_across_kills() {
    let kills = env_u64("SKADE_SHARED_KILLS").unwrap_or(4);
    let seed = env_u64("SKADE_CRASH_SEED").unwrap_or(0x5eed) | 1;
    let started = Instant::now();
    let pg = common::postgres::PgCluster::start();
    let url = pg.create_database("shared");
    let mut dir = tempfile::Builder::new()
        .prefix("skade-shared-")
        .tempdir()
        .unwrap();
    dir.disable_cleanup(std::env::var_os("SKADE_CRASH_KEEP").is_some());
    let base = dir.path().to_path_buf();
    let warehouse: PathBuf = base.join("warehouse");
    println!(
        "shared-catalog crash test: {kills} kills, seed {seed}, {INSTANCES} instances, dir {}",
        base.display()
    );

    let live: Live = Arc::new(Mutex::new(vec![None; INSTANCES]));
    let mut instances = Vec::new();
    for slot in 0..INSTANCES {
        let (mut server, flight, metrics) = start_instance(&base, slot, &warehouse, &url);
        wait_healthy(&mut server, metrics).await;
        lock(&live)[slot] = Some(flight);
        instances.push(Instance { server, metrics });
    }
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| tokio::spawn(produce(p, live.clone(), seed)))
        .collect();

    let mut rng = Rng(seed);
    for kill in 1..=kills {
        tokio::time::sleep(Duration::from_millis(rng.range(700, 2000))).await;
        let slot = rng.range(0, INSTANCES as u64) as usize;
        lock(&live)[slot] = None;
        instances[slot].server.0.kill().expect("SIGKILL skade");
        instances[slot].server.0.wait().expect("reap skade");
        println!("kill {kill}: instance {slot} at {:.1?}", started.elapsed());
        if kill == kills.div_ceil(2) {
            // The database itself dies and comes back; the running instances recover
            // without a restart.
            pg.stop_immediate();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            pg.restart();
            println!(
                "database stopped (immediate) and restarted at {:.1?}",
                started.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(rng.range(200, 800))).await;
        let (mut server, flight, metrics) = start_instance(&base, slot, &warehouse, &url);
        wait_healthy(&mut server, metrics).await;
        lock(&live)[slot] = Some(flight);
        instances[slot] = Instance { server, metrics };
    }

    let mut durable = BTreeMap::new();
    let mut resends = 0;
    for (p, task) in producers.into_iter().enumerate() {
        let (acked, again) = tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .expect("producer finishes")
            .expect("producer task")
            .unwrap_or_else(|e| panic!("{e} (logs in {})", base.display()));
        durable.insert(p, acked);
        resends += again;
    }
    let mut conflicts = 0.0;
    let mut maintained = 0.0;
    for instance in &instances {
        let (_, body) = common::http_get(instance.metrics, "/metrics").await;
        conflicts += common::metric(&body, "skade_commit_conflicts_total");
        maintained += common::metric(
            &body,
            "skade_maintenance_tables{maintained_by=\"this_instance\"}",
        );
    }
    for mut instance in instances {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(instance.server.0.id() as i32, libc::SIGTERM) };
        let status = instance.server.0.wait().expect("reap skade");
        assert!(status.success(), "skade exit after SIGTERM: {status}");
    }

    // Every producer's rows once, every retained snapshot readable.
    let catalog = RedbCatalog::open_postgres(
        &url,
        "skade",
        4,
        skade::catalog::store::postgres::turns::CommitTurn::Instance,
        Warehouse::Local(warehouse),
    )
    .await
    .expect("open the shared catalog");
    let ns = NamespaceIdent::new(NS.to_string());
    let mut total_rows = 0usize;
    let mut snapshots = 0usize;
    for table_name in (0..PRODUCERS)
        .map(table_of)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let table = catalog
            .load_table(&TableIdent::new(ns.clone(), table_name.clone()))
            .await
            .expect("load table");
        let mut found = ids(&common::scan(&table, None).await);
        total_rows += found.len();
        found.sort_unstable();
        let producers: Vec<usize> = (0..PRODUCERS)
            .filter(|p| table_of(*p) == table_name)
            .collect();
        let mut expected: Vec<i64> = producers
            .iter()
            .flat_map(|&p| {
                (1..=STREAMS * BATCHES)
                    .flat_map(move |s| (0..ROWS as i64).map(move |r| first_id(p, s) + r))
            })
            .collect();
        expected.sort_unstable();
        let doubled = found.windows(2).filter(|w| w[0] == w[1]).count();
        assert_eq!(
            doubled, 0,
            "table {table_name}: {doubled} rows landed twice"
        );
        assert_eq!(
            found.len(),
            expected.len(),
            "table {table_name}: {} rows, {} sent",
            found.len(),
            expected.len()
        );
        assert_eq!(
            found, expected,
            "table {table_name}: rows differ from what was sent"
        );
        for snapshot in table.metadata().snapshots() {
            let rows = ids(&common::scan(&table, Some(snapshot.snapshot_id())).await).len();
            let recorded = snapshot
                .summary()
                .additional_properties
                .get("total-records")
                .and_then(|v| v.parse::<usize>().ok());
            assert_eq!(
                Some(rows),
                recorded,
                "table {table_name}: snapshot {} reads {rows} rows",
                snapshot.snapshot_id()
            );
            snapshots += 1;
        }
    }
    // Each table is maintained by one instance at a time: the instances' last passes
    // together hold at most one lease per table.
    let tables = (0..PRODUCERS)
        .map(table_of)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(
        maintained <= tables as f64,
        "{maintained} tables maintained across the instances' last passes, {tables} tables"
    );
    for (p, acked) in &durable {
        assert_eq!(*acked, STREAMS * BATCHES, "producer {p}: acked {acked}");
    }
    println!(
        "SHARED RESULT: instances {INSTANCES}, kills {kills}, database restarts 1, producers \
         {PRODUCERS}, rows {total_rows} (each once), snapshots read {snapshots}, resends \
         {resends}, commit conflicts {conflicts}, tables maintained at the last scrape \
         {maintained}, {:.0?}",
        started.elapsed()
    );
}

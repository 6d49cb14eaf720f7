//! The commit driver's policy decisions (`catalog::commit`): every kind of commit into one
//! table — an evolving stream, a plain stream, a Flight SQL transaction, a REST schema
//! update, a maintenance pass — lands when a re-stage on the table as it stands
//! resolves the conflict, and none loses or doubles a row.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::EndTransaction;
use arrow_flight::{FlightClient, FlightDescriptor};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use serde_json::json;
use skade::config::MaintenanceConfig;
use skade::maintenance::Maintainer;
use skade::metrics::Metrics;
use skade::write::{self, WriteProps};

use crate::common::{self, TestServer, http_send, metric, open_catalog, sql_client, within};

fn schema_of(fields: &[(&str, DataType, bool)]) -> SchemaRef {
    Arc::new(ArrowSchema::new(
        fields
            .iter()
            .map(|(n, t, nullable)| Field::new(*n, t.clone(), *nullable))
            .collect::<Vec<_>>(),
    ))
}

fn plain_schema() -> SchemaRef {
    schema_of(&[
        ("id", DataType::Int64, false),
        ("name", DataType::Utf8, true),
    ])
}

fn scored_schema() -> SchemaRef {
    schema_of(&[
        ("id", DataType::Int64, false),
        ("name", DataType::Utf8, true),
        ("score", DataType::Float64, true),
    ])
}

/// Rows `ids` of the plain schema, or the scored one (score = id / 2) when `scored`.
fn rows(ids: std::ops::Range<i64>, scored: bool) -> RecordBatch {
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.clone())),
        Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| format!("n{i}")),
        )),
    ];
    if scored {
        columns.push(Arc::new(Float64Array::from_iter_values(
            ids.map(|i| i as f64 / 2.0),
        )));
        return RecordBatch::try_new(scored_schema(), columns).unwrap();
    }
    RecordBatch::try_new(plain_schema(), columns).unwrap()
}

/// `id → score` of every row of `table`'s current snapshot (`None`: a null score or no
/// score column).
async fn scores(table: &Table) -> Vec<(i64, Option<f64>)> {
    let mut out = Vec::new();
    for batch in common::scan(table, None).await {
        let id = batch
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .clone();
        let score = batch
            .column_by_name("score")
            .and_then(|c| c.as_any().downcast_ref::<Float64Array>().cloned());
        for i in 0..batch.num_rows() {
            let s = score
                .as_ref()
                .and_then(|s| s.is_valid(i).then(|| s.value(i)));
            out.push((id.value(i), s));
        }
    }
    out.sort_by_key(|r| r.0);
    out
}

/// Opens a DoPut stream of `schema` to `path` that stays open until the sender drops.
async fn open_stream(
    client: &mut FlightClient,
    path: &[&str],
    schema: SchemaRef,
) -> (
    tokio::sync::mpsc::Sender<RecordBatch>,
    futures::stream::BoxStream<
        'static,
        Result<arrow_flight::PutResult, arrow_flight::error::FlightError>,
    >,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(FlightDescriptor::new_path(
            path.iter().map(|s| s.to_string()).collect(),
        )))
        .build(tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok));
    let results = client.do_put(data).await.expect("open the put");
    (tx, results.boxed())
}

/// An evolving stream (adding the column `score`) is planned on schema 0; a REST
/// `updateTable` then makes schema 1 current (a column doc, no new column); then a plain
/// stream, a Flight SQL transaction and the evolving stream's end all commit at once.
/// All four land: the evolving commit is re-planned on schema 1 (its new column's field
/// id is still free), keeping REST's change, and every row is there exactly once.
/// Catches: an evolving commit that fails on a schema change a rebase resolves (the
/// driver's evolving-append policy), or any commit of the race lost.
/// RED once: without `evolve::rebase` (the change refused when the base schema is no
/// longer current), the evolving stream failed with `Aborted` "its schema changed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_a_transaction_and_a_rest_schema_update_racing_all_land() {
    let server = TestServer::start().await;
    let catalog = server.running.service.catalog.clone();
    let ns = NamespaceIdent::new("race".into());
    catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    let schema = Schema::builder()
        .with_fields(vec![
            Arc::new(NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            )),
            Arc::new(NestedField::optional(
                2,
                "name",
                Type::Primitive(PrimitiveType::String),
            )),
        ])
        .build()
        .unwrap();
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .properties(HashMap::from([(
            "skade.ingest.evolve-schema".to_string(),
            "true".to_string(),
        )]))
        .build();
    let created = catalog.create_table(&ns, creation).await.unwrap();
    let ident = TableIdent::new(ns.clone(), "t".into());

    // The evolving stream: its first batch is taken in (its change planned on schema 0).
    let mut evolving_client = server.client().await;
    let (evolving, evolving_results) =
        open_stream(&mut evolving_client, &["race", "t"], scored_schema()).await;
    evolving.send(rows(0..3, true)).await.unwrap();
    within(30, async {
        while metric(
            &server.http_get("/metrics").await.1,
            "skade_memory_reserved_bytes",
        ) <= 0.0
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // A REST schema update: `name` gets a doc (a new schema, no new field id).
    let uuid = created.metadata().uuid().to_string();
    let body = json!({
        "requirements": [
            {"type": "assert-table-uuid", "uuid": uuid},
            {"type": "assert-current-schema-id", "current-schema-id": 0}
        ],
        "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 2, "name": "name", "required": false, "type": "string", "doc": "who"}
            ]}},
            {"action": "set-current-schema", "schema-id": -1}
        ]
    });
    let (status, answer) = http_send(
        server.running.metrics_addr,
        "POST",
        "/v1/namespaces/race/tables/t",
        &[],
        &body.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // A Flight SQL transaction with rows staged, and a plain stream.
    let mut sql = sql_client(&server).await;
    let txn = sql.begin_transaction().await.unwrap();
    within(
        60,
        sql.execute_ingest(
            common::ingest_cmd("race", "t", Some(&txn)),
            futures::stream::iter(vec![Ok(rows(100..103, false))]),
        ),
    )
    .await
    .expect("ingest");
    let mut plain_client = server.client().await;

    // Everything commits at once.
    let plain = common::put_with_schema(
        &mut plain_client,
        &["race", "t"],
        plain_schema(),
        vec![rows(200..203, false)],
    );
    let transaction = sql.end_transaction(txn, EndTransaction::Commit);
    drop(evolving);
    let evolving_done = evolving_results.try_collect::<Vec<_>>();
    let (plain, transaction, evolving_done) = within(60, async {
        tokio::join!(plain, transaction, evolving_done)
    })
    .await;
    plain.expect("the plain stream lands");
    transaction.expect("the transaction lands");
    evolving_done.expect("the evolving stream lands");

    let table = catalog.load_table(&ident).await.unwrap();
    let current = table.metadata().current_schema();
    let score = current.field_by_name("score").expect("the stream's column");
    assert_eq!(score.id, 3);
    assert_eq!(
        current.field_by_name("name").unwrap().doc.as_deref(),
        Some("who"),
        "the REST update's change is kept"
    );
    let mut expected: Vec<(i64, Option<f64>)> = (0..3).map(|i| (i, Some(i as f64 / 2.0))).collect();
    expected.extend((100..103).map(|i| (i, None)));
    expected.extend((200..203).map(|i| (i, None)));
    assert_eq!(scores(&table).await, expected);
    server.stop().await;
}

/// A maintenance pass whose expiry commit is overtaken by an append from outside this
/// process's commit turns (another process's commit, here released straight through
/// `atomic_release_raw` in the same group-commit batch, ahead of it): the pass plans the
/// expiry again on the table as it then stands and lands it in the same pass, and every
/// row — the racing append's too — is in the table exactly once.
/// Catches: maintenance dropping its commit on a conflict a re-plan resolves (the
/// driver's maintenance policy), or an expiry that overwrites the racing append.
/// RED once: with maintenance's commit given up on the first conflict, the pass expired
/// 0 snapshots and counted 1 conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_pass_overtaken_by_an_append_plans_again_and_keeps_every_row() {
    let c = open_catalog();
    let table = common::synthetic_table(&c.catalog, "ns", "m").await;
    let mut table = table;
    for i in 0..4 {
        let batch = common::conformed(&table, i * 10, 10);
        (table, _) = write::append(&c.catalog, &table, vec![batch], &WriteProps::default())
            .await
            .unwrap();
    }
    let m = Maintainer::new(
        c.catalog.clone(),
        MaintenanceConfig {
            enabled: true,
            maintenance_interval: Duration::from_millis(50),
            max_snapshots: 2,
            cleanup_grace: Duration::from_secs(3600),
            metadata_cleanup_grace: Duration::from_secs(3600),
            cleanup_max_waiting: u64::MAX,
            compaction: false,
        },
        Metrics::new(),
    );

    // The outside append: files written, its commit staged on the table as it stands.
    let encoded = write::encode(&table, vec![vec![common::conformed(&table, 1000, 5)]])
        .await
        .unwrap();
    let files = write::write_files(
        &table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap();
    let (requirements, updates) = skade::snapshot::append::stage_append(
        c.catalog.written_manifests(),
        &table,
        files,
        HashMap::new(),
    )
    .await
    .unwrap();

    let pause = c.catalog.pause_commits();
    let outside = {
        let catalog = c.catalog.clone();
        let ident = table.identifier().clone();
        tokio::spawn(async move {
            catalog
                .atomic_release_raw(vec![(ident, requirements, updates)])
                .await
        })
    };
    let queued = |n: usize| {
        let catalog = c.catalog.clone();
        async move {
            while catalog.queued_commits() < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    within(30, queued(1)).await;
    let pass = {
        let m = Arc::new(m);
        tokio::spawn(async move { m.run_pass().await })
    };
    within(30, queued(2)).await;
    drop(pause);

    within(30, outside)
        .await
        .unwrap()
        .expect("the outside append lands");
    let report = within(60, pass).await.unwrap().expect("pass");
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        report.conflicts, 0,
        "the expiry gave way instead of planning again"
    );
    assert_eq!(report.snapshots_expired, 3, "5 snapshots, 2 kept");
    let table = c.catalog.load_table(table.identifier()).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 2);
    let ids: Vec<i64> = scores(&table).await.into_iter().map(|r| r.0).collect();
    let expected: BTreeSet<i64> = (0..40).chain(1000..1005).collect();
    assert_eq!(ids, expected.into_iter().collect::<Vec<_>>());
}

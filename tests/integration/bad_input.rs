//! Bad input gets the right gRPC status naming what is wrong, commits nothing of that
//! request, loses nothing already committed, and the server keeps serving. Valid edge
//! input works.

use crate::common;

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{TestServer, count, get, put, put_with_schema, synthetic_batch, synthetic_schema};
use futures::TryStreamExt;
use tonic::Code;

fn status(err: FlightError) -> tonic::Status {
    match err {
        FlightError::Tonic(status) => *status,
        other => panic!("not a gRPC status: {other}"),
    }
}

fn one_column(name: &str, array: ArrayRef, nullable: bool) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new(
        name,
        array.data_type().clone(),
        nullable,
    )]));
    RecordBatch::try_new(schema, vec![array]).unwrap()
}

/// Seeds `ns.t` with 10 synthetic rows (one commit) and returns the server.
async fn seeded() -> TestServer {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, &["ns", "t"], vec![synthetic_batch(0, 10)])
        .await
        .unwrap();
    server
}

async fn rows(server: &TestServer, path: &[&str]) -> usize {
    count(&get(&mut server.client().await, path).await)
}

/// Encodes `batches` as one FlightData stream without splitting any batch (as pyarrow
/// sends them), starting a new IPC schema message whenever a batch's schema changes.
async fn put_raw(
    client: &mut arrow_flight::FlightClient,
    path: &[&str],
    batches: Vec<RecordBatch>,
) -> Result<Vec<arrow_flight::PutResult>, FlightError> {
    let descriptor = FlightDescriptor::new_path(path.iter().map(|s| s.to_string()).collect());
    let mut data: Vec<FlightData> = Vec::new();
    let mut current: Option<SchemaRef> = None;
    let mut segment: Vec<RecordBatch> = Vec::new();
    let flush = |segment: &mut Vec<RecordBatch>, data: &mut Vec<FlightData>, schema: SchemaRef| {
        let batches = std::mem::take(segment);
        let encoded: Vec<FlightData> = futures::executor::block_on(
            arrow_flight::encode::FlightDataEncoderBuilder::new()
                .with_max_flight_data_size(usize::MAX)
                .with_schema(schema)
                .build(futures::stream::iter(batches.into_iter().map(Ok)))
                .try_collect(),
        )
        .unwrap();
        data.extend(encoded);
    };
    for batch in batches {
        if current.as_ref().is_some_and(|s| s != &batch.schema()) {
            flush(&mut segment, &mut data, current.clone().unwrap());
        }
        current = Some(batch.schema());
        segment.push(batch);
    }
    if let Some(schema) = current {
        flush(&mut segment, &mut data, schema);
    }
    data[0].flight_descriptor = Some(descriptor);
    client
        .do_put(futures::stream::iter(data.into_iter().map(Ok)))
        .await?
        .try_collect()
        .await
}

async fn expect_invalid(
    server: &TestServer,
    path: &[&str],
    batches: Vec<RecordBatch>,
    needle: &str,
) {
    let mut client = server.client().await;
    let err = status(put(&mut client, path, batches).await.unwrap_err());
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(
        err.message().contains(needle),
        "{needle:?} not in {:?}",
        err.message()
    );
}

/// RED once: before the Iceberg-type check, a float64 `id` was silently cast into the
/// table's long column and committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_differs_from_the_table_is_rejected_naming_the_column() {
    let server = seeded().await;
    // Renamed / extra column.
    let extra = one_column("idd", Arc::new(Int64Array::from(vec![1])), true);
    expect_invalid(&server, &["ns", "t"], vec![extra], "\"idd\"").await;
    // Retyped: float64 into the long column `id`.
    let retyped = one_column("id", Arc::new(Float64Array::from(vec![1.0])), false);
    expect_invalid(&server, &["ns", "t"], vec![retyped], "\"id\"").await;
    // Missing required column `id`.
    let missing = one_column("score", Arc::new(Float64Array::from(vec![1.0])), true);
    expect_invalid(
        &server,
        &["ns", "t"],
        vec![missing],
        "required column is missing",
    )
    .await;
    // Nulls in the required column `id`.
    let nulls = one_column("id", Arc::new(Int64Array::from(vec![Some(1), None])), true);
    expect_invalid(
        &server,
        &["ns", "t"],
        vec![nulls],
        "nulls in a required column",
    )
    .await;
    // Nothing of those landed; the committed rows are intact; the server still serves.
    assert_eq!(rows(&server, &["ns", "t"]).await, 10);
    // A missing *nullable* column is fine: written as nulls.
    let ids_only = one_column("id", Arc::new(Int64Array::from(vec![100, 101])), false);
    put(&mut server.client().await, &["ns", "t"], vec![ids_only])
        .await
        .unwrap();
    assert_eq!(rows(&server, &["ns", "t"]).await, 12);
    server.stop().await;
}

/// A second Schema message in one DoPut: arrow-flight's decoder refuses it, and the
/// refusal must reach the client as InvalidArgument with nothing committed. RED once:
/// with decode errors mapped to Internal in `into_status`, this failed on the code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_mid_stream_is_rejected() {
    let server = seeded().await;
    let first = one_column("id", Arc::new(Int64Array::from(vec![1])), false);
    let schema2 = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let second = RecordBatch::try_new(
        schema2,
        vec![
            Arc::new(Int64Array::from(vec![2])),
            Arc::new(StringArray::from(vec!["x"])),
        ],
    )
    .unwrap();
    let mut client = server.client().await;
    let err = status(
        put_raw(&mut client, &["ns", "t"], vec![first, second])
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("multiple Schema messages"), "{err}");
    assert_eq!(rows(&server, &["ns", "t"]).await, 10);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_without_an_iceberg_equivalent_are_rejected() {
    let server = TestServer::start().await;
    let dup = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("a", DataType::Int64, true),
    ]));
    let mut client = server.client().await;
    let err = status(
        put_with_schema(&mut client, &["ns", "dup"], dup, vec![])
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("duplicate column name"), "{err}");

    let u64s = one_column("big", Arc::new(UInt64Array::from(vec![1u64])), true);
    expect_invalid(&server, &["ns", "u64"], vec![u64s], "UInt64").await;
    let interval = Arc::new(Schema::new(vec![Field::new(
        "iv",
        DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano),
        true,
    )]));
    let err = status(
        put_with_schema(&mut client, &["ns", "iv"], interval, vec![])
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(common::parquet_files(&server.warehouse()).is_empty());
    server.stop().await;
}

/// The documented mappings: dictionary → its value type, large strings → string,
/// uint32 → long, nanosecond timestamps → microseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_types_round_trip() {
    let server = TestServer::start().await;
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new(
            "dict",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        ),
        Field::new("large", DataType::LargeUtf8, true),
        Field::new("u32", DataType::UInt32, true),
        Field::new(
            "ns",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            true,
        ),
    ]));
    let batch = |dict_values: Vec<&str>, keys: Vec<i32>| {
        let dict = DictionaryArray::<Int32Type>::try_new(
            keys.into(),
            Arc::new(StringArray::from(dict_values)),
        )
        .unwrap();
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(dict),
                Arc::new(arrow_array::LargeStringArray::from(vec!["l1", "l2"])),
                Arc::new(UInt32Array::from(vec![u32::MAX, 7])),
                Arc::new(
                    TimestampNanosecondArray::from(vec![1_000_000_000i64, 2_000_000_000])
                        .with_timezone("UTC"),
                ),
            ],
        )
        .unwrap()
    };
    // The dictionary is replaced between batches: values must read back decoded.
    let b1 = batch(vec!["a", "b"], vec![1, 0]);
    let b2 = batch(vec!["x", "y", "z"], vec![2, 2]);
    let mut client = server.client().await;
    put(&mut client, &["ns", "mapped"], vec![b1, b2])
        .await
        .unwrap();
    let got = get(&mut client, &["ns", "mapped"]).await;
    let rows = common::rows_of(&got);
    assert_eq!(
        rows,
        vec![
            "b|l1|4294967295|1970-01-01T00:00:01Z",
            "a|l2|7|1970-01-01T00:00:02Z",
            "z|l1|4294967295|1970-01-01T00:00:01Z",
            "z|l2|7|1970-01-01T00:00:02Z",
        ]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_streams_work() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // Schema only: creates the table, commits nothing.
    put_with_schema(
        &mut client,
        &["ns", "schema_only"],
        synthetic_schema(),
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(rows(&server, &["ns", "schema_only"]).await, 0);
    // Batches of 3, 0 and 2 rows.
    let batches = vec![
        synthetic_batch(0, 3),
        synthetic_batch(3, 0),
        synthetic_batch(3, 2),
    ];
    let acks = put(&mut client, &["ns", "three_zero_two"], batches)
        .await
        .unwrap();
    assert_eq!(acks.last().unwrap().committed_rows, 5);
    assert_eq!(rows(&server, &["ns", "three_zero_two"]).await, 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_ipc_and_unknown_descriptors_are_invalid_argument() {
    let server = seeded().await;
    let mut client = server.client().await;
    let garbage = FlightData {
        flight_descriptor: Some(FlightDescriptor::new_path(vec!["ns".into(), "t".into()])),
        data_header: vec![0xde, 0xad, 0xbe, 0xef, 1, 2, 3].into(),
        data_body: vec![9; 32].into(),
        ..Default::default()
    };
    let result = client
        .do_put(futures::stream::iter(vec![Ok(garbage)]))
        .await;
    let err = match result {
        Ok(stream) => status(stream.try_collect::<Vec<_>>().await.unwrap_err()),
        Err(e) => status(e),
    };
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");

    let unknown = FlightData {
        flight_descriptor: Some(FlightDescriptor {
            r#type: 0,
            ..Default::default()
        }),
        ..Default::default()
    };
    let result = client
        .do_put(futures::stream::iter(vec![Ok(unknown)]))
        .await;
    let err = match result {
        Ok(stream) => status(stream.try_collect::<Vec<_>>().await.unwrap_err()),
        Err(e) => status(e),
    };
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert_eq!(rows(&server, &["ns", "t"]).await, 10);
    server.stop().await;
}

/// The message limit: a 12 MiB batch lands under the default limit; a batch over a
/// lowered limit is `ResourceExhausted` naming the limit, and only acked commits stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_size_limit_is_enforced_and_named() {
    let big = |rows: usize| {
        let values: Vec<i64> = (0..rows as i64).collect();
        one_column("v", Arc::new(Int64Array::from(values)), false)
    };
    let server = TestServer::start().await;
    let mut client = server.client().await;
    // 12 MiB of int64 values in one batch.
    // 12 MiB of int64 values in one batch, one gRPC message.
    put_raw(&mut client, &["ns", "big"], vec![big(12 << 17)])
        .await
        .unwrap();
    assert_eq!(rows(&server, &["ns", "big"]).await, 12 << 17);
    server.stop().await;

    let server = TestServer::start_with(|c| {
        c.ingest.max_message_size = 4 << 20;
        c.ingest.files_per_commit = 1.try_into().unwrap();
        c.ingest.target_file_size = 1;
    })
    .await;
    let mut client = server.client().await;
    // 1 MiB fits and is committed on its own; 6 MiB does not.
    let err = status(
        put_raw(
            &mut client,
            &["ns", "limited"],
            vec![big(1 << 17), big(6 << 17)],
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.message().contains(&(4u64 << 20).to_string()), "{err}");
    // Only whole acked commits: the first batch's, or none — and then the table this put
    // created is dropped again (a failed first put leaves no empty table).
    let ident = iceberg::TableIdent::from_strs(["ns", "limited"]).unwrap();
    let catalog = &server.running.service.catalog;
    if iceberg::Catalog::table_exists(catalog.as_ref(), &ident)
        .await
        .unwrap()
    {
        let got = get(&mut client, &["ns", "limited"]).await;
        assert_eq!(count(&got), 1 << 17, "only whole acked commits");
    }
    server.stop().await;
}

/// A table that opts in with `skade.ingest.truncate-nanoseconds=true` takes nanoseconds
/// with a sub-microsecond part (rounded down); without it they are refused naming the
/// row. Catches the property being ignored (or truncation happening silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_nanoseconds_land_only_where_the_table_opts_in() {
    use iceberg::Catalog;
    use iceberg::transaction::{ApplyTransactionAction, Transaction};

    let server = TestServer::start().await;
    let mut client = server.client().await;
    let exact = one_column(
        "ts",
        Arc::new(TimestampNanosecondArray::from(vec![3_000])),
        true,
    );
    put(&mut client, &["ns", "nanos"], vec![exact])
        .await
        .unwrap();
    let lossy = || {
        one_column(
            "ts",
            Arc::new(TimestampNanosecondArray::from(vec![1_000, 1_500, -1])),
            true,
        )
    };
    let err = status(
        put(&mut client, &["ns", "nanos"], vec![lossy()])
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("at row 1"), "{err}");

    let catalog = server.running.service.catalog.clone();
    let ident = iceberg::TableIdent::from_strs(["ns", "nanos"]).unwrap();
    let table = catalog.load_table(&ident).await.unwrap();
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set(skade::write::TRUNCATE_NANOS.to_string(), "true".to_string())
        .apply(tx)
        .unwrap();
    tx.commit(catalog.as_ref()).await.unwrap();

    put(&mut client, &["ns", "nanos"], vec![lossy()])
        .await
        .unwrap();
    let got = get(&mut client, &["ns", "nanos"]).await;
    let rows = common::rows_of(&got);
    assert_eq!(
        rows,
        vec![
            "1970-01-01T00:00:00.000003",
            "1970-01-01T00:00:00.000001",
            "1970-01-01T00:00:00.000001",
            "1969-12-31T23:59:59.999999",
        ]
    );
    server.stop().await;
}

//! Schema evolution on ingest (`skade.ingest.evolve-schema=true`) against a real server:
//! a stream with a new nullable column adds it in the same catalog commit as its data,
//! Iceberg's promotions widen the table, anything else is `InvalidArgument` naming the
//! column, and without the property nothing changes.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_flight::sql::EndTransaction;
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use tonic::Code;

use crate::common::{self, TestServer, metric, put, rows_of, sql_client, status_of, within};

const EVOLVE: &str = "skade.ingest.evolve-schema";

fn ident(name: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new("evo".into()), name.into())
}

/// Creates `evo.name` with `fields` and, when `evolve`, the opt-in property.
async fn create(server: &TestServer, name: &str, fields: Vec<NestedField>, evolve: bool) -> Table {
    let catalog = &server.running.service.catalog;
    let ns = NamespaceIdent::new("evo".into());
    if !catalog.namespace_exists(&ns).await.unwrap() {
        catalog.create_namespace(&ns, HashMap::new()).await.unwrap();
    }
    let schema = Schema::builder()
        .with_fields(fields.into_iter().map(Arc::new))
        .build()
        .unwrap();
    let mut properties = HashMap::new();
    if evolve {
        properties.insert(EVOLVE.to_string(), "true".to_string());
    }
    let creation = TableCreation::builder()
        .name(name.to_string())
        .schema(schema)
        .properties(properties)
        .build();
    catalog.create_table(&ns, creation).await.unwrap()
}

async fn load(server: &TestServer, name: &str) -> Table {
    server
        .running
        .service
        .catalog
        .load_table(&ident(name))
        .await
        .unwrap()
}

async fn commits(server: &TestServer) -> f64 {
    metric(
        &server.http_get("/metrics").await.1,
        "skade_catalog_commits_total",
    )
}

fn batch(fields: Vec<(&str, DataType, bool, ArrayRef)>) -> RecordBatch {
    let schema = Arc::new(ArrowSchema::new(
        fields
            .iter()
            .map(|(n, t, nullable, _)| Field::new(*n, t.clone(), *nullable))
            .collect::<Vec<_>>(),
    ));
    RecordBatch::try_new(schema, fields.into_iter().map(|f| f.3).collect()).unwrap()
}

fn base_batch(ids: std::ops::Range<i64>) -> RecordBatch {
    batch(vec![
        (
            "id",
            DataType::Int64,
            false,
            Arc::new(Int64Array::from_iter_values(ids.clone())),
        ),
        (
            "name",
            DataType::Utf8,
            true,
            Arc::new(StringArray::from_iter_values(ids.map(|i| format!("n{i}")))),
        ),
    ])
}

fn base_fields() -> Vec<NestedField> {
    vec![
        NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)),
        NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)),
    ]
}

fn sorted(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = rows_of(batches);
    rows.sort();
    rows
}

/// A stream with a new nullable column `score` into an opted-in table: the column is
/// added with a new field id in the same catalog commit as the stream's rows (one commit,
/// the new snapshot written with the new schema); the old rows read back with null
/// scores.
/// Catches: the column refused, added in a commit of its own, or old rows misread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_nullable_column_is_added_with_the_data_in_one_commit() {
    let server = TestServer::start().await;
    create(&server, "added", base_fields(), true).await;
    let mut client = server.client().await;
    within(
        60,
        put(&mut client, &["evo", "added"], vec![base_batch(0..3)]),
    )
    .await
    .expect("first put");
    let before = commits(&server).await;
    let old_schema_id = load(&server, "added").await.metadata().current_schema_id();

    let with_score = batch(vec![
        (
            "id",
            DataType::Int64,
            false,
            Arc::new(Int64Array::from(vec![3, 4])),
        ),
        (
            "name",
            DataType::Utf8,
            true,
            Arc::new(StringArray::from(vec!["n3", "n4"])),
        ),
        (
            "score",
            DataType::Float64,
            true,
            Arc::new(Float64Array::from(vec![Some(1.5), None])),
        ),
    ]);
    within(60, put(&mut client, &["evo", "added"], vec![with_score]))
        .await
        .expect("put with a new column");
    assert_eq!(
        commits(&server).await - before,
        1.0,
        "schema and data: one commit"
    );

    let table = load(&server, "added").await;
    let schema = table.metadata().current_schema();
    assert_ne!(schema.schema_id(), old_schema_id);
    let score = schema.field_by_name("score").expect("score added");
    assert_eq!(score.id, 3, "a fresh field id");
    assert!(!score.required);
    assert_eq!(*score.field_type, Type::Primitive(PrimitiveType::Double));
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(snapshot.schema_id(), Some(schema.schema_id()));
    assert_eq!(table.metadata().snapshots().count(), 2);

    let rows = sorted(&common::scan(&table, None).await);
    assert_eq!(
        rows,
        vec!["0|n0|", "1|n1|", "2|n2|", "3|n3|1.5", "4|n4|"],
        "old rows read with null scores"
    );
    // An old-shaped stream still appends (the new column is nullable).
    within(
        60,
        put(&mut client, &["evo", "added"], vec![base_batch(5..6)]),
    )
    .await
    .expect("put without the new column");
    assert_eq!(
        common::count(&common::scan(&load(&server, "added").await, None).await),
        6
    );
    server.stop().await;
}

/// Iceberg's promotions on an opted-in table: int → long, float → double,
/// decimal(9, 2) → decimal(12, 2), applied with the data; old and new rows read back.
/// Catches: a promotion refused, or applied without rewriting the table's schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_promotions_widen_the_table() {
    let server = TestServer::start().await;
    create(
        &server,
        "promoted",
        vec![
            NestedField::optional(1, "n", Type::Primitive(PrimitiveType::Int)),
            NestedField::optional(2, "f", Type::Primitive(PrimitiveType::Float)),
            NestedField::optional(
                3,
                "d",
                Type::Primitive(PrimitiveType::Decimal {
                    precision: 9,
                    scale: 2,
                }),
            ),
        ],
        true,
    )
    .await;
    let mut client = server.client().await;
    let narrow = batch(vec![
        (
            "n",
            DataType::Int32,
            true,
            Arc::new(Int32Array::from(vec![1])),
        ),
        (
            "f",
            DataType::Float32,
            true,
            Arc::new(Float32Array::from(vec![0.5])),
        ),
        (
            "d",
            DataType::Decimal128(9, 2),
            true,
            Arc::new(
                Decimal128Array::from(vec![12345])
                    .with_precision_and_scale(9, 2)
                    .unwrap(),
            ),
        ),
    ]);
    within(60, put(&mut client, &["evo", "promoted"], vec![narrow]))
        .await
        .expect("narrow put");
    let wide = batch(vec![
        (
            "n",
            DataType::Int64,
            true,
            Arc::new(Int64Array::from(vec![1i64 << 40])),
        ),
        (
            "f",
            DataType::Float64,
            true,
            Arc::new(Float64Array::from(vec![0.1])),
        ),
        (
            "d",
            DataType::Decimal128(12, 2),
            true,
            Arc::new(
                Decimal128Array::from(vec![99_999_999_999])
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
        ),
    ]);
    let before = commits(&server).await;
    within(60, put(&mut client, &["evo", "promoted"], vec![wide]))
        .await
        .expect("wide put");
    assert_eq!(commits(&server).await - before, 1.0);
    let table = load(&server, "promoted").await;
    let schema = table.metadata().current_schema();
    let ty = |name: &str| {
        schema
            .field_by_name(name)
            .unwrap()
            .field_type
            .as_ref()
            .clone()
    };
    assert_eq!(ty("n"), Type::Primitive(PrimitiveType::Long));
    assert_eq!(ty("f"), Type::Primitive(PrimitiveType::Double));
    assert_eq!(
        ty("d"),
        Type::Primitive(PrimitiveType::Decimal {
            precision: 12,
            scale: 2
        })
    );
    assert_eq!(schema.field_by_name("n").unwrap().id, 1, "ids kept");
    assert_eq!(
        sorted(&common::scan(&table, None).await),
        vec!["1099511627776|0.1|999999999.99", "1|0.5|123.45"]
    );
    server.stop().await;
}

/// What evolution does not allow is `InvalidArgument` naming the column, and commits
/// nothing: a narrowing or another type on an opted-in table, a new required column; and
/// without the property, a new column or a promotion is refused as before.
/// Catches: a silent type change, a schema changed without data, or the property ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_changes_are_refused_naming_the_column() {
    let server = TestServer::start().await;
    create(&server, "strict", base_fields(), true).await;
    create(&server, "plain", base_fields(), false).await;
    let mut client = server.client().await;
    let cases: Vec<(&str, RecordBatch, &str)> = vec![
        (
            "strict",
            batch(vec![
                (
                    "id",
                    DataType::Int64,
                    false,
                    Arc::new(Int64Array::from(vec![1])),
                ),
                (
                    "name",
                    DataType::Int64,
                    true,
                    Arc::new(Int64Array::from(vec![1])),
                ),
            ]),
            "name",
        ),
        (
            "strict",
            batch(vec![
                (
                    "id",
                    DataType::Int64,
                    false,
                    Arc::new(Int64Array::from(vec![1])),
                ),
                (
                    "must",
                    DataType::Int64,
                    false,
                    Arc::new(Int64Array::from(vec![1])),
                ),
            ]),
            "must",
        ),
        (
            "plain",
            batch(vec![
                (
                    "id",
                    DataType::Int64,
                    false,
                    Arc::new(Int64Array::from(vec![1])),
                ),
                (
                    "extra",
                    DataType::Utf8,
                    true,
                    Arc::new(StringArray::from(vec!["x"])),
                ),
            ]),
            "extra",
        ),
    ];
    for (table, rows, column) in cases {
        let before = load(&server, table).await;
        let err = within(60, put(&mut client, &["evo", table], vec![rows]))
            .await
            .expect_err("refused");
        let (code, message) = status_of(err);
        assert_eq!(code, Code::InvalidArgument, "{table}: {message}");
        assert!(
            message.contains(&format!("\"{column}\"")),
            "{table}: {message}"
        );
        let after = load(&server, table).await;
        assert_eq!(
            after.metadata_location(),
            before.metadata_location(),
            "{table}: nothing committed"
        );
    }
    server.stop().await;
}

/// A put with a new column into a table without the property is refused naming the
/// property that would let it in, on both lanes. Catches: a refusal that leaves the user
/// to find `skade.ingest.evolve-schema` on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_column_without_the_property_is_refused_naming_it() {
    let server = TestServer::start().await;
    create(&server, "plain", base_fields(), false).await;
    let rows = batch(vec![
        (
            "id",
            DataType::Int64,
            false,
            Arc::new(Int64Array::from(vec![1])),
        ),
        (
            "email",
            DataType::Utf8,
            true,
            Arc::new(StringArray::from(vec!["a@b"])),
        ),
    ]);
    let mut client = server.client().await;
    let err = within(60, put(&mut client, &["evo", "plain"], vec![rows.clone()]))
        .await
        .expect_err("refused");
    let (code, message) = status_of(err);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.contains("\"email\""), "{message}");
    assert!(message.contains(&format!("{EVOLVE}=true")), "{message}");
    let mut sql = sql_client(&server).await;
    let err = within(
        60,
        sql.execute_ingest(
            common::ingest_cmd("evo", "plain", None),
            futures::stream::iter(vec![Ok(rows)]),
        ),
    )
    .await
    .expect_err("refused");
    let message = err.to_string();
    assert!(message.contains(&format!("{EVOLVE}=true")), "{message}");
    server.stop().await;
}

/// Lane 2: two ingests into one opted-in table in one Flight SQL transaction, the first
/// adding a column and the second adding another: ONE catalog commit carries both
/// columns and all rows.
/// Catches: Lane 2 ignoring the property, or a second ingest losing the first's column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_evolves_the_schema_in_its_one_commit() {
    let server = TestServer::start().await;
    create(&server, "txn", base_fields(), true).await;
    let mut client = sql_client(&server).await;
    let before = commits(&server).await;
    let txn = client.begin_transaction().await.unwrap();
    let first = batch(vec![
        (
            "id",
            DataType::Int64,
            false,
            Arc::new(Int64Array::from(vec![1])),
        ),
        (
            "a",
            DataType::Utf8,
            true,
            Arc::new(StringArray::from(vec!["x"])),
        ),
    ]);
    let second = batch(vec![
        (
            "id",
            DataType::Int64,
            false,
            Arc::new(Int64Array::from(vec![2])),
        ),
        (
            "a",
            DataType::Utf8,
            true,
            Arc::new(StringArray::from(vec!["y"])),
        ),
        (
            "b",
            DataType::Int64,
            true,
            Arc::new(Int64Array::from(vec![7])),
        ),
    ]);
    for rows in [first, second] {
        within(
            60,
            client.execute_ingest(
                common::ingest_cmd("evo", "txn", Some(&txn)),
                futures::stream::iter(vec![Ok(rows)]),
            ),
        )
        .await
        .expect("ingest");
    }
    within(60, client.end_transaction(txn, EndTransaction::Commit))
        .await
        .expect("commit");
    assert_eq!(commits(&server).await - before, 1.0);
    let table = load(&server, "txn").await;
    let schema = table.metadata().current_schema();
    assert_eq!(schema.field_by_name("a").unwrap().id, 3);
    assert_eq!(schema.field_by_name("b").unwrap().id, 4);
    assert_eq!(
        sorted(&common::scan(&table, None).await),
        vec!["1||x|", "2||y|7"]
    );
    server.stop().await;
}

//! Creating tables on a put: `--auto-create-tables` and the namespace property
//! `skade.ingest.auto-create-tables`, and a failed first put leaving no table behind.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, TimestampNanosecondArray};
use arrow_flight::sql::{CommandStatementIngest, TableDefinitionOptions};
use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use tonic::Code;

use crate::common::{
    TestServer, files_where, put, put_with_schema, sql_client, status_of, synthetic_batch, within,
};

const PROPERTY: &str = "skade.ingest.auto-create-tables";

fn ident(ns: &str, table: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(ns.into()), table.into())
}

async fn exists(server: &TestServer, ns: &str, table: &str) -> bool {
    server
        .running
        .service
        .catalog
        .table_exists(&ident(ns, table))
        .await
        .expect("catalog answers")
}

/// A Flight SQL ingest of `ns.table` with ADBC's mode `mode` ("create", "create_append").
fn ingest_cmd(ns: &str, table: &str, mode: &str) -> CommandStatementIngest {
    let if_exists = match mode {
        "create" => TableExistsOption::Fail,
        _ => TableExistsOption::Append,
    };
    CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create as i32,
            if_exists: if_exists as i32,
        }),
        table: table.to_string(),
        schema: Some(ns.to_string()),
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    }
}

/// With `--auto-create-tables false`, a put into a table that does not exist is
/// `NotFound` naming the table and the flag, on both lanes, and creates nothing (not the
/// namespace either); Flight SQL's explicit mode "create" still creates, and puts into
/// existing tables go on. Catches: a typo in a table name silently creating a new table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auto_create_off_a_put_into_an_unknown_table_is_not_found() {
    let server = TestServer::start_with(|c| c.ingest.auto_create_tables = false).await;
    let mut client = server.client().await;
    let err = within(
        60,
        put(
            &mut client,
            &["demo", "People"],
            vec![synthetic_batch(0, 3)],
        ),
    )
    .await
    .expect_err("refused");
    let (code, message) = status_of(err);
    assert_eq!(code, Code::NotFound, "{message}");
    assert!(
        message.contains("demo.People"),
        "names the table: {message}"
    );
    assert!(
        message.contains("--auto-create-tables"),
        "names the flag: {message}"
    );
    let catalog = &server.running.service.catalog;
    assert!(
        !catalog
            .namespace_exists(&NamespaceIdent::new("demo".into()))
            .await
            .unwrap(),
        "no namespace created"
    );

    let mut sql = sql_client(&server).await;
    let rows = || futures::stream::iter(vec![Ok(synthetic_batch(0, 2))]);
    let err = within(
        60,
        sql.execute_ingest(ingest_cmd("demo", "people", "create_append"), rows()),
    )
    .await
    .expect_err("create_append refused");
    let message = err.to_string();
    assert!(message.contains("demo.people"), "{message}");
    assert!(message.contains("--auto-create-tables"), "{message}");
    assert!(!exists(&server, "demo", "people").await);

    // An explicit create still creates; later puts append.
    within(
        60,
        sql.execute_ingest(ingest_cmd("demo", "people", "create"), rows()),
    )
    .await
    .expect("mode create creates");
    within(
        60,
        put(
            &mut client,
            &["demo", "people"],
            vec![synthetic_batch(2, 3)],
        ),
    )
    .await
    .expect("a put into an existing table");
    server.stop().await;
}

/// The namespace property overrides the flag for the tables in that namespace, both
/// ways. Catches: the property ignored, or applied to other namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_property_overrides_the_flag() {
    let server = TestServer::start().await;
    let catalog = &server.running.service.catalog;
    let off = HashMap::from([(PROPERTY.to_string(), "false".to_string())]);
    catalog
        .create_namespace(&NamespaceIdent::new("strict".into()), off)
        .await
        .unwrap();
    let mut client = server.client().await;
    let err = within(
        60,
        put(&mut client, &["strict", "t"], vec![synthetic_batch(0, 1)]),
    )
    .await
    .expect_err("refused");
    let (code, message) = status_of(err);
    assert_eq!(code, Code::NotFound, "{message}");
    assert!(message.contains(&format!("{PROPERTY}=false")), "{message}");
    assert!(!exists(&server, "strict", "t").await);
    within(
        60,
        put(&mut client, &["open", "t"], vec![synthetic_batch(0, 1)]),
    )
    .await
    .expect("the flag (on) governs other namespaces");
    server.stop().await;

    let server = TestServer::start_with(|c| c.ingest.auto_create_tables = false).await;
    let on = HashMap::from([(PROPERTY.to_string(), "true".to_string())]);
    server
        .running
        .service
        .catalog
        .create_namespace(&NamespaceIdent::new("loose".into()), on)
        .await
        .unwrap();
    let mut client = server.client().await;
    within(
        60,
        put(&mut client, &["loose", "t"], vec![synthetic_batch(0, 1)]),
    )
    .await
    .expect("the property (true) wins over the flag (off)");
    server.stop().await;
}

/// Two batches of nanosecond timestamps: the first whole microseconds (so the put
/// creates its table), the second with a sub-microsecond value, refused mid-stream.
fn failing_stream() -> (Arc<Schema>, Vec<RecordBatch>) {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "ts",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        true,
    )]));
    let batch = |v: i64| {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(TimestampNanosecondArray::from(vec![v]))],
        )
        .unwrap()
    };
    (schema.clone(), vec![batch(1_000), batch(1_001)])
}

/// A put that creates its table and then fails before its first commit leaves no table
/// and no file of it, on both lanes; a failed put into a table that existed before
/// keeps it. Catches: an empty table left behind by a first put that failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_put_that_fails_before_committing_leaves_no_table() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let (schema, batches) = failing_stream();
    let err = within(
        60,
        put_with_schema(
            &mut client,
            &["demo", "fails"],
            schema.clone(),
            batches.clone(),
        ),
    )
    .await
    .expect_err("the second batch is refused");
    assert_eq!(status_of(err).0, Code::InvalidArgument);
    assert!(
        !exists(&server, "demo", "fails").await,
        "no table left behind"
    );
    let table_dir = server.warehouse().join("demo").join("fails");
    assert!(
        files_where(&table_dir, |_| true).is_empty(),
        "no file left under {}",
        table_dir.display()
    );

    let mut sql = sql_client(&server).await;
    let err = within(
        60,
        sql.execute_ingest(
            ingest_cmd("demo", "sqlfails", "create_append"),
            futures::stream::iter(batches.clone().into_iter().map(Ok)),
        ),
    )
    .await
    .expect_err("refused");
    assert!(err.to_string().contains("ts"), "{err}");
    assert!(
        !exists(&server, "demo", "sqlfails").await,
        "no table left behind"
    );

    // A table that existed before the failed put stays, with its rows.
    within(
        60,
        put_with_schema(
            &mut client,
            &["demo", "kept"],
            schema.clone(),
            vec![batches[0].clone()],
        ),
    )
    .await
    .expect("first put");
    within(
        60,
        put_with_schema(&mut client, &["demo", "kept"], schema, batches),
    )
    .await
    .expect_err("refused");
    assert!(exists(&server, "demo", "kept").await);
    server.stop().await;
}

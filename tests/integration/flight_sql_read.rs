//! Reading over Flight SQL, with arrow-flight's own `FlightSqlServiceClient` against a
//! real server on 127.0.0.1:0: metadata (catalogs, namespaces with patterns, tables with
//! their schema, primary keys from identifier fields, SQL info), SELECT through
//! `CommandStatementQuery` and through a prepared statement with bound parameters, one
//! snapshot per query, DML refused by name, and the empty DoPut an ADBC driver sends for
//! a table with no rows. Expected rows are computed here from the rows the test sent.

use crate::common;

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, UnionArray};
use arrow_flight::FlightData;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables, CommandStatementIngest, SqlInfo};
use common::{TestServer, ingest_cmd, put, sql_client, status_of, synthetic_batch, within};
use futures::TryStreamExt;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use tonic::Code;
use tonic::transport::Channel;

/// Every row of every endpoint of `info`, concatenated.
async fn fetch(
    client: &mut FlightSqlServiceClient<Channel>,
    info: arrow_flight::FlightInfo,
) -> Result<RecordBatch, arrow_flight::error::FlightError> {
    let schema = Arc::new(info.clone().try_decode_schema()?);
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("ticket");
        let stream = client.do_get(ticket).await?;
        batches.extend(stream.try_collect::<Vec<_>>().await?);
    }
    Ok(arrow_select::concat::concat_batches(&schema, &batches)?)
}

async fn query(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> Result<RecordBatch, arrow_flight::error::FlightError> {
    let info = client.execute(sql.to_string(), None).await?;
    fetch(client, info).await
}

fn ids(batch: &RecordBatch, column: &str) -> Vec<i64> {
    batch
        .column_by_name(column)
        .unwrap_or_else(|| panic!("no column {column} in {:?}", batch.schema()))
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

fn strings(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
    let array = arrow_cast::cast(
        batch.column_by_name(column).expect("column"),
        &arrow_schema::DataType::Utf8,
    )
    .expect("utf8");
    let array = array.as_string::<i32>();
    (0..array.len())
        .map(|i| array.is_valid(i).then(|| array.value(i).to_string()))
        .collect()
}

/// The synthetic rows' `name` (see `common::synthetic_batch`).
fn name_of(id: i64) -> String {
    format!("name-{:04}", id % 1000)
}

/// Catches a SELECT that ignores its filter, projection or limit, reads rows committed
/// after its GetFlightInfo (the ticket must read the snapshot the FlightInfo described),
/// or evaluates a predicate wrongly: the expected ids are computed from what was put.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_filters_projects_limits_and_reads_one_snapshot() {
    let server = TestServer::start().await;
    within(120, async {
        let mut flight = server.client().await;
        put(&mut flight, &["q", "t"], vec![synthetic_batch(0, 3000)])
            .await
            .expect("put");
        let mut client = sql_client(&server).await;

        let sql = "SELECT id, name AS label FROM q.t \
                   WHERE (id BETWEEN 100 AND 1999 AND name LIKE 'name-01%') \
                      OR id IN (5, 2500, 9999) OR NOT (id < 2990)";
        let info = client.execute(sql.to_string(), None).await.expect("plan");
        // Rows committed after the plan are not in its result.
        put(&mut flight, &["q", "t"], vec![synthetic_batch(3000, 500)])
            .await
            .expect("second put");
        let got = fetch(&mut client, info).await.expect("rows");
        let expected: Vec<i64> = (0..3000)
            .filter(|&id| {
                ((100..=1999).contains(&id) && name_of(id).starts_with("name-01"))
                    || [5, 2500, 9999].contains(&id)
                    || id >= 2990
            })
            .collect();
        assert_eq!(ids(&got, "id"), expected);
        assert_eq!(
            got.schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>(),
            vec!["id", "label"]
        );
        let labels: Vec<Option<String>> = expected.iter().map(|&i| Some(name_of(i))).collect();
        assert_eq!(strings(&got, "label"), labels);

        // A new query sees both puts; LIMIT stops after that many rows, in write order.
        let all = query(&mut client, "SELECT * FROM q.t WHERE score >= 0.0")
            .await
            .expect("all");
        assert_eq!(all.num_rows(), 3500);
        let limited = query(&mut client, "SELECT id FROM q.t WHERE flag IS NULL LIMIT 7")
            .await
            .expect("limit");
        let nulls: Vec<i64> = (0..3500).filter(|i| i % 20 == 0).take(7).collect();
        assert_eq!(ids(&limited, "id"), nulls);
        let none = query(&mut client, "SELECT id FROM q.t LIMIT 0")
            .await
            .expect("limit 0");
        assert_eq!(none.num_rows(), 0);
        // The default namespace and a catalog-qualified name.
        put(&mut flight, &["d"], vec![synthetic_batch(0, 3)])
            .await
            .expect("put");
        let short = query(&mut client, "SELECT id FROM d WHERE id <> 1")
            .await
            .expect("d");
        assert_eq!(ids(&short, "id"), vec![0, 2]);
        let qualified = query(&mut client, "SELECT id FROM skade.q.t WHERE id = 42")
            .await
            .expect("qualified");
        assert_eq!(ids(&qualified, "id"), vec![42]);
    })
    .await;
    server.stop().await;
}

/// Catches a prepared statement whose bound parameters are lost, applied to the wrong
/// placeholder or typed wrongly, and a handle that keeps server state (a second binding
/// of the same prepared statement must not see the first's parameters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_bind_parameters() {
    let server = TestServer::start().await;
    within(120, async {
        let mut flight = server.client().await;
        put(&mut flight, &["p", "t"], vec![synthetic_batch(0, 200)])
            .await
            .expect("put");
        let mut client = sql_client(&server).await;
        let mut prepared = client
            .prepare(
                "SELECT id FROM p.t WHERE id >= ? AND name <> ? AND id < $9".replace("$9", "?"),
                None,
            )
            .await
            .expect("prepare");
        let params = prepared
            .parameter_schema()
            .expect("parameter schema")
            .clone();
        assert_eq!(params.fields().len(), 3);
        let bind = |low: i64, name: &str, high: &str| {
            RecordBatch::try_from_iter(vec![
                ("a", Arc::new(Int64Array::from(vec![low])) as ArrayRef),
                ("b", Arc::new(StringArray::from(vec![name]))),
                // Text for a long column: cast as the column's type.
                ("c", Arc::new(StringArray::from(vec![high]))),
            ])
            .expect("params")
        };
        prepared
            .set_parameters(bind(10, "name-0012", "15"))
            .expect("bind");
        let info = prepared.execute().await.expect("execute");
        let got = fetch(&mut client, info).await.expect("rows");
        assert_eq!(ids(&got, "id"), vec![10, 11, 13, 14]);
        prepared
            .set_parameters(bind(190, "none", "1000"))
            .expect("bind again");
        let info = prepared.execute().await.expect("execute again");
        let got = fetch(&mut client, info).await.expect("rows");
        assert_eq!(ids(&got, "id"), (190..200).collect::<Vec<_>>());
        prepared
            .set_parameters(bind(0, "x", "not a number"))
            .expect("bind bad");
        let bad = match prepared.execute().await {
            Ok(info) => fetch(&mut client, info).await.map(|_| ()),
            Err(e) => Err(e),
        };
        let (code, message) = status_of(bad.expect_err("a long parameter that is text"));
        assert_eq!(code, Code::InvalidArgument, "{message}");
        assert!(
            message.contains("parameter 3") && message.contains("id"),
            "{message}"
        );
        prepared.close().await.expect("close");
    })
    .await;
    server.stop().await;
}

/// Catches statements outside the subset (UPDATE, INSERT, RETURNING, ORDER BY, …)
/// run or silently ignored on the query and update paths, unknown tables or columns not
/// named, and a DELETE run as an update not deleting or misreporting its count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_outside_the_subset_are_refused_by_name() {
    let server = TestServer::start().await;
    within(60, async {
        let mut flight = server.client().await;
        put(&mut flight, &["r", "t"], vec![synthetic_batch(0, 10)])
            .await
            .expect("put");
        let mut client = sql_client(&server).await;
        for (sql, code, named) in [
            (
                "UPDATE r.t SET id = 2 WHERE id = 1",
                Code::InvalidArgument,
                "UPDATE",
            ),
            (
                "DELETE FROM r.t WHERE id = 1 RETURNING id",
                Code::InvalidArgument,
                "RETURNING",
            ),
            (
                "INSERT INTO r.t VALUES (1)",
                Code::InvalidArgument,
                "INSERT",
            ),
            (
                "SELECT id FROM r.t ORDER BY id",
                Code::InvalidArgument,
                "ORDER BY",
            ),
            (
                "SELECT count(*) FROM r.t",
                Code::InvalidArgument,
                "count(*)",
            ),
            ("SELECT id FROM r.nope", Code::NotFound, "r.nope"),
            ("SELECT nope FROM r.t", Code::InvalidArgument, "nope"),
            (
                "SELECT id FROM r.t WHERE id = 'x'",
                Code::InvalidArgument,
                "'x'",
            ),
        ] {
            let (got, message) = status_of(query(&mut client, sql).await.expect_err(sql));
            assert_eq!(got, code, "{sql}: {message}");
            assert!(message.contains(named), "{sql}: {message}");
        }
        let (code, message) = status_of(
            client
                .execute_update("UPDATE r.t SET id = 2".into(), None)
                .await
                .expect_err("update"),
        );
        assert_eq!(code, Code::InvalidArgument, "{message}");
        assert!(message.contains("UPDATE"), "{message}");
        let still = query(&mut client, "SELECT id FROM r.t")
            .await
            .expect("rows");
        assert_eq!(still.num_rows(), 10, "nothing was changed");
        // A DELETE runs as an update and reports the rows it deleted.
        let deleted = client
            .execute_update("DELETE FROM r.t WHERE id = 1".into(), None)
            .await
            .expect("delete");
        assert_eq!(deleted, 1);
        let left = query(&mut client, "SELECT id FROM r.t")
            .await
            .expect("rows");
        assert_eq!(left.num_rows(), 9, "one row deleted");
    })
    .await;
    server.stop().await;
}

/// The `SqlInfo` value of `info` (a `GetSqlInfo` answer) for `id`, shown as text.
fn sql_info_value(batch: &RecordBatch, id: SqlInfo) -> Option<String> {
    let names = batch
        .column(0)
        .as_primitive::<arrow_array::types::UInt32Type>();
    let values = batch.column(1).as_any().downcast_ref::<UnionArray>()?;
    (0..batch.num_rows())
        .find(|&row| names.value(row) == id as u32)
        .map(|row| {
            let value = values.value(row);
            arrow_cast::display::ArrayFormatter::try_new(value.as_ref(), &Default::default())
                .map(|f| f.value(0).to_string())
                .unwrap_or_default()
        })
}

/// Catches metadata that does not list what was created (a nested namespace missed, a
/// pattern applied wrongly, a table schema other than the one put), primary keys not
/// read from the identifier fields, and SqlInfo that reports literals (the Arrow
/// version must be Cargo.lock's, read here) or lacks what the JDBC driver needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_lists_what_was_created() {
    let server = TestServer::start().await;
    within(60, async {
        let mut flight = server.client().await;
        for path in [["m", "a"], ["m", "b"], ["mx", "c"]] {
            put(&mut flight, &path, vec![synthetic_batch(0, 2)])
                .await
                .expect("put");
        }
        put(
            &mut flight,
            &["m", "deep", "d"],
            vec![synthetic_batch(0, 2)],
        )
        .await
        .expect("nested");
        // A table with identifier fields, created through the catalog.
        let catalog = &server.running.service.catalog;
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "tenant", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::required(2, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(3, "v", Type::Primitive(PrimitiveType::Double)).into(),
            ])
            .with_identifier_field_ids(vec![1, 2])
            .build()
            .expect("schema");
        let ns = NamespaceIdent::new("keys".into());
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .expect("namespace");
        catalog
            .create_table(
                &ns,
                TableCreation::builder()
                    .name("k".into())
                    .schema(schema)
                    .build(),
            )
            .await
            .expect("table");

        let mut client = sql_client(&server).await;
        let info = client.get_catalogs().await.expect("catalogs");
        let catalogs = fetch(&mut client, info).await.expect("catalogs");
        assert_eq!(
            strings(&catalogs, "catalog_name"),
            vec![Some("skade".to_string())]
        );

        let info = client
            .get_db_schemas(CommandGetDbSchemas {
                catalog: None,
                db_schema_filter_pattern: Some("m%".into()),
            })
            .await
            .expect("schemas");
        let schemas = fetch(&mut client, info).await.expect("schemas");
        let names: Vec<Option<String>> = ["m", "m.deep", "mx"]
            .iter()
            .map(|s| Some(s.to_string()))
            .collect();
        assert_eq!(strings(&schemas, "db_schema_name"), names);

        let info = client
            .get_tables(CommandGetTables {
                catalog: Some("skade".into()),
                db_schema_filter_pattern: Some("m".into()),
                table_name_filter_pattern: Some("_".into()),
                table_types: vec!["TABLE".into()],
                include_schema: true,
            })
            .await
            .expect("tables");
        let tables = fetch(&mut client, info).await.expect("tables");
        assert_eq!(
            strings(&tables, "table_name"),
            vec![Some("a".to_string()), Some("b".to_string())]
        );
        let bytes = tables
            .column_by_name("table_schema")
            .expect("schema column");
        let bytes = bytes.as_binary::<i32>();
        let schema =
            arrow::ipc::convert::try_schema_from_ipc_buffer(bytes.value(0)).expect("ipc schema");
        let sent = common::synthetic_schema();
        let shape = |s: &arrow_schema::Schema| {
            s.fields()
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone(), f.is_nullable()))
                .collect::<Vec<_>>()
        };
        // Timestamps read back with zone +00:00 (docs/arrow-types.md); the rest as sent.
        let mut expected = shape(&sent);
        expected[1].1 = arrow_schema::DataType::Timestamp(
            arrow_schema::TimeUnit::Microsecond,
            Some("+00:00".into()),
        );
        assert_eq!(shape(&schema), expected);
        let views = client
            .get_tables(CommandGetTables {
                table_types: vec!["VIEW".into()],
                ..Default::default()
            })
            .await
            .expect("views");
        assert_eq!(
            fetch(&mut client, views).await.expect("views").num_rows(),
            0
        );

        let info = client.get_table_types().await.expect("types");
        let types = fetch(&mut client, info).await.expect("types");
        assert_eq!(
            strings(&types, "table_type"),
            vec![Some("TABLE".to_string())]
        );

        let info = client
            .get_primary_keys(arrow_flight::sql::CommandGetPrimaryKeys {
                catalog: None,
                db_schema: Some("keys".into()),
                table: "k".into(),
            })
            .await
            .expect("keys");
        let keys = fetch(&mut client, info).await.expect("keys");
        assert_eq!(
            strings(&keys, "column_name"),
            vec![Some("tenant".to_string()), Some("id".to_string())]
        );
        let info = client
            .get_primary_keys(arrow_flight::sql::CommandGetPrimaryKeys {
                catalog: None,
                db_schema: Some("m".into()),
                table: "a".into(),
            })
            .await
            .expect("no keys");
        assert_eq!(
            fetch(&mut client, info).await.expect("no keys").num_rows(),
            0
        );

        let info = client
            .get_sql_info(vec![
                SqlInfo::FlightSqlServerArrowVersion,
                SqlInfo::FlightSqlServerSql,
                SqlInfo::SqlTransactionsSupported,
                SqlInfo::FlightSqlServerTransaction,
            ])
            .await
            .expect("sql info");
        let info = fetch(&mut client, info).await.expect("sql info");
        let lock = include_str!("../../Cargo.lock");
        let arrow = lock
            .split("[[package]]")
            .find(|b| b.lines().any(|l| l.trim() == "name = \"arrow\""))
            .and_then(|b| {
                b.lines()
                    .find_map(|l| l.trim().strip_prefix("version = \""))
            })
            .and_then(|v| v.strip_suffix('"'))
            .expect("arrow in Cargo.lock");
        assert_eq!(
            sql_info_value(&info, SqlInfo::FlightSqlServerArrowVersion).as_deref(),
            Some(arrow)
        );
        assert_eq!(
            sql_info_value(&info, SqlInfo::FlightSqlServerSql).as_deref(),
            Some("true")
        );
        assert_eq!(
            sql_info_value(&info, SqlInfo::SqlTransactionsSupported).as_deref(),
            Some("true")
        );
        let info = client
            .get_xdbc_type_info(Default::default())
            .await
            .expect("types");
        assert!(fetch(&mut client, info).await.expect("xdbc").num_rows() >= 10);
    })
    .await;
    server.stop().await;
}

/// Catches an empty DoPut (no message: what ADBC drivers send for a table with no rows)
/// answered with a silent success, or with a status that does not say what happened, or
/// that disturbs the session's open transaction: its staged table still commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_doput_is_refused_and_leaves_the_transaction_alone() {
    let server = TestServer::start().await;
    within(60, async {
        let channel = Channel::from_shared(format!("http://{}", server.running.flight_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = FlightSqlServiceClient::new(channel.clone());
        client.set_header("x-skade-session", "empty-doput");
        let txn = client.begin_transaction().await.expect("begin");
        let cmd: CommandStatementIngest = ingest_cmd("e", "full", None);
        let rows = client
            .execute_ingest(cmd, futures::stream::iter([Ok(synthetic_batch(0, 5))]))
            .await
            .expect("ingest");
        assert_eq!(rows, 5);

        let mut raw = arrow_flight::flight_service_client::FlightServiceClient::new(channel);
        let mut request = tonic::Request::new(futures::stream::empty::<FlightData>());
        request
            .metadata_mut()
            .insert("x-skade-session", "empty-doput".parse().unwrap());
        let refused = match raw.do_put(request).await {
            Ok(response) => response.into_inner().message().await.map(|_| ()),
            Err(status) => Err(status),
        };
        let status = refused.expect_err("an empty DoPut must not succeed");
        assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
        for said in [
            "no descriptor and no schema",
            "created nothing",
            "touched no open transaction",
            "REST catalog",
        ] {
            assert!(
                status.message().contains(said),
                "{said}: {}",
                status.message()
            );
        }

        client
            .end_transaction(txn, arrow_flight::sql::EndTransaction::Commit)
            .await
            .expect("commit after the empty DoPut");
        let mut flight = server.client().await;
        let batches = common::get(&mut flight, &["e", "full"]).await;
        assert_eq!(common::count(&batches), 5);
        let catalog = &server.running.service.catalog;
        let namespaces = catalog.list_namespaces(None).await.expect("namespaces");
        assert_eq!(
            namespaces,
            vec![NamespaceIdent::new("e".into())],
            "nothing else created"
        );
        assert!(
            !catalog
                .table_exists(&TableIdent::from_strs(["e", "empty"]).unwrap())
                .await
                .unwrap()
        );
    })
    .await;
    server.stop().await;
}

//! The DDL half of the Iceberg REST catalog (issue #16 item 1): raw HTTP against a real
//! server on 127.0.0.1:0, checked against the spec's statuses and bodies and against the
//! catalog itself. pyiceberg drives the same routes in `tests/interop/test_rest_ddl.py`.

use crate::common;

use common::{TestServer, count, get, http_send, open_stream, put, synthetic_batch, within};
use futures::StreamExt;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use serde_json::{Value, json};

/// Sends `method path` with `body` and returns the status and the JSON body (`null`
/// when empty).
async fn call(server: &TestServer, method: &str, path: &str, body: Value) -> (u16, Value) {
    let text = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let (status, answer) = http_send(server.running.metrics_addr, method, path, &[], &text).await;
    let parsed = if answer.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{method} {path}: {e}: {answer}"))
    };
    (status, parsed)
}

/// Asserts `answer` is the spec's `IcebergErrorResponse` with `code` and `kind`.
fn assert_error(answer: &(u16, Value), code: u16, kind: &str) {
    assert_eq!(answer.0, code, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], json!(code), "{}", answer.1);
    assert_eq!(answer.1["error"]["type"], json!(kind), "{}", answer.1);
    assert!(
        answer.1["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{}",
        answer.1
    );
}

/// A `CreateTableRequest` of the synthetic schema, partitioned by `day(ts)` and
/// `bucket(8, id)`.
fn events_request(name: &str) -> Value {
    json!({
        "name": name,
        "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": false, "type": "long"},
            {"id": 2, "name": "ts", "required": false, "type": "timestamptz"},
            {"id": 3, "name": "score", "required": false, "type": "double"},
            {"id": 4, "name": "name", "required": false, "type": "string"}
        ]},
        "partition-spec": {"spec-id": 0, "fields": [
            {"source-id": 2, "field-id": 1000, "name": "ts_day", "transform": "day"},
            {"source-id": 1, "field-id": 1001, "name": "id_bucket", "transform": "bucket[8]"}
        ]},
        "write-order": {"order-id": 1, "fields": [
            {"source-id": 1, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}
        ]},
        "properties": {"owner": "ops"}
    })
}

fn ident(ns: &str, name: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new(ns.to_string()), name.to_string())
}

/// Creates, evolves, renames and drops through REST; each step is what the catalog then
/// holds. Before this change every write here answered 405 (the catalog was read-only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_and_tables_are_created_evolved_renamed_and_dropped() {
    let server = TestServer::start().await;
    let catalog = server.running.service.catalog.clone();

    let created = call(
        &server,
        "POST",
        "/v1/namespaces",
        json!({"namespace": ["db"], "properties": {"a": "1"}}),
    )
    .await;
    assert_eq!(
        created,
        (200, json!({"namespace": ["db"], "properties": {"a": "1"}}))
    );
    assert_error(
        &call(
            &server,
            "POST",
            "/v1/namespaces",
            json!({"namespace": ["db"]}),
        )
        .await,
        409,
        "AlreadyExistsException",
    );
    let props = call(
        &server,
        "POST",
        "/v1/namespaces/db/properties",
        json!({"removals": ["a", "gone"], "updates": {"b": "2"}}),
    )
    .await;
    assert_eq!(
        props,
        (
            200,
            json!({"updated": ["b"], "removed": ["a"], "missing": ["gone"]})
        )
    );
    assert_error(
        &call(
            &server,
            "POST",
            "/v1/namespaces/db/properties",
            json!({"removals": ["b"], "updates": {"b": "3"}}),
        )
        .await,
        422,
        "UnprocessableEntityException",
    );

    let (status, table) = call(
        &server,
        "POST",
        "/v1/namespaces/db/tables",
        events_request("events"),
    )
    .await;
    assert_eq!(status, 200, "{table}");
    let spec = &table["metadata"]["partition-specs"][0]["fields"];
    assert_eq!(spec[0]["transform"], json!("day"), "{table}");
    assert_eq!(spec[1]["transform"], json!("bucket[8]"), "{table}");
    assert_eq!(table["metadata"]["properties"]["owner"], json!("ops"));
    assert_eq!(
        table["metadata"]["default-sort-order-id"],
        json!(1),
        "{table}"
    );
    let loaded = catalog.load_table(&ident("db", "events")).await.unwrap();
    assert_eq!(loaded.metadata().default_partition_spec().fields().len(), 2);
    assert_error(
        &call(
            &server,
            "POST",
            "/v1/namespaces/db/tables",
            events_request("events"),
        )
        .await,
        409,
        "AlreadyExistsException",
    );

    // A metadata commit goes through the data commit path: one more catalog commit.
    let commits_before = catalog.commit_count();
    let uuid = loaded.metadata().uuid().to_string();
    let (status, committed) = call(
        &server,
        "POST",
        "/v1/namespaces/db/tables/events",
        json!({
            "identifier": {"namespace": ["db"], "name": "events"},
            "requirements": [
                {"type": "assert-table-uuid", "uuid": uuid},
                {"type": "assert-current-schema-id", "current-schema-id": 0}
            ],
            "updates": [
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
                    {"id": 1, "name": "id", "required": false, "type": "long"},
                    {"id": 2, "name": "ts", "required": false, "type": "timestamptz"},
                    {"id": 3, "name": "score", "required": false, "type": "double"},
                    {"id": 4, "name": "name", "required": false, "type": "string"},
                    {"id": 5, "name": "note", "required": false, "type": "string"}
                ]}},
                {"action": "set-current-schema", "schema-id": -1},
                {"action": "set-properties", "updates": {"k": "v"}}
            ]
        }),
    )
    .await;
    assert_eq!(status, 200, "{committed}");
    assert_eq!(committed["metadata"]["current-schema-id"], json!(1));
    assert_eq!(catalog.commit_count(), commits_before + 1);
    let loaded = catalog.load_table(&ident("db", "events")).await.unwrap();
    assert!(
        loaded
            .metadata()
            .current_schema()
            .field_by_name("note")
            .is_some()
    );
    assert_eq!(
        committed["metadata-location"].as_str(),
        loaded.metadata_location()
    );

    // A requirement that no longer holds: 409, nothing committed.
    let stale = json!({
        "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
        "updates": [{"action": "set-properties", "updates": {"stale": "yes"}}]
    });
    assert_error(
        &call(&server, "POST", "/v1/namespaces/db/tables/events", stale).await,
        409,
        "CommitFailedException",
    );
    // A snapshot from outside: refused naming the update, nothing committed.
    let outside = json!({
        "requirements": [],
        "updates": [{"action": "add-snapshot", "snapshot": {
            "snapshot-id": 7, "timestamp-ms": 1, "manifest-list": "/tmp/x.avro",
            "summary": {"operation": "append"}, "sequence-number": 1, "schema-id": 1
        }}]
    });
    let refused = call(&server, "POST", "/v1/namespaces/db/tables/events", outside).await;
    assert_error(&refused, 400, "BadRequestException");
    assert!(
        refused.1.to_string().contains("add-snapshot"),
        "{}",
        refused.1
    );
    let after = catalog.load_table(&ident("db", "events")).await.unwrap();
    assert_eq!(after.metadata_location(), loaded.metadata_location());

    // Rename: the same metadata under the new name; the old name is gone.
    assert_eq!(
        call(
            &server,
            "POST",
            "/v1/namespaces",
            json!({"namespace": ["archive"]})
        )
        .await
        .0,
        200
    );
    let rename = json!({
        "source": {"namespace": ["db"], "name": "events"},
        "destination": {"namespace": ["archive"], "name": "events_2026"}
    });
    assert_eq!(
        call(&server, "POST", "/v1/tables/rename", rename.clone()).await,
        (204, Value::Null)
    );
    assert_error(
        &call(&server, "POST", "/v1/tables/rename", rename).await,
        404,
        "NoSuchTableException",
    );
    let renamed = catalog
        .load_table(&ident("archive", "events_2026"))
        .await
        .unwrap();
    assert_eq!(renamed.metadata_location(), loaded.metadata_location());
    assert!(!catalog.table_exists(&ident("db", "events")).await.unwrap());

    // Drops: a namespace that holds a table is refused, then both go.
    assert_error(
        &call(&server, "DELETE", "/v1/namespaces/archive", Value::Null).await,
        409,
        "NamespaceNotEmptyException",
    );
    assert_eq!(
        call(
            &server,
            "DELETE",
            "/v1/namespaces/archive/tables/events_2026",
            Value::Null
        )
        .await,
        (204, Value::Null)
    );
    assert_eq!(
        call(&server, "DELETE", "/v1/namespaces/archive", Value::Null).await,
        (204, Value::Null)
    );
    assert_error(
        &call(&server, "DELETE", "/v1/namespaces/archive", Value::Null).await,
        404,
        "NoSuchNamespaceException",
    );
    server.stop().await;
}

/// Requests the spec declares invalid answer its 400 with an `ErrorModel` and create
/// nothing. RED once: `pageSize=0`, `pageSize=-5` and `snapshots=bogus` answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_400_and_create_nothing() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    within(
        60,
        put(&mut client, &["ns", "t"], vec![synthetic_batch(0, 10)]),
    )
    .await
    .unwrap();
    for (method, path, body) in [
        ("GET", "/v1/namespaces?pageSize=0", Value::Null),
        ("GET", "/v1/namespaces?pageSize=-5", Value::Null),
        ("GET", "/v1/namespaces/ns/tables?pageSize=abc", Value::Null),
        (
            "GET",
            "/v1/namespaces/ns/tables?pageToken=%21%21",
            Value::Null,
        ),
        (
            "GET",
            "/v1/namespaces/ns/tables/t?snapshots=bogus",
            Value::Null,
        ),
        (
            "DELETE",
            "/v1/namespaces/ns/tables/t?purgeRequested=maybe",
            Value::Null,
        ),
        ("POST", "/v1/namespaces", json!({"properties": {}})),
        ("POST", "/v1/namespaces", json!({"namespace": []})),
        ("POST", "/v1/namespaces", json!({"namespace": ["a", ""]})),
        ("POST", "/v1/namespaces", json!({"namespace": [".."]})),
        ("POST", "/v1/namespaces", json!({"namespace": ["a/b"]})),
        (
            "POST",
            "/v1/namespaces/ns/tables",
            json!({"name": "..", "schema": {"type": "struct", "fields": []}}),
        ),
        (
            "POST",
            "/v1/tables/rename",
            json!({"source": {"namespace": ["ns"], "name": "t"},
            "destination": {"namespace": ["ns"], "name": "../../x"}}),
        ),
        ("POST", "/v1/namespaces/ns/tables", json!({"name": "x"})),
        (
            "POST",
            "/v1/namespaces/ns/tables",
            json!({"name": "x", "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "a", "required": false, "type": "nonsense"}]}}),
        ),
        (
            "POST",
            "/v1/namespaces/ns/tables",
            json!({"name": "x", "location": "/etc", "schema": {"type": "struct", "fields": []}}),
        ),
        (
            "POST",
            "/v1/namespaces/ns/tables",
            json!({"name": "x", "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "a", "required": false, "type": "long"}]},
            "partition-spec": {"fields": [{"source-id": 9, "name": "p", "transform": "identity"}]}}),
        ),
        (
            "POST",
            "/v1/namespaces/ns/tables/t",
            json!({"requirements": [], "updates": [{"action": "frobnicate"}]}),
        ),
        ("POST", "/v1/namespaces/ns/tables/t", json!({"updates": []})),
        (
            "POST",
            "/v1/namespaces/ns/tables/t",
            json!({"identifier": {"namespace": ["ns"], "name": "other"}, "requirements": [], "updates": []}),
        ),
        (
            "POST",
            "/v1/tables/rename",
            json!({"source": {"namespace": ["ns"], "name": "t"}}),
        ),
    ] {
        let answer = call(&server, method, path, body.clone()).await;
        assert_error(&answer, 400, "BadRequestException");
        let _ = (method, path, body);
    }
    let catalog = server.running.service.catalog.clone();
    assert_eq!(catalog.all_tables().await.unwrap(), vec![ident("ns", "t")]);
    assert_eq!(catalog.list_namespaces(None).await.unwrap().len(), 1);
    assert_error(
        &call(
            &server,
            "POST",
            "/v1/namespaces/ns/tables",
            json!({"name": "x", "stage-create": true,
            "schema": {"type": "struct", "fields": []}}),
        )
        .await,
        400,
        "BadRequestException",
    );
    assert!(!catalog.table_exists(&ident("ns", "x")).await.unwrap());
    server.stop().await;
}

/// `pageSize`/`pageToken` walk every name once; without `pageToken` one response holds
/// everything with `next-page-token: null` (the spec's `PageToken`). Before this change
/// the first page held all five tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_endpoints_paginate() {
    let server = TestServer::start().await;
    assert_eq!(
        call(
            &server,
            "POST",
            "/v1/namespaces",
            json!({"namespace": ["p"]})
        )
        .await
        .0,
        200
    );
    for name in ["e", "b", "d", "a", "c"] {
        let schema = json!({"type": "struct", "fields": [{"id": 1, "name": "x", "required": false, "type": "int"}]});
        let (status, body) = call(
            &server,
            "POST",
            "/v1/namespaces/p/tables",
            json!({"name": name, "schema": schema}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            call(
                &server,
                "POST",
                "/v1/namespaces",
                json!({"namespace": ["p", name]})
            )
            .await
            .0,
            200
        );
    }
    let (_, all) = call(
        &server,
        "GET",
        "/v1/namespaces/p/tables?pageSize=2",
        Value::Null,
    )
    .await;
    assert_eq!(all["identifiers"].as_array().unwrap().len(), 5, "{all}");
    assert_eq!(all["next-page-token"], Value::Null);

    for (list, field, key) in [
        ("/v1/namespaces/p/tables?pageSize=2", "identifiers", "name"),
        ("/v1/namespaces?parent=p&pageSize=2", "namespaces", ""),
    ] {
        let mut seen = Vec::new();
        let mut token = String::new();
        for _ in 0..5 {
            let (status, page) = call(
                &server,
                "GET",
                &format!("{list}&pageToken={token}"),
                Value::Null,
            )
            .await;
            assert_eq!(status, 200, "{page}");
            let items = page[field].as_array().unwrap();
            assert!(items.len() <= 2, "{page}");
            seen.extend(items.iter().map(|item| {
                if key.is_empty() {
                    item[1].as_str().unwrap().to_string()
                } else {
                    item[key].as_str().unwrap().to_string()
                }
            }));
            match page["next-page-token"].as_str() {
                Some(next) => token = next.to_string(),
                None => break,
            }
        }
        assert_eq!(seen, ["a", "b", "c", "d", "e"], "{list}");
    }
    server.stop().await;
}

/// Makes `live.t` with one put, then opens a second put into it that holds one batch
/// and does not end: returns its batch sender and its results. The stream has opened
/// the table when this returns (its batch is held against the memory budget, which is
/// taken after the table is opened).
async fn held_open_put(
    server: &TestServer,
    client: &mut arrow_flight::FlightClient,
) -> (
    tokio::sync::mpsc::Sender<arrow_array::RecordBatch>,
    futures::stream::BoxStream<
        'static,
        Result<arrow_flight::PutResult, arrow_flight::error::FlightError>,
    >,
) {
    within(
        60,
        put(client, &["live", "t"], vec![synthetic_batch(0, 10)]),
    )
    .await
    .unwrap();
    let (batches, results) = open_stream(client, &["live", "t"]).await;
    batches.send(synthetic_batch(10, 10)).await.unwrap();
    let budget = &server.running.service.budget;
    within(60, async {
        while budget.available_bytes() == budget.total_bytes() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    (batches, results)
}

/// The first error of a put's `results`.
async fn first_error<S>(results: &mut S) -> arrow_flight::error::FlightError
where
    S: futures::Stream<Item = Result<arrow_flight::PutResult, arrow_flight::error::FlightError>>
        + Unpin,
{
    within(60, async {
        while let Some(item) = results.next().await {
            if let Err(e) = item {
                return Some(e);
            }
        }
        None
    })
    .await
    .expect("the put fails")
}

/// A put streaming into a table that is dropped meanwhile fails at its commit naming the
/// table, and does not bring the table back (the write path's commit reloads the table
/// under its turn; DDL relies on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_into_a_dropped_table_fails_and_does_not_resurrect_it() {
    let server = TestServer::start_with(|c| {
        c.ingest.commit_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let catalog = server.running.service.catalog.clone();
    let mut client = server.client().await;
    let (batches, mut results) = held_open_put(&server, &mut client).await;
    assert_eq!(
        call(
            &server,
            "DELETE",
            "/v1/namespaces/live/tables/t",
            Value::Null
        )
        .await,
        (204, Value::Null)
    );
    drop(batches);
    let outcome = first_error(&mut results).await;
    let (code, message) = common::status_of(outcome);
    assert_eq!(code, tonic::Code::NotFound, "{message}");
    assert!(message.contains("live.t"), "{message}");
    assert!(!catalog.table_exists(&ident("live", "t")).await.unwrap());
    server.stop().await;
}

/// Purge removes the table's files and directory and nothing of a neighbour's. RED once:
/// with iceberg's `drop_table_data` as the purge, the table's directory remained (its
/// unreferenced files and directories stay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_removes_the_tables_files_only() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for name in ["gone", "kept"] {
        within(
            60,
            put(&mut client, &["pg", name], vec![synthetic_batch(0, 10)]),
        )
        .await
        .unwrap();
    }
    let gone_dir = server.warehouse().join("pg").join("gone");
    let kept_dir = server.warehouse().join("pg").join("kept");
    assert!(!common::parquet_files(&gone_dir).is_empty());
    let kept_before = common::parquet_files(&kept_dir);
    assert_eq!(
        call(
            &server,
            "DELETE",
            "/v1/namespaces/pg/tables/gone?purgeRequested=true",
            Value::Null
        )
        .await,
        (204, Value::Null)
    );
    assert!(!gone_dir.exists(), "purged table's directory remains");
    assert_eq!(common::parquet_files(&kept_dir), kept_before);
    assert_eq!(count(&get(&mut client, &["pg", "kept"]).await), 10);
    server.stop().await;
}

/// A schema evolved over REST while a put streams into the table: the put's next commit
/// builds on the evolved metadata (it does not roll the schema back), and every row is
/// read back with the new column null. Catches a put committing from metadata cached at
/// its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_evolved_during_a_put_is_kept_by_the_puts_commit() {
    let server = TestServer::start_with(|c| {
        c.ingest.commit_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let catalog = server.running.service.catalog.clone();
    let mut client = server.client().await;
    within(
        60,
        put(&mut client, &["evo", "t"], vec![synthetic_batch(0, 10)]),
    )
    .await
    .unwrap();
    let (batches, mut results) = open_stream(&mut client, &["evo", "t"]).await;
    batches.send(synthetic_batch(10, 10)).await.unwrap();
    let svc = server.running.service.clone();
    let budget = &svc.budget;
    within(60, async {
        while budget.available_bytes() == budget.total_bytes() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let table = catalog.load_table(&ident("evo", "t")).await.unwrap();
    let mut fields =
        serde_json::to_value(table.metadata().current_schema().as_struct()).unwrap()["fields"]
            .clone();
    let next_id = table.metadata().last_column_id() + 1;
    fields
        .as_array_mut()
        .unwrap()
        .push(json!({"id": next_id, "name": "note", "required": false, "type": "string"}));
    let (status, body) = call(
        &server,
        "POST",
        "/v1/namespaces/evo/tables/t",
        json!({
            "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
            "updates": [
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": fields}},
                {"action": "set-current-schema", "schema-id": -1}
            ]
        }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    batches.send(synthetic_batch(20, 10)).await.unwrap();
    drop(batches);
    within(60, async {
        while let Some(item) = results.next().await {
            item.expect("the put commits");
        }
    })
    .await;
    let after = catalog.load_table(&ident("evo", "t")).await.unwrap();
    assert_eq!(after.metadata().current_schema_id(), 1);
    assert!(
        after
            .metadata()
            .current_schema()
            .field_by_name("note")
            .is_some()
    );
    assert_eq!(count(&get(&mut client, &["evo", "t"]).await), 30);
    server.stop().await;
}

/// Purge deletes only under the purged table's location: a data file it references in
/// another table's directory stays, and that table still reads. RED once: with
/// `purge_table` calling iceberg's `drop_table_data`, the other table's file was deleted
/// and its read failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_never_deletes_outside_the_tables_location() {
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    let server = TestServer::start().await;
    let catalog = server.running.service.catalog.clone();
    let mut client = server.client().await;
    for name in ["owner", "borrower"] {
        within(
            60,
            put(&mut client, &["out", name], vec![synthetic_batch(0, 10)]),
        )
        .await
        .unwrap();
    }
    // `borrower` also lists `owner`'s data file (an Iceberg table may reference files
    // anywhere, e.g. after an add-files migration).
    let owner = catalog.load_table(&ident("out", "owner")).await.unwrap();
    let snapshot = owner.metadata().current_snapshot().unwrap().clone();
    let list = owner.manifest_list_reader(&snapshot).load().await.unwrap();
    let manifest = list.entries()[0]
        .load_manifest(owner.file_io())
        .await
        .unwrap();
    let borrowed = manifest.entries()[0].data_file().clone();
    let borrowed_path = std::path::PathBuf::from(borrowed.file_path());
    let borrower = catalog.load_table(&ident("out", "borrower")).await.unwrap();
    let tx = Transaction::new(&borrower);
    let tx = tx
        .fast_append()
        .add_data_files(vec![borrowed])
        .apply(tx)
        .unwrap();
    tx.commit(catalog.as_ref()).await.unwrap();

    assert_eq!(
        call(
            &server,
            "DELETE",
            "/v1/namespaces/out/tables/borrower?purgeRequested=true",
            Value::Null
        )
        .await,
        (204, Value::Null)
    );
    assert!(
        borrowed_path.exists(),
        "{} was deleted",
        borrowed_path.display()
    );
    assert!(!server.warehouse().join("out").join("borrower").exists());
    assert_eq!(count(&get(&mut client, &["out", "owner"]).await), 10);
    server.stop().await;
}

/// A put streaming into a table that is dropped and created again under the same name
/// (another table, another uuid) fails at its commit naming the table, and lands
/// nothing in the new table. Catches a commit that reloads the table by name and so
/// appends the old write's rows to a table that never saw them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_into_a_dropped_and_recreated_table_lands_nothing() {
    let server = TestServer::start_with(|c| {
        c.ingest.commit_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut client = server.client().await;
    let (batches, mut results) = held_open_put(&server, &mut client).await;
    let dropped = call(
        &server,
        "DELETE",
        "/v1/namespaces/live/tables/t",
        Value::Null,
    )
    .await;
    assert_eq!(dropped, (204, Value::Null));
    let mut other = server.client().await;
    within(
        60,
        put(&mut other, &["live", "t"], vec![synthetic_batch(100, 5)]),
    )
    .await
    .unwrap();
    drop(batches);
    let outcome = first_error(&mut results).await;
    let (code, message) = common::status_of(outcome);
    assert_eq!(code, tonic::Code::NotFound, "{message}");
    assert!(message.contains("live.t"), "{message}");
    let rows = common::get(&mut other, &["live", "t"]).await;
    assert_eq!(common::count(&rows), 5, "only the new table's own rows");
    server.stop().await;
}

/// The REST spec marks `order-id`, `spec-id` and `schema-id` `readOnly`: a request may
/// leave them out. A create without them gets the ids Iceberg's reference catalog gives
/// (sort order 1, spec 0, schema 0), and a commit adding a schema, a spec and a sort
/// order without ids gets the next ones (1, 1, 2), `-1` naming the last added. Catches:
/// `400 missing field order-id` for a body the spec allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_ids_may_be_left_out_of_requests() {
    let server = TestServer::start().await;
    let ns = call(
        &server,
        "POST",
        "/v1/namespaces",
        json!({"namespace": ["ro"]}),
    )
    .await;
    assert_eq!(ns.0, 200, "{}", ns.1);
    let sort = |direction: &str| {
        json!({"fields": [
            {"source-id": 1, "transform": "identity", "direction": direction, "null-order": "nulls-first"}
        ]})
    };
    let created = call(
        &server,
        "POST",
        "/v1/namespaces/ro/tables",
        json!({
            "name": "t",
            "schema": {"type": "struct", "fields": [
                {"id": 1, "name": "id", "required": false, "type": "long"}
            ]},
            "partition-spec": {"fields": [
                {"source-id": 1, "field-id": 1000, "name": "id_bucket", "transform": "bucket[4]"}
            ]},
            "write-order": sort("asc")
        }),
    )
    .await;
    assert_eq!(created.0, 200, "{}", created.1);
    let metadata = &created.1["metadata"];
    assert_eq!(metadata["default-sort-order-id"], json!(1), "{metadata}");
    assert_eq!(
        metadata["sort-orders"][0]["order-id"],
        json!(1),
        "{metadata}"
    );
    assert_eq!(metadata["default-spec-id"], json!(0), "{metadata}");
    assert_eq!(metadata["current-schema-id"], json!(0), "{metadata}");

    let committed = call(
        &server,
        "POST",
        "/v1/namespaces/ro/tables/t",
        json!({"requirements": [], "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "fields": [
                {"id": 1, "name": "id", "required": false, "type": "long"},
                {"id": 2, "name": "note", "required": false, "type": "string"}
            ]}},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": {"fields": [
                {"source-id": 1, "field-id": 1001, "name": "id_trunc", "transform": "truncate[10]"}
            ]}},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-sort-order", "sort-order": sort("desc")},
            {"action": "set-default-sort-order", "sort-order-id": -1}
        ]}),
    )
    .await;
    assert_eq!(committed.0, 200, "{}", committed.1);
    let metadata = &committed.1["metadata"];
    assert_eq!(metadata["current-schema-id"], json!(1), "{metadata}");
    assert_eq!(metadata["default-spec-id"], json!(1), "{metadata}");
    assert_eq!(metadata["default-sort-order-id"], json!(2), "{metadata}");
    server.stop().await;
}

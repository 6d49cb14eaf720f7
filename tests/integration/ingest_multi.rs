//! `ingest_multi` (`docs/design/ingest_multi.md` §f5): N tables, ONE redb write transaction,
//! all or nothing, byte-identical data files. Real redb files and a real warehouse on
//! disk; the commit count is the catalog's own (`RedbCatalog::commit_count`, the
//! per-instance twin of the process-global `redb_commit_count`, so tests running in
//! parallel do not disturb each other).

use crate::common;

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use skade::catalog::RedbCatalog;
use skade::write::{self, IngestStats, StagedTable, WriteError, WriteProps};

use common::synthetic_batch;

const TABLES: [&str; 3] = ["scan_symbols", "scan_refs", "scan_files"];

struct Fixture {
    _dir: tempfile::TempDir,
    warehouse: std::path::PathBuf,
    catalog: Arc<RedbCatalog>,
}

fn open() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let warehouse = dir.path().join("warehouse");
    let catalog = RedbCatalog::open(&dir.path().join("catalog.redb"), &warehouse).unwrap();
    Fixture {
        _dir: dir,
        warehouse,
        catalog: Arc::new(catalog),
    }
}

fn ident(name: &str) -> TableIdent {
    TableIdent::new(NamespaceIdent::new("scan".into()), name.into())
}

async fn create(catalog: &RedbCatalog, name: &str) -> Table {
    write::ensure_table(catalog, &ident(name), &common::synthetic_schema())
        .await
        .unwrap()
}

/// Table `i`'s input: `2 + i` groups (data files) of 500 rows, conformed to its schema.
fn groups_for(table: &Table, i: usize) -> Vec<Vec<RecordBatch>> {
    let arrow = write::table_arrow_schema(table).unwrap();
    (0..2 + i)
        .map(|g| {
            let first = (i * 10_000 + g * 500) as i64;
            vec![write::conform_batch("t", &synthetic_batch(first, 500), &arrow).unwrap()]
        })
        .collect()
}

/// Every row of the current snapshot as `id|ts|score|name|flag`, sorted.
async fn rows(catalog: &RedbCatalog, name: &str) -> Vec<String> {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let batches: Vec<_> = common::scan(&table, None).await;
    let mut rows = common::rows_of(&batches);
    rows.sort();
    rows
}

/// The bytes of every data file of the current snapshot, in file-name (= write) order.
async fn data_file_bytes(catalog: &RedbCatalog, name: &str) -> Vec<Vec<u8>> {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let mut tasks: Vec<_> = table
        .scan()
        .build()
        .unwrap()
        .plan_files()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    tasks.sort_by(|a, b| a.data_file_path.cmp(&b.data_file_path));
    tasks
        .iter()
        .map(|t| std::fs::read(&t.data_file_path).unwrap())
        .collect()
}

async fn snapshots(catalog: &RedbCatalog, name: &str) -> usize {
    catalog
        .load_table(&ident(name))
        .await
        .unwrap()
        .metadata()
        .snapshots()
        .count()
}

/// One-fsync + byte-identical (§f5): three tables through `ingest_multi` are ONE redb
/// commit where three `ingest_parallel` calls are three; each table gains exactly one
/// snapshot; rows and data file bytes equal the separate-ingest baseline.
///
/// RED once: with `ingest_multi` temporarily committing each table on its own
/// (`commit_staged` called inside the per-table loop) the commit delta was 3, not 1
/// ("3 tables, one commit — left: 3, right: 1").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tables_are_one_commit_with_the_baseline_rows_and_bytes() {
    let props = WriteProps::default();

    // Baseline: three separate ingest_parallel calls.
    let base = open();
    let before = base.catalog.commit_count();
    for (i, name) in TABLES.iter().enumerate() {
        let table = create(&base.catalog, name).await;
        let groups = groups_for(&table, i);
        write::ingest_parallel(base.catalog.as_ref(), &table, groups, &props)
            .await
            .unwrap();
    }
    assert_eq!(
        base.catalog.commit_count() - before,
        3,
        "one commit per table"
    );

    // The same input through ingest_multi.
    let multi = open();
    let mut input = Vec::new();
    for (i, name) in TABLES.iter().enumerate() {
        let table = create(&multi.catalog, name).await;
        let groups = groups_for(&table, i);
        input.push((table, groups));
    }
    let global_before = skade::redb_commit_count();
    let before = multi.catalog.commit_count();
    let (tables, stats) = write::ingest_multi(&multi.catalog, input, &props)
        .await
        .unwrap();
    assert_eq!(
        multi.catalog.commit_count() - before,
        1,
        "3 tables, one commit"
    );
    assert!(skade::redb_commit_count() > global_before);
    assert_eq!(stats.commits, 1);
    assert_eq!(stats.rows, (2 + 3 + 4) * 500);
    assert_eq!(stats.files, 2 + 3 + 4);
    assert_eq!(tables.len(), 3);

    for (i, name) in TABLES.iter().enumerate() {
        assert_eq!(tables[i].identifier(), &ident(name), "input order kept");
        assert_eq!(
            snapshots(&multi.catalog, name).await,
            1,
            "{name}: one snapshot"
        );
        assert_eq!(
            tables[i].metadata().current_snapshot_id(),
            multi
                .catalog
                .load_table(&ident(name))
                .await
                .unwrap()
                .metadata()
                .current_snapshot_id(),
            "{name}: the returned handle is the committed state"
        );
        let expected = rows(&base.catalog, name).await;
        assert_eq!(expected.len(), (2 + i) * 500);
        assert_eq!(rows(&multi.catalog, name).await, expected, "{name}: rows");
        let expected = data_file_bytes(&base.catalog, name).await;
        assert_eq!(expected.len(), 2 + i);
        assert!(
            data_file_bytes(&multi.catalog, name).await == expected,
            "{name}: data file bytes differ from ingest_parallel's"
        );
    }
}

/// All-or-nothing (§f5): a later table whose batch has the wrong column count fails the
/// whole call; the earlier, already encoded and written tables have 0 snapshots and 0
/// rows, and no redb commit happened.
///
/// RED once: with the same per-table commit loop as above, the call still failed but the
/// two earlier tables had been committed ("no redb commit — left: 2, right: 0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_later_table_commits_nothing() {
    let f = open();
    let mut input = Vec::new();
    for (i, name) in TABLES.iter().enumerate() {
        let table = create(&f.catalog, name).await;
        let groups = if i == 2 {
            vec![vec![wrong_column_count(7)]]
        } else {
            groups_for(&table, i)
        };
        input.push((table, groups));
    }
    let before = f.catalog.commit_count();
    let err = write::ingest_multi(&f.catalog, input, &WriteProps::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WriteError::Schema { table, .. } if table == "scan.scan_files"),
        "{err}"
    );
    assert_eq!(f.catalog.commit_count(), before, "no redb commit");
    for name in TABLES {
        assert_eq!(snapshots(&f.catalog, name).await, 0, "{name} advanced");
        assert!(rows(&f.catalog, name).await.is_empty(), "{name} has rows");
    }
}

/// A batch with a sixth column the table does not have.
fn wrong_column_count(rows: usize) -> RecordBatch {
    let base = synthetic_batch(0, rows);
    let mut fields: Vec<Field> = base
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("extra", DataType::Utf8, true));
    let mut columns: Vec<ArrayRef> = base.columns().to_vec();
    columns.push(Arc::new(StringArray::from(vec!["x"; rows])));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// Distinct idents (§f1): a table named twice is rejected before any encode — no data
/// file is written and nothing is committed.
///
/// RED once: without the up-front check in `ingest_multi`/`commit_staged`, the catalog's
/// own check in `atomic_release` still refused the batch, but only after every entry was
/// encoded and written: the error was `Catalog { .. DataInvalid => table scan.a appears
/// more than once in one atomic release }`, not `RepeatedTable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_table_is_rejected_before_any_encode() {
    let f = open();
    let a = create(&f.catalog, "a").await;
    let b = create(&f.catalog, "b").await;
    let input = vec![
        (a.clone(), groups_for(&a, 0)),
        (b.clone(), groups_for(&b, 0)),
        (a.clone(), groups_for(&a, 1)),
    ];
    let err = write::ingest_multi(&f.catalog, input, &WriteProps::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WriteError::RepeatedTable { table } if table == "scan.a"),
        "{err}"
    );
    assert!(
        common::parquet_files(&f.warehouse).is_empty(),
        "a data file was written"
    );
    assert_eq!(f.catalog.commit_count(), 0);
    assert_eq!(snapshots(&f.catalog, "a").await, 0);
}

/// Empty tables are skipped; an all-empty flush does no redb write at all (`commits` 0,
/// counter +0), and a flush with one non-empty table is one commit that leaves the empty
/// table without a snapshot.
///
/// RED once: without the early return for an all-empty flush, `commits` came back 1
/// for a flush that committed nothing ("left: 1, right: 0").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_tables_are_skipped_and_an_empty_flush_writes_nothing() {
    let f = open();
    let a = create(&f.catalog, "a").await;
    let b = create(&f.catalog, "b").await;
    let arrow = write::table_arrow_schema(&a).unwrap();
    let zero_rows = write::conform_batch("a", &synthetic_batch(0, 0), &arrow).unwrap();
    let input = vec![(a.clone(), vec![]), (b.clone(), vec![vec![zero_rows]])];
    let (tables, stats) = write::ingest_multi(&f.catalog, input, &WriteProps::default())
        .await
        .unwrap();
    assert_eq!(stats, IngestStats::default(), "nothing committed");
    assert_eq!(f.catalog.commit_count(), 0, "no redb write");
    assert_eq!(tables.len(), 2);

    let input = vec![(a.clone(), vec![]), (b.clone(), groups_for(&b, 0))];
    let (_, stats) = write::ingest_multi(&f.catalog, input, &WriteProps::default())
        .await
        .unwrap();
    assert_eq!(stats.commits, 1);
    assert_eq!(stats.rows, 1000);
    assert_eq!(f.catalog.commit_count(), 1);
    assert_eq!(snapshots(&f.catalog, "a").await, 0);
    assert_eq!(snapshots(&f.catalog, "b").await, 1);
}

/// A stale base (another commit landed after the handles were loaded) is re-staged on
/// the new state: appends commute, so both commits' rows are there, none doubled.
///
/// RED once: with the re-stage disabled (no retry) the flush failed with
/// `CatalogCommitConflicts` ("Requirement failed: Branch or tag `main` already exists").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_base_is_restaged_and_no_row_is_lost() {
    let f = open();
    let a = create(&f.catalog, "a").await;
    let b = create(&f.catalog, "b").await;
    // Someone else appends to `a` after our handles were loaded.
    let other = groups_for(&a, 3);
    write::ingest_parallel(f.catalog.as_ref(), &a, other, &WriteProps::default())
        .await
        .unwrap();
    let input = vec![
        (a.clone(), groups_for(&a, 0)),
        (b.clone(), groups_for(&b, 1)),
    ];
    let (_, stats) = write::ingest_multi(&f.catalog, input, &WriteProps::default())
        .await
        .unwrap();
    assert_eq!(stats.commits, 1);
    assert_eq!(f.catalog.commit_count(), 2);
    assert_eq!(snapshots(&f.catalog, "a").await, 2);
    assert_eq!(rows(&f.catalog, "a").await.len(), 5 * 500 + 2 * 500);
    assert_eq!(rows(&f.catalog, "b").await.len(), 3 * 500);
}

/// Tables created by the flush itself ([`RedbCatalog::plan_table`] +
/// `StagedTable { create: true }`) appear in the same redb transaction as the data: a
/// failed flush leaves no empty table (nor namespace) behind.
///
/// RED once: with the release's "still absent" check on created tables disabled, the
/// flush that must fail returned `Ok` and overwrote the concurrently created `fresh.t2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_created_by_a_flush_appear_with_it_or_not_at_all() {
    let f = open();
    let fresh = |name: &str| TableIdent::new(NamespaceIdent::new("fresh".into()), name.into());
    let plan = |name: &str| {
        let schema = write::iceberg_schema_for(name, &common::synthetic_schema()).unwrap();
        let creation = iceberg::TableCreation::builder()
            .name(name.to_string())
            .schema(schema)
            .build();
        let (catalog, ident) = (f.catalog.clone(), fresh(name));
        async move { catalog.plan_table(&ident, creation).await.unwrap() }
    };
    let stage = |table: Table, groups| async move {
        let data_files = write::encode_and_write_files(
            &table,
            groups,
            &mut write::FileNames::new(),
            &WriteProps::default(),
        )
        .await
        .unwrap();
        StagedTable {
            schema_change: None,
            table,
            create: true,
            data_files,
            deletes: Vec::new(),
            replace: false,
        }
    };

    // A flush that fails: t2 exists by the time the pointers flip.
    let t1 = plan("t1").await;
    let t2 = plan("t2").await;
    let staged = vec![
        stage(t1.clone(), groups_for(&t1, 0)).await,
        stage(t2.clone(), groups_for(&t2, 0)).await,
    ];
    write::ensure_table(
        f.catalog.as_ref(),
        &fresh("t2"),
        &common::synthetic_schema(),
    )
    .await
    .unwrap();
    let err = write::ingest_multi_commit(&f.catalog, staged, None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("created concurrently"), "{err}");
    assert!(!f.catalog.table_exists(&fresh("t1")).await.unwrap());
    assert_eq!(f.catalog.commit_count(), 0);

    // A flush that succeeds creates t3 (and t4's namespace) with its one snapshot.
    let t3 = plan("t3").await;
    let nested = TableIdent::new(
        NamespaceIdent::from_vec(vec!["deep".into(), "er".into()]).unwrap(),
        "t4".into(),
    );
    let schema = write::iceberg_schema_for("t4", &common::synthetic_schema()).unwrap();
    let t4 = f
        .catalog
        .plan_table(
            &nested,
            iceberg::TableCreation::builder()
                .name("t4".into())
                .schema(schema)
                .build(),
        )
        .await
        .unwrap();
    let staged = vec![
        stage(t3.clone(), groups_for(&t3, 1)).await,
        stage(t4.clone(), vec![]).await,
    ];
    let (tables, stats) = write::ingest_multi_commit(&f.catalog, staged, None)
        .await
        .unwrap();
    assert_eq!(stats.commits, 1);
    assert_eq!(stats.rows, 1500);
    assert_eq!(f.catalog.commit_count(), 1);
    let loaded = f.catalog.load_table(&fresh("t3")).await.unwrap();
    assert_eq!(loaded.metadata().snapshots().count(), 1);
    assert_eq!(
        loaded.metadata_location(),
        tables[0].metadata_location(),
        "the returned handle is the committed state"
    );
    let t4 = f.catalog.load_table(&nested).await.unwrap();
    assert_eq!(t4.metadata().snapshots().count(), 0, "created empty");
    assert!(
        f.catalog
            .namespace_exists(&NamespaceIdent::new("deep".into()))
            .await
            .unwrap()
    );
}

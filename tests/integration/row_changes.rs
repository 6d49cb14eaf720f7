//! Row-level changes under concurrency: a `DELETE` (the row-delta producer,
//! `snapshot/row_delta.rs`) committed through the driver while another instance commits
//! to the same table, on a shared PostgreSQL catalog (two catalogs in one process, as
//! two instances).

use std::sync::Arc;

use futures::TryStreamExt;
use iceberg::Catalog;
use skade::catalog::store::postgres::turns::CommitTurn;
use skade::catalog::{CommitTarget, RedbCatalog, Stage, Staged};
use skade::snapshot::row_delta::DeleteRows;
use skade::sql::{Predicate, Statement, parse_statement};
use skade::write::{self, WriteProps};

use crate::common::postgres::PgCluster;
use crate::common::{conformed, synthetic_table};

/// The filter of `DELETE FROM <table> WHERE <filter>` bound to `table`'s schema.
fn filter(table: &iceberg::table::Table, filter: &str) -> Predicate {
    let sql = format!("DELETE FROM {} WHERE {filter}", table.identifier());
    let Ok(Statement::Delete(delete)) = parse_statement(&sql) else {
        panic!("{sql} is a DELETE");
    };
    delete
        .bind(
            table.metadata().current_schema(),
            &table.identifier().to_string(),
            None,
        )
        .expect("bind")
}

/// The ids `table`'s current snapshot holds, read by iceberg's own scan (which applies
/// position-delete files).
async fn ids(table: &iceberg::table::Table) -> Vec<i64> {
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .select(["id"])
        .build()
        .expect("scan")
        .to_arrow()
        .await
        .expect("stream")
        .try_collect()
        .await
        .expect("batches");
    let mut out: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .expect("id is a long")
                .values()
                .to_vec()
        })
        .collect();
    out.sort_unstable();
    out
}

/// A `DELETE` whose first attempt is overtaken: before it plans, the other instance
/// appends rows, so its release conflicts and the driver stages it again.
struct Overtaken {
    delete: DeleteRows,
    other: Arc<RedbCatalog>,
    ident: iceberg::TableIdent,
    appended: Option<i64>,
    attempts: u32,
}

#[async_trait::async_trait]
impl Stage for Overtaken {
    type Out = u64;
    type Error = iceberg::Error;

    async fn stage(
        &mut self,
        current: &[iceberg::table::Table],
    ) -> Result<Option<Staged<u64>>, iceberg::Error> {
        self.attempts += 1;
        if let Some(first) = self.appended.take() {
            let theirs = self.other.load_table(&self.ident).await?;
            let batch = conformed(&theirs, first, 10);
            write::append(&self.other, &theirs, vec![batch], &WriteProps::default())
                .await
                .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string()))?;
        }
        self.delete.stage(current).await
    }
}

// Catches a DELETE planned once and released after another writer's commit: the rows
// that writer appended and the filter matches would survive the DELETE (Iceberg's
// serializable isolation, the default `write.delete.isolation-level`, deletes them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_overtaken_by_an_append_plans_again_and_deletes_its_matching_rows() {
    let pg = PgCluster::start();
    let url = pg.create_database("row_changes");
    let warehouse = tempfile::tempdir().expect("warehouse");
    let open = || {
        RedbCatalog::open_postgres(
            &url,
            "skade",
            4,
            CommitTurn::Instance,
            skade::storage::Warehouse::Local(warehouse.path().to_path_buf()),
        )
    };
    let a = open().await.expect("instance A");
    let b = open().await.expect("instance B");
    let table = synthetic_table(&a, "rc", "t").await;
    let (table, _) = write::append(
        &a,
        &table,
        vec![conformed(&table, 0, 100)],
        &WriteProps::default(),
    )
    .await
    .expect("append");
    let mut overtaken = Overtaken {
        delete: DeleteRows::new(&a, vec![filter(&table, "id >= 50")]),
        other: b.clone(),
        ident: table.identifier().clone(),
        appended: Some(100),
        attempts: 0,
    };
    let outcome = a
        .commit(&[CommitTarget::data(&table)], &mut overtaken)
        .await
        .expect("the delete lands");
    let (after, deleted) = outcome.committed().expect("committed");
    assert_eq!(overtaken.attempts, 2, "staged again after the conflict");
    assert_eq!(
        deleted, 60,
        "50 of the first rows and the 10 appended meanwhile"
    );
    assert_eq!(ids(&after[0]).await, (0..50).collect::<Vec<i64>>());
    let seen_by_b = b.load_table(table.identifier()).await.expect("load");
    assert_eq!(ids(&seen_by_b).await, (0..50).collect::<Vec<i64>>());
}

// Catches rows a DELETE removed coming back through maintenance: compaction rewriting a
// data file a position-delete file applies to (its deleted rows would return under the
// new file's path), or expiry / merging / cleanup dropping the delete files. Expected
// rows: the ids put minus the ids deleted, read by iceberg's own scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_delete_removed_stay_deleted_through_maintenance() {
    use skade::config::MaintenanceConfig;
    use skade::maintenance::Maintainer;
    use skade::metrics::Metrics;
    use std::time::Duration;

    let c = crate::common::open_catalog();
    let mut table = synthetic_table(&c.catalog, "rc", "m").await;
    // Twelve small files: compaction's runs start at five.
    for i in 0..12 {
        (table, _) = write::append(
            &c.catalog,
            &table,
            vec![conformed(&table, i * 10, 10)],
            &WriteProps::default(),
        )
        .await
        .expect("append");
    }
    let mut delete = DeleteRows::new(&c.catalog, vec![filter(&table, "id IN (3, 55, 56, 117)")]);
    let outcome = c
        .catalog
        .commit(&[CommitTarget::data(&table)], &mut delete)
        .await
        .expect("delete");
    let (_, deleted) = outcome.committed().expect("committed");
    assert_eq!(deleted, 4);
    let expected: Vec<i64> = (0..120).filter(|i| ![3, 55, 56, 117].contains(i)).collect();
    let m = Maintainer::new(
        c.catalog.clone(),
        MaintenanceConfig {
            enabled: true,
            maintenance_interval: Duration::from_millis(50),
            max_snapshots: 2,
            cleanup_grace: Duration::ZERO,
            metadata_cleanup_grace: Duration::ZERO,
            cleanup_max_waiting: u64::MAX,
            compaction: true,
        },
        Metrics::new(),
    );
    let mut compacted = 0;
    for _ in 0..4 {
        let report = m.run_pass().await.expect("pass");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        compacted += report.files_compacted;
    }
    assert!(compacted > 0, "the files without deletes were compacted");
    let after = c
        .catalog
        .load_table(table.identifier())
        .await
        .expect("load");
    assert_eq!(ids(&after).await, expected);
}

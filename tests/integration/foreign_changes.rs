//! Maintenance on tables other writers changed and on locations that are not only a
//! table's own: compaction, manifest merging, expiry, cleanup, `skade gc` and purge
//! never bring back a row a delete file hides and never remove a file that was not
//! written for the table they sweep (`docs/maintenance.md`, "Tables with delete files"
//! and "What cleanup may delete").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use iceberg::table::Table;
use iceberg::{Catalog, TableCreation, TableIdent};
use skade::catalog::gc::{GcOptions, collect_garbage};
use skade::catalog::{CommitTarget, RedbCatalog};
use skade::config::MaintenanceConfig;
use skade::maintenance::{Maintainer, PassReport};
use skade::metrics::Metrics;
use skade::snapshot::fast_append::FastAppend;
use skade::write::{self, WriteProps};

use crate::common::foreign::{delete_by_equality, delete_by_position};
use crate::common::{self, CatalogDir, open_catalog};

fn ident(name: &str) -> TableIdent {
    TableIdent::from_strs(["ns", name]).unwrap()
}

/// Maintenance at its busiest: every job on, passes back to back, no grace.
fn busiest() -> MaintenanceConfig {
    MaintenanceConfig {
        enabled: true,
        maintenance_interval: Duration::from_millis(50),
        max_snapshots: 2,
        cleanup_grace: Duration::ZERO,
        metadata_cleanup_grace: Duration::ZERO,
        cleanup_max_waiting: u64::MAX,
        compaction: true,
    }
}

async fn passes(m: &Maintainer, n: usize) -> PassReport {
    let mut all = PassReport::default();
    for _ in 0..n {
        let report = m.run_pass().await.expect("pass");
        assert!(
            report.errors.is_empty(),
            "maintenance errors: {:?}",
            report.errors
        );
        all.files_compacted += report.files_compacted;
        all.snapshots_expired += report.snapshots_expired;
        all.manifests_replaced += report.manifests_replaced;
        all.removed.extend(report.removed);
    }
    all
}

/// One fast append (iceberg's, as another writer's) of `rows` rows from `first_id`.
async fn append(catalog: &RedbCatalog, name: &str, first_id: i64, rows: usize) {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let batch = common::conformed(&table, first_id, rows);
    let encoded = write::encode(&table, vec![vec![batch]]).await.unwrap();
    let files = write::write_files(
        &table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap();
    let target = CommitTarget::data(&table);
    let mut append = FastAppend::new(files, Default::default());
    catalog.commit_one(&target, &mut append).await.unwrap();
}

/// `ns.<name>` after `commits` appends of `rows` rows each (ids from 0).
async fn table_with(c: &CatalogDir, name: &str, commits: i64, rows: usize) {
    common::synthetic_table(&c.catalog, "ns", name).await;
    for i in 0..commits {
        append(&c.catalog, name, i * rows as i64, rows).await;
    }
}

/// The ids a reader of `table`'s snapshot gets (iceberg's scan, which applies position
/// and equality deletes), asserting none twice.
async fn ids(table: &Table, snapshot: Option<i64>) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for batch in common::scan(table, snapshot).await {
        let col = batch
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        for id in col.values() {
            assert!(out.insert(*id), "id {id} read twice");
        }
    }
    out
}

fn without(range: std::ops::Range<i64>, gone: &[i64]) -> BTreeSet<i64> {
    range.filter(|id| !gone.contains(id)).collect()
}

fn live_data_files(table: &Table) -> i64 {
    table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties["total-data-files"]
        .parse()
        .unwrap()
}

/// Ten appends of ten rows, a foreign `delete` snapshot of position deletes (file paths
/// by `file_path` bounds, not `referenced_data_file`) hiding ids 5, 17 and 42, then
/// maintenance at its busiest: every reader still misses exactly those three rows, the
/// seven files no delete names are compacted (compaction still works beside deletes), the
/// three named files stay, and the delete files stay on disk.
/// Catches: compaction rewriting a data file a position delete names (the deleted rows
/// come back: the replay of the maintenance issue), cleanup removing a delete file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_leaves_the_files_a_position_delete_names() {
    let c = open_catalog();
    table_with(&c, "t", 10, 10).await;
    let gone = [5, 17, 42];
    let delete_files = delete_by_position(&c.catalog, &ident("t"), &gone, false).await;
    let before = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&before, None).await, without(0..100, &gone));

    let metrics = Metrics::new();
    let m = Maintainer::new(c.catalog.clone(), busiest(), metrics.clone());
    let report = passes(&m, 4).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, without(0..100, &gone));
    assert_eq!(report.files_compacted, 7, "the seven files no delete names");
    assert_eq!(
        live_data_files(&table),
        4,
        "three named files and one compacted"
    );
    for path in &delete_files {
        assert!(Path::new(path).is_file(), "delete file {path} removed");
    }
    assert_eq!(
        common::metric(
            &metrics.render(),
            "skade_maintenance_skipped_tables{reason=\"delete_files\"}"
        ),
        1.0
    );
}

/// The same with a file-scoped delete (`referenced_data_file` set) and then an equality
/// delete: an equality delete applies to every older data file of an unpartitioned
/// table, so nothing older is compacted; files appended after it are.
/// Catches: an equality delete ignored by compaction (its rows come back in a file with a
/// higher sequence number), or treated as applying to newer files (nothing compacts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_leaves_what_an_equality_delete_may_apply_to() {
    let c = open_catalog();
    table_with(&c, "t", 6, 10).await;
    delete_by_position(&c.catalog, &ident("t"), &[3], true).await;
    delete_by_equality(&c.catalog, &ident("t"), &[12, 33, 51]).await;
    let gone = [3, 12, 33, 51];
    let m = Maintainer::new(c.catalog.clone(), busiest(), Metrics::new());
    let report = passes(&m, 3).await;
    assert_eq!(
        report.files_compacted, 0,
        "every file is older than the equality delete"
    );
    // Six more appends: newer than every delete, compacted.
    for i in 6..12 {
        append(&c.catalog, "t", i * 10, 10).await;
    }
    let report = passes(&m, 3).await;
    assert_eq!(report.files_compacted, 6);
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, without(0..120, &gone));
    assert_eq!(live_data_files(&table), 7);
}

/// Expiry, manifest merging and cleanup on a table with a foreign delete, with every
/// snapshot but two expired: the delete stays in force in the current snapshot and in
/// every retained one, and its delete manifest and delete file stay referenced and on
/// disk; `skade gc` after it keeps them too.
/// Catches: a merge that drops or rewrites delete manifests, expiry or cleanup taking a
/// delete file for unreferenced (the walk not reading delete manifests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_merging_and_cleanup_keep_a_foreign_delete_in_force() {
    let c = open_catalog();
    table_with(&c, "t", 4, 5).await;
    let delete_files = delete_by_position(&c.catalog, &ident("t"), &[1, 7], true).await;
    for i in 4..24 {
        append(&c.catalog, "t", i * 5, 5).await;
    }
    let gone = [1, 7];
    let config = MaintenanceConfig {
        compaction: false,
        ..busiest()
    };
    let m = Maintainer::new(c.catalog.clone(), config, Metrics::new());
    let report = passes(&m, 3).await;
    assert!(report.snapshots_expired > 0);
    assert!(report.manifests_replaced > 0, "no merge ran");
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, without(0..120, &gone));
    for snapshot in table.metadata().snapshots() {
        let read = ids(&table, Some(snapshot.snapshot_id())).await;
        assert!(read.contains(&0) && !read.contains(&1) && !read.contains(&7));
    }
    for path in &delete_files {
        assert!(Path::new(path).is_file(), "delete file {path} removed");
    }
    let dir = c.dir;
    drop(m);
    drop(c.catalog);
    let report = collect_garbage(
        dir.path(),
        GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        },
    )
    .await
    .expect("gc");
    assert!(report.left_alone.is_empty(), "{report}");
    for path in &delete_files {
        assert!(Path::new(path).is_file(), "gc removed delete file {path}");
    }
    let catalog = RedbCatalog::open(
        &dir.path().join("catalog.redb"),
        &dir.path().join("warehouse"),
    )
    .unwrap();
    let table = catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, without(0..120, &gone));
}

/// An old leftover (a file nothing references, modified long ago) under `location`'s
/// data directory.
fn leftover(location: &str, name: &str) -> PathBuf {
    let path = Path::new(location).join("data").join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"orphan").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    path
}

/// Every regular file under `dir`.
fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    crate::gc::files(dir)
}

/// A table dropped without purge keeps every file when its name is used again: the new
/// table gets a location of its own (`<default>-<uuid>`), cleanup sweeps only that one
/// (its own leftover goes), and the dropped table registered again on its metadata (the
/// same table: its uuid still holds its location) reads back whole.
/// Catches: a re-created table at the dropped one's location, whose cleanup takes the
/// dropped table's files for its own leftovers (the replay of the maintenance issue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tables_files_stay_when_its_name_is_used_again() {
    let c = open_catalog();
    table_with(&c, "t", 3, 10).await;
    let old = c.catalog.load_table(&ident("t")).await.unwrap();
    let old_location = old.metadata().location().to_string();
    let old_metadata = old.metadata_location().unwrap().to_string();
    c.catalog.drop_table(&ident("t")).await.unwrap();
    let old_files = files_under(Path::new(&old_location));
    assert!(old_files.len() > 6, "{old_files:?}");

    table_with(&c, "t", 2, 10).await;
    let new = c.catalog.load_table(&ident("t")).await.unwrap();
    let new_location = new.metadata().location().to_string();
    assert!(
        new_location.starts_with(&format!("{old_location}-")),
        "{new_location} beside {old_location}"
    );
    let ours = leftover(&new_location, "leftover.parquet");
    let m = Maintainer::new(c.catalog.clone(), busiest(), Metrics::new());
    passes(&m, 3).await;
    assert!(!ours.exists(), "the new table's own leftover stays");
    assert_eq!(files_under(Path::new(&old_location)), old_files);
    assert_eq!(ids(&new, None).await, (0..20).collect());

    let back = c
        .catalog
        .register_table(&ident("back"), old_metadata)
        .await
        .unwrap();
    // Maintained like any table from now on (its snapshots expire), and whole.
    passes(&m, 3).await;
    let back = c.catalog.load_table(back.identifier()).await.unwrap();
    assert_eq!(ids(&back, None).await, (0..30).collect());
    for data in old_files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "parquet"))
    {
        assert!(data.exists(), "{} removed", data.display());
    }
}

/// A table registered from files skade did not write for it (here another catalog's)
/// is never swept, by online cleanup or `skade gc`, while an owned table's leftover
/// found by the same listing goes. Catches: a registered table's location swept (the
/// files another catalog still writes there would go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_tables_location_is_left_alone() {
    let elsewhere = open_catalog();
    table_with(&elsewhere, "t", 2, 10).await;
    let theirs = elsewhere.catalog.load_table(&ident("t")).await.unwrap();
    let c = open_catalog();
    table_with(&c, "own", 2, 5).await;
    let guest = c
        .catalog
        .register_table(
            &ident("guest"),
            theirs.metadata_location().unwrap().to_string(),
        )
        .await
        .unwrap();
    assert_eq!(ids(&guest, None).await, (0..20).collect());
    let their_leftover = leftover(theirs.metadata().location(), "theirs.parquet");
    let own_location = c.catalog.load_table(&ident("own")).await.unwrap();
    let our_leftover = leftover(own_location.metadata().location(), "ours.parquet");
    let metrics = Metrics::new();
    let m = Maintainer::new(c.catalog.clone(), busiest(), metrics.clone());
    passes(&m, 3).await;
    assert!(!our_leftover.exists(), "the listing did not run");
    assert!(
        their_leftover.exists(),
        "a registered table's location was swept"
    );
    assert_eq!(
        common::metric(
            &metrics.render(),
            "skade_maintenance_skipped_tables{reason=\"location_not_owned\"}"
        ),
        1.0
    );
    drop(m);
    let dir = c.dir;
    drop(c.catalog);
    let our_leftover = leftover(own_location.metadata().location(), "ours2.parquet");
    let report = collect_garbage(
        dir.path(),
        GcOptions {
            grace: Duration::ZERO,
            dry_run: false,
        },
    )
    .await
    .expect("gc");
    assert!(!our_leftover.exists(), "gc kept an owned table's leftover");
    assert!(
        their_leftover.exists(),
        "gc swept a registered table's location"
    );
    assert_eq!(report.left_alone, vec!["ns.guest".to_string()], "{report}");
}

/// A create that names a location another table uses, or where files lie, is refused
/// naming what is there; nothing is created. Catches: a second table at an occupied
/// location (whose cleanup would then remove the other's files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_at_a_location_in_use_is_refused() {
    let c = open_catalog();
    table_with(&c, "t", 1, 5).await;
    let taken = c.catalog.load_table(&ident("t")).await.unwrap();
    let schema = write::iceberg_schema_for("u", &common::synthetic_schema()).unwrap();
    let create = |location: String| {
        TableCreation::builder()
            .name("u".to_string())
            .schema(schema.clone())
            .location(location)
            .build()
    };
    for location in [
        taken.metadata().location().to_string(),
        format!("{}/nested", taken.metadata().location()),
        c.warehouse().join("ns").to_string_lossy().into_owned(),
    ] {
        let err = c
            .catalog
            .create_table(&ident("u").namespace().clone(), create(location.clone()))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("is in use") && err.to_string().contains("ns.t"),
            "{location}: {err}"
        );
    }
    let strays = c.warehouse().join("strays");
    leftover(&strays.to_string_lossy(), "x.parquet");
    let err = c
        .catalog
        .create_table(
            &ident("u").namespace().clone(),
            create(strays.to_string_lossy().into_owned()),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("files are stored under it"),
        "{err}"
    );
    assert!(!c.catalog.table_exists(&ident("u")).await.unwrap());
    let free = c.warehouse().join("free");
    let table = c
        .catalog
        .create_table(
            &ident("u").namespace().clone(),
            create(free.to_string_lossy().into_owned()),
        )
        .await
        .unwrap();
    assert_eq!(table.metadata().location(), free.to_string_lossy());
}

/// A catalog written before location claims were kept: its tables are adopted by the
/// first sweep and swept as before (an old leftover goes).
/// Catches: an upgrade that stops cleaning every existing table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_of_an_older_catalog_are_adopted() {
    let c = open_catalog();
    table_with(&c, "t", 2, 5).await;
    let location = c
        .catalog
        .load_table(&ident("t"))
        .await
        .unwrap()
        .metadata()
        .location()
        .to_string();
    let dir = c.dir;
    drop(c.catalog);
    {
        let db = redb::Database::create(dir.path().join("catalog.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let claims: redb::TableDefinition<&str, &str> =
            redb::TableDefinition::new("location_claims");
        assert!(
            txn.delete_table(claims).unwrap(),
            "no claims table to remove"
        );
        txn.commit().unwrap();
    }
    let catalog = std::sync::Arc::new(
        RedbCatalog::open(
            &dir.path().join("catalog.redb"),
            &dir.path().join("warehouse"),
        )
        .unwrap(),
    );
    let orphan = leftover(&location, "orphan.parquet");
    let m = Maintainer::new(catalog.clone(), busiest(), Metrics::new());
    passes(&m, 2).await;
    assert!(!orphan.exists(), "an adopted table's leftover stays");
}

//! Online table maintenance against a real catalog and warehouse: snapshot expiry
//! (count and Iceberg's age rules), metadata JSON retention, manifest merging and
//! file cleanup — what they remove, what they must never remove (a file a retained
//! snapshot or a reader that loaded the table earlier still needs, a writer's files
//! before their commit), and that maintenance never loses an append racing it.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use iceberg::spec::Operation;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use skade::catalog::{CommitTarget, RedbCatalog};
use skade::config::MaintenanceConfig;
use skade::maintenance::{Maintainer, PassReport};
use skade::metrics::Metrics;
use skade::snapshot::fast_append::FastAppend;
use skade::write::{self, WriteProps};

use crate::common::{self, CatalogDir, count, open_catalog};

fn ident(name: &str) -> TableIdent {
    TableIdent::from_strs(["ns", name]).unwrap()
}

fn config(max_snapshots: usize, grace: Duration) -> MaintenanceConfig {
    MaintenanceConfig {
        enabled: true,
        maintenance_interval: Duration::from_millis(50),
        max_snapshots,
        cleanup_grace: grace,
        // The tests of the metadata grace and the cap set their own.
        metadata_cleanup_grace: grace,
        cleanup_max_waiting: u64::MAX,
        // Each test turns on what it is about; compaction has its own.
        compaction: false,
    }
}

fn maintainer(c: &CatalogDir, max_snapshots: usize, grace: Duration) -> Maintainer {
    Maintainer::new(
        c.catalog.clone(),
        config(max_snapshots, grace),
        Metrics::new(),
    )
}

async fn pass(m: &Maintainer) -> PassReport {
    let report = m.run_pass().await.expect("pass");
    assert!(
        report.errors.is_empty(),
        "maintenance errors: {:?}",
        report.errors
    );
    report
}

/// One commit of `rows` rows with ids from `first_id`, as another Iceberg writer makes
/// it: iceberg's own fast append (no inline manifest merge, so manifests pile up for
/// maintenance to merge), through the catalog's commit driver (this process's turn).
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

async fn set_properties(catalog: &RedbCatalog, name: &str, props: &[(&str, &str)]) {
    let table = catalog.load_table(&ident(name)).await.unwrap();
    let tx = Transaction::new(&table);
    let mut action = tx.update_table_properties();
    for (k, v) in props {
        action = action.set(k.to_string(), v.to_string());
    }
    let tx = action.apply(tx).unwrap();
    tx.commit(catalog).await.unwrap();
}

/// Manifest merging off (a merge is a snapshot and a metadata JSON of its own): for the
/// tests of the other jobs.
const NO_MERGE: (&str, &str) = ("commit.manifest-merge.enabled", "false");

/// A fresh catalog with table `ns.t` (properties `props`) after `commits` appends of
/// `rows` rows each (ids from 0).
async fn table_after(props: &[(&str, &str)], commits: i64, rows: usize) -> CatalogDir {
    let c = open_catalog();
    common::synthetic_table(&c.catalog, "ns", "t").await;
    if !props.is_empty() {
        set_properties(&c.catalog, "t", props).await;
    }
    for i in 0..commits {
        append(&c.catalog, "t", i * rows as i64, rows).await;
    }
    c
}

/// Every id in `table`'s current snapshot, asserting there are no duplicates.
async fn ids(table: &Table, snapshot: Option<i64>) -> BTreeSet<i64> {
    let batches = common::scan(table, snapshot).await;
    let mut out = BTreeSet::new();
    for batch in &batches {
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
    assert_eq!(out.len(), count(&batches));
    out
}

/// Every retained snapshot reads back with the rows its summary promises.
async fn assert_every_snapshot_complete(table: &Table) {
    for snapshot in table.metadata().snapshots() {
        let expected: usize = snapshot.summary().additional_properties["total-records"]
            .parse()
            .unwrap();
        let got = ids(table, Some(snapshot.snapshot_id())).await.len();
        assert_eq!(got, expected, "snapshot {}", snapshot.snapshot_id());
    }
}

/// Every file under `dir` (the gc tests' listing).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    crate::gc::files(dir).into_iter().collect()
}

fn table_dir(c: &CatalogDir, name: &str) -> PathBuf {
    c.warehouse().join("ns").join(name)
}

fn metadata_json_files(c: &CatalogDir, name: &str) -> usize {
    files_under(&table_dir(c, name).join("metadata"))
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .count()
}

fn expected_ids(n: i64, rows: i64) -> BTreeSet<i64> {
    (0..n * rows).collect()
}

/// 30 commits, `--max-snapshots 10`, grace 0: one pass leaves exactly the 10 newest
/// snapshots (the current one among them), every one of them reads back completely, the
/// current one holds all 30 commits' rows, and the manifest lists of the 20 expired
/// snapshots are gone from disk while every retained one's is there.
/// Catches: no count-based expiry (30 snapshots stay), expiry deleting a file a retained
/// snapshot references (a retained scan fails), cleanup not removing what expiry freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_expiry_keeps_the_newest_and_every_retained_snapshot_reads() {
    // Manifest merging off, so the expiry's effect is seen alone.
    let c = table_after(&[NO_MERGE], 30, 3).await;
    let m = maintainer(&c, 10, Duration::ZERO);
    let report = pass(&m).await;
    assert_eq!(report.snapshots_expired, 20);
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 10);
    assert_eq!(ids(&table, None).await, expected_ids(30, 3));
    assert_every_snapshot_complete(&table).await;
    let lists: HashSet<PathBuf> = table
        .metadata()
        .snapshots()
        .map(|s| PathBuf::from(s.manifest_list()))
        .collect();
    let on_disk: HashSet<PathBuf> = files_under(&table_dir(&c, "t").join("metadata"))
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("snap-")
        })
        .collect();
    assert_eq!(
        on_disk, lists,
        "manifest lists on disk = retained snapshots'"
    );
    // A second pass has nothing to do.
    let again = pass(&m).await;
    assert_eq!(again.snapshots_expired, 0);
    assert!(again.removed.is_empty());
}

/// Iceberg's own rules decide too: `history.expire.min-snapshots-to-keep=12` wins over
/// a count bound of 5, and a tag on an old snapshot keeps that snapshot (and its files)
/// however old it is. Catches: a count bound that overrides Iceberg's minimum, expiry of
/// a snapshot a tag needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iceberg_min_snapshots_and_tags_win_over_the_count_bound() {
    let c = table_after(
        &[("history.expire.min-snapshots-to-keep", "12"), NO_MERGE],
        20,
        2,
    )
    .await;
    let m = maintainer(&c, 5, Duration::ZERO);
    pass(&m).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 12);

    // Tag the oldest retained snapshot, then let the count bound apply.
    let oldest = table
        .metadata()
        .snapshots()
        .min_by_key(|s| s.sequence_number())
        .unwrap()
        .snapshot_id();
    let location = table.metadata_location().unwrap().to_string();
    c.catalog
        .atomic_release_raw(vec![(
            ident("t"),
            vec![],
            vec![
                iceberg::TableUpdate::SetSnapshotRef {
                    ref_name: "keep".into(),
                    reference: iceberg::spec::SnapshotReference::new(
                        oldest,
                        iceberg::spec::SnapshotRetention::Tag {
                            max_ref_age_ms: None,
                        },
                    ),
                },
                iceberg::TableUpdate::SetProperties {
                    updates: [(
                        "history.expire.min-snapshots-to-keep".to_string(),
                        "1".to_string(),
                    )]
                    .into(),
                },
            ],
        )])
        .await
        .unwrap();
    assert_ne!(
        c.catalog.metadata_location(&ident("t")).await.unwrap(),
        location
    );
    pass(&m).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    let kept: Vec<i64> = table
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .collect();
    assert!(kept.contains(&oldest), "the tagged snapshot was expired");
    assert_eq!(kept.len(), 6, "5 newest + the tagged one: {kept:?}");
    assert_every_snapshot_complete(&table).await;
}

/// `write.metadata.previous-versions-max=5`: after 20 commits and a pass, the metadata
/// log holds 5 entries and only those 5 plus the current metadata JSON are on disk; with
/// `write.metadata.delete-after-commit.enabled=false` on another table, its metadata
/// JSON files all stay. Catches: metadata JSON never deleted (21 files), the property
/// ignored (files deleted that the user asked to keep).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_json_retention_follows_the_iceberg_properties() {
    let c = open_catalog();
    for name in ["t", "keep"] {
        common::synthetic_table(&c.catalog, "ns", name).await;
        set_properties(
            &c.catalog,
            name,
            &[("write.metadata.previous-versions-max", "5"), NO_MERGE],
        )
        .await;
    }
    set_properties(
        &c.catalog,
        "keep",
        &[("write.metadata.delete-after-commit.enabled", "false")],
    )
    .await;
    for i in 0..20 {
        append(&c.catalog, "t", i, 1).await;
        append(&c.catalog, "keep", i, 1).await;
    }
    let before_keep = metadata_json_files(&c, "keep");
    pass(&maintainer(&c, 100, Duration::ZERO)).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(table.metadata().metadata_log().len(), 5);
    assert_eq!(metadata_json_files(&c, "t"), 6);
    assert_eq!(metadata_json_files(&c, "keep"), before_keep);
    assert!(before_keep > 20);
    assert_eq!(ids(&table, None).await, expected_ids(20, 1));
}

/// 120 commits at the default merge rules (`commit.manifest.min-count-to-merge` 16,
/// 8 MiB target): before the pass the current snapshot lists 120 manifests, after it one,
/// in a `replace` snapshot that reads the same rows; appends keep working on top of it
/// and every retained snapshot (before and after the merge) reads back completely.
/// Catches: no merging (120 manifests stay), a merge that loses or doubles a file, a
/// merged manifest later appends cannot build on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_merge_at_the_default_rules() {
    let c = table_after(&[], 120, 2).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    let manifests = |t: &Table| {
        let t = t.clone();
        async move {
            let snapshot = t.metadata().current_snapshot().unwrap().clone();
            t.manifest_list_reader(&snapshot)
                .load()
                .await
                .unwrap()
                .entries()
                .len()
        }
    };
    assert_eq!(manifests(&table).await, 120);
    // No count bound, so the merge's effect is seen alone.
    let report = pass(&maintainer(&c, 0, Duration::from_secs(3600))).await;
    assert_eq!(report.manifests_replaced, 120);
    assert_eq!(report.manifests_written, 1);
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(manifests(&table).await, 1);
    let current = table.metadata().current_snapshot().unwrap();
    assert_eq!(current.summary().operation, Operation::Replace);
    assert_eq!(ids(&table, None).await, expected_ids(120, 2));
    append(&c.catalog, "t", 240, 2).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(manifests(&table).await, 2);
    assert_eq!(ids(&table, None).await, expected_ids(121, 2));
    assert_every_snapshot_complete(&table).await;
}

/// A reader that loaded the table before maintenance expired its snapshot and merged
/// its manifests still scans it completely afterwards while the grace period runs; with
/// a grace of 0 the same stale handle fails, which is what the grace period is for.
/// Catches: cleanup removing a file as soon as a commit unreferences it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_loaded_before_maintenance_finishes_its_scan() {
    let c = table_after(&[("commit.manifest.min-count-to-merge", "5")], 8, 2).await;
    // Every file is old: only the time since a commit unreferenced a file protects it,
    // not the file's own age.
    for file in files_under(&table_dir(&c, "t")) {
        let f = std::fs::File::options().write(true).open(&file).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
    }
    let reader = c.catalog.load_table(&ident("t")).await.unwrap();
    // A second reader of the same version that has read nothing yet (iceberg caches a
    // table's manifests once read, so the first reader no longer needs those files).
    let late_reader = c.catalog.load_table(&ident("t")).await.unwrap();
    let old_snapshot = reader.metadata().current_snapshot_id();
    // Keep 1 snapshot: the first pass expires the 7 older ones and merges the 8
    // manifests into a new snapshot, the second expires the reader's snapshot.
    let m = maintainer(&c, 1, Duration::from_secs(3600));
    let report = pass(&m).await;
    assert_eq!(
        (report.snapshots_expired, report.manifests_replaced),
        (7, 8)
    );
    let report = pass(&m).await;
    assert_eq!(report.snapshots_expired, 1);
    assert!(report.removed.is_empty());
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert!(
        table
            .metadata()
            .snapshot_by_id(old_snapshot.unwrap())
            .is_none()
    );
    // The stale handle plans from its own (now unreferenced) manifest list and manifests.
    assert_eq!(ids(&reader, old_snapshot).await, expected_ids(8, 2));

    let zero = maintainer(&c, 1, Duration::ZERO);
    let report = pass(&zero).await;
    assert!(!report.removed.is_empty());
    let stale = late_reader
        .scan()
        .snapshot_id(old_snapshot.unwrap())
        .build()
        .unwrap()
        .to_arrow()
        .await;
    let failed = match stale {
        Err(_) => true,
        Ok(stream) => futures::TryStreamExt::try_collect::<Vec<_>>(stream)
            .await
            .is_err(),
    };
    assert!(failed, "the stale scan should fail once its files are gone");
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, expected_ids(8, 2));
}

/// Files a writer created and has not committed yet survive cleanup however old they
/// are while the writer's pin lives (grace 0); once the writer is gone without
/// committing, they are leftovers and the next pass removes them — but a grace period
/// keeps leftovers younger than it. Catches: cleanup removing a stream's or a
/// transaction's files before their commit; leftovers of failed commits never removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_pins_protect_uncommitted_files_and_leftovers_go() {
    let c = open_catalog();
    let table = common::synthetic_table(&c.catalog, "ns", "t").await;
    append(&c.catalog, "t", 0, 2).await;
    let pin = c.catalog.pin_writes();
    let batch = common::conformed(&table, 100, 2);
    let encoded = write::encode(&table, vec![vec![batch]]).await.unwrap();
    let staged = write::write_files(
        &table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap();
    let staged_path = PathBuf::from(&staged[0].file_path());
    let zero = maintainer(&c, 100, Duration::ZERO);
    pass(&zero).await;
    assert!(staged_path.exists(), "a pinned writer's file was removed");
    // The writer commits late: its rows are all there.
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    write::commit_files(c.catalog.as_ref(), &table, staged)
        .await
        .unwrap();
    drop(pin);
    pass(&zero).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(count(&common::scan(&table, None).await), 4);

    // A leftover (written, never committed, no pin): a grace period keeps it while
    // young; with grace 0 it goes.
    let batch = common::conformed(&table, 200, 2);
    let encoded = write::encode(&table, vec![vec![batch]]).await.unwrap();
    let leftover = write::write_files(
        &table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap();
    let leftover = PathBuf::from(&leftover[0].file_path());
    pass(&maintainer(&c, 100, Duration::from_secs(3600))).await;
    assert!(leftover.exists());
    // A fresh maintainer sweeps at once (a running one finds leftovers that appear
    // without any commit within 30 s).
    let report = pass(&maintainer(&c, 100, Duration::ZERO)).await;
    assert!(!leftover.exists());
    assert!(report.removed.iter().any(|r| r.path == leftover));
    assert_eq!(count(&common::scan(&table, None).await), 4);
}

/// Runs maintenance passes back to back while `writers` tasks each make `commits`
/// appends of `rows` rows to `ns.t` (ids `(writer * commits + i) * rows ..`), each
/// holding a write pin as the server's writers do (the grace in these tests is 0).
/// Returns the passes run and the data files they compacted.
async fn passes_beside_writers(
    m: &Arc<Maintainer>,
    catalog: &Arc<RedbCatalog>,
    writers: i64,
    commits: i64,
    rows: usize,
) -> (usize, usize) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let runner = {
        let (m, stop) = (m.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut passes, mut compacted) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let report = m.run_pass().await.unwrap();
                assert!(report.errors.is_empty(), "{:?}", report.errors);
                passes += 1;
                compacted += report.files_compacted;
            }
            (passes, compacted)
        })
    };
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let catalog = catalog.clone();
            tokio::spawn(async move {
                for i in 0..commits {
                    let _pin = catalog.pin_writes();
                    append(&catalog, "t", (w * commits + i) * rows as i64, rows).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    runner.await.unwrap()
}

/// 4 writers append to one table while maintenance passes run back to back with a
/// small count bound and merge threshold: every acked row is in the final snapshot
/// exactly once and every retained snapshot reads back completely. Catches: an expiry
/// or merge commit that overwrites an append racing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_never_loses_an_append_racing_it() {
    let c = open_catalog();
    common::synthetic_table(&c.catalog, "ns", "t").await;
    set_properties(
        &c.catalog,
        "t",
        &[("commit.manifest.min-count-to-merge", "4")],
    )
    .await;
    let m = Arc::new(maintainer(&c, 5, Duration::ZERO));
    let (passes, compacted) = passes_beside_writers(&m, &c.catalog, 4, 15, 2).await;
    assert!(passes > 0);
    let _ = compacted;
    pass(&m).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, expected_ids(60, 2));
    assert!(table.metadata().snapshots().count() <= 6);
    assert_every_snapshot_complete(&table).await;
}

/// 5,000 one-row commits to one table at the default maintenance settings (a pass every
/// 100 commits, as the 1 s interval does at 100 commits/s; grace 0 so the files bound is
/// reached within the test): the metadata JSON stays under 256 KiB with at most 101
/// snapshots, the current manifest list under 200 entries (min-count-to-merge 100 + one
/// interval's appends), the metadata directory under 450 files, compaction keeps fewer
/// than 100 live data files (and under 1,000 on disk: those of retained snapshots), and a
/// full scan returns every acked row exactly once. About 80 s in debug on the 2-core VM.
/// Catches: any of expiry, merging, metadata-log trimming or cleanup not running, and
/// a maintenance commit losing an append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_tiny_commits_stay_bounded() {
    // On tmpfs when there is one: the bounds do not depend on the disk, and 5,000
    // `syncfs` calls on a disk shared with builds take minutes instead of seconds.
    let dir = match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let catalog = RedbCatalog::open(
        &dir.path().join("catalog.redb"),
        &dir.path().join("warehouse"),
    )
    .unwrap();
    let c = CatalogDir {
        dir,
        catalog: Arc::new(catalog),
    };
    common::synthetic_table(&c.catalog, "ns", "t").await;
    let defaults = skade::config::Config::for_tests(c.dir.path()).maintenance;
    let m = Maintainer::new(
        c.catalog.clone(),
        MaintenanceConfig {
            cleanup_grace: Duration::ZERO,
            ..defaults
        },
        Metrics::new(),
    );
    let commits = 5_000i64;
    for i in 0..commits {
        append(&c.catalog, "t", i, 1).await;
        if (i + 1) % 100 == 0 {
            pass(&m).await;
        }
    }
    pass(&m).await;
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    let location = table.metadata_location().unwrap().to_string();
    let json_bytes = std::fs::metadata(&location).unwrap().len();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let manifests = table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .unwrap()
        .entries()
        .len();
    let metadata_files = files_under(&table_dir(&c, "t").join("metadata")).len();
    let data_files = files_under(&table_dir(&c, "t").join("data")).len();
    let live: usize = snapshot.summary().additional_properties["total-data-files"]
        .parse()
        .unwrap();
    eprintln!(
        "after {commits} commits: metadata JSON {json_bytes} bytes, {} snapshots, {manifests} manifests, {metadata_files} metadata files, {live} live data files, {data_files} data files on disk",
        table.metadata().snapshots().count()
    );
    assert!(live < 100, "{live} live data files");
    assert!(data_files < 1_000, "{data_files} data files on disk");
    assert!(table.metadata().snapshots().count() <= 101);
    assert!(json_bytes < 256 << 10, "metadata JSON {json_bytes} bytes");
    assert!(manifests < 200, "{manifests} manifests");
    assert!(
        metadata_files < 450,
        "{metadata_files} files under metadata/"
    );
    assert_eq!(
        ids(&table, None).await,
        (0..commits).collect::<BTreeSet<_>>()
    );
}

/// The value of the metric line that starts with `prefix` (name and labels).
fn labelled(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The running server maintains its tables by itself: with `--max-snapshots 3`, a short
/// interval and grace 0, ten puts end up as at most three snapshots plus the merge's,
/// `/metrics` shows the expiry, the per-table gauges and maintenance commits in their
/// own `lane`, DoGet returns every acked row, and after a clean stop the data dir opens
/// again at once (the maintenance task let go of the catalog).
/// Catches: maintenance not started by the server, its metrics not exported (and, in
/// some runs, a maintenance task that outlives shutdown and keeps the catalog locked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_expires_on_its_own_and_reports_it() {
    let server = common::TestServer::start_with(|c| {
        c.maintenance.max_snapshots = 3;
        c.maintenance.maintenance_interval = Duration::from_millis(50);
        c.maintenance.cleanup_grace = Duration::ZERO;
        c.maintenance.compaction = false;
    })
    .await;
    let mut client = server.client().await;
    for i in 0..10 {
        common::put(&mut client, &["t"], vec![common::synthetic_batch(i * 5, 5)])
            .await
            .unwrap();
    }
    let metrics = common::within(30, async {
        loop {
            let (_, body) = server.http_get("/metrics").await;
            let snapshots = labelled(&body, "skade_table_snapshots{table=\"default.t\"}");
            let deleted = labelled(&body, "skade_files_deleted_total{kind=\"manifest_list\"}");
            if common::metric(&body, "skade_snapshots_expired_total") >= 7.0
                && snapshots.is_some_and(|s| s <= 3.0)
                && deleted.is_some_and(|n| n >= 7.0)
            {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        labelled(
            &metrics,
            "skade_commit_duration_seconds_count{lane=\"maintenance\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert_eq!(
        labelled(&metrics, "skade_table_data_files{table=\"default.t\"}"),
        Some(10.0)
    );
    assert_eq!(count(&common::get(&mut client, &["t"]).await), 50);
    let dir = server.stop().await;
    let again = common::TestServer::start_in(dir, |c| c.maintenance.enabled = false).await;
    let mut client = again.client().await;
    assert_eq!(count(&common::get(&mut client, &["t"]).await), 50);
    again.stop().await;
}

/// Compaction while 4 writers append to the same table (each holding a write pin, as
/// the server's puts do) and passes run back to back at the defaults (compaction on,
/// grace 0): every acked row is in the final snapshot exactly once, the live data files
/// drop well below the 100 appended, a scan of each retained snapshot is complete, and
/// sequential appends still read back in the order they were written (files in name
/// order). Catches: a compaction that loses or doubles rows when an append lands beside
/// it, compaction not running, an output file that sorts away from its inputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_beside_four_appending_writers_keeps_every_row_once() {
    let c = open_catalog();
    common::synthetic_table(&c.catalog, "ns", "t").await;
    let m = Arc::new(Maintainer::new(
        c.catalog.clone(),
        MaintenanceConfig {
            compaction: true,
            ..config(100, Duration::ZERO)
        },
        Metrics::new(),
    ));
    let (_, mut compacted) = passes_beside_writers(&m, &c.catalog, 4, 25, 3).await;
    for _ in 0..10 {
        compacted += pass(&m).await.files_compacted;
    }
    assert!(compacted > 0, "nothing was compacted");
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, expected_ids(100, 3));
    let live: usize = table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties["total-data-files"]
        .parse()
        .unwrap();
    assert!(live < 30, "{live} live data files after compaction");
    assert_every_snapshot_complete(&table).await;

    // Sequential appends into a fresh table read back in order after compaction.
    common::synthetic_table(&c.catalog, "ns", "ordered").await;
    for i in 0..7 {
        append(&c.catalog, "ordered", i * 2, 2).await;
    }
    pass(&m).await;
    // Three more: too few to compact, so they stay after the compacted file.
    for i in 7..10 {
        append(&c.catalog, "ordered", i * 2, 2).await;
    }
    pass(&m).await;
    let table = c.catalog.load_table(&ident("ordered")).await.unwrap();
    let mut files: Vec<String> = Vec::new();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    for manifest in table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .unwrap()
        .entries()
    {
        for entry in manifest
            .load_manifest(table.file_io())
            .await
            .unwrap()
            .entries()
        {
            if entry.is_alive() {
                files.push(entry.file_path().to_string());
            }
        }
    }
    files.sort();
    assert_eq!(files.len(), 4, "7 compacted into 1, then 3: {files:?}");
    let mut in_name_order = Vec::new();
    for path in &files {
        let file = std::fs::File::open(path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let col = batch
                .column_by_name("id")
                .unwrap()
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap()
                .clone();
            in_name_order.extend(col.values().iter().copied());
        }
    }
    assert_eq!(in_name_order, (0..20).collect::<Vec<i64>>());
}

/// A table's `write.target-file-size-bytes` overrides `--target-file-size` for its
/// puts: with 1 byte, each batch of one stream becomes its own data file. Catches the
/// Iceberg property being ignored (compaction aims at the same target).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tables_target_file_size_property_cuts_its_files() {
    let server = common::TestServer::start().await;
    let mut client = server.client().await;
    let path = ["ns", "t"];
    common::put(&mut client, &path, vec![common::synthetic_batch(0, 10)])
        .await
        .unwrap();
    let catalog = server.running.service.catalog.clone();
    set_properties(&catalog, "t", &[("write.target-file-size-bytes", "1")]).await;
    let before = common::parquet_files(&server.warehouse()).len();
    let batches = (1..4)
        .map(|i| common::synthetic_batch(i * 10, 10))
        .collect();
    common::put(&mut client, &path, batches).await.unwrap();
    let after = common::parquet_files(&server.warehouse()).len();
    assert_eq!(after - before, 3, "one data file per batch");
    assert_eq!(count(&common::get(&mut client, &path).await), 40);
    server.stop().await;
}

/// Manifest lists of `ns.t` on disk.
fn manifest_lists(c: &CatalogDir) -> usize {
    common::files_named(&c.dir.path().join("warehouse"), |name| {
        name.starts_with("snap-") && name.ends_with(".avro")
    })
}

/// Between directory listings (one every 30 s), a sweep still removes what a commit
/// just unreferenced once its grace has passed: here the manifest lists of expired
/// snapshots, on the pass right after a listing. Catches cleanup that finds
/// unreferenced files only by listing directories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_a_commit_unreferenced_go_between_listings() {
    let c = table_after(&[], 4, 10).await;
    let m = maintainer(&c, 0, Duration::ZERO);
    pass(&m).await; // the first sweep lists
    assert_eq!(manifest_lists(&c), 4);
    set_properties(
        &c.catalog,
        "t",
        &[("skade.history.expire.max-snapshots", "1")],
    )
    .await;
    let report = pass(&m).await; // expires 3 snapshots; this sweep does not list
    assert_eq!(report.snapshots_expired, 3);
    assert_eq!(
        manifest_lists(&c),
        1,
        "only the current snapshot's list is left"
    );
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(count(&common::scan(&table, None).await), 40);
}

/// A pass starts early once a quarter of `--max-snapshots` (at least 16) commits landed
/// since the last pass started: with an interval of an hour, 40 puts and
/// `--max-snapshots 8` leave the table, once the passes they woke are done, at most
/// 8 + 15 snapshots (and 2 of the passes' own merges) — however long a pass takes.
/// Catches: maintenance that waits out `--maintenance-interval` however fast commits
/// come (40 snapshots until the hour is up), and commits made while a pass ran not
/// counted towards the next (a slow pass left up to a burst's worth more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_commits_starts_a_pass_before_the_interval() {
    let server = common::TestServer::start_with(|c| {
        c.maintenance.max_snapshots = 8;
        c.maintenance.maintenance_interval = Duration::from_secs(3600);
        c.maintenance.compaction = false;
    })
    .await;
    let mut client = server.client().await;
    for i in 0..40 {
        common::put(&mut client, &["t"], vec![common::synthetic_batch(i * 5, 5)])
            .await
            .unwrap();
    }
    let bound = 8 + 15 + 2;
    let snapshots = common::within(30, async {
        loop {
            let snapshots = server
                .table(&["default", "t"])
                .await
                .metadata()
                .snapshots()
                .len();
            if snapshots <= bound {
                return snapshots;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let (_, body) = server.http_get("/metrics").await;
    let expired = common::metric(&body, "skade_snapshots_expired_total");
    assert!(
        expired >= (40 - bound) as f64,
        "{snapshots} snapshots left, {expired} expired"
    );
    assert_eq!(count(&common::get(&mut client, &["t"]).await), 200);
    server.stop().await;
}

/// Live data files of `table`'s current snapshot (its summary's `total-data-files`).
fn live_data_files(table: &Table) -> u64 {
    table
        .metadata()
        .current_snapshot()
        .and_then(|s| s.summary().additional_properties.get("total-data-files"))
        .and_then(|v| v.parse().ok())
        .expect("total-data-files")
}

/// In the background, expiry goes on while a compaction job waits: with the whole
/// `--memory-budget` held elsewhere, compaction of a table of 30 small files waits for
/// memory, and the spawned maintenance still expires the 10 commits made meanwhile,
/// down to `--max-snapshots` (4), while no file is compacted; once the memory is free,
/// the compaction lands (fewer live files, every row once) and the task ends at
/// shutdown.
/// Catches: compaction run inside the pass, where one job that waits stops every
/// table's expiry, so each commit's metadata JSON grows with the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_goes_on_while_a_compaction_waits() {
    let c = table_after(&[NO_MERGE], 30, 10).await;
    let budget = write::MemoryBudget::new(64 << 20);
    let held = budget.reserve(64 << 20).await;
    let mut config = config(4, Duration::from_secs(3600));
    config.compaction = true;
    let m = Arc::new(
        Maintainer::new(c.catalog.clone(), config, Metrics::new())
            .with_target_file_size(1 << 20)
            .with_memory_budget(budget.clone()),
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = m.spawn(shutdown.clone());
    let expired_to_four = || async {
        loop {
            let table = c.catalog.load_table(&ident("t")).await.unwrap();
            if table.metadata().snapshots().len() <= 4 {
                return table;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    common::within(30, expired_to_four()).await;
    // The first pass expired; its compaction now waits for memory. Ten more commits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 30..40 {
        append(&c.catalog, "t", i * 10, 10).await;
    }
    let expired = common::within(30, expired_to_four()).await;
    assert_eq!(live_data_files(&expired), 40, "compacted without memory");
    drop(held);
    let compacted = common::within(30, async {
        loop {
            let table = c.catalog.load_table(&ident("t")).await.unwrap();
            if live_data_files(&table) < 40 {
                return table;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(ids(&compacted, None).await, expected_ids(40, 10));
    shutdown.cancel();
    common::within(30, task).await.unwrap();
}

/// Metadata JSON files that left the metadata log go after `--metadata-cleanup-grace`
/// (1 s here), while every other unreferenced file still waits out the hour of
/// `--cleanup-grace`: after 20 commits with `write.metadata.previous-versions-max=5`, a
/// pass that finds the 15 old metadata JSON files and one more 1.1 s later leave the 5
/// logged ones and the current one, and remove nothing but metadata JSON.
/// Catches: metadata JSON held for the whole data-file grace (11 GB per busy table at
/// 200 commits/s and 10 minutes), or the short grace applied to other files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_json_that_left_the_log_goes_after_its_own_grace() {
    let c = table_after(
        &[("write.metadata.previous-versions-max", "5"), NO_MERGE],
        20,
        1,
    )
    .await;
    // Expiry frees manifest lists too: those must wait out the hour.
    let m = Maintainer::new(
        c.catalog.clone(),
        MaintenanceConfig {
            metadata_cleanup_grace: Duration::from_secs(1),
            ..config(5, Duration::from_secs(3600))
        },
        Metrics::new(),
    );
    let report = pass(&m).await;
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    assert!(metadata_json_files(&c, "t") > 20);
    let lists_before = manifest_lists(&c);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = pass(&m).await;
    assert!(
        report
            .removed
            .iter()
            .all(|f| f.kind == skade::maintenance::cleanup::FileKind::Metadata && !f.early),
        "{:?}",
        report.removed
    );
    assert_eq!(metadata_json_files(&c, "t"), 6);
    assert_eq!(
        manifest_lists(&c),
        lists_before,
        "manifest lists keep the hour"
    );
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, expected_ids(20, 1));
}

/// The manifest lists of `table`'s snapshots other than the current one, with their
/// bytes on disk.
fn lists_of_old_snapshots(table: &Table) -> Vec<(PathBuf, u64)> {
    let current = table.metadata().current_snapshot_id();
    table
        .metadata()
        .snapshots()
        .filter(|s| Some(s.snapshot_id()) != current)
        .map(|s| {
            let path = PathBuf::from(s.manifest_list().trim_start_matches("file:"));
            let bytes = std::fs::metadata(&path).unwrap().len();
            (path, bytes)
        })
        .collect()
}

/// Past `--cleanup-max-waiting`, the longest-waiting files go first, however long their
/// grace: a first expiry frees 3 manifest lists, which wait out an hour's grace; a
/// second, 5 appends later, frees 5 more. With the cap at exactly the 5 newer lists'
/// bytes, the first pass keeps its 3 and the second removes them (early, counted in
/// `skade_files_deleted_early_total`) and keeps the 5 newer, which the waiting gauges
/// then show.
/// Catches: unreferenced files kept without a byte bound (all 8 stay for the hour), a
/// cap that removes the newest first or more than it must, early removals not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_waiting_cap_the_oldest_waiting_files_go_first() {
    let c = table_after(&[NO_MERGE], 4, 2).await;
    let older = lists_of_old_snapshots(&c.catalog.load_table(&ident("t")).await.unwrap());
    assert_eq!(older.len(), 3);
    // What the second pass will free: the snapshots of the first pass's current one
    // and the next 4 appends (measured on a twin table built the same way, since the
    // cap is fixed before the first pass).
    let twin = table_after(&[NO_MERGE], 9, 2).await;
    let twin_table = twin.catalog.load_table(&ident("t")).await.unwrap();
    let twin_lists = lists_of_old_snapshots(&twin_table);
    assert_eq!(twin_lists.len(), 8);
    let older_bytes: u64 = older.iter().map(|(_, b)| b).sum();
    let mut newer_sizes: Vec<u64> = twin_lists.iter().map(|(_, b)| *b).collect();
    newer_sizes.sort_unstable();
    // A list's size varies by a few bytes with its snapshot ids' encodings: 64 bytes of
    // slack, far below the smallest list, so all 3 older lists must still go.
    let cap: u64 = newer_sizes[3..].iter().sum::<u64>() + 64;
    assert!(
        older_bytes < cap,
        "the first pass must fit: {older_bytes} vs {cap}"
    );
    assert!(older.iter().all(|(_, b)| *b > 128));

    let metrics = Metrics::new();
    let m = Maintainer::new(
        c.catalog.clone(),
        MaintenanceConfig {
            cleanup_max_waiting: cap,
            // Sweeps follow a change at most every tenth of the shortest grace: 100 ms.
            metadata_cleanup_grace: Duration::from_secs(1),
            ..config(1, Duration::from_secs(3600))
        },
        metrics.clone(),
    );
    let report = pass(&m).await;
    assert_eq!(report.snapshots_expired, 3);
    assert!(report.removed.is_empty(), "{:?}", report.removed);
    assert_eq!(report.waiting.files, 3);
    assert_eq!(report.waiting.bytes, older_bytes);
    for i in 4..9 {
        append(&c.catalog, "t", i * 2, 2).await;
    }
    let newer = lists_of_old_snapshots(&c.catalog.load_table(&ident("t")).await.unwrap());
    assert_eq!(newer.len(), 5);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let newer_bytes: u64 = newer.iter().map(|(_, b)| b).sum();
    assert!(
        newer_bytes <= cap && newer_bytes + 64 > cap - 64,
        "the twin table predicts the lists' sizes: {newer_bytes} vs cap {cap}"
    );
    let report = pass(&m).await;
    assert_eq!(report.snapshots_expired, 5);
    let mut removed: Vec<&PathBuf> = report.removed.iter().map(|f| &f.path).collect();
    removed.sort();
    let mut expected: Vec<&PathBuf> = older.iter().map(|(p, _)| p).collect();
    expected.sort();
    assert_eq!(
        removed, expected,
        "the 3 longest-waiting lists go, nothing else"
    );
    assert!(report.removed.iter().all(|f| f.early));
    for (path, _) in &older {
        assert!(!path.exists(), "{}", path.display());
    }
    for (path, _) in &newer {
        assert!(path.exists(), "{} was removed", path.display());
    }
    assert_eq!(report.waiting.files, 5);
    assert_eq!(report.waiting.bytes, newer_bytes);
    let body = metrics.render();
    assert_eq!(
        scraped(
            &body,
            r#"skade_files_deleted_early_total{kind="manifest_list"}"#
        ),
        3.0
    );
    assert_eq!(
        scraped(
            &body,
            r#"skade_bytes_deleted_early_total{kind="manifest_list"}"#
        ),
        older_bytes as f64
    );
    assert_eq!(scraped(&body, "skade_cleanup_waiting_files"), 5.0);
    assert_eq!(
        scraped(&body, "skade_cleanup_waiting_bytes"),
        newer_bytes as f64
    );
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, expected_ids(9, 2));
}

/// The metric `series` in `body` (0 when absent).
fn scraped(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            (name == series).then(|| v.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// A write that stays open (one long streaming put holds its pin for as long as it
/// runs) does not hold what commits unreferenced meanwhile: with a pin taken before 20
/// commits and no pass between them, one pass at grace 0 removes the expired snapshots'
/// manifest lists (seen referenced before its expiry commit) and the
/// metadata JSON that left the log (never seen referenced, but older than every version
/// the log names), while a file the pinned writer staged stays.
/// Catches: cleanup halted for the whole life of a long put (every file modified after
/// the oldest pin kept, so garbage grows without bound under a put that never ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_write_does_not_hold_what_commits_unreferenced() {
    let c = open_catalog();
    let table = common::synthetic_table(&c.catalog, "ns", "t").await;
    set_properties(
        &c.catalog,
        "t",
        &[("write.metadata.previous-versions-max", "5"), NO_MERGE],
    )
    .await;
    let pin = c.catalog.pin_writes();
    let batch = common::conformed(&table, 1000, 2);
    let encoded = write::encode(&table, vec![vec![batch]]).await.unwrap();
    let staged = write::write_files(
        &table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap();
    let staged_path = PathBuf::from(&staged[0].file_path());
    for i in 0..20 {
        append(&c.catalog, "t", i, 1).await;
    }
    let report = pass(&maintainer(&c, 1, Duration::ZERO)).await;
    assert_eq!(report.snapshots_expired, 19);
    assert_eq!(
        metadata_json_files(&c, "t"),
        6,
        "metadata JSON out of the log"
    );
    assert_eq!(
        manifest_lists(&c),
        1,
        "only the current snapshot's list is left"
    );
    assert!(staged_path.exists(), "a pinned writer's file was removed");
    drop(pin);
    let table = c.catalog.load_table(&ident("t")).await.unwrap();
    assert_eq!(ids(&table, None).await, expected_ids(20, 1));
}

//! `skade gc` against a real data dir: orphans older than the grace period go, young
//! orphans and every referenced file stay, the tables still read back completely, and a
//! live server's data dir is refused.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{TestServer, count, put, synthetic_batch};
use iceberg::{Catalog, TableIdent};
use skade::catalog::gc::{GcError, GcOptions, collect_garbage};
use skade::write::{self, WriteProps};

/// Every regular file under `dir`.
pub(crate) fn files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path);
            }
        }
    }
    out
}

fn age(path: &Path, by: Duration) {
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - by).unwrap();
}

fn write_orphan(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Every snapshot of `ident` reads back with the rows its summary promises.
async fn assert_every_snapshot_complete(server: &TestServer, ident: &TableIdent) -> usize {
    let table = server
        .running
        .service
        .catalog
        .load_table(ident)
        .await
        .unwrap();
    let mut snapshots = 0;
    for snapshot in table.metadata().snapshots() {
        let rows: Vec<_> = common::scan(&table, Some(snapshot.snapshot_id())).await;
        let expected: usize = snapshot.summary().additional_properties["total-records"]
            .parse()
            .unwrap();
        assert_eq!(
            count(&rows),
            expected,
            "{ident} snapshot {}",
            snapshot.snapshot_id()
        );
        snapshots += 1;
    }
    snapshots
}

fn gc_binary(dir: &Path, grace: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_skade"))
        .args(["gc", "--data-dir"])
        .arg(dir)
        .args(["--grace", grace])
        .output()
        .expect("run skade gc")
}

/// Two tables with several snapshots, then real orphans (data files written but never
/// committed, a staged manifest and manifest list of a snapshot that never landed) and
/// planted ones (a data file, a metadata JSON), all made two hours old like every
/// referenced file, plus one young orphan. `skade gc --grace 1h` removes exactly the old
/// orphans: the warehouse afterwards is what it was before the orphans plus the young
/// one, and every snapshot of both tables reads back completely. A dry run before it
/// reports the same files and removes none.
///
/// RED once: with `references` skipping the data files the manifests name, the dry run
/// listed all 15 committed data files of both tables as orphans beside the 6 real ones.
/// RED once: with the grace check disabled, it listed the young orphan too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_old_orphans_and_keeps_referenced_files_and_young_orphans() {
    let server = TestServer::start_with(|c| {
        c.ingest.target_file_size = 1;
        c.ingest.files_per_commit = 2.try_into().unwrap();
    })
    .await;
    let mut client = server.client().await;
    for (path, first) in [
        (&["gc", "t"][..], 0),
        (&["gc", "t"][..], 1000),
        (&["gc", "deep", "u"][..], 0),
    ] {
        let batches = (0..5)
            .map(|i| synthetic_batch(first + i * 10, 10))
            .collect();
        put(&mut client, path, batches).await.unwrap();
    }
    let warehouse = server.warehouse();
    let referenced = files(&warehouse);

    // Real orphans: files written for a commit that never happened.
    let t = TableIdent::from_strs(["gc", "t"]).unwrap();
    let catalog = server.running.service.catalog.clone();
    let table = catalog.load_table(&t).await.unwrap();
    let arrow = write::table_arrow_schema(&table).unwrap();
    let batch = write::conform_batch("gc.t", &synthetic_batch(5000, 10), &arrow).unwrap();
    let encoded = write::encode(&table, vec![vec![batch.clone()], vec![batch]])
        .await
        .unwrap();
    let data_files = write::write_files(
        &table,
        encoded,
        &mut write::FileNames::new(),
        &WriteProps::default(),
    )
    .await
    .unwrap();
    skade::snapshot::fast_append::stage_fast_append(&table, data_files)
        .await
        .unwrap();
    let ids = [
        TableIdent::from_strs(["gc", "t"]).unwrap(),
        TableIdent::from_strs(["gc", "deep", "u"]).unwrap(),
    ];
    let snapshots_before = [
        assert_every_snapshot_complete(&server, &ids[0]).await,
        assert_every_snapshot_complete(&server, &ids[1]).await,
    ];
    assert_eq!(
        snapshots_before,
        [6, 3],
        "5 files, 2 per commit: 3 commits per put"
    );
    drop(catalog); // the catalog's lock goes with its last handle
    let dir = server.stop().await;

    // Planted orphans; then everything is two hours old except one young orphan.
    let location = warehouse.join("gc").join("t");
    write_orphan(&location.join("data/planted-00000000.parquet"), b"PAR1junk");
    write_orphan(
        &location.join("metadata/99999-planted.metadata.json"),
        b"{}",
    );
    for file in files(&warehouse) {
        age(&file, Duration::from_secs(2 * 3600));
    }
    let young = location.join("data/young-00000000.parquet");
    write_orphan(&young, b"PAR1young");
    let before = files(&warehouse);
    let old_orphans: BTreeSet<PathBuf> = before
        .difference(&referenced)
        .filter(|p| **p != young)
        .cloned()
        .collect();
    assert_eq!(
        old_orphans.len(),
        2 + 2 + 2,
        "2 data files, manifest + list, 2 planted"
    );

    let options = GcOptions {
        grace: Duration::from_secs(3600),
        dry_run: true,
    };
    let report = collect_garbage(dir.path(), options).await.unwrap();
    assert_eq!(
        report.removed.iter().cloned().collect::<BTreeSet<_>>(),
        old_orphans
    );
    assert_eq!(files(&warehouse), before, "a dry run removes nothing");

    let out = gc_binary(dir.path(), "1h");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("2 tables"), "{stdout}");
    assert!(stdout.contains("removed 6 orphan files"), "{stdout}");
    assert!(
        stdout.contains("kept 1 orphans younger than 1h"),
        "{stdout}"
    );
    let after = files(&warehouse);
    let expected: BTreeSet<PathBuf> = referenced.iter().cloned().chain([young.clone()]).collect();
    assert_eq!(
        after.symmetric_difference(&expected).collect::<Vec<_>>(),
        Vec::<&PathBuf>::new(),
        "the warehouse after gc: every referenced file and the young orphan, nothing else"
    );

    // Maintenance off: a compaction right after the restart would add a snapshot.
    let server = TestServer::start_in(dir, |c| c.maintenance.enabled = false).await;
    for (ident, snapshots) in ids.iter().zip(snapshots_before) {
        assert_eq!(
            assert_every_snapshot_complete(&server, ident).await,
            snapshots
        );
    }
    server.stop().await;
}

/// gc refuses a data dir a running server holds, naming the lock, and removes nothing;
/// a dir without a catalog is refused too.
///
/// RED once: with `collect_garbage` mapping every open error to `GcError::Catalog`, the
/// binary printed only redb's "Database already open. Cannot acquire lock." without
/// saying to stop the server (the "stop the skade server" assertion failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_refuses_a_live_servers_data_dir() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    put(&mut client, &["gc", "live"], vec![synthetic_batch(0, 10)])
        .await
        .unwrap();
    let orphan = server.warehouse().join("gc/live/data/orphan.parquet");
    write_orphan(&orphan, b"x");
    age(&orphan, Duration::from_secs(7200));

    let out = gc_binary(server.data_dir(), "0s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("Cannot acquire lock"), "{stderr}");
    assert!(stderr.contains("stop the skade server"), "{stderr}");
    assert!(orphan.exists(), "nothing removed");

    let options = GcOptions {
        grace: Duration::ZERO,
        dry_run: false,
    };
    let err = collect_garbage(server.data_dir(), options)
        .await
        .unwrap_err();
    assert!(matches!(err, GcError::InUse { .. }), "{err}");
    assert!(orphan.exists(), "nothing removed");

    let empty = tempfile::tempdir().unwrap();
    let err = collect_garbage(empty.path(), options).await.unwrap_err();
    assert!(matches!(err, GcError::NoCatalog { .. }), "{err}");
    assert!(
        !empty.path().join("catalog.redb").exists(),
        "gc creates no catalog"
    );
    server.stop().await;
}

/// Catches the reference walk (online cleanup's sweeps, `skade gc`, purge) keeping every
/// parsed manifest it read until the next sweep: after a long maintenance pass those
/// would take gigabytes (`docs/performance.md`, "What the soak measured behind
/// maintenance's shape"). The walk must still name every data file, and keep only paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_walk_names_every_file_and_keeps_no_parsed_manifest() {
    let server = TestServer::start_with(|c| c.maintenance.enabled = false).await;
    let mut client = server.client().await;
    for i in 0..5 {
        put(
            &mut client,
            &["gc", "walk"],
            vec![synthetic_batch(i * 10, 10)],
        )
        .await
        .unwrap();
    }
    let table = server.table(&["gc", "walk"]).await;
    let mut walker = skade::catalog::gc::ReferenceWalker::new(
        server.running.service.catalog.written_manifests().clone(),
    );
    let mut referenced = std::collections::HashSet::new();
    walker.references(&table, &mut referenced).await.unwrap();
    let data = files(&server.warehouse().join("gc").join("walk").join("data"));
    assert_eq!(data.len(), 5, "one data file per put");
    for file in &data {
        assert!(referenced.contains(file), "{} not named", file.display());
    }
    assert_eq!(
        walker.cache().manifests_held(),
        0,
        "the walk kept parsed manifests"
    );
    // A second walk answers from the paths it kept.
    let mut again = std::collections::HashSet::new();
    walker.references(&table, &mut again).await.unwrap();
    assert_eq!(again, referenced);
}

/// Catches the reference walk reading back (and parsing) the manifest lists and
/// manifests its catalog wrote, once more of them were written than the catalog's
/// parsed caches keep (128 lists): under a busy load that would be most of a
/// maintenance pass's CPU. A second walker, which finds nothing handed over, reads them
/// from the storage and names the same files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_walk_reads_back_nothing_this_process_wrote() {
    const PUTS: i64 = 140;
    let server = TestServer::start_with(|c| c.maintenance.enabled = false).await;
    let mut client = server.client().await;
    for i in 0..PUTS {
        put(
            &mut client,
            &["gc", "many"],
            vec![synthetic_batch(i * 10, 10)],
        )
        .await
        .unwrap();
    }
    let table = server.table(&["gc", "many"]).await;
    assert_eq!(table.metadata().snapshots().count(), PUTS as usize);
    let mut walker = skade::catalog::gc::ReferenceWalker::new(
        server.running.service.catalog.written_manifests().clone(),
    );
    let mut referenced = std::collections::HashSet::new();
    walker.references(&table, &mut referenced).await.unwrap();
    assert_eq!(
        walker.read_back(),
        0,
        "the walk read back manifest lists or manifests this process wrote"
    );
    let data = files(&server.warehouse().join("gc").join("many").join("data"));
    assert_eq!(data.len(), PUTS as usize, "one data file per put");
    let metadata = files(&server.warehouse().join("gc").join("many").join("metadata"));
    let is_list = |f: &&PathBuf| {
        f.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("snap-") && n.ends_with(".avro"))
    };
    let lists: Vec<&PathBuf> = metadata.iter().filter(is_list).collect();
    assert_eq!(lists.len(), PUTS as usize, "a manifest list per put");
    for file in data.iter().chain(lists.iter().copied()) {
        assert!(referenced.contains(file), "{} not named", file.display());
    }
    // Every put's manifest, and the manifests the inline merges (one per 16 puts) wrote
    // in place of the manifest of the put that merged, which no list names.
    let manifests = metadata
        .iter()
        .filter(|f| !is_list(f) && f.extension().is_some_and(|e| e == "avro"))
        .filter(|f| referenced.contains(*f))
        .count();
    assert!(manifests > 100, "{manifests} manifests named");
    // Another catalog's registry: nothing of this table handed over.
    let mut reader = skade::catalog::gc::ReferenceWalker::new(Default::default());
    let mut read = std::collections::HashSet::new();
    reader.references(&table, &mut read).await.unwrap();
    assert_eq!(
        reader.read_back(),
        lists.len() + manifests,
        "a walker that finds nothing handed over reads each list and manifest once"
    );
    assert_eq!(read, referenced);
}

// Catches the registry of written manifests shared by every catalog of the process: one
// catalog's reference walk would then take (and so lose for its own walk) what another
// catalog wrote, and both would share one memory bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_catalog_keeps_its_own_written_manifests() {
    let server = TestServer::start_with(|c| c.maintenance.enabled = false).await;
    let other = common::open_catalog();
    let mut client = server.client().await;
    put(&mut client, &["gc", "own"], vec![synthetic_batch(0, 10)])
        .await
        .expect("put");
    let table = server.table(&["gc", "own"]).await;
    let snapshot = table.metadata().current_snapshot().expect("a snapshot");
    let ours = server.running.service.catalog.written_manifests();
    let theirs = other.catalog.written_manifests();
    assert!(
        ours.written_paths() > 0,
        "the writing catalog holds its manifests' paths for its walk"
    );
    assert_eq!(theirs.written_paths(), 0);
    assert!(
        theirs.take_written_list(snapshot.manifest_list()).is_none(),
        "another catalog handed out this catalog's manifest list"
    );
    assert!(ours.take_written_list(snapshot.manifest_list()).is_some());
}

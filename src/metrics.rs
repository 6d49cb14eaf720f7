//! Every metric skade exports, by name (docs/SERVICE.md, "Metrics"), and their registry.
//!
//! Each server owns its own [`Metrics`] (a `prometheus::Registry`), so several servers in
//! one process — as in the tests — count separately. Every event is recorded through one
//! method of [`Metrics`] (`record_*`, `set_*`, or a guard such as [`ActiveStream`]); the
//! handles are private. The commit and sync counts are the catalog's own
//! ([`crate::catalog::CommitCounts`]), read at scrape time ([`Metrics::count_catalog`]).

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Metric, MetricFamily, MetricType};
use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::catalog::CommitCounts;
use crate::storage::object_store::ObjectStoreMetrics;
use crate::write::IngestStats;

/// Durable redb write transactions on the data paths (= commit fsyncs).
pub const CATALOG_COMMITS_TOTAL: &str = "skade_catalog_commits_total";
/// Warehouse syncs (`syncfs(2)`) before data commits' pointer flips.
pub const FILE_SYNCS_TOTAL: &str = "skade_file_syncs_total";
/// Commits staged again after a compare-and-swap conflict (the table moved under them:
/// on a shared catalog, mostly another instance's commit of the same table).
pub const COMMIT_CONFLICTS_TOTAL: &str = "skade_commit_conflicts_total";
/// Commits on a shared catalog that went ahead without their turn across instances.
pub const COMMIT_TURN_SKIPPED_TOTAL: &str = "skade_commit_turn_skipped_total";
/// Seconds of one catalog commit, label `lane` = `stream` | `multi`.
pub const COMMIT_DURATION_SECONDS: &str = "skade_commit_duration_seconds";
/// Rows made visible, label `table`.
pub const ROWS_COMMITTED_TOTAL: &str = "skade_rows_committed_total";
/// Data files made visible, label `table`.
pub const DATA_FILES_COMMITTED_TOTAL: &str = "skade_data_files_committed_total";
/// Parquet bytes made visible, label `table`.
pub const BYTES_COMMITTED_TOTAL: &str = "skade_bytes_committed_total";
/// Open DoPut streams.
pub const PUT_STREAMS_ACTIVE: &str = "skade_put_streams_active";
/// Open Flight SQL transactions.
pub const TRANSACTIONS_ACTIVE: &str = "skade_transactions_active";
/// Failed puts/commits, label `code` (gRPC code name; `Cancelled` for calls the client
/// ended: cancel, deadline, reset or closed connection).
pub const INGEST_ERRORS_TOTAL: &str = "skade_ingest_errors_total";
/// DoPut streams and Flight SQL actions received: the calls [`INGEST_ERRORS_TOTAL`]
/// counts the failures of (the denominator of an error ratio).
pub const INGEST_REQUESTS_TOTAL: &str = "skade_ingest_requests_total";
/// `--max-streams`: the most DoPut streams open at once.
pub const PUT_STREAMS_MAX: &str = "skade_put_streams_max";
/// `--memory-budget` in bytes (as the budget holds it).
pub const MEMORY_BUDGET_BYTES: &str = "skade_memory_budget_bytes";
/// Arrow bytes of rows in flight held against the memory budget right now (read at
/// scrape time).
pub const MEMORY_RESERVED_BYTES: &str = "skade_memory_reserved_bytes";
/// Bytes the process's allocator has handed out and not had back (the live heap, read at
/// scrape time; [`crate::heap::allocated_bytes`]). Shown only when the global allocator
/// counts them, as the `skade` binary's does.
pub const HEAP_ALLOCATED_BYTES: &str = "skade_heap_allocated_bytes";
/// 1 when `/readyz` would answer 200, else 0 (checked at scrape time).
pub const READY: &str = "skade_ready";

/// Calls refused for a missing or invalid bearer token, label `surface` = `flight`
/// (every Flight and Flight SQL RPC, `Handshake` included) | `rest` (the `/v1` REST
/// catalog routes).
pub const AUTH_FAILURES_TOTAL: &str = "skade_auth_failures_total";

/// Snapshots removed by maintenance expiry commits.
pub const SNAPSHOTS_EXPIRED_TOTAL: &str = "skade_snapshots_expired_total";
/// Manifests replaced by merged ones in maintenance commits.
pub const MANIFESTS_MERGED_TOTAL: &str = "skade_manifests_merged_total";
/// Files whose content maintenance commits rewrote into new files, label `kind` =
/// `data` (data files replaced by compaction) | `manifest` (manifests replaced by
/// merges).
pub const FILES_REWRITTEN_TOTAL: &str = "skade_files_rewritten_total";
/// Bytes of [`FILES_REWRITTEN_TOTAL`], label `kind`.
pub const BYTES_REWRITTEN_TOTAL: &str = "skade_bytes_rewritten_total";
/// Unreferenced files removed by online cleanup, label `kind` = `data` | `manifest` |
/// `manifest_list` | `metadata` | `other`.
pub const FILES_DELETED_TOTAL: &str = "skade_files_deleted_total";
/// Bytes of [`FILES_DELETED_TOTAL`], label `kind`.
pub const BYTES_DELETED_TOTAL: &str = "skade_bytes_deleted_total";
/// Unreferenced files cleanup removed before their grace period ended because the files
/// waiting out a grace passed `--cleanup-max-waiting` bytes (the longest-waiting first),
/// label `kind` as [`FILES_DELETED_TOTAL`] (which counts them too).
pub const FILES_DELETED_EARLY_TOTAL: &str = "skade_files_deleted_early_total";
/// Bytes of [`FILES_DELETED_EARLY_TOTAL`], label `kind`.
pub const BYTES_DELETED_EARLY_TOTAL: &str = "skade_bytes_deleted_early_total";
/// Unreferenced files kept after the last cleanup sweep, waiting out a grace period
/// (files of writes in progress not counted).
pub const CLEANUP_WAITING_FILES: &str = "skade_cleanup_waiting_files";
/// Bytes of [`CLEANUP_WAITING_FILES`]; at most `--cleanup-max-waiting` after every sweep.
pub const CLEANUP_WAITING_BYTES: &str = "skade_cleanup_waiting_bytes";
/// Seconds of one maintenance pass over every table (expiry, merge, compaction, cleanup).
pub const MAINTENANCE_PASS_DURATION_SECONDS: &str = "skade_maintenance_pass_duration_seconds";
/// Tables the last maintenance pass found, label `maintained_by` = `this_instance` (it held
/// the table's maintenance lease and ran its jobs) | `another_instance` (an instance
/// sharing the PostgreSQL catalog held it). On the embedded catalog every table is
/// `this_instance`.
pub const MAINTENANCE_TABLES: &str = "skade_maintenance_tables";
/// Failed maintenance jobs, label `job` = `expire` | `merge` | `compact` | `cleanup` |
/// `load` | `lease`.
pub const MAINTENANCE_ERRORS_TOTAL: &str = "skade_maintenance_errors_total";
/// Tables whose maintenance leaves something out for their data's sake, as the last
/// pass (or compaction pass) found them, label `reason` = `delete_files` (compaction
/// leaves data files that a live delete file may apply to) | `location_not_owned`
/// (cleanup does not sweep a location skade did not create the table at) |
/// `location_shared` (cleanup does not sweep a location another table's overlaps) |
/// `write_path_property` (the table sets `write.data.path` or another property that
/// moves where its files go, which skade does not honour: nothing is written to it).
pub const MAINTENANCE_SKIPPED_TABLES: &str = "skade_maintenance_skipped_tables";
/// Snapshots in a table's metadata, label `table` (one series per catalog table; a
/// dropped table's series is removed).
pub const TABLE_SNAPSHOTS: &str = "skade_table_snapshots";
/// Manifests listed by a table's current snapshot, label `table`.
pub const TABLE_MANIFESTS: &str = "skade_table_manifests";
/// Live data files of a table's current snapshot, label `table`.
pub const TABLE_DATA_FILES: &str = "skade_table_data_files";

/// Writer ids with a committed high-water mark (exactly-once), read at scrape time.
pub const WRITERS: &str = "skade_writers";
/// `--max-writers`: the most writer ids the catalog keeps.
pub const WRITERS_MAX: &str = "skade_writers_max";
/// Writer ids forgotten after `--writer-retention` without a commit.
pub const WRITERS_FORGOTTEN_TOTAL: &str = "skade_writers_forgotten_total";
/// Batches of keyed streaming puts skipped as replays (at or below the writer's
/// high-water mark).
pub const BATCHES_REPLAYED_TOTAL: &str = "skade_batches_replayed_total";
/// Keyed puts and Flight SQL commits that were entirely replays: answered with the
/// original snapshot, nothing written. Label `lane` = `stream` | `multi`.
pub const COMMITS_REPLAYED_TOTAL: &str = "skade_commits_replayed_total";
/// Object-store operations of an S3 warehouse, label `op` = `read` | `write` | `stat` |
/// `delete` | `list` (a `write` is one whole upload, all its parts).
pub const OBJECT_STORE_REQUESTS_TOTAL: &str = "skade_object_store_requests_total";
/// Failed [`OBJECT_STORE_REQUESTS_TOTAL`] (after the store client's retries), label `op`.
pub const OBJECT_STORE_ERRORS_TOTAL: &str = "skade_object_store_errors_total";
/// Seconds of one object-store operation, label `op`.
pub const OBJECT_STORE_REQUEST_DURATION_SECONDS: &str =
    "skade_object_store_request_duration_seconds";

/// Always 1, labelled with what the running binary was built from: `version` (skade's),
/// `arrow`, `iceberg` and `parquet` (the crate versions linked, from `Cargo.lock`) and
/// `rustc`.
pub const BUILD_INFO: &str = "skade_build_info";
/// `--commit-interval` in seconds.
pub const COMMIT_INTERVAL_SECONDS: &str = "skade_commit_interval_seconds";
/// `--cleanup-max-waiting` in bytes: the bound [`CLEANUP_WAITING_BYTES`] stays under.
pub const CLEANUP_MAX_WAITING_BYTES: &str = "skade_cleanup_max_waiting_bytes";
/// Per table with at least one streaming put open (label `table`): seconds since the
/// later of the table's last commit and the moment its puts started (read at scrape
/// time). Grows past `--commit-interval` when rows wait longer than they should, or a
/// client holds a stream open without sending; absent while no put into the table is
/// open.
pub const TABLE_UNCOMMITTED_SECONDS: &str = "skade_table_uncommitted_seconds";

/// The `lane` label of a commit on the streaming put.
pub const LANE_STREAM: &str = "stream";
/// The `lane` label of a multi-table commit.
pub const LANE_MULTI: &str = "multi";
/// The `lane` label of a table maintenance commit (expiry, manifest merge).
pub const LANE_MAINTENANCE: &str = "maintenance";

/// The metrics of one server: every event is recorded through one of its methods.
/// Cheap to clone (the clones share the handles).
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// The names of every family registered (histograms by their base name), for
    /// [`Self::exported_names`].
    names: Arc<Mutex<Vec<String>>>,
    /// Streaming puts open per table and since when their table waits for a commit.
    waits: Waits,
    uncommitted: GaugeVec,
    settings: SettingsFamily,
    commits: CommitFamily,
    ingest: IngestFamily,
    writers: WriterFamily,
    maintenance: MaintenanceFamily,
    cleanup: CleanupFamily,
    object_store: ObjectStoreMetrics,
}

/// Registers metrics on one registry, noting their names.
struct Registrar<'a>(&'a Registry, Arc<Mutex<Vec<String>>>);

impl Registrar<'_> {
    fn add<C: Collector + Clone + 'static>(&self, collector: C) -> C {
        let names: Vec<String> = collector.desc().iter().map(|d| d.fq_name.clone()).collect();
        self.0
            .register(Box::new(collector.clone()))
            .expect("unique metric");
        lock(&self.1).extend(names);
        collector
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.add(IntCounter::new(name, help).expect("valid metric"))
    }

    fn counter_vec(&self, name: &str, help: &str, label: &str) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric"))
    }

    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::new(name, help).expect("valid metric"))
    }

    fn gauge_vec(&self, name: &str, help: &str, label: &str) -> IntGaugeVec {
        self.add(IntGaugeVec::new(Opts::new(name, help), &[label]).expect("valid metric"))
    }

    fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.add(Histogram::with_opts(opts).expect("valid metric"))
    }

    fn histogram_vec(&self, name: &str, help: &str, label: &str, buckets: &[f64]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
        self.add(HistogramVec::new(opts, &[label]).expect("valid metric"))
    }
}

/// A table's streaming puts: how many are open, and since when the table waits for a
/// commit (the later of its last commit and the opening of its first open put).
#[derive(Debug, Clone, Copy)]
struct TableWait {
    open: usize,
    since: Instant,
}

/// Every table's open streaming puts, shared by the metrics and the puts' guards.
type Waits = Arc<Mutex<HashMap<String, TableWait>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the server runs as: build info and the settings alert rules compare against.
#[derive(Debug, Clone)]
struct SettingsFamily {
    commit_interval_seconds: Gauge,
    cleanup_max_waiting_bytes: IntGauge,
}

impl SettingsFamily {
    fn new(r: &Registrar<'_>) -> Self {
        let info = r.add(
            IntGaugeVec::new(
                Opts::new(
                    BUILD_INFO,
                    "Always 1, labelled with what skade was built from.",
                ),
                &["version", "arrow", "iceberg", "parquet", "rustc"],
            )
            .expect("valid metric"),
        );
        info.with_label_values(&[
            env!("CARGO_PKG_VERSION"),
            env!("SKADE_DEP_VERSION_ARROW"),
            env!("SKADE_DEP_VERSION_ICEBERG"),
            env!("SKADE_DEP_VERSION_PARQUET"),
            env!("SKADE_RUSTC_VERSION"),
        ])
        .set(1);
        // The process's resident memory, CPU seconds, open file descriptors, threads and
        // start time (`process_*`, read from /proc at scrape time).
        #[cfg(target_os = "linux")]
        r.add_process_collector();
        Self {
            commit_interval_seconds: r.add(
                Gauge::new(COMMIT_INTERVAL_SECONDS, "--commit-interval in seconds.")
                    .expect("valid metric"),
            ),
            cleanup_max_waiting_bytes: r.gauge(
                CLEANUP_MAX_WAITING_BYTES,
                "--cleanup-max-waiting in bytes: the bound on bytes of unreferenced files waiting out a grace period.",
            ),
        }
    }
}

#[cfg(target_os = "linux")]
impl Registrar<'_> {
    fn add_process_collector(&self) {
        let collector = prometheus::process_collector::ProcessCollector::for_self();
        let names: Vec<String> = collector.desc().iter().map(|d| d.fq_name.clone()).collect();
        if self.0.register(Box::new(collector)).is_ok() {
            lock(&self.1).extend(names);
        }
    }
}

/// What commits made visible, and replays skipped.
#[derive(Debug, Clone)]
struct CommitFamily {
    duration: HistogramVec,
    rows: IntCounterVec,
    data_files: IntCounterVec,
    bytes: IntCounterVec,
    batches_replayed: IntCounter,
    commits_replayed: IntCounterVec,
}

impl CommitFamily {
    fn new(r: &Registrar<'_>) -> Self {
        Self {
            duration: r.histogram_vec(
                COMMIT_DURATION_SECONDS,
                "Seconds of one catalog commit.",
                "lane",
                &[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ],
            ),
            rows: r.counter_vec(ROWS_COMMITTED_TOTAL, "Rows made visible.", "table"),
            data_files: r.counter_vec(
                DATA_FILES_COMMITTED_TOTAL,
                "Data files made visible.",
                "table",
            ),
            bytes: r.counter_vec(
                BYTES_COMMITTED_TOTAL,
                "Parquet bytes made visible.",
                "table",
            ),
            batches_replayed: r.counter(
                BATCHES_REPLAYED_TOTAL,
                "Batches of keyed puts skipped as replays.",
            ),
            commits_replayed: r.counter_vec(
                COMMITS_REPLAYED_TOTAL,
                "Keyed puts and Flight SQL commits that were entirely replays.",
                "lane",
            ),
        }
    }
}

/// The ingest surface: calls, failures, open streams and transactions, limits, readiness.
#[derive(Debug, Clone)]
struct IngestFamily {
    requests: IntCounter,
    errors: IntCounterVec,
    auth_failures: IntCounterVec,
    put_streams_active: IntGauge,
    put_streams_max: IntGauge,
    transactions_active: IntGauge,
    memory_budget_bytes: IntGauge,
    memory_reserved_bytes: IntGauge,
    /// `None` when the global allocator does not count (a program embedding the library).
    heap_allocated_bytes: Option<IntGauge>,
    ready: IntGauge,
}

impl IngestFamily {
    fn new(r: &Registrar<'_>) -> Self {
        Self {
            requests: r.counter(
                INGEST_REQUESTS_TOTAL,
                "DoPut streams and Flight SQL actions received.",
            ),
            errors: r.counter_vec(INGEST_ERRORS_TOTAL, "Failed puts and commits.", "code"),
            auth_failures: r.counter_vec(
                AUTH_FAILURES_TOTAL,
                "Calls refused for a missing or invalid bearer token.",
                "surface",
            ),
            put_streams_active: r.gauge(PUT_STREAMS_ACTIVE, "Open DoPut streams."),
            put_streams_max: r.gauge(
                PUT_STREAMS_MAX,
                "Most DoPut streams open at once (--max-streams).",
            ),
            transactions_active: r.gauge(TRANSACTIONS_ACTIVE, "Open Flight SQL transactions."),
            memory_budget_bytes: r.gauge(
                MEMORY_BUDGET_BYTES,
                "Arrow bytes of rows in flight all streams may hold (--memory-budget).",
            ),
            memory_reserved_bytes: r.gauge(
                MEMORY_RESERVED_BYTES,
                "Arrow bytes of rows in flight held against the memory budget.",
            ),
            heap_allocated_bytes: crate::heap::allocated_bytes().map(|_| {
                r.gauge(
                    HEAP_ALLOCATED_BYTES,
                    &format!(
                        "Bytes the allocator has handed out and not had back (the live heap), to within {} KiB per thread.",
                        crate::heap::THREAD_SLACK_BYTES >> 10
                    ),
                )
            }),
            ready: r.gauge(READY, "1 when /readyz answers 200, else 0."),
        }
    }
}

/// Producers' writer ids (exactly-once).
#[derive(Debug, Clone)]
struct WriterFamily {
    writers: IntGauge,
    max: IntGauge,
    forgotten: IntCounter,
}

impl WriterFamily {
    fn new(r: &Registrar<'_>) -> Self {
        Self {
            writers: r.gauge(WRITERS, "Writer ids with a committed high-water mark."),
            max: r.gauge(
                WRITERS_MAX,
                "Most writer ids the catalog keeps (--max-writers).",
            ),
            forgotten: r.counter(
                WRITERS_FORGOTTEN_TOTAL,
                "Writer ids forgotten after --writer-retention without a commit.",
            ),
        }
    }
}

/// Table maintenance: what it expired and rewrote, its passes and failures, and each
/// table's shape. What cleanup removes is [`CleanupFamily`]'s.
#[derive(Debug, Clone)]
struct MaintenanceFamily {
    snapshots_expired: IntCounter,
    manifests_merged: IntCounter,
    files_rewritten: IntCounterVec,
    bytes_rewritten: IntCounterVec,
    tables: IntGaugeVec,
    pass_duration: Histogram,
    errors: IntCounterVec,
    skipped: IntGaugeVec,
    table_snapshots: IntGaugeVec,
    table_manifests: IntGaugeVec,
    table_data_files: IntGaugeVec,
}

impl MaintenanceFamily {
    fn new(r: &Registrar<'_>) -> Self {
        Self {
            snapshots_expired: r.counter(
                SNAPSHOTS_EXPIRED_TOTAL,
                "Snapshots removed by maintenance expiry commits.",
            ),
            manifests_merged: r.counter(
                MANIFESTS_MERGED_TOTAL,
                "Manifests replaced by merged ones in maintenance commits.",
            ),
            files_rewritten: r.counter_vec(
                FILES_REWRITTEN_TOTAL,
                "Files whose content maintenance commits rewrote into new files.",
                "kind",
            ),
            bytes_rewritten: r.counter_vec(
                BYTES_REWRITTEN_TOTAL,
                "Bytes of files whose content maintenance commits rewrote into new files.",
                "kind",
            ),
            pass_duration: r.histogram(
                MAINTENANCE_PASS_DURATION_SECONDS,
                "Seconds of one maintenance pass over every table.",
                &[
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                ],
            ),
            tables: r.gauge_vec(
                MAINTENANCE_TABLES,
                "Tables the last maintenance pass found, by which instance maintains them.",
                "maintained_by",
            ),
            errors: r.counter_vec(
                MAINTENANCE_ERRORS_TOTAL,
                "Failed table maintenance jobs.",
                "job",
            ),
            skipped: r.gauge_vec(
                MAINTENANCE_SKIPPED_TABLES,
                "Tables whose maintenance leaves something out to keep their data, by reason.",
                "reason",
            ),
            table_snapshots: r.gauge_vec(
                TABLE_SNAPSHOTS,
                "Snapshots in a table's metadata.",
                "table",
            ),
            table_manifests: r.gauge_vec(
                TABLE_MANIFESTS,
                "Manifests listed by a table's current snapshot.",
                "table",
            ),
            table_data_files: r.gauge_vec(
                TABLE_DATA_FILES,
                "Live data files of a table's current snapshot.",
                "table",
            ),
        }
    }
}

/// Online cleanup: the unreferenced files it removed (before their grace period ended,
/// too) and those its last sweep left waiting.
#[derive(Debug, Clone)]
struct CleanupFamily {
    files_deleted: IntCounterVec,
    bytes_deleted: IntCounterVec,
    files_deleted_early: IntCounterVec,
    bytes_deleted_early: IntCounterVec,
    waiting_files: IntGauge,
    waiting_bytes: IntGauge,
}

impl CleanupFamily {
    fn new(r: &Registrar<'_>) -> Self {
        Self {
            files_deleted: r.counter_vec(
                FILES_DELETED_TOTAL,
                "Unreferenced files removed by online cleanup.",
                "kind",
            ),
            bytes_deleted: r.counter_vec(
                BYTES_DELETED_TOTAL,
                "Bytes of unreferenced files removed by online cleanup.",
                "kind",
            ),
            files_deleted_early: r.counter_vec(
                FILES_DELETED_EARLY_TOTAL,
                "Unreferenced files removed before their grace period ended (waiting bytes over the cap).",
                "kind",
            ),
            bytes_deleted_early: r.counter_vec(
                BYTES_DELETED_EARLY_TOTAL,
                "Bytes of unreferenced files removed before their grace period ended.",
                "kind",
            ),
            waiting_files: r.gauge(
                CLEANUP_WAITING_FILES,
                "Unreferenced files waiting out a grace period after the last cleanup sweep.",
            ),
            waiting_bytes: r.gauge(
                CLEANUP_WAITING_BYTES,
                "Bytes of unreferenced files waiting out a grace period after the last cleanup sweep.",
            ),
        }
    }
}

fn object_store_family(r: &Registrar<'_>) -> ObjectStoreMetrics {
    ObjectStoreMetrics::new(
        r.counter_vec(
            OBJECT_STORE_REQUESTS_TOTAL,
            "Object-store operations of an S3 warehouse.",
            "op",
        ),
        r.counter_vec(
            OBJECT_STORE_ERRORS_TOTAL,
            "Failed object-store operations of an S3 warehouse.",
            "op",
        ),
        r.histogram_vec(
            OBJECT_STORE_REQUEST_DURATION_SECONDS,
            "Seconds of one object-store operation.",
            "op",
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
        ),
    )
}

/// Reads one of a catalog's counts.
type ReadCount = fn(&CommitCounts) -> u64;

/// A counter whose value its owner keeps and the registry reads at scrape time.
struct PullingCounter {
    desc: Desc,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl Collector for PullingCounter {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut counter = Counter::default();
        counter.set_value((self.read)() as f64);
        let mut metric = Metric::default();
        metric.set_counter(counter);
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::COUNTER);
        family.set_metric(vec![metric]);
        vec![family]
    }
}

/// Converts a count or size to a gauge value, saturating.
fn gauge_value(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl Metrics {
    /// Creates and registers every metric, family by family; the catalog's commit and sync
    /// counts join when a catalog is given ([`Self::count_catalog`]).
    ///
    /// # Panics
    /// Never in practice: registration fails only for duplicate or malformed names, and
    /// the names are the constants above.
    pub fn new() -> Self {
        let registry = Registry::new();
        let names = Arc::new(Mutex::new(Vec::new()));
        let r = Registrar(&registry, names.clone());
        let uncommitted = r.add(
            GaugeVec::new(
                Opts::new(
                    TABLE_UNCOMMITTED_SECONDS,
                    "Seconds a table with open streaming puts has waited for a commit.",
                ),
                &["table"],
            )
            .expect("valid metric"),
        );
        Self {
            settings: SettingsFamily::new(&r),
            uncommitted,
            waits: Arc::default(),
            names,
            commits: CommitFamily::new(&r),
            ingest: IngestFamily::new(&r),
            writers: WriterFamily::new(&r),
            maintenance: MaintenanceFamily::new(&r),
            cleanup: CleanupFamily::new(&r),
            object_store: object_store_family(&r),
            registry,
        }
    }

    /// Shows `counts` — one catalog's own data-commit and sync counts, the one place they
    /// are kept — as [`CATALOG_COMMITS_TOTAL`] and [`FILE_SYNCS_TOTAL`], read at scrape
    /// time. Only the first catalog given is shown.
    pub fn count_catalog(&self, counts: CommitCounts) {
        let pulled: [(&str, &str, ReadCount); 4] = [
            (
                CATALOG_COMMITS_TOTAL,
                "Durable redb write transactions on the data paths (commit fsyncs).",
                CommitCounts::commits,
            ),
            (
                FILE_SYNCS_TOTAL,
                "Warehouse syncs (syncfs) before data commits' pointer flips.",
                CommitCounts::syncs,
            ),
            (
                COMMIT_CONFLICTS_TOTAL,
                "Commits staged again after a compare-and-swap conflict.",
                CommitCounts::conflicts,
            ),
            (
                COMMIT_TURN_SKIPPED_TOTAL,
                "Commits on a shared catalog that went ahead without their turn across instances (no turn connection free, or the database failing).",
                CommitCounts::turns_skipped,
            ),
        ];
        for (name, help, read) in pulled {
            let counts = counts.clone();
            let Ok(desc) = Desc::new(name.into(), help.into(), Vec::new(), Default::default())
            else {
                continue;
            };
            // A second catalog's counts are refused as a duplicate: the first stays.
            if self
                .registry
                .register(Box::new(PullingCounter {
                    desc,
                    read: Box::new(move || read(&counts)),
                }))
                .is_ok()
            {
                lock(&self.names).push(name.to_string());
            }
        }
    }

    /// The object-store handles, for an S3 warehouse's storage.
    pub fn object_store(&self) -> ObjectStoreMetrics {
        self.object_store.clone()
    }

    /// Records one successful commit of `stats` to `table` on `lane`.
    pub fn record_commit(&self, lane: &str, table: &str, stats: &IngestStats, seconds: f64) {
        self.record_commit_seconds(lane, seconds);
        self.count_table(table, stats);
    }

    /// Records ONE catalog commit on `lane` that made several tables' `stats` visible:
    /// one histogram observation, per-table row/file/byte counters.
    pub fn record_tables_commit(&self, lane: &str, tables: &[(String, IngestStats)], seconds: f64) {
        self.record_commit_seconds(lane, seconds);
        for (table, stats) in tables {
            self.count_table(table, stats);
        }
    }

    /// Records the duration of one catalog commit on `lane` that made no rows visible (a
    /// maintenance commit).
    pub fn record_commit_seconds(&self, lane: &str, seconds: f64) {
        self.commits
            .duration
            .with_label_values(&[lane])
            .observe(seconds);
    }

    /// Adds one commit's rows, data files and bytes to `table`'s counters; the table's
    /// open puts wait for a commit from now on.
    fn count_table(&self, table: &str, stats: &IngestStats) {
        if let Some(wait) = lock(&self.waits).get_mut(table) {
            wait.since = Instant::now();
        }
        let labels = [table];
        let c = &self.commits;
        c.rows.with_label_values(&labels).inc_by(stats.rows);
        c.data_files.with_label_values(&labels).inc_by(stats.files);
        c.bytes.with_label_values(&labels).inc_by(stats.bytes);
    }

    /// Records `batches` batches of a keyed put skipped as replays.
    pub fn record_batches_replayed(&self, batches: u64) {
        self.commits.batches_replayed.inc_by(batches);
    }

    /// Records one keyed put or Flight SQL commit on `lane` that was entirely a replay.
    pub fn record_commit_replayed(&self, lane: &str) {
        self.commits
            .commits_replayed
            .with_label_values(&[lane])
            .inc();
    }

    /// Records one DoPut stream or Flight SQL action received.
    pub fn record_ingest_request(&self) {
        self.ingest.requests.inc();
    }

    /// Records one failed put or commit, by its gRPC code name (`code`).
    pub fn record_ingest_error(&self, code: &str) {
        self.ingest.errors.with_label_values(&[code]).inc();
    }

    /// Records one call refused for its bearer token on `surface` (`flight` | `rest`).
    pub fn record_auth_failure(&self, surface: &str) {
        self.ingest
            .auth_failures
            .with_label_values(&[surface])
            .inc();
    }

    /// Counts one open DoPut stream until the returned guard drops.
    pub fn put_stream_opened(&self) -> ActiveStream {
        self.ingest.put_streams_active.inc();
        ActiveStream {
            gauge: self.ingest.put_streams_active.clone(),
            table: None,
        }
    }

    /// Counts one open streaming put into `table` until the returned guard drops; while
    /// one is open, [`TABLE_UNCOMMITTED_SECONDS`] shows how long the table has waited
    /// for a commit.
    pub fn table_put_opened(&self, table: &str) -> ActiveStream {
        let mut guard = self.put_stream_opened();
        let mut waits = lock(&self.waits);
        let wait = waits.entry(table.to_string()).or_insert(TableWait {
            open: 0,
            since: Instant::now(),
        });
        if wait.open == 0 {
            wait.since = Instant::now();
        }
        wait.open += 1;
        guard.table = Some((table.to_string(), self.waits.clone()));
        guard
    }

    /// Sets the settings alert rules compare against: `--commit-interval` and
    /// `--cleanup-max-waiting` (bytes).
    pub fn set_settings(
        &self,
        commit_interval: std::time::Duration,
        cleanup_max_waiting_bytes: u64,
    ) {
        let s = &self.settings;
        s.commit_interval_seconds.set(commit_interval.as_secs_f64());
        s.cleanup_max_waiting_bytes
            .set(gauge_value(cleanup_max_waiting_bytes));
    }

    /// The name of every metric family this registry exports (histograms by their base
    /// name, without `_bucket`, `_sum`, `_count`), whether or not it has a sample yet.
    pub fn exported_names(&self) -> Vec<String> {
        let mut names = lock(&self.names).clone();
        names.sort();
        names.dedup();
        names
    }

    /// Sets [`TABLE_UNCOMMITTED_SECONDS`] of every table with open puts, and removes
    /// the series of tables without.
    fn refresh_waits(&self) {
        let now = Instant::now();
        let mut waits = lock(&self.waits);
        waits.retain(|table, wait| {
            if wait.open == 0 {
                let _ = self.uncommitted.remove_label_values(&[table]);
                return false;
            }
            self.uncommitted
                .with_label_values(&[table])
                .set(now.saturating_duration_since(wait.since).as_secs_f64());
            true
        });
    }

    /// Sets the number of open Flight SQL transactions.
    pub fn set_transactions_open(&self, open: usize) {
        self.ingest.transactions_active.set(gauge_value(open));
    }

    /// Sets the configured limits: `--max-streams`, the memory budget in bytes and
    /// `--max-writers`.
    pub fn set_limits(&self, max_streams: usize, memory_budget_bytes: usize, max_writers: usize) {
        let i = &self.ingest;
        i.put_streams_max.set(gauge_value(max_streams));
        i.memory_budget_bytes.set(gauge_value(memory_budget_bytes));
        self.writers.max.set(gauge_value(max_writers));
    }

    /// Sets what a scrape reads from the server: bytes held against the memory budget,
    /// the live heap ([`crate::heap::allocated_bytes`]), writer ids with a mark (`None`
    /// when the catalog could not be read: the last value stays), and readiness.
    pub fn set_scrape_state(&self, reserved_bytes: usize, writers: Option<u64>, ready: bool) {
        let i = &self.ingest;
        i.memory_reserved_bytes.set(gauge_value(reserved_bytes));
        if let (Some(gauge), Some(bytes)) =
            (&i.heap_allocated_bytes, crate::heap::allocated_bytes())
        {
            gauge.set(gauge_value(bytes));
        }
        if let Some(writers) = writers {
            self.writers.writers.set(gauge_value(writers));
        }
        i.ready.set(i64::from(ready));
    }

    /// Records `writers` writer ids forgotten after the retention.
    pub fn record_writers_forgotten(&self, writers: u64) {
        self.writers.forgotten.inc_by(writers);
    }

    /// Records `snapshots` snapshots removed by an expiry commit.
    pub fn record_snapshots_expired(&self, snapshots: u64) {
        self.maintenance.snapshots_expired.inc_by(snapshots);
    }

    /// Records a manifest merge commit that replaced `manifests` manifests of `bytes`.
    pub fn record_manifests_merged(&self, manifests: u64, bytes: u64) {
        self.maintenance.manifests_merged.inc_by(manifests);
        self.record_rewritten("manifest", manifests, bytes);
    }

    /// Records `files` files of `bytes` whose content a maintenance commit rewrote, of
    /// `kind` (`data` | `manifest`).
    pub fn record_rewritten(&self, kind: &str, files: u64, bytes: u64) {
        let m = &self.maintenance;
        m.files_rewritten.with_label_values(&[kind]).inc_by(files);
        m.bytes_rewritten.with_label_values(&[kind]).inc_by(bytes);
    }

    /// Records one unreferenced file of `bytes` removed by cleanup, of `kind`.
    pub fn record_file_deleted(&self, kind: &str, bytes: u64) {
        let m = &self.cleanup;
        m.files_deleted.with_label_values(&[kind]).inc();
        m.bytes_deleted.with_label_values(&[kind]).inc_by(bytes);
    }

    /// Records one unreferenced file of `bytes` that cleanup removed before its grace
    /// period ended (over `--cleanup-max-waiting`), of `kind`; [`Self::record_file_deleted`]
    /// counts it too.
    pub fn record_file_deleted_early(&self, kind: &str, bytes: u64) {
        let m = &self.cleanup;
        m.files_deleted_early.with_label_values(&[kind]).inc();
        m.bytes_deleted_early
            .with_label_values(&[kind])
            .inc_by(bytes);
    }

    /// Sets the unreferenced files (count, bytes) a cleanup sweep left waiting.
    pub fn set_cleanup_waiting(&self, files: usize, bytes: u64) {
        let m = &self.cleanup;
        m.waiting_files.set(gauge_value(files));
        m.waiting_bytes.set(gauge_value(bytes));
    }

    /// Records one maintenance pass of `seconds`, in which this instance maintained
    /// `maintained` tables and another instance `elsewhere`.
    pub fn record_maintenance_pass(&self, seconds: f64, maintained: usize, elsewhere: usize) {
        let m = &self.maintenance;
        m.pass_duration.observe(seconds);
        m.tables
            .with_label_values(&["this_instance"])
            .set(gauge_value(maintained as u64));
        m.tables
            .with_label_values(&["another_instance"])
            .set(gauge_value(elsewhere as u64));
    }

    /// Records one failed maintenance `job`.
    pub fn record_maintenance_error(&self, job: &str) {
        self.maintenance.errors.with_label_values(&[job]).inc();
    }

    /// Sets how many tables the last pass left partly unmaintained for `reason` (see
    /// [`MAINTENANCE_SKIPPED_TABLES`]).
    pub fn set_maintenance_skipped(&self, reason: &str, tables: usize) {
        self.maintenance
            .skipped
            .with_label_values(&[reason])
            .set(gauge_value(tables));
    }

    /// Sets `table`'s snapshot, manifest and live data file counts.
    pub fn set_table_shape(
        &self,
        table: &str,
        snapshots: usize,
        manifests: usize,
        data_files: i64,
    ) {
        let (m, labels) = (&self.maintenance, [table]);
        m.table_snapshots
            .with_label_values(&labels)
            .set(gauge_value(snapshots));
        m.table_manifests
            .with_label_values(&labels)
            .set(gauge_value(manifests));
        m.table_data_files
            .with_label_values(&labels)
            .set(data_files);
    }

    /// Removes a dropped `table`'s series of [`Self::set_table_shape`].
    pub fn forget_table(&self, table: &str) {
        let m = &self.maintenance;
        for gauge in [&m.table_snapshots, &m.table_manifests, &m.table_data_files] {
            let _ = gauge.remove_label_values(&[table]);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.refresh_waits();
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// One open DoPut stream on [`PUT_STREAMS_ACTIVE`] ([`Metrics::put_stream_opened`]);
/// dropping it counts the stream closed.
#[derive(Debug)]
#[must_use = "dropping the guard counts the stream closed at once"]
pub struct ActiveStream {
    gauge: IntGauge,
    /// The table of a streaming put, and the waits it counts in.
    table: Option<(String, Waits)>,
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        self.gauge.dec();
        if let Some((table, waits)) = &self.table
            && let Some(wait) = lock(waits).get_mut(table)
        {
            wait.open = wait.open.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use iceberg::{NamespaceIdent, TableCreation, TableIdent};

    use super::*;
    use crate::catalog::{RedbCatalog, Release};

    /// The value of the series `series` (name with its labels, as exposed) in `text`.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| {
            let (name, v) = line.rsplit_once(' ')?;
            (name == series).then(|| v.parse().ok()).flatten()
        })
    }

    // Catches an ingest record method that bumps the wrong series, label or amount, and a
    // name or help text that drifts from what dashboards and alert rules scrape.
    #[test]
    fn ingest_events_are_recorded_once_under_their_names_and_labels() {
        let m = Metrics::new();
        let stats = IngestStats {
            rows: 10,
            files: 2,
            bytes: 300,
            commits: 1,
        };
        m.record_commit(LANE_STREAM, "ns.a", &stats, 0.002);
        let both = [("ns.a".into(), stats), ("ns.b".into(), stats)];
        m.record_tables_commit(LANE_MULTI, &both, 0.01);
        m.record_commit_seconds(LANE_MAINTENANCE, 0.5);
        m.record_batches_replayed(3);
        m.record_commit_replayed(LANE_STREAM);
        m.record_ingest_request();
        m.record_ingest_error("InvalidArgument");
        m.record_auth_failure("rest");
        let stream = m.put_stream_opened();
        m.set_transactions_open(2);
        m.set_limits(8, 1024, 5);
        m.set_scrape_state(512, Some(4), true);
        m.record_writers_forgotten(1);
        let text = m.render();
        for (series, expected) in [
            (r#"skade_rows_committed_total{table="ns.a"}"#, 20.0),
            (r#"skade_rows_committed_total{table="ns.b"}"#, 10.0),
            (r#"skade_data_files_committed_total{table="ns.a"}"#, 4.0),
            (r#"skade_bytes_committed_total{table="ns.b"}"#, 300.0),
            (r#"skade_commit_duration_seconds_count{lane="stream"}"#, 1.0),
            (r#"skade_commit_duration_seconds_count{lane="multi"}"#, 1.0),
            (
                r#"skade_commit_duration_seconds_sum{lane="maintenance"}"#,
                0.5,
            ),
            ("skade_batches_replayed_total", 3.0),
            (r#"skade_commits_replayed_total{lane="stream"}"#, 1.0),
            ("skade_ingest_requests_total", 1.0),
            (r#"skade_ingest_errors_total{code="InvalidArgument"}"#, 1.0),
            (r#"skade_auth_failures_total{surface="rest"}"#, 1.0),
            ("skade_put_streams_active", 1.0),
            ("skade_transactions_active", 2.0),
            ("skade_put_streams_max", 8.0),
            ("skade_memory_budget_bytes", 1024.0),
            ("skade_writers_max", 5.0),
            ("skade_memory_reserved_bytes", 512.0),
            ("skade_writers", 4.0),
            ("skade_ready", 1.0),
            ("skade_writers_forgotten_total", 1.0),
        ] {
            assert_eq!(value(&text, series), Some(expected), "{series} in\n{text}");
        }
        for help in [
            "# HELP skade_rows_committed_total Rows made visible.",
            "# HELP skade_ingest_errors_total Failed puts and commits.",
            "# HELP skade_commit_duration_seconds Seconds of one catalog commit.",
        ] {
            assert!(text.contains(help), "{help}");
        }
        drop(stream);
        assert_eq!(value(&m.render(), "skade_put_streams_active"), Some(0.0));
    }

    // Catches build info that reports literals instead of what was linked (the arrow
    // label must be Cargo.lock's arrow, read here independently), missing process
    // metrics, and a per-table wait series that outlives the table's last open put or
    // never appears.
    #[test]
    fn build_info_process_metrics_and_table_waits() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
            .expect("Cargo.lock");
        let arrow = lock
            .split("[[package]]")
            .find(|b| b.lines().any(|l| l.trim() == "name = \"arrow\""))
            .and_then(|b| {
                b.lines()
                    .find_map(|l| l.trim().strip_prefix("version = \""))
            })
            .and_then(|v| v.strip_suffix('"'))
            .expect("arrow in Cargo.lock");
        let m = Metrics::new();
        m.set_settings(std::time::Duration::from_secs(10), 1 << 30);
        let text = m.render();
        let info = text
            .lines()
            .find(|l| l.starts_with("skade_build_info{"))
            .expect("build info");
        assert!(info.contains(&format!("arrow=\"{arrow}\"")), "{info}");
        assert!(
            info.contains("version=\"0.1.0\"") && info.ends_with(" 1"),
            "{info}"
        );
        assert_eq!(value(&text, "skade_commit_interval_seconds"), Some(10.0));
        assert_eq!(
            value(&text, "skade_cleanup_max_waiting_bytes"),
            Some(1073741824.0)
        );
        let resident = value(&text, "process_resident_memory_bytes").expect("resident memory");
        assert!(resident > 1e6, "{resident}");
        assert!(value(&text, "process_open_fds").is_some_and(|fds| fds >= 1.0));

        let series = r#"skade_table_uncommitted_seconds{table="ns.a"}"#;
        assert_eq!(value(&text, series), None, "no put open yet");
        let first = m.table_put_opened("ns.a");
        let second = m.table_put_opened("ns.a");
        assert!(value(&m.render(), series).is_some_and(|s| s >= 0.0));
        drop(first);
        assert!(
            value(&m.render(), series).is_some(),
            "one put is still open"
        );
        drop(second);
        let text = m.render();
        assert_eq!(value(&text, series), None, "{text}");
        assert_eq!(value(&text, "skade_put_streams_active"), Some(0.0));
        let names = m.exported_names();
        for name in [
            "skade_build_info",
            "process_resident_memory_bytes",
            "skade_ingest_errors_total",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }

    // Catches a maintenance record method that bumps the wrong series, label or amount,
    // and a dropped table's shape series left behind.
    #[test]
    fn maintenance_events_are_recorded_under_their_names_and_labels() {
        let m = Metrics::new();
        m.record_snapshots_expired(3);
        m.record_manifests_merged(4, 4096);
        m.record_rewritten("data", 6, 600);
        m.record_file_deleted("data", 70);
        m.record_file_deleted_early("metadata", 90);
        m.set_cleanup_waiting(12, 3400);
        m.record_maintenance_pass(0.2, 0, 0);
        m.record_maintenance_error("merge");
        m.set_table_shape("ns.a", 3, 2, 9);
        m.set_table_shape("ns.gone", 1, 1, 1);
        m.forget_table("ns.gone");
        let text = m.render();
        for (series, expected) in [
            ("skade_snapshots_expired_total", 3.0),
            ("skade_manifests_merged_total", 4.0),
            (r#"skade_files_rewritten_total{kind="manifest"}"#, 4.0),
            (r#"skade_bytes_rewritten_total{kind="manifest"}"#, 4096.0),
            (r#"skade_files_rewritten_total{kind="data"}"#, 6.0),
            (r#"skade_bytes_rewritten_total{kind="data"}"#, 600.0),
            (r#"skade_files_deleted_total{kind="data"}"#, 1.0),
            (r#"skade_bytes_deleted_total{kind="data"}"#, 70.0),
            (r#"skade_files_deleted_early_total{kind="metadata"}"#, 1.0),
            (r#"skade_bytes_deleted_early_total{kind="metadata"}"#, 90.0),
            ("skade_cleanup_waiting_files", 12.0),
            ("skade_cleanup_waiting_bytes", 3400.0),
            ("skade_maintenance_pass_duration_seconds_count", 1.0),
            ("skade_maintenance_pass_duration_seconds_sum", 0.2),
            (r#"skade_maintenance_errors_total{job="merge"}"#, 1.0),
            (r#"skade_table_snapshots{table="ns.a"}"#, 3.0),
            (r#"skade_table_manifests{table="ns.a"}"#, 2.0),
            (r#"skade_table_data_files{table="ns.a"}"#, 9.0),
        ] {
            assert_eq!(value(&text, series), Some(expected), "{series} in\n{text}");
        }
        assert!(
            !text.contains("ns.gone"),
            "a forgotten table keeps no series"
        );
        assert!(text.contains("# HELP skade_table_snapshots Snapshots in a table's metadata."));
    }

    // Catches the commit and sync metrics drifting from the catalog's own counts (the one
    // place a commit is counted): they read the catalog at scrape time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commit_and_sync_totals_read_the_catalog_counts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let catalog =
            RedbCatalog::open(&dir.path().join("c.redb"), &dir.path().join("w")).expect("catalog");
        let m = Metrics::new();
        m.count_catalog(catalog.commit_counts());
        let text = m.render();
        assert!(text.contains(
            "# HELP skade_catalog_commits_total Durable redb write transactions on the data paths (commit fsyncs)."
        ));
        assert!(text.contains("# TYPE skade_file_syncs_total counter"));
        assert_eq!(value(&text, "skade_catalog_commits_total"), Some(0.0));

        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .expect("schema");
        let creation = TableCreation::builder()
            .name("t".into())
            .schema(schema)
            .build();
        let ident = TableIdent::new(NamespaceIdent::new("ns".into()), "t".into());
        let table = catalog.plan_table(&ident, creation).await.expect("plan");
        catalog
            .atomic_release_raw(vec![Release::Create {
                table,
                requirements: Vec::new(),
                updates: Vec::new(),
                mark: None,
            }])
            .await
            .expect("release");
        let text = m.render();
        assert_eq!(value(&text, "skade_catalog_commits_total"), Some(1.0));
        assert_eq!(value(&text, "skade_file_syncs_total"), Some(1.0));
        assert_eq!(catalog.commit_count(), 1);
    }
}

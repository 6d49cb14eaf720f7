//! Every metric skade exports, by name (docs/SERVICE.md, "Metrics"), and their registry.
//!
//! Each server owns its own [`Metrics`] (a `prometheus::Registry`), so several servers in
//! one process — as in the tests — count separately.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Durable redb write transactions on the data paths (= commit fsyncs).
pub const CATALOG_COMMITS_TOTAL: &str = "skade_catalog_commits_total";
/// Warehouse syncs (`syncfs(2)`) before data commits' pointer flips.
pub const FILE_SYNCS_TOTAL: &str = "skade_file_syncs_total";
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
/// Failed maintenance jobs, label `job` = `expire` | `merge` | `compact` | `cleanup` | `load`.
pub const MAINTENANCE_ERRORS_TOTAL: &str = "skade_maintenance_errors_total";
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

/// The `lane` label of a commit on the streaming put.
pub const LANE_STREAM: &str = "stream";
/// The `lane` label of a multi-table commit.
pub const LANE_MULTI: &str = "multi";
/// The `lane` label of a table maintenance commit (expiry, manifest merge).
pub const LANE_MAINTENANCE: &str = "maintenance";

/// The metric handles of one server.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    /// See [`CATALOG_COMMITS_TOTAL`].
    pub catalog_commits: IntCounter,
    /// See [`FILE_SYNCS_TOTAL`].
    pub file_syncs: IntCounter,
    /// See [`COMMIT_DURATION_SECONDS`].
    pub commit_duration: HistogramVec,
    /// See [`ROWS_COMMITTED_TOTAL`].
    pub rows_committed: IntCounterVec,
    /// See [`DATA_FILES_COMMITTED_TOTAL`].
    pub data_files_committed: IntCounterVec,
    /// See [`BYTES_COMMITTED_TOTAL`].
    pub bytes_committed: IntCounterVec,
    /// See [`PUT_STREAMS_ACTIVE`].
    pub put_streams_active: IntGauge,
    /// See [`TRANSACTIONS_ACTIVE`].
    pub transactions_active: IntGauge,
    /// See [`INGEST_ERRORS_TOTAL`].
    pub ingest_errors: IntCounterVec,
    /// See [`AUTH_FAILURES_TOTAL`].
    pub auth_failures: IntCounterVec,
    /// See [`INGEST_REQUESTS_TOTAL`].
    pub ingest_requests: IntCounter,
    /// See [`PUT_STREAMS_MAX`].
    pub put_streams_max: IntGauge,
    /// See [`MEMORY_BUDGET_BYTES`].
    pub memory_budget_bytes: IntGauge,
    /// See [`MEMORY_RESERVED_BYTES`].
    pub memory_reserved_bytes: IntGauge,
    /// See [`READY`].
    pub ready: IntGauge,
    /// See [`SNAPSHOTS_EXPIRED_TOTAL`].
    pub snapshots_expired: IntCounter,
    /// See [`MANIFESTS_MERGED_TOTAL`].
    pub manifests_merged: IntCounter,
    /// See [`FILES_REWRITTEN_TOTAL`].
    pub files_rewritten: IntCounterVec,
    /// See [`BYTES_REWRITTEN_TOTAL`].
    pub bytes_rewritten: IntCounterVec,
    /// See [`FILES_DELETED_TOTAL`].
    pub files_deleted: IntCounterVec,
    /// See [`BYTES_DELETED_TOTAL`].
    pub bytes_deleted: IntCounterVec,
    /// See [`MAINTENANCE_ERRORS_TOTAL`].
    pub maintenance_errors: IntCounterVec,
    /// See [`TABLE_SNAPSHOTS`].
    pub table_snapshots: IntGaugeVec,
    /// See [`TABLE_MANIFESTS`].
    pub table_manifests: IntGaugeVec,
    /// See [`TABLE_DATA_FILES`].
    pub table_data_files: IntGaugeVec,
    /// See [`WRITERS`].
    pub writers: IntGauge,
    /// See [`WRITERS_MAX`].
    pub writers_max: IntGauge,
    /// See [`WRITERS_FORGOTTEN_TOTAL`].
    pub writers_forgotten: IntCounter,
    /// See [`BATCHES_REPLAYED_TOTAL`].
    pub batches_replayed: IntCounter,
    /// See [`COMMITS_REPLAYED_TOTAL`].
    pub commits_replayed: IntCounterVec,
    /// See [`OBJECT_STORE_REQUESTS_TOTAL`].
    pub object_store_requests: IntCounterVec,
    /// See [`OBJECT_STORE_ERRORS_TOTAL`].
    pub object_store_errors: IntCounterVec,
    /// See [`OBJECT_STORE_REQUEST_DURATION_SECONDS`].
    pub object_store_duration: HistogramVec,
}

impl Metrics {
    /// Creates and registers every metric.
    ///
    /// # Panics
    /// Never in practice: registration fails only for duplicate or malformed names, and
    /// the names are the constants above.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter_vec = |name: &str, help: &str, label: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let rows_committed = counter_vec(ROWS_COMMITTED_TOTAL, "Rows made visible.", "table");
        let data_files_committed = counter_vec(
            DATA_FILES_COMMITTED_TOTAL,
            "Data files made visible.",
            "table",
        );
        let bytes_committed = counter_vec(
            BYTES_COMMITTED_TOTAL,
            "Parquet bytes made visible.",
            "table",
        );
        let ingest_errors = counter_vec(INGEST_ERRORS_TOTAL, "Failed puts and commits.", "code");
        let auth_failures = counter_vec(
            AUTH_FAILURES_TOTAL,
            "Calls refused for a missing or invalid bearer token.",
            "surface",
        );
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let catalog_commits = counter(
            CATALOG_COMMITS_TOTAL,
            "Durable redb write transactions on the data paths (commit fsyncs).",
        );
        let file_syncs = counter(
            FILE_SYNCS_TOTAL,
            "Warehouse syncs (syncfs) before data commits' pointer flips.",
        );
        let ingest_requests = counter(
            INGEST_REQUESTS_TOTAL,
            "DoPut streams and Flight SQL actions received.",
        );
        let commit_duration = HistogramVec::new(
            HistogramOpts::new(COMMIT_DURATION_SECONDS, "Seconds of one catalog commit.").buckets(
                vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ],
            ),
            &["lane"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(commit_duration.clone()))
            .expect("unique metric");
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let gauge_vec = |name: &str, help: &str| {
            let g = IntGaugeVec::new(Opts::new(name, help), &["table"]).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("unique metric");
            g
        };
        let snapshots_expired = counter(
            SNAPSHOTS_EXPIRED_TOTAL,
            "Snapshots removed by maintenance expiry commits.",
        );
        let manifests_merged = counter(
            MANIFESTS_MERGED_TOTAL,
            "Manifests replaced by merged ones in maintenance commits.",
        );
        let files_rewritten = counter_vec(
            FILES_REWRITTEN_TOTAL,
            "Files whose content maintenance commits rewrote into new files.",
            "kind",
        );
        let bytes_rewritten = counter_vec(
            BYTES_REWRITTEN_TOTAL,
            "Bytes of files whose content maintenance commits rewrote into new files.",
            "kind",
        );
        let files_deleted = counter_vec(
            FILES_DELETED_TOTAL,
            "Unreferenced files removed by online cleanup.",
            "kind",
        );
        let bytes_deleted = counter_vec(
            BYTES_DELETED_TOTAL,
            "Bytes of unreferenced files removed by online cleanup.",
            "kind",
        );
        let maintenance_errors = counter_vec(
            MAINTENANCE_ERRORS_TOTAL,
            "Failed table maintenance jobs.",
            "job",
        );
        let table_snapshots = gauge_vec(TABLE_SNAPSHOTS, "Snapshots in a table's metadata.");
        let table_manifests = gauge_vec(
            TABLE_MANIFESTS,
            "Manifests listed by a table's current snapshot.",
        );
        let table_data_files = gauge_vec(
            TABLE_DATA_FILES,
            "Live data files of a table's current snapshot.",
        );
        let put_streams_active = gauge(PUT_STREAMS_ACTIVE, "Open DoPut streams.");
        let transactions_active = gauge(TRANSACTIONS_ACTIVE, "Open Flight SQL transactions.");
        let put_streams_max = gauge(
            PUT_STREAMS_MAX,
            "Most DoPut streams open at once (--max-streams).",
        );
        let memory_budget_bytes = gauge(
            MEMORY_BUDGET_BYTES,
            "Arrow bytes of rows in flight all streams may hold (--memory-budget).",
        );
        let memory_reserved_bytes = gauge(
            MEMORY_RESERVED_BYTES,
            "Arrow bytes of rows in flight held against the memory budget.",
        );
        let ready = gauge(READY, "1 when /readyz answers 200, else 0.");
        let writers = gauge(WRITERS, "Writer ids with a committed high-water mark.");
        let writers_max = gauge(
            WRITERS_MAX,
            "Most writer ids the catalog keeps (--max-writers).",
        );
        let writers_forgotten = counter(
            WRITERS_FORGOTTEN_TOTAL,
            "Writer ids forgotten after --writer-retention without a commit.",
        );
        let batches_replayed = counter(
            BATCHES_REPLAYED_TOTAL,
            "Batches of keyed puts skipped as replays.",
        );
        let commits_replayed = counter_vec(
            COMMITS_REPLAYED_TOTAL,
            "Keyed puts and Flight SQL commits that were entirely replays.",
            "lane",
        );
        let object_store_requests = counter_vec(
            OBJECT_STORE_REQUESTS_TOTAL,
            "Object-store operations of an S3 warehouse.",
            "op",
        );
        let object_store_errors = counter_vec(
            OBJECT_STORE_ERRORS_TOTAL,
            "Failed object-store operations of an S3 warehouse.",
            "op",
        );
        let object_store_duration = HistogramVec::new(
            HistogramOpts::new(
                OBJECT_STORE_REQUEST_DURATION_SECONDS,
                "Seconds of one object-store operation.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["op"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(object_store_duration.clone()))
            .expect("unique metric");
        Self {
            registry,
            catalog_commits,
            file_syncs,
            commit_duration,
            rows_committed,
            data_files_committed,
            bytes_committed,
            put_streams_active,
            transactions_active,
            ingest_errors,
            auth_failures,
            ingest_requests,
            put_streams_max,
            memory_budget_bytes,
            memory_reserved_bytes,
            ready,
            snapshots_expired,
            manifests_merged,
            files_rewritten,
            bytes_rewritten,
            files_deleted,
            bytes_deleted,
            maintenance_errors,
            table_snapshots,
            table_manifests,
            table_data_files,
            writers,
            writers_max,
            writers_forgotten,
            batches_replayed,
            commits_replayed,
            object_store_requests,
            object_store_errors,
            object_store_duration,
        }
    }

    /// The object-store handles, for an S3 warehouse's storage.
    pub fn object_store(&self) -> crate::catalog::object_store::ObjectStoreMetrics {
        crate::catalog::object_store::ObjectStoreMetrics {
            requests: self.object_store_requests.clone(),
            errors: self.object_store_errors.clone(),
            duration: self.object_store_duration.clone(),
        }
    }

    /// Records one successful commit of `stats` to `table` on `lane`.
    pub fn record_commit(
        &self,
        lane: &str,
        table: &str,
        stats: &crate::write::IngestStats,
        seconds: f64,
    ) {
        self.commit_duration
            .with_label_values(&[lane])
            .observe(seconds);
        self.count_table(table, stats);
    }

    /// Records ONE catalog commit on `lane` that made several tables' `stats` visible:
    /// one histogram observation, per-table row/file/byte counters.
    pub fn record_tables_commit(
        &self,
        lane: &str,
        tables: &[(String, crate::write::IngestStats)],
        seconds: f64,
    ) {
        self.commit_duration
            .with_label_values(&[lane])
            .observe(seconds);
        for (table, stats) in tables {
            self.count_table(table, stats);
        }
    }

    /// Adds one commit's rows, data files and bytes to `table`'s counters.
    fn count_table(&self, table: &str, stats: &crate::write::IngestStats) {
        self.rows_committed
            .with_label_values(&[table])
            .inc_by(stats.rows);
        self.data_files_committed
            .with_label_values(&[table])
            .inc_by(stats.files);
        self.bytes_committed
            .with_label_values(&[table])
            .inc_by(stats.bytes);
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
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

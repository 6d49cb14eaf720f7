//! Command line and environment configuration (docs/SERVICE.md, "Process and defaults").

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// skade: Arrow Flight in, Apache Iceberg tables out, through an embedded redb catalog or a
/// shared PostgreSQL one.
#[derive(Debug, Parser)]
#[command(name = "skade", version, about)]
pub struct Cli {
    /// Log line format on stderr: `text` (human) or `json` (one object per line). The
    /// level filter is `RUST_LOG` (default `info`).
    #[arg(long, global = true, env = "SKADE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines with the span context (`rpc{method=DoPut table=ns.t}: ...`).
    Text,
    /// One JSON object per line, with the fields of the event and its spans.
    Json,
}

/// skade's subcommands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
pub enum Command {
    /// Run the Flight server: the embedded redb catalog in --data-dir, or a shared one
    /// with --catalog postgres://… (docs/several-instances.md).
    Serve(Config),
    /// Remove files no snapshot references (orphans) older than a grace period. On the
    /// embedded catalog the server must be stopped (gc refuses a data dir whose catalog
    /// is locked); with --catalog postgres://… it runs beside the instances.
    Gc(GcConfig),
}

/// Everything `skade gc` needs.
#[derive(Debug, Clone, Args)]
pub struct GcConfig {
    /// Directory holding `catalog.redb` and `warehouse/`.
    #[arg(long, env = "SKADE_DATA_DIR", default_value = "./skade-data")]
    pub data_dir: PathBuf,

    /// Unreferenced files modified less than this long ago are kept (e.g. `1h`).
    #[arg(long, env = "SKADE_GC_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub grace: Duration,

    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// The server's warehouse flags (`--warehouse`, `--s3-endpoint`, `--s3-region`,
    /// `--s3-path-style-access`, or their `SKADE_*` variables): gc must see the tables
    /// where the server wrote them.
    #[command(flatten)]
    pub storage: GcStorageConfig,

    /// The servers' catalog flags (`--catalog`, `--catalog-name`, `--catalog-pool-size`):
    /// unset, the redb catalog in `--data-dir` (gc refuses it while a server holds it);
    /// a PostgreSQL catalog is collected beside its running instances, keeping every
    /// file an open write on any of them may still commit.
    #[command(flatten)]
    pub catalog: GcCatalogConfig,
}

/// The warehouse flags `skade gc` takes: the server's; what only a server uses
/// (`--s3-vend-credentials`, which hands credentials to REST clients) is accepted and
/// ignored, and not listed by `--help`.
#[derive(Debug, Clone, Args)]
pub struct GcStorageConfig {
    /// Warehouse root: a local directory, or `s3://bucket/prefix` for object storage.
    /// Default: `warehouse/` under `--data-dir`.
    #[arg(long, env = "SKADE_WAREHOUSE")]
    pub warehouse: Option<String>,

    /// S3 endpoint URL for S3-compatible stores (e.g. `http://127.0.0.1:9000`); unset:
    /// AWS's own.
    #[arg(long, env = "SKADE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// S3 signing region; unset: `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[arg(long, env = "SKADE_S3_REGION")]
    pub s3_region: Option<String>,

    /// Path-style S3 addressing (`true` or `false`), as the server was given.
    #[arg(long, env = "SKADE_S3_PATH_STYLE_ACCESS", default_value_t = false, action = clap::ArgAction::Set)]
    pub s3_path_style_access: bool,

    /// The server's `--s3-vend-credentials`: accepted, so the servers' flags and
    /// environment can be given to gc as they are, and ignored (gc serves no REST
    /// client); not listed by `--help`.
    #[arg(long, env = "SKADE_S3_VEND_CREDENTIALS", hide = true, action = clap::ArgAction::Set)]
    pub s3_vend_credentials: Option<bool>,
}

impl GcStorageConfig {
    /// The warehouse these flags name, `data_dir/warehouse` by default.
    ///
    /// # Errors
    /// As [`StorageConfig::warehouse`].
    pub fn warehouse(
        &self,
        data_dir: &std::path::Path,
    ) -> iceberg::Result<crate::storage::Warehouse> {
        StorageConfig {
            warehouse: self.warehouse.clone(),
            s3_endpoint: self.s3_endpoint.clone(),
            s3_region: self.s3_region.clone(),
            s3_path_style_access: self.s3_path_style_access,
            s3_vend_credentials: false,
        }
        .warehouse(data_dir)
    }
}

/// The catalog flags `skade gc` takes: the server's; what only a server uses
/// (`--catalog-commit-turn`: gc commits nothing) is accepted and ignored, and not listed
/// by `--help`.
#[derive(Debug, Clone, Args)]
pub struct GcCatalogConfig {
    /// The catalog: unset, the embedded redb file `catalog.redb` in `--data-dir`;
    /// `postgres://user:password@host:port/database` for the servers' shared one.
    #[arg(long = "catalog", env = "SKADE_CATALOG")]
    pub url: Option<String>,

    /// The JDBC catalog name the servers' rows carry (`--catalog-name` of the servers).
    #[arg(
        long = "catalog-name",
        env = "SKADE_CATALOG_NAME",
        default_value = "skade"
    )]
    pub name: String,

    /// Most connections gc opens to a PostgreSQL catalog (at least 2).
    #[arg(
        long = "catalog-pool-size",
        env = "SKADE_CATALOG_POOL_SIZE",
        default_value_t = 16
    )]
    pub pool_size: usize,

    /// The servers' `--catalog-commit-turn`: accepted and ignored (gc commits nothing);
    /// not listed by `--help`.
    #[arg(
        long = "catalog-commit-turn",
        env = "SKADE_CATALOG_COMMIT_TURN",
        hide = true
    )]
    pub commit_turn: Option<String>,
}

/// Everything `skade serve` needs. Every flag has a `SKADE_*` environment variable.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Directory holding `catalog.redb` and `warehouse/`.
    #[arg(long, env = "SKADE_DATA_DIR", default_value = "./skade-data")]
    pub data_dir: PathBuf,

    /// Address of the Arrow Flight (gRPC) server, `host:port` (an IP address or a host
    /// name such as `localhost`). Port 0 picks a free port.
    #[arg(long, env = "SKADE_FLIGHT_ADDR", default_value = "127.0.0.1:50051")]
    pub flight_addr: ListenAddr,

    /// Address of the HTTP server for `/metrics`, `/healthz`, `/readyz` and the REST
    /// catalog, `host:port`. Port 0 picks a free port.
    #[arg(long, env = "SKADE_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: ListenAddr,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub catalog: CatalogConfig,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub storage: StorageConfig,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub ingest: IngestConfig,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub security: SecurityConfig,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub maintenance: MaintenanceConfig,
}

/// Where the catalog is kept: the embedded redb file (the default) or a PostgreSQL database
/// shared by several instances (docs/several-instances.md).
#[derive(Debug, Clone, Args)]
pub struct CatalogConfig {
    /// The catalog: unset, the embedded redb file `catalog.redb` in `--data-dir`;
    /// `postgres://user:password@host:port/database` for a PostgreSQL database that
    /// several skade instances (and any Iceberg JDBC-catalog engine) share, in the
    /// Iceberg JDBC catalog's schema.
    #[arg(long = "catalog", env = "SKADE_CATALOG")]
    pub url: Option<String>,

    /// The JDBC catalog name skade's rows carry in a PostgreSQL catalog (`catalog_name`;
    /// give pyiceberg's `SqlCatalog` or Java's `JdbcCatalog` the same name to read them).
    #[arg(
        long = "catalog-name",
        env = "SKADE_CATALOG_NAME",
        default_value = "skade"
    )]
    pub name: String,

    /// Most connections this instance opens to a PostgreSQL catalog (at least 2).
    #[arg(
        long = "catalog-pool-size",
        env = "SKADE_CATALOG_POOL_SIZE",
        default_value_t = 16
    )]
    pub pool_size: usize,

    /// How commits of one table from several instances sharing a PostgreSQL catalog
    /// take turns: `database`, one turn across the instances (an advisory lock per table
    /// in the database, held from the table's load to its release, on up to
    /// `--catalog-pool-size` more connections); `instance`, each instance's own turns
    /// only (instances stage at once; a commit that loses the compare-and-swap stages
    /// again). `docs/scale-out.md` has the measurement behind the default.
    #[arg(
        long = "catalog-commit-turn",
        env = "SKADE_CATALOG_COMMIT_TURN",
        value_enum,
        default_value_t = crate::catalog::store::postgres::turns::CommitTurn::Database
    )]
    pub commit_turn: crate::catalog::store::postgres::turns::CommitTurn,
}

/// Where table data lives: a local directory or an S3 prefix (docs/object-storage.md).
/// S3 credentials come from the standard AWS environment variables or profile.
#[derive(Debug, Clone, Args)]
pub struct StorageConfig {
    /// Warehouse root: a local directory, or `s3://bucket/prefix` for object storage.
    /// Default: `warehouse/` under `--data-dir` (`catalog.redb` always stays there).
    #[arg(long, env = "SKADE_WAREHOUSE")]
    pub warehouse: Option<String>,

    /// S3 endpoint URL for S3-compatible stores (e.g. `http://127.0.0.1:9000`); unset:
    /// AWS's own.
    #[arg(long, env = "SKADE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// S3 signing region; unset: `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`.
    #[arg(long, env = "SKADE_S3_REGION")]
    pub s3_region: Option<String>,

    /// Path-style S3 addressing (`endpoint/bucket/key`), which most S3-compatible
    /// stores need (`true` or `false`; Iceberg's default is virtual-host style).
    #[arg(long, env = "SKADE_S3_PATH_STYLE_ACCESS", default_value_t = false, action = clap::ArgAction::Set)]
    pub s3_path_style_access: bool,

    /// Hand skade's own AWS credentials (from its environment) to REST catalog clients
    /// that ask for vended credentials (`true` or `false`).
    #[arg(long, env = "SKADE_S3_VEND_CREDENTIALS", default_value_t = false, action = clap::ArgAction::Set)]
    pub s3_vend_credentials: bool,
}

impl StorageConfig {
    /// The warehouse these flags name, `data_dir/warehouse` by default.
    ///
    /// # Errors
    /// `DataInvalid` naming `--warehouse` for an `s3://` URI without a bucket.
    pub fn warehouse(
        &self,
        data_dir: &std::path::Path,
    ) -> iceberg::Result<crate::storage::Warehouse> {
        let options = crate::storage::S3Options {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            path_style_access: self.s3_path_style_access,
            vend_credentials: self.s3_vend_credentials,
        };
        match &self.warehouse {
            Some(location) => crate::storage::Warehouse::parse(location, options),
            None => Ok(crate::storage::Warehouse::Local(data_dir.join("warehouse"))),
        }
    }
}

/// Online table maintenance: snapshot expiry, manifest merging and file cleanup, run in
/// the background for every table (docs/maintenance.md).
#[derive(Debug, Clone, Args)]
pub struct MaintenanceConfig {
    /// Run table maintenance in the background (`true` or `false`).
    #[arg(long = "maintenance", env = "SKADE_MAINTENANCE", default_value_t = true, action = clap::ArgAction::Set)]
    pub enabled: bool,

    /// How often every table is checked for expiry, merging and cleanup (e.g. `1s`); a
    /// pass also starts once `--max-snapshots`/4 commits (at least 16) landed since the last.
    #[arg(long, env = "SKADE_MAINTENANCE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub maintenance_interval: Duration,

    /// Most snapshots a table's `main` history keeps, on top of Iceberg's age rules
    /// (`history.expire.*`); the table property `skade.history.expire.max-snapshots`
    /// overrides it. `0`: no count bound.
    #[arg(long, env = "SKADE_MAX_SNAPSHOTS", default_value = "100")]
    pub max_snapshots: usize,

    /// How long an unreferenced file is kept after the commit that dropped it (and how
    /// old a leftover must be) before cleanup removes it, so readers that loaded the
    /// table before that commit can finish their scans (e.g. `10m`).
    #[arg(long, env = "SKADE_CLEANUP_GRACE", default_value = "10m", value_parser = humantime::parse_duration)]
    pub cleanup_grace: Duration,

    /// How long a metadata JSON file that left its table's metadata log is kept (and how
    /// old a leftover metadata JSON must be) before cleanup removes it (e.g. `10s`). A
    /// reader reads a metadata JSON only right after a load-table answer named it, so
    /// this grace is short; the smaller of it and `--cleanup-grace` applies.
    #[arg(long, env = "SKADE_METADATA_CLEANUP_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub metadata_cleanup_grace: Duration,

    /// Most bytes of unreferenced files kept waiting out a grace period, over all tables
    /// (e.g. `1GiB`). Past it, cleanup removes the files that have waited longest before
    /// their grace ends (counted in `skade_files_deleted_early_total`); files of a write
    /// still in progress are never among them.
    #[arg(long, env = "SKADE_CLEANUP_MAX_WAITING", default_value = "1GiB", value_parser = parse_bytes)]
    pub cleanup_max_waiting: u64,

    /// Rewrite runs of small data files into one file (`true` or `false`): at most one
    /// job per table per round (up to 8 runs of 64 files and half a `--target-file-size`
    /// each, one `--target-file-size` in all), in a task beside the maintenance passes.
    #[arg(long = "compaction", env = "SKADE_COMPACTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub compaction: bool,
}

/// TLS of both addresses and authentication of Flight and the REST catalog.
#[derive(Debug, Clone, Default, Args)]
pub struct SecurityConfig {
    /// PEM certificate chain to serve Flight, and the HTTP address (metrics, probes, REST
    /// catalog), over TLS (needs `--tls-key`). The HTTP address then speaks only HTTPS.
    #[arg(long, env = "SKADE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SKADE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// File of bearer tokens, one per line (blank lines and `#` comments skipped). When
    /// set, every Flight RPC needs `authorization: Bearer <token>`. Re-read on SIGHUP.
    #[arg(long, env = "SKADE_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
}

/// How streaming puts are cut into data files and commits.
#[derive(Debug, Clone, Args)]
pub struct IngestConfig {
    /// Target size of one data file, as Arrow in-memory bytes gathered before an encode
    /// (e.g. `128MiB`). The Parquet file is usually smaller.
    #[arg(long, env = "SKADE_TARGET_FILE_SIZE", default_value = "128MiB", value_parser = parse_bytes)]
    pub target_file_size: u64,

    /// Whether a put (Flight `DoPut`, or a Flight SQL ingest in mode `create_append`)
    /// into a table that does not exist creates it (`true` or `false`). `false`: such a
    /// put is `NotFound` naming the table; tables are created over the REST catalog or
    /// by a Flight SQL ingest in mode `create`. A namespace's property
    /// `skade.ingest.auto-create-tables` overrides it for the tables in it.
    #[arg(long, env = "SKADE_AUTO_CREATE_TABLES", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_tables: bool,

    /// Data files per snapshot on a streaming put.
    #[arg(long, env = "SKADE_FILES_PER_COMMIT", default_value = "4")]
    pub files_per_commit: NonZeroUsize,

    /// Longest time rows of an open stream wait before they are committed (e.g. `10s`).
    #[arg(long, env = "SKADE_COMMIT_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub commit_interval: Duration,

    /// Data-file writes in flight ahead of the committer.
    #[arg(long, env = "SKADE_CHANNEL_DEPTH", default_value = "4")]
    pub channel_depth: NonZeroUsize,

    /// Arrow bytes of rows in flight (read but not yet written as data files) that all
    /// streams together may hold (e.g. `2GiB`); past it the server stops reading.
    #[arg(long, env = "SKADE_MEMORY_BUDGET", default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_budget: u64,

    /// How often the server makes its allocator return freed memory to the operating
    /// system, busy or idle (e.g. `1s`; `0s` turns it off and leaves it to the allocator
    /// and the release after each stream; checked every 250 ms, so shorter acts as
    /// 250 ms). mimalloc 3.3's own delayed purge can stop for good under load; this
    /// forced purge restarts it (`skade::memory::PURGE_EVERY`).
    #[arg(long, env = "SKADE_MEMORY_PURGE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub memory_purge_interval: Duration,

    /// Longest time a Flight SQL transaction may stay idle (no ingest, no end) before it
    /// is rolled back (e.g. `5m`).
    #[arg(long, env = "SKADE_TRANSACTION_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub transaction_timeout: Duration,

    /// On SIGTERM/SIGINT, how long open streams get to commit what they have read before
    /// the process exits anyway (e.g. `30s`).
    #[arg(long, env = "SKADE_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,

    /// Largest gRPC message accepted or sent (e.g. `64MiB`); larger ones get
    /// `ResourceExhausted`.
    #[arg(long, env = "SKADE_MAX_MESSAGE_SIZE", default_value = "64MiB", value_parser = parse_bytes)]
    pub max_message_size: u64,

    /// Most DoPut streams (streaming puts and Flight SQL ingests) open at once; one more
    /// gets `ResourceExhausted`.
    #[arg(long, env = "SKADE_MAX_STREAMS", default_value = "64")]
    pub max_streams: NonZeroUsize,

    /// Most Flight SQL transactions open at once; one more `BeginTransaction` gets
    /// `ResourceExhausted`.
    #[arg(long, env = "SKADE_MAX_TRANSACTIONS", default_value = "1024")]
    pub max_transactions: NonZeroUsize,

    /// Most writer ids (exactly-once producers) the catalog keeps a high-water mark for;
    /// a put or transaction from one more new writer id gets `ResourceExhausted`
    /// (docs/exactly-once.md, "Bounded state"). Checked when the put or commit starts, so
    /// puts racing in from new writers may pass it by their number.
    #[arg(long, env = "SKADE_MAX_WRITERS", default_value = "100000")]
    pub max_writers: NonZeroUsize,

    /// A writer id that has not committed for this long is forgotten with its
    /// high-water marks; if it comes back, its batches count as new (e.g. `7d`, as
    /// Kafka's `transactional.id.expiration.ms`).
    #[arg(long, env = "SKADE_WRITER_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub writer_retention: Duration,
}

impl Config {
    /// The defaults of `skade serve` with `data_dir` and both addresses on
    /// `127.0.0.1:0` — what tests and embedders start from.
    pub fn for_tests(data_dir: impl Into<PathBuf>) -> Self {
        let mut config = match Cli::parse_from(["skade", "serve"]).command {
            Command::Serve(config) => config,
            Command::Gc(_) => unreachable!("parsed `serve`"),
        };
        config.data_dir = data_dir.into();
        config.flight_addr = SocketAddr::from(([127, 0, 0, 1], 0)).into();
        config.metrics_addr = SocketAddr::from(([127, 0, 0, 1], 0)).into();
        config
    }
}

/// A listen address as given: `host:port`, where `host` is an IP address (`127.0.0.1`,
/// `0.0.0.0`, `[::1]`) or a host name (`localhost`) that [`crate::start`] resolves. The
/// syntax is checked when the flag is parsed; the name is resolved at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr(String);

impl ListenAddr {
    /// The address as given (`host:port`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        Self(addr.to_string())
    }
}

impl std::str::FromStr for ListenAddr {
    type Err = String;

    /// Accepts `host:port` with a port in `0..=65535` and a non-empty host; an IPv6
    /// address goes in brackets (`[::1]:50051`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.parse::<SocketAddr>().is_ok() {
            return Ok(Self(s.to_string()));
        }
        let usage = "use host:port, e.g. 127.0.0.1:50051, localhost:50051 or [::1]:50051";
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(format!("no port in {s:?}; {usage}"));
        };
        if port.parse::<u16>().is_err() {
            return Err(format!("{port:?} is not a port (0-65535); {usage}"));
        }
        if host.is_empty() || host.contains(':') || host.contains('/') {
            return Err(format!("{host:?} is not a host name or address; {usage}"));
        }
        Ok(Self(s.to_string()))
    }
}

/// Parses a byte size such as `128MiB`, `64 MB` or `1048576`.
fn parse_bytes(s: &str) -> Result<u64, String> {
    s.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("not a byte size ({e}); use e.g. 128MiB"))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    // Catches `skade gc --help` listing flags only a server uses (the reader
    // found --catalog-commit-turn and --s3-vend-credentials there), or losing the ones
    // gc needs to find the tables.
    #[test]
    fn gc_help_lists_only_what_gc_uses() {
        let mut cli = Cli::command();
        let gc = cli.find_subcommand_mut("gc").expect("gc subcommand");
        let help = gc.render_long_help().to_string();
        for server_only in [
            "--catalog-commit-turn",
            "--s3-vend-credentials",
            "--flight-addr",
            "--max-streams",
        ] {
            assert!(!help.contains(server_only), "{server_only} in\n{help}");
        }
        // The servers' own flags are still accepted (a script passes gc the same ones).
        let parsed = Cli::try_parse_from([
            "skade",
            "gc",
            "--s3-vend-credentials",
            "true",
            "--catalog-commit-turn",
            "database",
        ]);
        assert!(parsed.is_ok(), "{:?}", parsed.err());
        for needed in [
            "--data-dir",
            "--grace",
            "--dry-run",
            "--warehouse",
            "--s3-endpoint",
            "--catalog ",
            "--catalog-name",
            "--catalog-pool-size",
        ] {
            assert!(help.contains(needed), "{needed} missing from\n{help}");
        }
    }
}

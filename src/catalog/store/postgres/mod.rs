//! The catalog's durable state in a shared PostgreSQL database, for several skade
//! instances serving the same tables (`docs/several-instances.md`).
//!
//! Table pointers and namespace properties live in the Iceberg JDBC catalog's own tables
//! (`iceberg_tables`, `iceberg_namespace_properties`: Java's
//! `org.apache.iceberg.jdbc.JdbcUtil`, pyiceberg's `SqlCatalog`), keyed by the catalog
//! name (`--catalog-name`) and the namespace's levels joined with `.`, so every engine
//! that speaks the JDBC catalog reads skade's tables from the database, and a commit
//! another JDBC-catalog writer makes is caught by skade's compare-and-swap on
//! `metadata_location` (and skade's by theirs). skade's own state — producers'
//! high-water marks, writer ids, the live instances and their oldest write pins — lives
//! in `skade_*` tables beside them ([`schema`]).
//!
//! What stays one implementation above this store: the release protocol, the metadata
//! JSON, the caches, group commit (a batch of this instance's releases is ONE PostgreSQL
//! transaction, [`batch`]).
//!
//! One job per module: this file connects and maps errors; [`schema`] creates and
//! upgrades the tables; [`rows`] reads and writes namespaces, pointers and marks;
//! [`locations`] the location claims and the other catalog names' tables; [`batch`]
//! runs one group-commit batch; [`store`] is all of it as the catalog's `Store`; [`cluster`] registers this instance, publishes
//! its oldest write pin and takes the maintenance locks; [`turns`] takes the commit turns
//! across instances; [`tls`] reads the URL's `sslmode` and `sslrootcert`.

mod batch;
pub mod cluster;
mod locations;
mod rows;
mod schema;
mod store;
mod tls;
pub mod turns;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use iceberg::{Error, ErrorKind, Result};

use crate::catalog::pins::Pins;

/// The `iceberg_type` condition of a table row (a view's row is not a table).
pub(super) const IS_TABLE: &str = "(iceberg_type = 'TABLE' OR iceberg_type IS NULL)";

/// How long a statement may run before PostgreSQL cancels it (`statement_timeout`).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long opening one connection may take (`connect_timeout`), and how long a caller
/// waits for a pooled connection before failing `Unavailable`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared catalog database: a bounded connection pool, the catalog name every row is
/// keyed by, and this instance's registration ([`cluster`]).
#[derive(Debug)]
pub(crate) struct PgStore {
    pool: Pool,
    /// The `catalog_name` of every JDBC-catalog row skade reads and writes.
    catalog: String,
    /// Where the database is, without the password (for messages).
    target: String,
    pub(super) instance: cluster::Instance,
    /// The connection settings, for the maintenance leases' own connection.
    config: tokio_postgres::Config,
    /// TLS of every connection ([`tls`]).
    tls: tls::Connector,
    /// The maintenance leases this instance holds.
    leases: cluster::Leases,
    /// The connections commit turns are held on; `None` with
    /// [`turns::CommitTurn::Instance`].
    turns: Option<turns::TurnPool>,
}

/// Why the catalog database could not be used at start.
#[derive(Debug, thiserror::Error)]
pub enum PgOpenError {
    /// The URL does not parse as a PostgreSQL connection string, or its `sslmode` is
    /// not one libpq knows.
    #[error("--catalog is not a PostgreSQL URL (postgres://user:password@host:port/database): {0}")]
    Url(String),
    /// The URL asks for TLS and its root certificates cannot be used.
    #[error("--catalog asks for TLS: {0}")]
    Tls(String),
    /// The database refused or did not answer (down, wrong host or port, wrong password,
    /// no such database).
    #[error("cannot reach the catalog database {target} (--catalog): {reason}")]
    Connect {
        /// Host, port and database, without the password.
        target: String,
        /// PostgreSQL's or the network's reason.
        reason: String,
    },
    /// Creating or upgrading skade's tables failed.
    #[error("cannot create skade's tables in the catalog database {target} (--catalog): {reason}")]
    Schema {
        /// Host, port and database.
        target: String,
        /// PostgreSQL's reason.
        reason: String,
    },
}

impl PgStore {
    /// Connects to the database at `url` with at most `pool_size` connections for
    /// commits and reads (and as many more for commit turns under
    /// [`turns::CommitTurn::Database`]), creates or upgrades the catalog's tables
    /// ([`schema::migrate`], safe to run from several instances at once) and registers
    /// this instance ([`cluster`]).
    ///
    /// # Errors
    /// [`PgOpenError`] naming `--catalog`.
    pub(crate) async fn connect(
        url: &str,
        catalog: &str,
        pool_size: usize,
        turn: turns::CommitTurn,
        pins: Arc<Pins>,
    ) -> std::result::Result<Self, PgOpenError> {
        let url_tls = tls::UrlTls::parse(url).map_err(PgOpenError::Url)?;
        let mut config = tokio_postgres::Config::from_str(&url_tls.url)
            .map_err(|e| PgOpenError::Url(e.to_string()))?;
        let target = describe(&config);
        let connector = url_tls.connector().map_err(PgOpenError::Tls)?;
        config
            .ssl_mode(url_tls.ssl_mode())
            .connect_timeout(CONNECT_TIMEOUT)
            .application_name("skade")
            .options(session_options());
        let pool = build_pool(
            config.clone(),
            connector.make(),
            pool_size.max(2),
            Some(CONNECT_TIMEOUT),
        )
        .map_err(PgOpenError::Url)?;
        let turns = match turn {
            turns::CommitTurn::Database => Some(
                turns::TurnPool::new(&config, connector.make(), pool_size.max(2))
                    .map_err(PgOpenError::Url)?,
            ),
            turns::CommitTurn::Instance => None,
        };
        let connect_failed = |reason: String| PgOpenError::Connect {
            target: target.clone(),
            reason,
        };
        let mut client = pool
            .get()
            .await
            .map_err(|e| connect_failed(pool_reason(&e)))?;
        schema::migrate(&mut client)
            .await
            .map_err(|e| PgOpenError::Schema {
                target: target.clone(),
                reason: db_reason(&e),
            })?;
        let instance = cluster::Instance::register(&client, catalog, pins)
            .await
            .map_err(|e| connect_failed(db_reason(&e)))?;
        drop(client);
        Ok(Self {
            pool,
            catalog: catalog.to_string(),
            target,
            instance,
            config,
            tls: connector,
            leases: cluster::Leases::default(),
            turns,
        })
    }

    /// A pooled connection.
    ///
    /// # Errors
    /// `Unexpected` with an I/O cause (answered `Unavailable`, [`crate::catalog::error::is_storage_failure`])
    /// when no connection could be had within [`CONNECT_TIMEOUT`].
    pub(super) async fn client(&self) -> Result<Object> {
        self.pool.get().await.map_err(|e| {
            unavailable(format!(
                "the catalog database {} is unavailable: {}",
                self.target,
                pool_reason(&e)
            ))
        })
    }

    /// The catalog name rows are keyed by.
    pub(super) fn catalog(&self) -> &str {
        &self.catalog
    }

    /// The catalog name rows are keyed by (`--catalog-name`).
    pub(crate) fn catalog_name(&self) -> &str {
        &self.catalog
    }

    /// Host, port and database (no password), for messages.
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    /// This instance's id in `skade_instances` (changes when it registers again).
    pub(crate) fn instance_id(&self) -> String {
        self.instance.id()
    }

    /// A database error as the catalog's error: a lost connection, a database shutting
    /// down or out of resources is a storage failure (`Unavailable`); a deadlock or a
    /// serialization failure a retryable `CatalogCommitConflicts`; anything else
    /// `Unexpected`.
    pub(super) fn error(&self, e: tokio_postgres::Error) -> Error {
        pg_error(&self.target, e)
    }
}

impl Drop for PgStore {
    /// Removes this instance's `skade_instances` row ([`cluster::Instance::deregister`]).
    fn drop(&mut self) {
        self.instance.deregister(&self.config, self.tls.make());
    }
}

/// A pool of at most `size` connections made with `config` and `tls`, each opened and
/// checked within [`CONNECT_TIMEOUT`]; a caller waits at most `wait` for a free one
/// (`None`: as long as it takes, unless the caller sets its own timeouts).
///
/// # Errors
/// The pool's build error, as text (a bad configuration).
fn build_pool(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    size: usize,
    wait: Option<Duration>,
) -> std::result::Result<Pool, String> {
    let target = describe(&config);
    let manager = Manager::from_connect(
        config,
        LoggedConnect { tls, target },
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(wait)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| e.to_string())
}

/// Opens the pool's connections as deadpool's own connector does, but logs a connection
/// that ends in error in skade's words: the database (host, port, name) and PostgreSQL's
/// or the network's reason, once per reason a minute — not deadpool's bare
/// `Connection error: db error`.
struct LoggedConnect {
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// `host:port/database`, for the log.
    target: String,
}

impl deadpool_postgres::Connect for LoggedConnect {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> futures::future::BoxFuture<
        '_,
        std::result::Result<
            (tokio_postgres::Client, tokio::task::JoinHandle<()>),
            tokio_postgres::Error,
        >,
    > {
        let tls = self.tls.clone();
        let pg_config = pg_config.clone();
        let target = self.target.clone();
        Box::pin(async move {
            let (client, connection) = pg_config.connect(tls).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    let reason = db_reason(&e);
                    if let Some(repeats) = crate::repeats::repeats("catalog connection", &reason) {
                        tracing::warn!(
                            database = %target,
                            %reason,
                            repeats,
                            "a connection to the catalog database ended"
                        );
                    }
                }
            });
            Ok((client, task))
        })
    }
}

/// The settings every connection starts with: [`STATEMENT_TIMEOUT`], and no `NOTICE`s
/// (`client_min_messages=warning`: the schema's `CREATE … IF NOT EXISTS` would send one
/// per existing table at every start, and tokio-postgres logs each at info level).
pub(super) fn session_options() -> String {
    format!(
        "-c statement_timeout={} -c client_min_messages=warning",
        STATEMENT_TIMEOUT.as_millis()
    )
}

/// See [`PgStore::error`].
pub(super) fn pg_error(target: &str, e: tokio_postgres::Error) -> Error {
    let reason = db_reason(&e);
    let code = e.code().map(|c| c.code().to_string());
    match code.as_deref() {
        // serialization_failure, deadlock_detected
        Some("40001" | "40P01") => Error::new(
            ErrorKind::CatalogCommitConflicts,
            format!("the catalog database {target} aborted a commit: {reason}"),
        )
        .with_retryable(true),
        // connection exceptions, insufficient resources, operator intervention (shutdown,
        // cancel by statement_timeout), system errors
        Some(c)
            if c.starts_with("08")
                || c.starts_with("53")
                || c.starts_with("57")
                || c.starts_with("58") =>
        {
            unavailable(format!("the catalog database {target} failed: {reason}"))
        }
        Some(_) => Error::new(
            ErrorKind::Unexpected,
            format!("the catalog database {target}: {reason}"),
        ),
        // No SQLSTATE: the connection broke or could not be made.
        None => unavailable(format!(
            "the catalog database {target} is unavailable: {reason}"
        )),
    }
}

/// `Unexpected` with an I/O cause: the server answers it `Unavailable` keeping `message`.
/// The cause only marks it (its text, "not connected", is all a status adds after the
/// message: a copy of the message there said everything twice).
pub(super) fn unavailable(message: String) -> Error {
    Error::new(ErrorKind::Unexpected, message)
        .with_source(std::io::Error::from(std::io::ErrorKind::NotConnected))
}

/// The database's message (with its detail), or the client's.
fn db_reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => {
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                reason = format!("{reason}: {s}");
                source = s.source();
            }
            reason
        }
    }
}

fn pool_reason(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_reason(e),
        deadpool_postgres::PoolError::Timeout(_) => {
            format!("no connection within {} s", CONNECT_TIMEOUT.as_secs())
        }
        other => other.to_string(),
    }
}

/// `host:port/database` of a connection config, without user or password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_string());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

/// The JDBC catalog's namespace string: the levels joined with `.` (Java's
/// `JdbcUtil.namespaceToString`, pyiceberg's `Catalog.namespace_to_string`).
///
/// # Errors
/// `DataInvalid` for no level, an empty level or one holding `.` (it would read back as
/// two levels).
pub(super) fn namespace_string(levels: &[String]) -> Result<String> {
    if levels.is_empty() || levels.iter().any(|l| l.is_empty() || l.contains('.')) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "invalid namespace {levels:?} for a PostgreSQL catalog: a level must be \
                 non-empty and hold no '.' (the JDBC catalog joins levels with '.')"
            ),
        ));
    }
    Ok(levels.join("."))
}

/// The levels of a JDBC namespace string.
pub(super) fn namespace_levels(namespace: &str) -> Vec<String> {
    namespace.split('.').map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches a namespace level with a '.' written as it is: it would read back as two
    // levels (another namespace) in every JDBC-catalog reader.
    #[test]
    fn a_dotted_namespace_level_is_refused() {
        let ns =
            |l: &[&str]| namespace_string(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(ns(&["a", "b"]).unwrap(), "a.b");
        assert!(ns(&["a.b"]).is_err());
        assert!(ns(&[""]).is_err());
        assert!(ns(&[]).is_err());
        assert_eq!(namespace_levels("a.b"), vec!["a", "b"]);
    }
}

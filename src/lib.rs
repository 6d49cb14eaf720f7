//! skade: an Arrow Flight (gRPC) and Flight SQL service that turns streams of Arrow record
//! batches into Apache Iceberg tables, committed through its catalog — an embedded redb
//! file, or a PostgreSQL database in the Iceberg JDBC catalog's schema shared by several
//! instances — which it also serves as an Iceberg REST catalog.
//!
//! [`start`] runs the whole service in-process (the tests do this); `main.rs` only parses
//! the command line and calls [`run`]. The contract is `docs/SERVICE.md`.

pub mod auth;
pub mod catalog;
pub mod config;
pub mod deletes;
pub mod error;
pub mod flight;
pub mod heap;
pub mod http;
pub mod logging;
pub mod maintenance;
pub mod memory;
pub mod metrics;
pub mod proto;
pub mod read;
pub mod repeats;
pub mod rest;
pub mod snapshot;
pub mod sql;
pub mod storage;
pub mod tls;
pub mod write;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::info;

pub use catalog::{RedbCatalog, redb_commit_count};
pub use config::Config;
use flight::{Service, SkadeFlight};
use metrics::Metrics;

/// HTTP/2 receive window of one gRPC stream, in bytes. A `DoPut` is one long upload; with
/// hyper's 1 MiB default the client waits for a window update every MiB, which caps a
/// loopback put well below what the encoder can take (`skade-bench -- ingest`).
const STREAM_WINDOW_BYTES: u32 = 16 << 20;
/// HTTP/2 receive window of one connection, in bytes (shared by its streams).
const CONNECTION_WINDOW_BYTES: u32 = 32 << 20;

/// Why the service could not start (or, for [`StartError::Serve`], stopped). Each
/// message is one line naming the flag concerned and what to do.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another process (a running skade, or `skade gc`) holds the catalog's lock.
    #[error(
        "the data dir {} is in use: another skade process holds the lock on {} (Database already open. Cannot acquire lock.); stop it, or give this one another --data-dir",
        .data_dir.display(), .data_dir.join("catalog.redb").display()
    )]
    Locked {
        /// The `--data-dir`.
        data_dir: PathBuf,
    },
    /// The data dir could not be created.
    #[error("cannot create the data dir {} (--data-dir): {source}", .path.display())]
    DataDir {
        /// The `--data-dir`.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The catalog could not be opened for another reason than the lock.
    #[error(
        "cannot open the catalog {} (--data-dir): {}",
        .path.display(), .source.message()
    )]
    Catalog {
        /// The `catalog.redb` path.
        path: PathBuf,
        /// The catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// The catalog holds a table whose files are not under the configured warehouse
    /// (the data dir was served with another `--warehouse`): its files cannot be read
    /// or written through this warehouse's storage, so the server does not start.
    #[error(
        "the data dir {} holds the table {table} at {location}, which is not under the warehouse {warehouse} (--warehouse): serve this data dir with the --warehouse its tables were written to, or give this warehouse its own --data-dir",
        .data_dir.display()
    )]
    TableOutsideWarehouse {
        /// The `--data-dir`.
        data_dir: PathBuf,
        /// The configured warehouse root.
        warehouse: String,
        /// The first such table (dotted).
        table: String,
        /// Its current metadata location.
        location: String,
    },
    /// A shared catalog holds a table whose files are not under this instance's
    /// `--warehouse`: the instances sharing the catalog were given different warehouses.
    #[error(
        "the catalog database {database} holds the table {table} at {location}, which is not under the warehouse {warehouse} (--warehouse): give every instance sharing --catalog the same --warehouse"
    )]
    SharedTableOutsideWarehouse {
        /// Host, port and database of `--catalog`.
        database: String,
        /// The configured warehouse root.
        warehouse: String,
        /// The first such table (dotted).
        table: String,
        /// Its current metadata location.
        location: String,
    },
    /// The PostgreSQL catalog (`--catalog`) could not be used: a bad URL, a database that
    /// refuses or does not answer, or a schema that cannot be created.
    #[error("{0}")]
    Database(String),
    /// `--warehouse` (or an `--s3-*` flag) is not a usable warehouse.
    #[error("invalid warehouse: {reason}")]
    Warehouse {
        /// What is wrong, naming the flag.
        reason: String,
    },
    /// A listen address's host name could not be resolved.
    #[error("cannot resolve {flag} {addr}: {source}; give a resolvable host name or an IP address")]
    Resolve {
        /// The flag (`--flight-addr`, `--metrics-addr`).
        flag: &'static str,
        /// The address as given.
        addr: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// An address could not be bound.
    #[error(
        "cannot listen on {addr} ({flag}): {source}; stop whatever holds it, or give another {flag}"
    )]
    Bind {
        /// The flag (`--flight-addr`, `--metrics-addr`).
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `--tls-cert`/`--tls-key` cannot be used.
    #[error("--tls-cert/--tls-key: {0}")]
    Tls(String),
    /// `--auth-token-file` cannot be used.
    #[error("--auth-token-file: {0}")]
    Auth(#[from] auth::TokenFileError),
    /// A server task failed.
    #[error("server failed: {0}")]
    Serve(String),
}

/// A service started by [`start`].
#[derive(Debug)]
pub struct Running {
    /// The bound Flight address (the real port when 0 was asked for).
    pub flight_addr: SocketAddr,
    /// The bound metrics/health address.
    pub metrics_addr: SocketAddr,
    /// The service state (catalog, metrics).
    pub service: Arc<Service>,
    shutdown: Vec<oneshot::Sender<()>>,
    health: tonic_health::server::HealthReporter,
    shutdown_timeout: std::time::Duration,
    tasks: Vec<JoinHandle<Result<(), StartError>>>,
    /// The background table maintenance, when on.
    maintenance: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, ends every open streaming put (each commits what it has read
    /// and ends with `Unavailable`), waits up to `--shutdown-timeout` for them, then stops
    /// both servers.
    ///
    /// # Errors
    /// A server task's failure.
    pub async fn shutdown_and_wait(mut self) -> Result<(), StartError> {
        self.service.shutdown.cancel();
        // Watchers see NOT_SERVING, then their streams end (so they do not hold the
        // server's graceful stop open).
        for name in [
            "",
            <FlightServiceServer<SkadeFlight> as tonic::server::NamedService>::NAME,
        ] {
            self.health
                .set_service_status(name, tonic_health::ServingStatus::NotServing)
                .await;
            self.health.clear_service_status(name).await;
        }
        for tx in self.shutdown.drain(..) {
            let _ = tx.send(());
        }
        self.service.puts.close();
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        if tokio::time::timeout_at(deadline, self.service.puts.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                open_puts = self.service.puts.len(),
                "shutdown timeout: abandoning open puts (their un-acked rows are not committed)"
            );
        }
        // Maintenance stops at once (its task ends on the shutdown token); waiting for it
        // means the catalog file is closed when this returns.
        if let Some(task) = self.maintenance.take()
            && tokio::time::timeout_at(deadline, task).await.is_err()
        {
            tracing::warn!("shutdown timeout: table maintenance did not stop in time");
        }
        for task in self.tasks.drain(..) {
            match tokio::time::timeout_at(deadline, task).await {
                Ok(joined) => joined.map_err(|e| StartError::Serve(e.to_string()))??,
                Err(_) => tracing::warn!("shutdown timeout: a server did not stop in time"),
            }
        }
        Ok(())
    }
}

/// Checks the TLS and token files, resolves and binds both addresses, then creates the
/// data dir if needed, opens its catalog and serves in the background: Flight (with the
/// gRPC health service, TLS and bearer tokens when configured) and the HTTP
/// metrics/health/REST address. A failed start leaves nothing new on disk. Must run
/// inside a multi-threaded tokio runtime with timers.
///
/// # Errors
/// [`StartError::Tls`] and [`StartError::Auth`] for unusable certificate, key or token
/// files; [`StartError::Resolve`] for a host name that does not resolve;
/// [`StartError::Bind`] when an address is taken; [`StartError::Locked`] when another
/// process holds the catalog; [`StartError::DataDir`] / [`StartError::Catalog`] when the
/// data dir or the catalog cannot be created or opened.
pub async fn start(config: Config) -> Result<Running, StartError> {
    tls::use_ring_provider();
    let (tls, https, tokens) = load_security(&config)?;
    let warehouse =
        config
            .storage
            .warehouse(&config.data_dir)
            .map_err(|e| StartError::Warehouse {
                reason: e.message().to_string(),
            })?;
    // Bind before touching the disk: a start that fails creates nothing.
    let flight_listener = bind("--flight-addr", &config.flight_addr).await?;
    let metrics_listener = bind("--metrics-addr", &config.metrics_addr).await?;
    let flight_addr = local_addr(&flight_listener, "--flight-addr")?;
    let metrics_addr = local_addr(&metrics_listener, "--metrics-addr")?;
    let service = open_service(&config, warehouse, tokens.clone()).await?;
    flight::txn::Transactions::spawn_reaper(Arc::downgrade(&service));
    flight::spawn_writer_expiry(Arc::downgrade(&service));
    memory::spawn(
        Arc::downgrade(&service),
        config.ingest.memory_purge_interval,
    );
    let maintenance = config.maintenance.enabled.then(|| {
        Arc::new(
            maintenance::Maintainer::new(
                service.catalog.clone(),
                config.maintenance.clone(),
                service.metrics.clone(),
            )
            .with_target_file_size(config.ingest.target_file_size)
            .with_memory_budget(service.budget.clone()),
        )
        .spawn(service.shutdown.clone())
    });
    let tls_on = tls.is_some();
    let ((flight_task, flight_stop), health) =
        serve_flight(&config, &service, tls, flight_listener).await?;
    let (http_task, http_stop) = serve_http(&service, https, metrics_listener)?;
    info!(
        version = env!("CARGO_PKG_VERSION"),
        %flight_addr,
        %metrics_addr,
        // On a PostgreSQL catalog with its own --warehouse nothing is kept in the data dir.
        data_dir = %match (service.catalog.store_kind(), &config.storage.warehouse) {
            (catalog::StoreKind::Postgres { .. }, Some(_)) => "none (unused)".to_string(),
            _ => config.data_dir.display().to_string(),
        },
        catalog = %match service.catalog.store_kind() {
            catalog::StoreKind::Redb => "redb (catalog.redb in the data dir)".to_string(),
            catalog::StoreKind::Postgres { target, instance } => {
                format!("postgresql {target} (instance {instance})")
            }
        },
        warehouse = %service.catalog.warehouse(),
        auth = if tokens.is_some() { "bearer tokens" } else { "off" },
        tls = if tls_on { "on" } else { "off" },
        "serving"
    );
    Ok(Running {
        flight_addr,
        metrics_addr,
        service,
        shutdown: vec![flight_stop, http_stop],
        health,
        shutdown_timeout: config.ingest.shutdown_timeout,
        tasks: vec![flight_task, http_task],
        maintenance,
    })
}

/// The security files of `config`, checked: the Flight TLS config and the HTTPS acceptor
/// (both or neither), and the bearer tokens.
type Security = (
    Option<tonic::transport::ServerTlsConfig>,
    Option<tokio_rustls::TlsAcceptor>,
    Option<Arc<auth::Tokens>>,
);

/// Reads the TLS certificate and key and the token file of `config`, when configured.
///
/// # Errors
/// [`StartError::Tls`] and [`StartError::Auth`] for unusable files.
fn load_security(config: &Config) -> Result<Security, StartError> {
    let (tls, https) = match (&config.security.tls_cert, &config.security.tls_key) {
        (Some(cert), Some(key)) => (
            Some(tls::server_config(cert, key).map_err(|e| StartError::Tls(e.to_string()))?),
            Some(tls::http_acceptor(cert, key).map_err(|e| StartError::Tls(e.to_string()))?),
        ),
        _ => (None, None),
    };
    let tokens = match &config.security.auth_token_file {
        Some(path) => Some(Arc::new(auth::Tokens::load(path)?)),
        None => None,
    };
    Ok((tls, https, tokens))
}

/// Opens the catalog of the data dir (created if needed) over `warehouse` and builds the
/// service around it, with this server's metrics.
///
/// # Errors
/// [`StartError::Locked`], [`StartError::DataDir`] or [`StartError::Catalog`] from
/// opening the catalog; [`StartError::Serve`] when SIGHUP cannot be listened for.
async fn open_service(
    config: &Config,
    warehouse: storage::Warehouse,
    tokens: Option<Arc<auth::Tokens>>,
) -> Result<Arc<Service>, StartError> {
    let metrics = Metrics::new();
    if let Some(tokens) = &tokens {
        tokens.count_refusals(metrics.clone());
    }
    let warehouse = warehouse.with_object_store_metrics(metrics.object_store());
    let catalog = match &config.catalog.url {
        None => Arc::new(open_catalog(&config.data_dir, warehouse)?),
        Some(url) => RedbCatalog::open_postgres(
            url,
            &config.catalog.name,
            config.catalog.pool_size,
            config.catalog.commit_turn,
            warehouse,
        )
        .await
        .map_err(|e| StartError::Database(e.to_string()))?,
    };
    refuse_tables_outside_warehouse(&config.data_dir, &catalog).await?;
    metrics.count_catalog(catalog.commit_counts());
    if let Some(local) = catalog.warehouse().local_path() {
        error::hide_in_statuses(local, "<warehouse>");
    }
    if let Ok(data_dir) = std::path::absolute(&config.data_dir) {
        error::hide_in_statuses(&data_dir, "<data-dir>");
    }
    let service = Arc::new(Service {
        catalog,
        catalog_name: config.catalog.name.clone(),
        metrics: metrics.clone(),
        config: config.ingest.clone(),
        budget: write::MemoryBudget::new(config.ingest.memory_budget),
        transactions: flight::txn::Transactions::new(
            config.ingest.transaction_timeout,
            config.ingest.max_transactions.get(),
            &metrics,
        ),
        shutdown: tokio_util::sync::CancellationToken::new(),
        puts: tokio_util::task::TaskTracker::new(),
        streams: Arc::new(tokio::sync::Semaphore::new(config.ingest.max_streams.get())),
        tokens: tokens.clone(),
    });
    if let Some(tokens) = tokens {
        auth::reload_on_sighup(tokens, service.shutdown.clone())
            .map_err(|e| StartError::Serve(format!("cannot listen for SIGHUP: {e}")))?;
    }
    metrics.set_settings(
        config.ingest.commit_interval,
        config.maintenance.cleanup_max_waiting,
    );
    metrics.set_limits(
        config.ingest.max_streams.get(),
        service.budget.total_bytes(),
        config.ingest.max_writers.get(),
    );
    Ok(service)
}

/// A server task, and the sender that stops it gracefully.
type Served = (JoinHandle<Result<(), StartError>>, oneshot::Sender<()>);

/// Serves Flight (with the gRPC health service; TLS when `tls` is given; bearer tokens
/// when the service has them) on `listener` in the background; returns the task, its
/// stop sender and the health reporter.
///
/// # Errors
/// [`StartError::Tls`] when tonic refuses the TLS config.
async fn serve_flight(
    config: &Config,
    service: &Arc<Service>,
    tls: Option<tonic::transport::ServerTlsConfig>,
    listener: tokio::net::TcpListener,
) -> Result<(Served, tonic_health::server::HealthReporter), StartError> {
    let limit = usize::try_from(config.ingest.max_message_size).unwrap_or(usize::MAX);
    let flight = FlightServiceServer::new(SkadeFlight::new(service.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let flight = auth::FlightGuard::new(flight, service.tokens.clone());
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<FlightServiceServer<SkadeFlight>>()
        .await;
    let mut builder = tonic::transport::Server::builder()
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| StartError::Tls(tls::describe(&e)))?;
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        builder
            .add_service(health_service)
            .add_service(flight)
            .serve_with_incoming_shutdown(flight_connections(listener), async {
                let _ = stopped.await;
            })
            .await
            .map_err(|e| StartError::Serve(format!("flight: {e}")))
    });
    Ok(((task, stop), health))
}

/// Serves the HTTP address (metrics, health, the REST catalog; HTTPS when `https` is
/// given) on `listener` in the background.
///
/// # Errors
/// [`StartError::Serve`] when the TLS listener cannot be set up.
fn serve_http(
    service: &Arc<Service>,
    https: Option<tokio_rustls::TlsAcceptor>,
    listener: tokio::net::TcpListener,
) -> Result<Served, StartError> {
    let (stop, stopped) = oneshot::channel::<()>();
    let app = http::router(service.clone(), service.tokens.clone())
        .into_make_service_with_connect_info::<tls::Peer>();
    let stopped = async {
        let _ = stopped.await;
    };
    let task = match https {
        Some(acceptor) => {
            let listener = tls::TlsListener::new(listener, acceptor)
                .map_err(|e| StartError::Serve(format!("metrics: {e}")))?;
            tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await
                    .map_err(|e| StartError::Serve(format!("metrics: {e}")))
            })
        }
        None => tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
                .map_err(|e| StartError::Serve(format!("metrics: {e}")))
        }),
    };
    Ok((task, stop))
}

/// Resolves `addr` (given as `flag`) and binds its first IPv4 address (else its first
/// address): `localhost:50051` listens where IPv4 clients such as `127.0.0.1` reach it.
async fn bind(
    flag: &'static str,
    addr: &config::ListenAddr,
) -> Result<tokio::net::TcpListener, StartError> {
    let resolve_error = |source| StartError::Resolve {
        flag,
        addr: addr.to_string(),
        source,
    };
    let candidates: Vec<SocketAddr> = tokio::net::lookup_host(addr.as_str())
        .await
        .map_err(resolve_error)?
        .collect();
    let chosen = candidates
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| candidates.first())
        .copied()
        .ok_or_else(|| {
            resolve_error(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the name has no address",
            ))
        })?;
    tokio::net::TcpListener::bind(chosen)
        .await
        .map_err(|source| StartError::Bind {
            flag,
            addr: chosen,
            source,
        })
}

fn local_addr(
    listener: &tokio::net::TcpListener,
    flag: &'static str,
) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        flag,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}

/// Creates `data_dir` if needed and opens its catalog. When the data dir did not exist
/// and the open fails, what was created is removed again, so a failed start leaves
/// nothing on disk.
fn open_catalog(
    data_dir: &std::path::Path,
    warehouse: storage::Warehouse,
) -> Result<RedbCatalog, StartError> {
    let catalog_path = data_dir.join("catalog.redb");
    let existed = data_dir.exists();
    std::fs::create_dir_all(data_dir).map_err(|source| StartError::DataDir {
        path: data_dir.to_path_buf(),
        source,
    })?;
    RedbCatalog::open_in(&catalog_path, warehouse).map_err(|source| {
        if !existed {
            let _ = std::fs::remove_dir_all(data_dir);
        }
        if catalog::is_lock_error(&source) {
            StartError::Locked {
                data_dir: data_dir.to_path_buf(),
            }
        } else {
            StartError::Catalog {
                path: catalog_path,
                source: Box::new(source),
            }
        }
    })
}

/// Refuses a catalog holding a table whose metadata is not under its warehouse (see
/// [`StartError::TableOutsideWarehouse`]): such a table cannot be loaded, so serving it
/// would answer `ready` while its puts and reads fail.
///
/// # Errors
/// [`StartError::TableOutsideWarehouse`] naming the first such table;
/// [`StartError::Catalog`] when the catalog cannot be read.
async fn refuse_tables_outside_warehouse(
    data_dir: &std::path::Path,
    catalog: &RedbCatalog,
) -> Result<(), StartError> {
    let outside = catalog
        .first_table_outside_warehouse()
        .await
        .map_err(|source| match catalog.store_kind() {
            catalog::StoreKind::Postgres { target, .. } => StartError::Database(format!(
                "cannot read the catalog database {target} (--catalog): {}",
                source.message()
            )),
            catalog::StoreKind::Redb => StartError::Catalog {
                path: data_dir.join("catalog.redb"),
                source: Box::new(source),
            },
        })?;
    match (outside, catalog.store_kind()) {
        (None, _) => Ok(()),
        (Some((table, location)), catalog::StoreKind::Postgres { target, .. }) => {
            Err(StartError::SharedTableOutsideWarehouse {
                database: target,
                warehouse: catalog.warehouse().root(),
                table: table.to_string(),
                location,
            })
        }
        (Some((table, location)), catalog::StoreKind::Redb) => {
            Err(StartError::TableOutsideWarehouse {
                data_dir: data_dir.to_path_buf(),
                warehouse: catalog.warehouse().root(),
                table: table.to_string(),
                location,
            })
        }
    }
}

/// Runs the service until `shutdown` resolves, then stops cleanly.
///
/// # Errors
/// As [`start`], or a server task's failure.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let running = start(config).await?;
    hold_after_start().await;
    shutdown.await;
    info!("shutting down");
    running.shutdown_and_wait().await
}

/// The environment variable of a fault for the lifecycle tests: with
/// `SKADE_FAULT_HOLD_AFTER_START_MS=n` a debug build (or one with the `fault-injection`
/// feature) waits `n` ms after the server started before it watches for shutdown — the
/// moment a signal handler installed only then would miss a SIGTERM.
pub const HOLD_AFTER_START_MS: &str = "SKADE_FAULT_HOLD_AFTER_START_MS";

/// The [`HOLD_AFTER_START_MS`] fault: a no-op in a release build.
#[cfg(not(any(debug_assertions, feature = "fault-injection")))]
async fn hold_after_start() {}

/// The [`HOLD_AFTER_START_MS`] fault.
#[cfg(any(debug_assertions, feature = "fault-injection"))]
async fn hold_after_start() {
    if let Some(ms) = std::env::var(HOLD_AFTER_START_MS)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// The Flight listener's connections with `TCP_NODELAY` set. gRPC writes small frames
/// (acks, headers, trailers); with Nagle's algorithm on, each waits for the peer's delayed
/// ACK, which adds tens of milliseconds to every short request (`docs/internals.md`,
/// "Data files and transport").
fn flight_connections(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use futures::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

//! skade: an Arrow Flight (gRPC) service that turns streams of Arrow record batches into
//! Apache Iceberg tables, with an embedded redb catalog as its single durability point.
//!
//! [`start`] runs the whole service in-process (the tests do this); `main.rs` only parses
//! the command line and calls [`run`]. The contract is `docs/SERVICE.md`.

pub mod auth;
pub mod catalog;
pub mod config;
pub mod error;
pub mod flight;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod read;
pub mod rest;
pub mod tls;
pub mod write;

/// skade's own protobuf messages (`proto/skade/v1/skade.proto`).
#[allow(missing_docs, unreachable_pub)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/skade.v1.rs"));
}

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

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The catalog could not be opened — most often another skade holds its lock.
    #[error(
        "cannot open the catalog {path}: {source} (is another skade running on this data dir?)"
    )]
    Catalog {
        /// The `catalog.redb` path.
        path: PathBuf,
        /// The catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// An address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `--tls-cert`/`--tls-key` cannot be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// `--auth-token-file` cannot be used.
    #[error("authentication: {0}")]
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
        for task in self.tasks.drain(..) {
            match tokio::time::timeout_at(deadline, task).await {
                Ok(joined) => joined.map_err(|e| StartError::Serve(e.to_string()))??,
                Err(_) => tracing::warn!("shutdown timeout: a server did not stop in time"),
            }
        }
        Ok(())
    }
}

/// Opens the catalog under `config.data_dir`, binds both addresses and serves in the
/// background: Flight (with the gRPC health service, TLS and bearer tokens when
/// configured) and the HTTP metrics/health/REST address. Must run inside a
/// multi-threaded tokio runtime with timers.
///
/// # Errors
/// [`StartError::Catalog`] when the catalog cannot be opened (e.g. another process holds
/// its lock); [`StartError::Bind`] when an address is taken; [`StartError::Tls`] and
/// [`StartError::Auth`] for unusable certificate, key or token files.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let tls = match (&config.security.tls_cert, &config.security.tls_key) {
        (Some(cert), Some(key)) => {
            Some(tls::server_config(cert, key).map_err(|e| StartError::Tls(e.to_string()))?)
        }
        _ => None,
    };
    let tokens = match &config.security.auth_token_file {
        Some(path) => Some(Arc::new(auth::Tokens::load(path)?)),
        None => None,
    };
    let catalog_path = config.data_dir.join("catalog.redb");
    let metrics = Metrics::new();
    if let Some(tokens) = &tokens {
        tokens.count_refusals(metrics.auth_failures.clone());
    }
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::Catalog {
        path: catalog_path.clone(),
        source: Box::new(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            source.to_string(),
        )),
    })?;
    let catalog = RedbCatalog::open(&catalog_path, &config.data_dir.join("warehouse"))
        .map_err(|source| StartError::Catalog {
            path: catalog_path.clone(),
            source: Box::new(source),
        })?
        .with_commit_counter(metrics.catalog_commits.clone())
        .with_sync_counter(metrics.file_syncs.clone());
    error::hide_in_statuses(catalog.warehouse(), "<warehouse>");
    if let Ok(data_dir) = std::path::absolute(&config.data_dir) {
        error::hide_in_statuses(&data_dir, "<data-dir>");
    }
    let service = Arc::new(Service {
        catalog: Arc::new(catalog),
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
    if let Some(tokens) = tokens.clone() {
        auth::reload_on_sighup(tokens, service.shutdown.clone())
            .map_err(|e| StartError::Serve(format!("cannot listen for SIGHUP: {e}")))?;
    }
    flight::txn::Transactions::spawn_reaper(Arc::downgrade(&service));

    let bind = |addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })
    };
    let flight_listener = bind(config.flight_addr).await?;
    let metrics_listener = bind(config.metrics_addr).await?;
    let flight_addr = local_addr(&flight_listener, config.flight_addr)?;
    let metrics_addr = local_addr(&metrics_listener, config.metrics_addr)?;

    let limit = usize::try_from(config.ingest.max_message_size).unwrap_or(usize::MAX);
    let flight = FlightServiceServer::new(SkadeFlight::new(service.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    let flight = auth::FlightGuard::new(flight, tokens.clone());
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
    let (flight_stop, flight_stopped) = oneshot::channel::<()>();
    let flight_task = tokio::spawn(async move {
        builder
            .add_service(health_service)
            .add_service(flight)
            .serve_with_incoming_shutdown(flight_connections(flight_listener), async {
                let _ = flight_stopped.await;
            })
            .await
            .map_err(|e| StartError::Serve(format!("flight: {e}")))
    });

    let (http_stop, http_stopped) = oneshot::channel::<()>();
    let app = http::router(
        Arc::new(metrics),
        service.catalog.clone(),
        service.shutdown.clone(),
        tokens.clone(),
    );
    let http_task = tokio::spawn(async move {
        axum::serve(metrics_listener, app)
            .with_graceful_shutdown(async {
                let _ = http_stopped.await;
            })
            .await
            .map_err(|e| StartError::Serve(format!("metrics: {e}")))
    });
    info!(%flight_addr, %metrics_addr, data_dir = %config.data_dir.display(), "serving");
    Ok(Running {
        flight_addr,
        metrics_addr,
        service,
        shutdown: vec![flight_stop, http_stop],
        health,
        shutdown_timeout: config.ingest.shutdown_timeout,
        tasks: vec![flight_task, http_task],
    })
}

fn local_addr(
    listener: &tokio::net::TcpListener,
    asked: SocketAddr,
) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        addr: asked,
        source,
    })
}

/// Runs the service until `shutdown` resolves, then stops cleanly.
///
/// # Errors
/// As [`start`], or a server task's failure.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let running = start(config).await?;
    shutdown.await;
    info!("shutting down");
    running.shutdown_and_wait().await
}

/// The Flight listener's connections with `TCP_NODELAY` set. gRPC writes small frames
/// (acks, headers, trailers); with Nagle's algorithm on, each waits for the peer's delayed
/// ACK, which put ~40 ms under every short request (`skade-bench -- commit`).
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

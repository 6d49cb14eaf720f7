//! TLS for both listeners: `--tls-cert` and `--tls-key` (PEM), served by rustls with the
//! `ring` provider — through tonic on the Flight address, and through [`TlsListener`] on
//! the HTTP address (metrics, probes and the REST catalog), which then speaks only
//! HTTPS.

use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::{Identity, ServerTlsConfig};
use tracing::debug;

/// How long an HTTPS client may take to finish its TLS handshake before the connection
/// is closed.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for the HTTP server to take them.
const ACCEPTED_BACKLOG: usize = 64;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but holds no PEM block of the expected kind.
    #[error("{path} holds no PEM {what}")]
    NotPem {
        /// The file.
        path: PathBuf,
        /// `CERTIFICATE` or `PRIVATE KEY`.
        what: &'static str,
    },
    /// rustls refused the certificate or key.
    #[error("{path}: {reason}")]
    Rejected {
        /// The certificate file.
        path: PathBuf,
        /// rustls's reason.
        reason: String,
    },
}

/// `e` and its sources, `: `-separated (tonic's own message is just "transport error").
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The server TLS configuration of the PEM certificate chain `cert` and its key `key`.
/// rustls parses them when the server starts (a bad key fails [`crate::start`]).
///
/// # Errors
/// [`TlsError::Read`] for an unreadable file, [`TlsError::NotPem`] for one without a PEM
/// certificate (`cert`) or private key (`key`).
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerTlsConfig, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    let has = |pem: &[u8], label: &str| {
        String::from_utf8_lossy(pem)
            .lines()
            .any(|line| line.starts_with("-----BEGIN ") && line.contains(label))
    };
    if !has(&cert_pem, "CERTIFICATE") {
        return Err(TlsError::NotPem {
            path: cert.to_path_buf(),
            what: "CERTIFICATE",
        });
    }
    if !has(&key_pem, "PRIVATE KEY") {
        return Err(TlsError::NotPem {
            path: key.to_path_buf(),
            what: "PRIVATE KEY",
        });
    }
    use_ring_provider();
    Ok(ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem)))
}

/// The rustls acceptor of the HTTP listener, from the same PEM files as
/// [`server_config`].
///
/// # Errors
/// As [`server_config`]; [`TlsError::Rejected`] when rustls refuses the pair (a key that
/// does not parse or does not match the certificate).
pub fn http_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    // The same checks (and errors) as the Flight side.
    server_config(cert, key)?;
    let rejected = |reason: String| TlsError::Rejected {
        path: cert.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| rejected(format!("certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| rejected(format!("key: {e}")))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| rejected(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| rejected(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The peer of an HTTP connection, plain or TLS (axum's `ConnectInfo`).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TcpListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

/// An HTTPS listener for `axum::serve`: TCP connections are accepted and handshaken on
/// their own tasks (a slow or failing client never holds up the others; a handshake
/// that fails or outlasts 10 s is dropped), and the server takes them as they are
/// ready. Dropping the listener stops accepting.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, std::net::SocketAddr)>,
    local: std::net::SocketAddr,
    acceptor_task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `acceptor` on `listener`.
    ///
    /// # Errors
    /// The OS error reading the listener's address.
    pub fn new(listener: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(ACCEPTED_BACKLOG);
        let acceptor_task = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        debug!(error = %e, "https accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                if tx.is_closed() {
                    break;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "https handshake failed"),
                        Err(_) => debug!(%peer, "https handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            ready,
            local,
            acceptor_task,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor_task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The acceptor task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Makes ring rustls' process-wide crypto provider (tonic's), unless one is set already.
/// The S3 client's HTTP stack (OpenDAL's reqwest) enables rustls' `aws-lc-rs` feature
/// too, and with both compiled in rustls cannot pick a default: the TLS server (and an
/// `https` S3 endpoint's client) panicked. [`crate::start`] calls it first.
pub fn use_ring_provider() {
    // An error only means a provider is installed already: keep it.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

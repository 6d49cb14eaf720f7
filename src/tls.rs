//! TLS for the Flight address: `--tls-cert` and `--tls-key` (PEM), served by rustls with
//! the `ring` provider through tonic. The metrics address stays plain HTTP.

use std::path::{Path, PathBuf};

use tonic::transport::{Identity, ServerTlsConfig};

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

/// Makes ring rustls' process-wide crypto provider (tonic's), unless one is set already.
/// The S3 client's HTTP stack (OpenDAL's reqwest) enables rustls' `aws-lc-rs` feature
/// too, and with both compiled in rustls cannot pick a default: the TLS server (and an
/// `https` S3 endpoint's client) panicked. [`crate::start`] calls it first.
pub fn use_ring_provider() {
    // An error only means a provider is installed already: keep it.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

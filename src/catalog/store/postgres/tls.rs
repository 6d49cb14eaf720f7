//! TLS to the catalog database, asked for the libpq way in the `--catalog` URL:
//! `sslmode` and `sslrootcert` (PostgreSQL docs, "libpq — Connection Strings" and "SSL
//! Support"; `docs/several-instances.md`, "TLS").
//!
//! - `sslmode=require`, `verify-ca` or `verify-full`: every connection is TLS (rustls,
//!   the ring provider), and the server's certificate is verified against the roots in
//!   `sslrootcert` (a PEM file) or, without it, the system's trusted roots, *and* its
//!   host name or IP address is checked against the URL's host — libpq's `verify-full`
//!   for all three. skade makes no unverified TLS connection: libpq's `require`
//!   without a root certificate encrypts without knowing whom it talks to, which is what
//!   TLS to a shared catalog is there to prevent.
//! - No `sslmode`, or `disable`, `allow`, `prefer`: no TLS, as before (libpq's `allow`
//!   and `prefer` fall back to plaintext anyway; a server that requires TLS refuses the
//!   start with its own reason).
//!
//! Only the URL form (`postgres://…?sslmode=…`) carries `sslrootcert`; tokio-postgres
//! parses the rest of the URL.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector every connection to the catalog database is made with.
#[derive(Clone)]
pub(super) struct Connector(MakeRustlsConnect);

impl Connector {
    /// The tokio-postgres connector.
    pub(super) fn make(&self) -> MakeRustlsConnect {
        self.0.clone()
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connector(rustls)")
    }
}

/// What a `--catalog` URL asks of TLS, and the URL without what only skade reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UrlTls {
    /// The URL for tokio-postgres: `sslmode` and `sslrootcert` taken out.
    pub(super) url: String,
    /// TLS with a verified certificate (`require`, `verify-ca`, `verify-full`).
    pub(super) verify: bool,
    /// `sslrootcert`: the PEM file of the roots to verify against (else the system's).
    pub(super) root_cert: Option<PathBuf>,
}

impl UrlTls {
    /// Splits `url`'s `sslmode` and `sslrootcert` from the rest (module docs).
    ///
    /// # Errors
    /// An `sslmode` libpq does not know, or `sslrootcert` without a TLS `sslmode`, as a
    /// sentence naming the parameter.
    pub(super) fn parse(url: &str) -> Result<Self, String> {
        let Some((base, query)) = url.split_once('?') else {
            return Ok(Self {
                url: url.to_string(),
                verify: false,
                root_cert: None,
            });
        };
        let mut kept = Vec::new();
        let (mut verify, mut root_cert) = (false, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(value)
                .decode_utf8()
                .map_err(|_| format!("{key} is not UTF-8 once percent-decoded"))?;
            match key {
                "sslmode" => {
                    verify = match value.as_ref() {
                        "disable" | "allow" | "prefer" => false,
                        "require" | "verify-ca" | "verify-full" => true,
                        other => {
                            return Err(format!(
                                "sslmode={other} is not one of disable, allow, prefer, require, \
                                 verify-ca, verify-full"
                            ));
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(PathBuf::from(value.as_ref())),
                _ => kept.push(pair),
            }
        }
        if root_cert.is_some() && !verify {
            return Err(
                "sslrootcert is given but sslmode does not ask for TLS: add sslmode=verify-full"
                    .to_string(),
            );
        }
        let url = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok(Self {
            url,
            verify,
            root_cert,
        })
    }

    /// The `sslmode` tokio-postgres connects with: `Require` for TLS, else `Disable`
    /// (never its default `Prefer`, which would try TLS on a plaintext URL).
    pub(super) fn ssl_mode(&self) -> SslMode {
        if self.verify {
            SslMode::Require
        } else {
            SslMode::Disable
        }
    }

    /// The connector: verifying against `sslrootcert` or the system's roots when TLS is
    /// asked for; otherwise one that is never used (`sslmode` is `Disable`).
    ///
    /// # Errors
    /// `sslrootcert` unreadable or holding no PEM certificate, as a sentence naming it.
    pub(super) fn connector(&self) -> Result<Connector, String> {
        let mut roots = rustls::RootCertStore::empty();
        if self.verify {
            match &self.root_cert {
                Some(path) => add_pem_roots(&mut roots, path)?,
                None => {
                    // Unreadable system certificates are skipped: a server signed by
                    // none of the rest is refused at connect, naming the certificate.
                    for cert in rustls_native_certs::load_native_certs().certs {
                        let _ = roots.add(cert);
                    }
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Connector(MakeRustlsConnect::new(config)))
    }
}

/// Adds every certificate of the PEM file `path` to `roots`.
fn add_pem_roots(roots: &mut rustls::RootCertStore, path: &Path) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let failed = |reason: String| format!("sslrootcert {}: {reason}", path.display());
    let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| failed(format!("not a PEM certificate ({e})")))?;
        roots
            .add(cert)
            .map_err(|e| failed(format!("not a usable root certificate ({e})")))?;
    }
    if roots.is_empty() {
        return Err(failed("holds no PEM certificate".to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches a URL whose TLS parameters reach tokio-postgres (it refuses sslrootcert and
    // the verify-* modes), an sslmode that turns TLS off or on against libpq's meaning,
    // and a percent-encoded path read as it is written.
    #[test]
    fn sslmode_and_sslrootcert_are_read_the_libpq_way() {
        let tls = |url: &str| UrlTls::parse(url);
        let plain = tls("postgres://u@h:5432/db").unwrap();
        assert_eq!(
            (plain.url.as_str(), plain.verify),
            ("postgres://u@h:5432/db", false)
        );
        assert_eq!(plain.ssl_mode(), SslMode::Disable);
        for mode in ["disable", "allow", "prefer"] {
            let t = tls(&format!(
                "postgres://h/db?sslmode={mode}&application_name=x"
            ))
            .unwrap();
            assert_eq!(t.url, "postgres://h/db?application_name=x");
            assert!(!t.verify, "{mode}");
        }
        for mode in ["require", "verify-ca", "verify-full"] {
            let t = tls(&format!("postgres://h/db?sslmode={mode}")).unwrap();
            assert_eq!(t.url, "postgres://h/db");
            assert!(t.verify, "{mode}");
            assert_eq!(t.ssl_mode(), SslMode::Require);
        }
        let t = tls(
            "postgres://h/db?connect_timeout=3&sslrootcert=%2Fetc%2Fca%20x.pem&sslmode=verify-full",
        )
        .unwrap();
        assert_eq!(t.url, "postgres://h/db?connect_timeout=3");
        assert_eq!(t.root_cert, Some(PathBuf::from("/etc/ca x.pem")));
        assert!(
            tls("postgres://h/db?sslmode=on")
                .unwrap_err()
                .contains("sslmode=on")
        );
        assert!(
            tls("postgres://h/db?sslrootcert=/ca.pem")
                .unwrap_err()
                .contains("sslmode=verify-full")
        );
    }

    // Catches a root file that is missing or holds no certificate being taken as "trust
    // the system's roots" instead of refusing the start.
    #[test]
    fn an_unusable_sslrootcert_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        for path in [dir.path().join("missing.pem"), empty] {
            let t = UrlTls {
                url: "postgres://h/db".into(),
                verify: true,
                root_cert: Some(path.clone()),
            };
            let e = t.connector().expect_err("refused");
            assert!(e.contains(&path.display().to_string()), "{e}");
        }
    }
}

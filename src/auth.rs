//! Bearer-token authentication of the Flight address (docs/SERVICE.md, "Security"), and the
//! per-RPC span every Flight call runs in.
//!
//! [`Tokens`] is the set of valid tokens, read from `--auth-token-file` (one per line)
//! and re-read on SIGHUP. [`FlightGuard`] wraps the tonic `FlightServiceServer`, so it
//! covers every Flight and Flight SQL RPC: it opens the RPC's span and, when tokens are
//! configured, refuses a call without a valid `authorization: Bearer <token>` header with
//! `Unauthenticated` before the handler runs — nothing is read, nothing is written.
//! `Handshake` passes through: its handler ([`handshake_token`]) trades a token sent as
//! basic auth (pyarrow's `authenticate_basic_token`) or as the payload for the bearer
//! header clients then send. Token values never reach a log line or an error message.

use std::collections::HashSet;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use crate::error::Error;
use base64::Engine;
use futures::future::{Either, Ready, ready};
use tonic::Status;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tracing::{Instrument, Span, info, info_span, warn};

/// The gRPC path of Flight's `Handshake`, the one RPC that runs without a bearer token.
pub const HANDSHAKE_PATH: &str = "/arrow.flight.protocol.FlightService/Handshake";

/// The header that carries the token.
pub const AUTHORIZATION: &str = "authorization";

/// Why the token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no token, which would refuse every call.
    #[error("the token file {path} holds no token (one per line; `#` starts a comment)")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// The valid bearer tokens, read from a file and re-read on demand ([`Tokens::reload`]).
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    set: RwLock<Arc<HashSet<String>>>,
    /// The server's metrics (`skade_auth_failures_total`), once they exist.
    refusals: std::sync::OnceLock<crate::metrics::Metrics>,
}

impl Tokens {
    /// Reads the tokens of `path`: one per line, surrounding whitespace trimmed, blank
    /// lines and lines starting with `#` skipped.
    ///
    /// # Errors
    /// [`TokenFileError::Read`] when the file cannot be read, [`TokenFileError::Empty`]
    /// when it holds no token.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let set = read_tokens(path)?;
        if set.is_empty() {
            return Err(TokenFileError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            set: RwLock::new(Arc::new(set)),
            refusals: std::sync::OnceLock::new(),
        })
    }

    /// Re-reads the file. On a read error the tokens in force stay and the error is
    /// returned; an empty file is accepted (every call is then refused) with a warning.
    /// Returns how many tokens are in force.
    ///
    /// # Errors
    /// [`TokenFileError::Read`].
    pub fn reload(&self) -> Result<usize, TokenFileError> {
        let set = read_tokens(&self.path)?;
        let count = set.len();
        if count == 0 {
            warn!(path = %self.path.display(), "the token file holds no token: every Flight RPC is refused");
        }
        *self.set.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(count)
    }

    /// Whether `token` is one of the tokens in force (compared in constant time per
    /// token, so the comparison does not tell how much of a token matched).
    pub fn contains(&self, token: &str) -> bool {
        let set = self.set.read().unwrap_or_else(|p| p.into_inner()).clone();
        set.iter().fold(false, |found, t| {
            found | constant_time_eq(t.as_bytes(), token.as_bytes())
        })
    }

    /// Counts every refusal on `metrics` ([`crate::metrics::AUTH_FAILURES_TOTAL`], label
    /// `surface`). Only the first metrics given are used.
    pub fn count_refusals(&self, metrics: crate::metrics::Metrics) {
        let _ = self.refusals.set(metrics);
    }

    /// Records one refused call on `surface` (`flight` or `rest`).
    pub fn refused(&self, surface: &str) {
        if let Some(metrics) = self.refusals.get() {
            metrics.record_auth_failure(surface);
        }
    }

    /// Whether `value`, an `authorization` header, is `Bearer <token>` with a valid token.
    pub fn allows_header(&self, value: Option<&str>) -> bool {
        value
            .and_then(bearer_token)
            .is_some_and(|token| self.contains(token))
    }
}

fn read_tokens(path: &Path) -> Result<HashSet<String>, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_string)
        .collect())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of a `Bearer <token>` header value (scheme case-insensitive).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The password of a `Basic base64(user:password)` header value.
fn basic_password(value: &str) -> Option<String> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    // Padding optional: Go's Flight client (the ADBC driver) sends it unpadded.
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let decoded = engine.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (_user, password) = decoded.split_once(':')?;
    Some(password.to_string())
}

/// `Handshake` with authentication on: the valid token the client presents, taken from
/// its `authorization` header — `Bearer <token>`, or `Basic` with the token as the
/// password (any user name), as pyarrow's `authenticate_basic_token` sends it — or else
/// from `payload`, the first `HandshakeRequest`'s payload, as the raw token.
///
/// # Errors
/// `Unauthenticated` when none of them is a valid token (the message never quotes it).
pub fn handshake_token(
    tokens: &Tokens,
    metadata: &MetadataMap,
    payload: Option<&[u8]>,
) -> Result<String, Status> {
    let header = metadata
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let candidates = [
        bearer_token(header).map(str::to_string),
        basic_password(header),
        payload.and_then(|p| std::str::from_utf8(p).ok().map(|s| s.trim().to_string())),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|token| !token.is_empty() && tokens.contains(token))
        .ok_or_else(unauthenticated)
}

/// The `surface` label of refusals on the Flight service.
pub const SURFACE_FLIGHT: &str = "flight";
/// The `surface` label of refusals on the REST catalog.
pub const SURFACE_REST: &str = "rest";

/// The one status every refused call gets.
pub fn unauthenticated() -> Status {
    Error::Unauthenticated.into_status()
}

/// Wraps the Flight service: one `rpc` span per call (with `table` and `transaction`
/// fields the handlers fill in), and the bearer-token check when tokens are configured.
#[derive(Debug, Clone)]
pub struct FlightGuard<S> {
    inner: S,
    tokens: Option<Arc<Tokens>>,
}

impl<S> FlightGuard<S> {
    /// Guards `inner`; `tokens` `None` means authentication is off.
    pub fn new(inner: S, tokens: Option<Arc<Tokens>>) -> Self {
        Self { inner, tokens }
    }
}

impl<S: NamedService> NamedService for FlightGuard<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<http::Request<B>> for FlightGuard<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<
        tracing::instrument::Instrumented<S::Future>,
        Ready<Result<http::Response<Body>, Infallible>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let method = path.rsplit('/').next().unwrap_or(path);
        let span = info_span!(
            "rpc",
            method = %method,
            table = tracing::field::Empty,
            transaction = tracing::field::Empty
        );
        if let Some(tokens) = &self.tokens
            && path != HANDSHAKE_PATH
        {
            let header = request
                .headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            if !tokens.allows_header(header) {
                tokens.refused(SURFACE_FLIGHT);
                span.in_scope(|| {
                    info!(
                        peer = %peer_of(&request).map(|a| a.to_string()).unwrap_or_default(),
                        header = if header.is_some() { "invalid" } else { "missing" },
                        "unauthenticated"
                    )
                });
                return Either::Right(ready(Ok(unauthenticated().into_http())));
            }
        }
        Either::Left(self.inner.call(request).instrument(span))
    }
}

fn peer_of<B>(request: &http::Request<B>) -> Option<std::net::SocketAddr> {
    request
        .extensions()
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
        .or_else(|| {
            request
                .extensions()
                .get::<tonic::transport::server::TlsConnectInfo<
                    tonic::transport::server::TcpConnectInfo,
                >>()
                .and_then(|info| info.get_ref().remote_addr())
        })
}

/// Re-reads `tokens` on every SIGHUP until `stop` is cancelled.
///
/// # Errors
/// The OS error when SIGHUP cannot be listened for.
pub fn reload_on_sighup(
    tokens: Arc<Tokens>,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = hangups.recv() => if got.is_none() { return },
            }
            match tokens.reload() {
                Ok(count) => info!(tokens = count, "token file re-read"),
                Err(e) => {
                    warn!(error = %e, "cannot re-read the token file; the tokens in force stay")
                }
            }
        }
    }))
}

/// Records `name = value` on the current span (the RPC's span of [`FlightGuard`]).
pub fn record(name: &str, value: impl std::fmt::Display) {
    Span::current().record(name, tracing::field::display(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RED once: with `basic_password` returning the user name instead of the password,
    /// the basic-auth assertion failed (`"anyone"` for `"s3cret"`); and with the padded-only
    /// STANDARD engine, the unpadded form (the ADBC driver's) gave `None`.
    #[test]
    fn header_forms() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Basic abc"), None);
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("anyone:s3cret")
        );
        assert_eq!(basic_password(&basic).as_deref(), Some("s3cret"));
        let unpadded = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode("anyone:tok-123")
        );
        assert!(!unpadded.ends_with('='));
        assert_eq!(basic_password(&unpadded).as_deref(), Some("tok-123"));
        assert_eq!(basic_password("Basic !!!"), None);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}

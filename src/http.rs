//! The operator HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (alive),
//! `/readyz` (ready to ingest), and the Iceberg REST catalog under `/v1`
//! ([`crate::rest`]). With `--tls-cert`/`--tls-key` it is served over TLS (HTTPS only,
//! [`crate::tls::TlsListener`]); with `--auth-token-file` the REST catalog — reads and
//! writes — needs the same bearer tokens as Flight, while probes and scrapers reach
//! `/metrics`, `/healthz` and `/readyz` without one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use iceberg::Catalog;

use crate::flight::Service;
use crate::rest;

/// The prefix of the file `/readyz` creates and removes in the warehouse root to prove it
/// writable (a random suffix keeps concurrent probes apart).
const READY_PROBE_PREFIX: &str = ".skade-readyz-";

/// How long the catalog read and the warehouse write of one readiness check may take
/// together before the check answers "did not answer": well under the readiness probe's
/// `timeoutSeconds: 3` (`deploy/statefulset.yaml`), so the probe sees the reason instead
/// of timing out.
pub const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// How long one readiness check's result is reused: probes and scrapes in between get
/// it at once, and the warehouse sees at most one probe object per period.
pub const READY_CACHE_TTL: Duration = Duration::from_secs(2);

/// The longest reason `/readyz` gives, in bytes (the rest is cut at a character
/// boundary and marked `…`).
const READY_REASON_MAX_BYTES: usize = 240;

/// The state the HTTP routes share: the service and the last readiness result.
#[derive(Debug)]
struct Probe {
    service: Arc<Service>,
    state: tokio::sync::Mutex<ProbeState>,
}

/// The readiness checks of one server: at most one runs at a time.
#[derive(Debug, Default)]
struct ProbeState {
    /// The last answer and when it was given.
    last: Option<(Instant, Result<(), String>)>,
    /// A check that outlived a probe's wait; the next probe waits for it again instead of
    /// starting another one beside it.
    running: Option<tokio::task::JoinHandle<Result<(), String>>>,
}

/// The router served on `--metrics-addr`: metrics, liveness and readiness, plus the
/// REST catalog over the service's catalog. `/readyz` answers `503` once the service's
/// shutdown has begun.
pub fn router(service: Arc<Service>, tokens: Option<Arc<crate::auth::Tokens>>) -> Router {
    let catalog = service.catalog.clone();
    let probe = Arc::new(Probe {
        service,
        state: tokio::sync::Mutex::default(),
    });
    // The first check pays for setting up the storage client (its HTTP client, TLS
    // roots, credentials): start it now, so the first probe mostly finds it done.
    if tokio::runtime::Handle::try_current().is_ok() {
        let warm = probe.clone();
        tokio::spawn(async move {
            let _ = warm.ready().await;
        });
    }
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(probe)
        .merge(rest::router(catalog, tokens))
}

/// `GET /`: one line per endpoint this address serves, for a person who opens it.
async fn index() -> &'static str {
    "skade: /metrics (Prometheus), /healthz (liveness), /readyz (readiness), /v1/... (Iceberg REST catalog; try /v1/config)\n"
}

/// The Prometheus text of every metric. The gauges of state that changes without an
/// event — rows' bytes held against `--memory-budget`, the writer ids kept, and
/// readiness (the same check as `/readyz`, cached the same way) — are read at scrape time.
async fn render_metrics(State(probe): State<Arc<Probe>>) -> impl IntoResponse {
    let service = &probe.service;
    let metrics = &service.metrics;
    let budget = &service.budget;
    let held = budget
        .total_bytes()
        .saturating_sub(budget.available_bytes());
    let writers = service.catalog.writers(None).await.ok().map(|(n, _)| n);
    let ready = probe.ready().await.is_ok();
    metrics.set_scrape_state(held, writers, ready);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.render(),
    )
}

/// `200 ready` when the server is not shutting down, the catalog answers a read and the
/// warehouse takes a new file; else `503` with one short line naming what is not ready.
/// Answers within [`READY_CHECK_TIMEOUT`] (plus waiting for a check already running).
async fn readyz(State(probe): State<Arc<Probe>>) -> (StatusCode, String) {
    match probe.ready().await {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

impl Probe {
    /// The readiness result: `shutting down` at once once shutdown began; else the last
    /// answer while it is younger than [`READY_CACHE_TTL`]; else the answer of a check
    /// (the one still running, or a new one in its own task, so that a check blocking
    /// its thread cannot hold the answer up) waited for at most [`READY_CHECK_TIMEOUT`].
    async fn ready(&self) -> Result<(), String> {
        if self.service.shutdown.is_cancelled() {
            return Err("shutting down".to_string());
        }
        let mut state = self.state.lock().await;
        if let Some((at, result)) = state.last.as_ref()
            && at.elapsed() < READY_CACHE_TTL
        {
            return result.clone();
        }
        let mut check = state.running.take().unwrap_or_else(|| {
            let service = self.service.clone();
            tokio::spawn(async move { check_ready(&service).await })
        });
        let result = match tokio::time::timeout(READY_CHECK_TIMEOUT, &mut check).await {
            Ok(Ok(result)) => result.map_err(|reason| shorten(&reason)),
            Ok(Err(e)) => Err(format!("the readiness check failed: {e}")),
            Err(_) => {
                state.running = Some(check);
                Err(format!(
                    "the catalog or the warehouse {} did not answer within {} ms",
                    self.service.catalog.warehouse(),
                    READY_CHECK_TIMEOUT.as_millis()
                ))
            }
        };
        state.last = Some((Instant::now(), result.clone()));
        result
    }
}

/// `reason` on one line of at most [`READY_REASON_MAX_BYTES`] bytes.
fn shorten(reason: &str) -> String {
    let line: String = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() <= READY_REASON_MAX_BYTES {
        return line;
    }
    let mut end = READY_REASON_MAX_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

async fn check_ready(ready: &Service) -> Result<(), String> {
    ready
        .catalog
        .list_namespaces(None)
        .await
        .map_err(|e| format!("catalog: {}", e.message()))?;
    match ready.catalog.warehouse().local_path() {
        Some(root) => {
            let probe = root.join(format!("{READY_PROBE_PREFIX}{}", uuid::Uuid::new_v4()));
            crate::storage::blocking::run_blocking(move || {
                std::fs::write(&probe, b"ok")
                    .and_then(|()| std::fs::remove_file(&probe))
                    .map_err(|e| format!("warehouse {} is not writable: {e}", probe.display()))
            })
            .await
            .map_err(|e| format!("warehouse check: {e}"))?
        }
        None => {
            // An object store: the bucket must take (and drop) a small object.
            let probe = format!(
                "{}/{READY_PROBE_PREFIX}{}",
                ready.catalog.warehouse().root(),
                uuid::Uuid::new_v4()
            );
            let io = ready.catalog.file_io();
            let root = ready.catalog.warehouse().root();
            let unwritable = |e: iceberg::Error| {
                format!("warehouse {root} is not writable: {}", storage_reason(&e))
            };
            io.new_output(&probe)
                .map_err(unwritable)?
                .write(bytes::Bytes::from_static(b"ok"))
                .await
                .map_err(unwritable)?;
            io.delete(&probe).await.map_err(unwritable)
        }
    }
}

/// The store's own words for `e`: its innermost source (iceberg and OpenDAL repeat the
/// same context at every level above it), else `e`'s message.
fn storage_reason(e: &iceberg::Error) -> String {
    let mut innermost: Option<&dyn std::error::Error> = None;
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        innermost = Some(c);
        cause = c.source();
    }
    match innermost {
        Some(c) => c.to_string(),
        None => e.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::shorten;

    #[test]
    fn a_reason_is_one_short_line() {
        assert_eq!(shorten("a\n\n  b c\n"), "a b c");
        let long = "é".repeat(500);
        let short = shorten(&long);
        assert!(short.len() <= super::READY_REASON_MAX_BYTES + '…'.len_utf8());
        assert!(short.ends_with('…'));
    }
}

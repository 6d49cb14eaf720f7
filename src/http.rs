//! The operator HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (alive),
//! `/readyz` (ready to ingest), and the Iceberg REST catalog under `/v1`
//! ([`crate::rest`]). With `--tls-cert`/`--tls-key` it is served over TLS (HTTPS only,
//! [`crate::tls::TlsListener`]); with `--auth-token-file` the REST catalog — reads and
//! writes — needs the same bearer tokens as Flight, while probes and scrapers reach
//! `/metrics`, `/healthz` and `/readyz` without one.

use std::sync::Arc;

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

/// The router served on `--metrics-addr`: metrics, liveness and readiness, plus the
/// REST catalog over the service's catalog. `/readyz` answers `503` once the service's
/// shutdown has begun.
pub fn router(service: Arc<Service>, tokens: Option<Arc<crate::auth::Tokens>>) -> Router {
    let catalog = service.catalog.clone();
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(service)
        .merge(rest::router(catalog, tokens))
}

/// The Prometheus text of every metric. The gauges of state that changes without an
/// event — rows' bytes held against `--memory-budget`, the writer ids kept, and
/// readiness (the same check as `/readyz`) — are read at scrape time.
async fn render_metrics(State(service): State<Arc<Service>>) -> impl IntoResponse {
    let metrics = &service.metrics;
    let budget = &service.budget;
    let held = budget
        .total_bytes()
        .saturating_sub(budget.available_bytes());
    let writers = service.catalog.writers(None).await.ok().map(|(n, _)| n);
    let ready = check_ready(&service).await.is_ok();
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
/// warehouse takes a new file; else `503` naming what is not ready.
async fn readyz(State(service): State<Arc<Service>>) -> (StatusCode, String) {
    match check_ready(&service).await {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

async fn check_ready(ready: &Service) -> Result<(), String> {
    if ready.shutdown.is_cancelled() {
        return Err("shutting down".to_string());
    }
    ready
        .catalog
        .list_namespaces(None)
        .await
        .map_err(|e| format!("catalog: {e}"))?;
    match ready.catalog.warehouse().local_path() {
        Some(root) => {
            let probe = root.join(format!("{READY_PROBE_PREFIX}{}", uuid::Uuid::new_v4()));
            tokio::task::spawn_blocking(move || {
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
            let unwritable = |e: iceberg::Error| {
                format!("warehouse {probe} is not writable: {}", storage_reason(&e))
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

/// An error with its sources (the object store's own words are in the innermost one).
fn storage_reason(e: &iceberg::Error) -> String {
    let mut reason = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        reason.push_str(": ");
        reason.push_str(&c.to_string());
        cause = c.source();
    }
    reason
}

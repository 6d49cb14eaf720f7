//! The operator HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (alive),
//! `/readyz` (ready to ingest), and the read-only Iceberg REST catalog under `/v1`
//! ([`crate::rest`]). It is never behind TLS; with `--auth-token-file` the REST catalog
//! needs the same bearer tokens as Flight, while probes and scrapers reach `/metrics`,
//! `/healthz` and `/readyz` without one.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use iceberg::Catalog;
use tokio_util::sync::CancellationToken;

use crate::catalog::RedbCatalog;
use crate::metrics::Metrics;
use crate::rest;

/// The prefix of the file `/readyz` creates and removes in the warehouse root to prove it
/// writable (a random suffix keeps concurrent probes apart).
const READY_PROBE_PREFIX: &str = ".skade-readyz-";

#[derive(Clone)]
struct Ready {
    catalog: Arc<RedbCatalog>,
    shutdown: CancellationToken,
}

/// The router served on `--metrics-addr`: metrics, liveness and readiness, plus the
/// REST catalog over `catalog`. `/readyz` answers `503` once `shutdown` is cancelled.
pub fn router(
    metrics: Arc<Metrics>,
    catalog: Arc<RedbCatalog>,
    shutdown: CancellationToken,
    tokens: Option<Arc<crate::auth::Tokens>>,
) -> Router {
    let ready = Ready {
        catalog: catalog.clone(),
        shutdown,
    };
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(metrics)
        .merge(
            Router::new()
                .route("/readyz", get(readyz))
                .with_state(ready),
        )
        .merge(rest::router(catalog, tokens))
}

async fn render_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
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
async fn readyz(State(ready): State<Ready>) -> (StatusCode, String) {
    match check_ready(&ready).await {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

async fn check_ready(ready: &Ready) -> Result<(), String> {
    if ready.shutdown.is_cancelled() {
        return Err("shutting down".to_string());
    }
    ready
        .catalog
        .list_namespaces(None)
        .await
        .map_err(|e| format!("catalog: {e}"))?;
    let probe = ready
        .catalog
        .warehouse()
        .join(format!("{READY_PROBE_PREFIX}{}", uuid::Uuid::new_v4()));
    tokio::task::spawn_blocking(move || {
        std::fs::write(&probe, b"ok")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| format!("warehouse {} is not writable: {e}", probe.display()))
    })
    .await
    .map_err(|e| format!("warehouse check: {e}"))?
}

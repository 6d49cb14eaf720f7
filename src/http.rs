//! The operator HTTP endpoint: `/metrics` (Prometheus text), `/healthz`, and the
//! read-only Iceberg REST catalog under `/v1` ([`crate::rest`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::catalog::RedbCatalog;
use crate::metrics::Metrics;
use crate::rest;

/// The router served on `--metrics-addr`: metrics and health, plus the REST catalog
/// over `catalog`.
pub fn router(metrics: Arc<Metrics>, catalog: Arc<RedbCatalog>) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(metrics)
        .merge(rest::router(catalog))
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

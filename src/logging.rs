//! Log setup: `tracing` events on stderr, filtered by `RUST_LOG` (default `info`), as
//! text or JSON lines (`--log-format`).
//!
//! Every Flight RPC runs in an `rpc` span with its `method` and, once known, its `table`
//! and `transaction` ([`crate::auth::FlightGuard`]); every commit is one `committed`
//! event (table, snapshot id, rows, bytes, seconds); a failed RPC is logged once, where
//! it becomes a gRPC status. Token values are never logged.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let (filter, bad_filter) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(e) => (
            EnvFilter::new("info"),
            std::env::var("RUST_LOG").ok().map(|v| (v, e)),
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
    if let Some((value, e)) = bad_filter {
        tracing::warn!(rust_log = %value, error = %e, "RUST_LOG is not a valid filter; logging at info");
    }
}

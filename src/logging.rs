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

/// Libraries whose warnings skade says again in its own words, shown from `error` only.
const QUIET_TARGETS: &str = "deadpool.postgres=error";

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let (mut filter, bad_filter) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(e) => (
            EnvFilter::new("info"),
            std::env::var("RUST_LOG").ok().map(|v| (v, e)),
        ),
    };
    // The catalog pool's own warnings (`Connection could not be recycled: Connection
    // closed`, one per pooled connection when the database goes away) name neither the
    // database nor the reason; skade logs the connection's end in its words instead
    // (`a connection to the catalog database ended`). A RUST_LOG that names the target
    // keeps what it asks for.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("deadpool")) {
        filter = filter.add_directive(QUIET_TARGETS.parse().expect("a valid directive"));
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(builder.finish()),
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(true)
                .finish(),
        ),
    };
    if installed.is_ok() {
        use tracing_log::AsLog;
        // Libraries that log through `log` (OpenDAL's retry warnings, ...) reach the same
        // subscriber, each record on one line.
        if log::set_boxed_logger(Box::new(OneLine(tracing_log::LogTracer::new()))).is_ok() {
            log::set_max_level(tracing::level_filters::LevelFilter::current().as_log());
        }
    }
    if let Some((value, e)) = bad_filter {
        tracing::warn!(rust_log = %value, error = %e, "RUST_LOG is not a valid filter; logging at info");
    }
}

/// Passes `log` records on to `tracing` (through [`tracing_log::LogTracer`]) with their
/// message on one line and without a backtrace: OpenDAL's storage retry warnings format
/// their error with `{:?}`, which spans lines (context, source) and, when
/// `RUST_BACKTRACE` is set, ends with a captured backtrace of some 40 lines.
struct OneLine(tracing_log::LogTracer);

impl log::Log for OneLine {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        let message = record.args().to_string();
        if !message.contains('\n') {
            return self.0.log(record);
        }
        let line = one_line(&message);
        self.0.log(
            &log::Record::builder()
                .args(format_args!("{line}"))
                .level(record.level())
                .target(record.target())
                .module_path(record.module_path())
                .file(record.file())
                .line(record.line())
                .build(),
        );
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// `message` without its backtrace (from a line `Backtrace:` or `stack backtrace:` on)
/// and with every run of whitespace, line breaks included, as one space.
fn one_line(message: &str) -> String {
    let cut = ["Backtrace:", "stack backtrace:"]
        .iter()
        .filter_map(|marker| message.find(marker))
        .min()
        .unwrap_or(message.len());
    message[..cut]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_multi_line_error_becomes_one_line_without_its_backtrace() {
        let debug = "Unexpected (temporary) at write => send http request\n\nContext:\n   service: s3\n\nSource:\n   connection refused\n\nBacktrace:\n   0: opendal::Error::new\n             at src/error.rs:1\n";
        assert_eq!(
            one_line(debug),
            "Unexpected (temporary) at write => send http request Context: service: s3 Source: connection refused"
        );
    }
}

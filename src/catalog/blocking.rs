//! Blocking work off the async runtime: iceberg `FileIO` futures and redb transactions.

use iceberg::{Error, ErrorKind, Result};

/// Runs `io` — a future over iceberg's local `FileIO` — on the blocking pool, and waits
/// for it.
///
/// iceberg 0.10.1's local storage makes blocking `std::fs` calls inside its async
/// functions, and its manifest and manifest-list writers `fsync` each file on close.
/// Awaited on a runtime worker, such a future blocks that worker (2 on the development
/// machine) for the whole write; several of them joined on one task run one after the
/// other. On the blocking pool they overlap — the N tables of one release write their
/// files at once — and the workers stay free for the streams.
///
/// # Errors
/// `io`'s error, or `Unexpected` when the task panicked.
///
/// # Cancel safety
/// Dropping the future does not stop `io`; it runs to its end and its result is
/// dropped (files it wrote are orphans, never referenced).
pub async fn run_blocking_io<T, F>(io: F) -> Result<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T>> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(io))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "file task failed").with_source(e))?
}

/// Runs blocking redb work off the async runtime.
pub(super) async fn blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "catalog task failed").with_source(e))?
}

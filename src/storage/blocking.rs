//! Blocking work off the async runtime, one way for the whole crate: iceberg `FileIO`
//! futures (local storage makes blocking `std::fs` calls inside its async functions, and
//! its writers `fsync` on close), redb transactions, directory walks and unlinks.
//!
//! - [`run_blocking`]: a closure on the blocking pool, awaited;
//! - [`run_blocking_io`]: a future over iceberg's `FileIO` driven on the blocking pool;
//! - [`block_on_here`]: such a future driven from code already on the blocking pool.

use std::future::Future;

use iceberg::{Error, ErrorKind, Result};

/// Runs `f` on the blocking pool and waits for it.
///
/// # Errors
/// [`tokio::task::JoinError`] when the task panicked or the runtime is shutting down.
///
/// # Cancel safety
/// Dropping the future does not stop `f`; it runs to its end and its result is dropped.
pub async fn run_blocking<T, F>(f: F) -> std::result::Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f).await
}

/// Runs `io` — a future over iceberg's local `FileIO` — on the blocking pool, and waits
/// for it.
///
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
    F: Future<Output = Result<T>> + Send + 'static,
{
    run_blocking(move || block_on_here(io))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "file task failed").with_source(e))?
}

/// Drives `io` to its end from a thread of the blocking pool (inside [`run_blocking`]),
/// with the runtime's timers and I/O at hand; on a thread outside any runtime, on that
/// thread alone.
///
/// # Panics
/// When called from one of a runtime's async workers (it would block it).
pub fn block_on_here<F: Future>(io: F) -> F::Output {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.block_on(io),
        Err(_) => futures::executor::block_on(io),
    }
}

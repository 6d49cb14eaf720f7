//! `skade serve`: parse the configuration, set up logging, run until SIGTERM/SIGINT.
//! `skade gc`: remove orphan files of a stopped server's data dir.

use clap::Parser;
use skade::config::{Cli, Command};
use tokio::signal::unix::{SignalKind, signal};

/// mimalloc instead of glibc's malloc: a long-running server that allocates and frees
/// per commit (metadata JSON, manifests) keeps its resident set near its live heap with
/// it; under glibc's per-thread arenas the resident set measured 2.5 times the live
/// heap after 3,000 commits (`docs/performance.md`, table age).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

unsafe extern "C" {
    /// mimalloc's own: frees the calling thread's empty pages and, with `force`, returns
    /// every free page of its arenas to the operating system now (`mimalloc.h`).
    fn mi_collect(force: bool);
    /// mimalloc's own: sets an option (`mi_option_t`, `mimalloc.h`) at run time.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (`mimalloc.h` of the bundled
/// `libmimalloc-sys` 0.1.49): milliseconds freed memory waits before it is returned to
/// the operating system.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Freed memory goes back to the operating system after this many milliseconds
/// (mimalloc 2's default; mimalloc 3's is 1000).
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Keeps the resident set near the live heap under a fast stream, which frees its
/// batches at the rate it reads them (`docs/performance.md`, "Memory"): with mimalloc
/// 3's defaults a 256 MiB budget fed by 8 streams peaked at 1009 MiB of RSS over a 500
/// MiB live heap, 586 MiB with these settings.
///
/// - Transparent huge pages off for this process: mimalloc advises its arenas
///   `MADV_HUGEPAGE`, so a 64 KiB page first touched in a fresh 2 MiB range makes all
///   2 MiB resident, and its purges inside a huge page return nothing.
/// - Purge after [`PURGE_DELAY_MS`]: at mimalloc 3's 1 s a stream's freed batches of
///   the last second stay resident — a term that grows with the stream's speed.
fn tune_allocator() {
    // SAFETY: `PR_SET_THP_DISABLE` takes no pointers and affects only this process's
    // later page faults; `mi_option_set` stores one integer option.
    unsafe {
        let _ = libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}

/// What [`skade::memory`] runs once a stream's memory is free: mimalloc keeps freed
/// pages for reuse (its purge waits for more allocator activity on the same thread).
fn release_free_memory() {
    // SAFETY: `mi_collect` only walks the calling thread's heap and the shared arenas;
    // it is safe to call from any thread at any time.
    unsafe { mi_collect(true) }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tune_allocator();
    skade::memory::set_release_hook(release_free_memory);
    let cli = Cli::parse();
    skade::logging::init(cli.log_format);
    let config = match cli.command {
        Command::Serve(config) => config,
        Command::Gc(gc) => return collect_garbage(gc).await,
    };
    let shutdown = async {
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    match skade::run(config, shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // One line, in the configured log format.
        Err(e @ skade::StartError::Serve(_)) => {
            tracing::error!(error = %e, "skade stopped");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `skade gc`: the summary line on stdout (and each path it would remove with
/// `--dry-run`).
async fn collect_garbage(gc: skade::config::GcConfig) -> std::process::ExitCode {
    let options = skade::catalog::gc::GcOptions {
        grace: gc.grace,
        dry_run: gc.dry_run,
    };
    let warehouse = match gc.storage.warehouse(&gc.data_dir) {
        Ok(warehouse) => warehouse,
        Err(e) => {
            tracing::error!(error = %e, "gc failed");
            return std::process::ExitCode::FAILURE;
        }
    };
    match skade::catalog::gc::collect_garbage_in(&gc.data_dir, warehouse, options).await {
        Ok(report) => {
            if gc.dry_run {
                for path in &report.removed {
                    println!("would remove {}", path.display());
                }
            }
            println!("skade gc: {report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "gc failed");
            std::process::ExitCode::FAILURE
        }
    }
}

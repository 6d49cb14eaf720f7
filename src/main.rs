//! `skade serve`: parse the configuration, set up logging, run until SIGTERM/SIGINT.
//! `skade gc`: remove orphan files of a stopped server's data dir.

use clap::Parser;
use skade::config::{Cli, Command};
use tokio::signal::unix::{SignalKind, signal};

mod allocator;

/// mimalloc instead of glibc's malloc: a long-running server that allocates and frees
/// per commit (metadata JSON, manifests) keeps its resident set near its live heap with
/// it, where glibc's per-thread arenas let the resident set grow to a multiple of the
/// live heap (`docs/performance.md`, "Table age (`table_age` arm)"). Counted, for the
/// `skade_heap_allocated_bytes` gauge ([`skade::heap`]).
#[global_allocator]
static ALLOCATOR: skade::heap::CountingAllocator<mimalloc::MiMalloc> =
    skade::heap::CountingAllocator::new(mimalloc::MiMalloc);

#[tokio::main]
async fn main() -> std::process::ExitCode {
    allocator::tune();
    skade::memory::set_release_hook(allocator::release_free_memory);
    let cli = Cli::parse();
    skade::logging::init(cli.log_format);
    let config = match cli.command {
        Command::Serve(config) => config,
        Command::Gc(gc) => return collect_garbage(gc).await,
    };
    // Listening from here, before the server starts: a SIGTERM that arrives once the
    // server is up (or while it starts) stops it cleanly instead of killing it.
    let (term, interrupt) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(interrupt)) => (term, interrupt),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM and SIGINT");
            return std::process::ExitCode::FAILURE;
        }
    };
    let shutdown = async move {
        let (mut term, mut interrupt) = (term, interrupt);
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
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
    let run = match &gc.catalog.url {
        None => skade::catalog::gc::collect_garbage_in(&gc.data_dir, warehouse, options).await,
        Some(url) => {
            skade::catalog::gc::collect_garbage_shared(
                url,
                &gc.catalog.name,
                gc.catalog.pool_size,
                warehouse,
                options,
            )
            .await
        }
    };
    match run {
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

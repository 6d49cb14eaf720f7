//! `skade serve`: parse the configuration, set up logging, run until SIGTERM/SIGINT.

use clap::Parser;
use skade::config::{Cli, Command};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    skade::logging::init(cli.log_format);
    let Command::Serve(config) = cli.command;
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
        Err(e) => {
            tracing::error!(error = %e, "skade stopped");
            eprintln!("skade: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

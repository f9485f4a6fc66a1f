//! The `npud` binary: parse, validate, then serve. A bad configuration exits with 64
//! (EX_USAGE) before any socket is bound or device opened.

use clap::Parser;
use npud::{Config, Daemon, cli::Args};
use std::process::ExitCode;

const EX_USAGE: u8 = 64;
const EX_UNAVAILABLE: u8 = 69;

fn init_tracing(format: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop npud with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("npud: invalid configuration: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    init_tracing(&config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("npud")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("npud: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let daemon = match Daemon::open(config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("npud: {e}");
            return ExitCode::from(EX_UNAVAILABLE);
        }
    };
    match runtime.block_on(npud::serve(daemon, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("npud: {e}");
            ExitCode::FAILURE
        }
    }
}

//! The `npud` binary: parse, validate, then serve. A bad configuration exits with 64
//! (EX_USAGE) before any socket is bound or device opened.

use clap::Parser;
use npud::serve::handover::{Inherited, Turn};
use npud::{Config, Daemon, config::Args};
use std::process::ExitCode;
use std::sync::Arc;

/// The allocator, counting what npud holds: the proof behind `limits.client_memory_mib`
/// (`npud_heap_bytes` and its peak, in the metrics).
#[global_allocator]
static HEAP: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

const EX_USAGE: u8 = 64;
const EX_UNAVAILABLE: u8 = 69;

fn init_tracing(format: &str, level: Option<&str>) -> Result<(), String> {
    use std::io::IsTerminal;
    let filter = match level {
        Some(l) => tracing_subscriber::EnvFilter::try_new(l).map_err(|e| format!("--log-level {l:?}: {e}"))?,
        None => tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}

/// Installs the SIGTERM/SIGINT handlers now, before READY=1 can be sent: a supervisor
/// that stops npud right after READY=1 must find the handler there, not the default
/// action that kills the process without STOPPING=1 or a drain.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot install signal handlers; stop npud with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}

/// SIGHUP re-reads the config file and applies tenants and quotas; a bad file is logged
/// and changes nothing.
/// The handler is installed by the caller, inside the runtime, before READY=1: SIGHUP's
/// default action would end the daemon.
async fn reload_on_sighup(daemon: Arc<Daemon>, args: Args, hup: std::io::Result<tokio::signal::unix::Signal>) {
    let Ok(mut hup) = hup else {
        tracing::warn!("cannot install the SIGHUP handler; reloading is unavailable");
        return;
    };
    while hup.recv().await.is_some() {
        match Config::load(&args) {
            Ok(config) => {
                if let Err(e) = daemon.reload(&config) {
                    tracing::error!(error = %e, "reload refused; the running configuration stays");
                }
            }
            Err(e) => tracing::error!(error = %e, "reload failed; the running configuration stays"),
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    npud::observe::heap::install(|| (HEAP.allocated(), HEAP.max_allocated()));
    // Before the config: its connection limits follow the descriptors npud may open.
    npud::config::descriptors::raise_soft_limit();
    let config = match Config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("npud: invalid configuration: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    if let Err(e) = init_tracing(&config.log_format, args.log_level.as_deref()) {
        eprintln!("npud: invalid configuration: {e}");
        return ExitCode::from(EX_USAGE);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("npud").build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("npud: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The handlers register with the runtime's signal driver, so inside it, and now: a
    // standby is stopped by them too.
    let (mut shutdown, hup) = {
        let _entered = runtime.enter();
        let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        (Box::pin(shutdown_signal()), hup)
    };
    // Another npud serving here: stand by until it hands the node over (an upgrade).
    let turn =
        runtime.block_on(npud::serve::handover::wait_turn(&config.socket, config.state_dir.as_deref(), &mut shutdown));
    let inherited = match turn {
        Ok(Turn::Alone) => Inherited::default(),
        Ok(Turn::Took(inherited)) => inherited,
        Ok(Turn::Stopped) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("npud: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Devices are opened inside the runtime: backends may spawn tasks.
    let daemon = match runtime.block_on(async { Daemon::open(config) }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("npud: {e}");
            return ExitCode::from(EX_UNAVAILABLE);
        }
    };
    runtime.spawn(reload_on_sighup(Arc::clone(&daemon), args, hup));
    match runtime.block_on(npud::serve::serve_inherited(daemon, shutdown, inherited)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("npud: {e}");
            ExitCode::FAILURE
        }
    }
}

//! npuctl's global flags and its command tree (the contract of DESIGN.md). Each command
//! group's arguments live with what it does, in `commands/<group>.rs`; what several groups
//! share (`--session`, durations) in `commands/mod.rs`, the output format in `output.rs`.

use crate::commands::parse_duration;
use crate::output::Output;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "npuctl",
    version,
    about = "Talk to npud: devices, streams, events, sessions, budget and quotas",
    after_help = "Examples:\n  npuctl device list\n  npuctl stream create --count 4 --flags fast-launch,fast-sync --wait 30s\n  npuctl -o json stream list\n  npuctl status\n\nExit codes: 0 success, 1 other failure, 2 usage, 3 not found, 4 budget or quota, 5 timed out, 6 bad state, 7 permission, 8 daemon unreachable."
)]
pub struct Cli {
    /// npud's Unix socket [default: $NPUD_SOCKET, /run/npud/npud.sock for root, else $XDG_RUNTIME_DIR/npud.sock]
    #[arg(long, global = true, value_name = "PATH", conflicts_with = "endpoint")]
    pub socket: Option<PathBuf>,
    /// Reach npud over TCP instead: https://HOST:PORT (TLS), or http:// against --insecure-tcp.
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint: Option<String>,
    /// CA certificate that signed the daemon's TLS certificate (PEM).
    #[arg(long, global = true, value_name = "FILE", env = "NPUD_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Client certificate for mutual TLS (PEM).
    #[arg(long, global = true, value_name = "FILE", env = "NPUD_TLS_CERT")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// Key of the client certificate (PEM).
    #[arg(long, global = true, value_name = "FILE", env = "NPUD_TLS_KEY")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Bearer token, for daemons that authenticate TCP clients by token.
    #[arg(long, global = true, value_name = "TOKEN", env = "NPUD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Devices and their stream budget.
    #[command(subcommand)]
    Device(crate::commands::device::DeviceCmd),
    /// Create, inspect, synchronise and destroy streams.
    #[command(subcommand)]
    Stream(crate::commands::stream::StreamCmd),
    /// Create, record, query, synchronise and time events.
    #[command(subcommand)]
    Event(crate::commands::event::EventCmd),
    /// Budget per device, usage per tenant, the queue.
    #[command(after_help = "Examples:\n  npuctl status\n  npuctl -o json status | jq '.devices[0].available'")]
    Status,
    /// `status`, refreshed live until interrupted.
    #[command(after_help = "Examples:\n  npuctl top\n  npuctl top --interval 500ms")]
    Top {
        /// Time between refreshes.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        interval: std::time::Duration,
        /// Stop after this many refreshes (0: until interrupted).
        #[arg(long, default_value_t = 0)]
        iterations: u32,
    },
    /// Ask npud's gRPC health service whether it serves (exit 0) or not (non-zero).
    #[command(
        after_help = "Examples:\n  npuctl health\n  npuctl health --service npud.v1.StreamService   # a Kubernetes exec probe"
    )]
    Health {
        /// Service to check; empty means the daemon as a whole.
        #[arg(long, default_value = "")]
        service: String,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  npuctl completions bash > /etc/bash_completion.d/npuctl\n  npuctl completions zsh > ~/.zfunc/_npuctl"
    )]
    Completions { shell: clap_complete::Shell },
    /// Run a program with npud admitting the streams it creates natively (the interposer
    /// preloaded): CMD replaces npuctl, same pid.
    #[command(
        after_help = "Examples:\n  npuctl run -- python train.py\n  npuctl run --streams 61 --wait 2m -- ./server --port 8000\n\nThe program's first stream or context on a device asks npud for --streams at once (waiting up to --wait in the fair queue); the streams go back when it destroys them, resets the device or exits."
    )]
    Run(crate::commands::run::RunArgs),
    /// Print the man page (roff).
    #[command(after_help = "Example:\n  npuctl man > /usr/local/share/man/man1/npuctl.1")]
    Man,
    /// Your sessions (all sessions for admins).
    #[command(subcommand)]
    Session(crate::commands::session::SessionCmd),
    /// Tenants and their quotas.
    #[command(subcommand)]
    Tenant(crate::commands::tenant::TenantCmd),
    /// Change a tenant's quota (admins only).
    #[command(subcommand)]
    Quota(crate::commands::tenant::QuotaCmd),
}

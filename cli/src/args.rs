//! npuctl's command line (the contract of DESIGN.md), kept apart from what the commands do.

use clap::{Args, Parser, Subcommand, ValueEnum};
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Devices and their stream budget.
    #[command(subcommand)]
    Device(DeviceCmd),
    /// Create, inspect, synchronise and destroy streams.
    #[command(subcommand)]
    Stream(StreamCmd),
    /// Create, record, query, synchronise and time events.
    #[command(subcommand)]
    Event(EventCmd),
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
    Session(SessionCmd),
    /// Tenants and their quotas.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Change a tenant's quota (admins only).
    #[command(subcommand)]
    Quota(QuotaCmd),
}

#[derive(Debug, Subcommand)]
pub enum DeviceCmd {
    /// List devices: capacity, reserved, in use, pooled, available.
    #[command(after_help = "Examples:\n  npuctl device list\n  npuctl -o json device list")]
    List,
}

/// The named session a command works in; streams made by one npuctl call stay in it for
/// the next until its lease runs out or it is closed.
#[derive(Debug, Args, Clone)]
pub struct SessionArg {
    #[arg(long, value_name = "NAME", default_value = "npuctl")]
    pub session: String,
}

#[derive(Debug, Subcommand)]
pub enum StreamCmd {
    /// Create streams, all or none, waiting for budget up to --wait.
    #[command(
        after_help = "Example:\n  npuctl stream create --count 60 --flags fast-launch,fast-sync --wait 60s --session job-7"
    )]
    Create {
        #[arg(long, default_value_t = 0)]
        device: u32,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Lower is more urgent; the range is the device's (`device list`: 0..=7 on Ascend, -5..=0 on CUDA, where 0 is the least urgent).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i32,
        /// Comma-separated: fast-launch, fast-sync, persistent, huge, cpu-schedule, device-use-only, non-blocking.
        #[arg(long, default_value = "")]
        flags: String,
        /// How long to wait for budget, e.g. 30s (0 fails at once).
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        wait: std::time::Duration,
        #[command(flatten)]
        session: SessionArg,
    },
    /// Your streams.
    #[command(after_help = "Example:\n  npuctl stream list")]
    List,
    /// Destroy streams (all named handles or none).
    #[command(after_help = "Example:\n  npuctl stream destroy 1234 1235 --session job-7")]
    Destroy {
        #[arg(required = true, value_name = "HANDLE")]
        handles: Vec<u64>,
        #[command(flatten)]
        session: SessionArg,
    },
    /// Wait until all work on the stream has finished.
    #[command(after_help = "Example:\n  npuctl stream sync 1234 --timeout 5s")]
    Sync {
        handle: u64,
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Whether all work on the stream has finished.
    #[command(after_help = "Example:\n  npuctl stream query 1234")]
    Query { handle: u64 },
    /// Put timed work on a stream (npud extension).
    #[command(after_help = "Example:\n  npuctl stream delay 1234 20ms")]
    Delay {
        handle: u64,
        #[arg(value_parser = parse_duration)]
        duration: std::time::Duration,
    },
    /// Make later work on STREAM wait for EVENT's current record.
    #[command(after_help = "Example:\n  npuctl stream wait-event 1235 77")]
    WaitEvent { stream: u64, event: u64 },
}

#[derive(Debug, Subcommand)]
pub enum EventCmd {
    /// Create an event.
    #[command(after_help = "Examples:\n  npuctl event create\n  npuctl event create --no-timing --session job-7")]
    Create {
        #[arg(long, default_value_t = 0)]
        device: u32,
        /// ACL event flags as a number (0 = default: sync + timeline).
        #[arg(long, default_value_t = 0)]
        flags: u32,
        /// No timestamps (cheaper; elapsed time is refused).
        #[arg(long)]
        no_timing: bool,
        #[command(flatten)]
        session: SessionArg,
    },
    /// Record EVENT on STREAM.
    #[command(after_help = "Example:\n  npuctl event record 77 1234")]
    Record { event: u64, stream: u64 },
    /// State of the event's most recent record.
    #[command(after_help = "Example:\n  npuctl event query 77")]
    Query { event: u64 },
    /// Wait for the event's most recent record.
    #[command(after_help = "Example:\n  npuctl event sync 77 --timeout 2s")]
    Sync {
        event: u64,
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Milliseconds between two recorded, completed, timed events.
    #[command(after_help = "Example:\n  npuctl event elapsed 77 78")]
    Elapsed { start: u64, end: u64 },
    /// Destroy events.
    #[command(after_help = "Example:\n  npuctl event destroy 77 78")]
    Destroy {
        #[arg(required = true)]
        events: Vec<u64>,
    },
    /// Your events.
    #[command(after_help = "Example:\n  npuctl event list")]
    List,
}

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Sessions with their holdings and lease.
    #[command(after_help = "Example:\n  npuctl session list")]
    List,
    /// Close a named session: everything it holds is reclaimed.
    #[command(after_help = "Example:\n  npuctl session close job-7")]
    Close { name: String },
}

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    /// Tenants with explicit quotas (and yours).
    #[command(after_help = "Example:\n  npuctl tenant list")]
    List,
}

#[derive(Debug, Subcommand)]
pub enum QuotaCmd {
    /// Set quota fields of TENANT; fields not given keep their value. Persisted.
    #[command(after_help = "Example:\n  npuctl quota set team-a --max-streams 256 --reserved-streams 64")]
    Set {
        tenant: String,
        #[arg(long)]
        max_streams: Option<u32>,
        #[arg(long)]
        reserved_streams: Option<u32>,
        #[arg(long)]
        max_events: Option<u32>,
        #[arg(long)]
        weight: Option<u32>,
        #[arg(long)]
        highest_priority: Option<i32>,
    },
}

pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 500ms or 30s: {e}"))
}

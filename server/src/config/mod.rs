//! Typed configuration: a TOML file overlaid with command-line flags, validated as a whole
//! before any socket is bound or device opened. A bad config exits with 64 (EX_USAGE).

pub mod flags;
pub mod kubernetes;

use crate::types::Quota;
pub use flags::Args;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn bad(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Sim,
    Acl,
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Ledger, quotas, whole-batch grants, fair queue, pacing, pool.
    Managed,
    /// Straight to the device, partial failures and all: for comparison.
    Passthrough,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Managed => "managed",
            Policy::Passthrough => "passthrough",
        }
    }
}

/// The most a tenant's `process_streams` may say: more than any device holds.
pub const MAX_PROCESS_STREAMS: u32 = 4096;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    #[serde(default)]
    pub uids: Vec<u32>,
    #[serde(default)]
    pub gids: Vec<u32>,
    /// Container ids (or prefixes of at least 12 hex digits) as the runtime reports them.
    #[serde(default)]
    pub containers: Vec<String>,
    /// Kubernetes pod uids.
    #[serde(default)]
    pub pod_uids: Vec<String>,
    /// TLS client certificate names (subject CN or a DNS/email/URI SAN).
    #[serde(default)]
    pub cert_names: Vec<String>,
    /// SHA-256 (hex) of bearer tokens; the tokens themselves are never stored.
    #[serde(default)]
    pub token_sha256: Vec<String>,
    #[serde(default)]
    pub admin: bool,
    /// Streams per device an interposed process of this tenant asks for at once when its
    /// environment does not say (`NPUD_STREAMS`); unset: the interposer's default, sized
    /// for a torch_npu process.
    #[serde(default)]
    pub process_streams: Option<u32>,
    #[serde(flatten)]
    pub quota: Quota,
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub profile: npu_sim::Profile,
    pub devices: u32,
    pub options: npu_sim::SimOptions,
}

#[derive(Debug, Clone)]
pub struct BudgetConfig {
    /// Streams held back from every device on top of what the runtime itself uses.
    pub safety_margin: u32,
    /// Hardware creations per paced batch.
    pub batch_size: u32,
    /// Pause between two batches on one device.
    pub batch_pause: Duration,
    /// Retries of a batch that failed with 207005/207008, with doubling backoff.
    pub create_retries: u32,
    pub retry_backoff: Duration,
    /// Warm pool size per device (0 turns pooling off).
    pub pool_max: u32,
    /// Streams created into the pool at start-up, per device.
    pub prewarm: u32,
    /// Longest a create request may wait for budget.
    pub max_wait: Duration,
    /// Streams per device for backends with no fixed limit (CUDA).
    pub cuda_streams_per_device: u32,
    /// Longest one process's native creation batch keeps a device to itself before the
    /// next process's grant is answered (it usually ends sooner, when the process reports
    /// it created its streams); zero turns pacing of native creation off.
    pub native_pacing: Duration,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_sessions_per_tenant: u32,
    /// Create requests one tenant may have waiting per device.
    pub max_pending_requests: u32,
    /// Callbacks one tenant may have launched and not yet acknowledged.
    pub max_callbacks_in_flight: u32,
    /// Requests per second per tenant (0: unlimited) and the burst above it.
    pub requests_per_second: u32,
    pub request_burst: u32,
    pub max_streams_per_request: u32,
    pub max_user_data: usize,
    pub callback_deadline: Duration,
    pub max_pending_reports: usize,
    /// Interposed processes one tenant may have connected at once.
    pub max_native_processes: u32,
    /// Connections (gRPC and budget wire) one uid may keep open on the Unix socket, so one
    /// user cannot take every descriptor npud has.
    pub max_connections_per_uid: u32,
    /// Calls one HTTP/2 connection may have in flight (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_calls: u32,
    /// Report streams one session may keep open (a process needs one; reconnects overlap).
    pub max_report_streams_per_session: u32,
    /// Bytes of undelivered reports (callback payloads) one session may have queued.
    pub max_report_bytes: usize,
    /// How long after start the daemon accepts declarations of streams that interposed
    /// processes held before it restarted.
    pub declare_grace: Duration,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub socket_mode: u32,
    pub socket_dir_mode: u32,
    /// Group that may connect (the socket is chowned to it), by name or number.
    pub socket_group: Option<u32>,
    pub listen: Option<SocketAddr>,
    pub insecure_tcp: bool,
    pub tls: Option<TlsFiles>,
    pub backend: BackendKind,
    pub acl_library: Option<PathBuf>,
    pub cuda_library: Option<PathBuf>,
    pub sim: SimConfig,
    pub policy: Policy,
    pub metrics: Option<SocketAddr>,
    pub state_dir: Option<PathBuf>,
    /// Lease of anonymous sessions (a client renews it; a dead client lets it lapse).
    pub lease: Duration,
    /// Default lease of named sessions, which outlive one process.
    pub named_lease: Duration,
    pub max_lease: Duration,
    pub shutdown_grace: Duration,
    /// Liveness probes of every device: how often, and how long one may take.
    pub health_interval: Duration,
    pub health_timeout: Duration,
    /// Check ledger = registry = hardware at every reaper tick (tests turn it on).
    pub check_invariants: bool,
    pub budget: BudgetConfig,
    pub limits: Limits,
    pub tenants: Vec<TenantConfig>,
    pub default_quota: Quota,
    /// Whether the file has a `[default_quota]` section; without one the default
    /// `max_events` is derived from the devices' event tables (see `Quotas`).
    pub default_quota_given: bool,
    /// Peers no tenant entry names are refused instead of getting the default quota.
    pub refuse_unknown: bool,
    pub admin_uids: Vec<u32>,
    pub log_format: String,
    /// Where peers' `/proc/<pid>/cgroup` are read: `/proc`, or the host's /proc mounted
    /// elsewhere when npud itself runs in a container.
    pub proc_root: PathBuf,
    /// The kubelet device plugin (`[kubernetes]`, `--device-plugin-dir`); off when `None`.
    pub kubernetes: Option<crate::config::kubernetes::KubernetesConfig>,
}

/// The file format: every key optional, flags win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    socket: Option<PathBuf>,
    socket_mode: Option<String>,
    socket_dir_mode: Option<String>,
    socket_group: Option<String>,
    listen: Option<String>,
    insecure_tcp: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    /// "required" (default with a client CA) or "optional" (bearer tokens without certs).
    tls_client_auth: Option<String>,
    backend: Option<BackendKind>,
    acl_library: Option<PathBuf>,
    cuda_library: Option<PathBuf>,
    policy: Option<Policy>,
    metrics: Option<String>,
    state_dir: Option<PathBuf>,
    lease: Option<String>,
    named_lease: Option<String>,
    max_lease: Option<String>,
    shutdown_grace: Option<String>,
    health_interval: Option<String>,
    health_timeout: Option<String>,
    check_invariants: Option<bool>,
    log_format: Option<String>,
    #[serde(default)]
    sim: FileSim,
    #[serde(default)]
    budget: FileBudget,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    tenants: Vec<TenantConfig>,
    default_quota: Option<Quota>,
    refuse_unknown: Option<bool>,
    admin_uids: Option<Vec<u32>>,
    #[serde(default)]
    identity: FileIdentity,
    #[serde(default)]
    kubernetes: crate::config::kubernetes::FileKubernetes,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIdentity {
    proc_root: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSim {
    profile: Option<String>,
    devices: Option<u32>,
    lanes: Option<u32>,
    create_latency: Option<String>,
    contention_window: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBudget {
    safety_margin: Option<u32>,
    batch_size: Option<u32>,
    batch_pause: Option<String>,
    native_pacing: Option<String>,
    create_retries: Option<u32>,
    retry_backoff: Option<String>,
    pool_max: Option<u32>,
    prewarm: Option<u32>,
    max_wait: Option<String>,
    cuda_streams_per_device: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_sessions_per_tenant: Option<u32>,
    max_pending_requests: Option<u32>,
    max_callbacks_in_flight: Option<u32>,
    requests_per_second: Option<u32>,
    request_burst: Option<u32>,
    max_streams_per_request: Option<u32>,
    max_user_data: Option<usize>,
    callback_deadline: Option<String>,
    max_pending_reports: Option<usize>,
    max_native_processes: Option<u32>,
    max_connections_per_uid: Option<u32>,
    max_concurrent_calls: Option<u32>,
    max_report_streams_per_session: Option<u32>,
    max_report_bytes: Option<usize>,
    declare_grace: Option<String>,
}

/// Connections one uid may keep open on the Unix socket by default.
pub const DEFAULT_MAX_CONNECTIONS_PER_UID: u32 = 512;
/// Calls in flight per HTTP/2 connection by default.
pub const DEFAULT_MAX_CONCURRENT_CALLS: u32 = 1024;

/// Longest a native creation batch keeps a device by default: far above what creating a
/// torch_npu process's ~70 streams takes, so it only matters for a process that never says
/// it is done.
pub const DEFAULT_NATIVE_PACING: Duration = Duration::from_secs(2);
const MAX_NATIVE_PACING: Duration = Duration::from_secs(24 * 3600);

fn bounded(key: &str, d: Duration, max: Duration) -> Result<Duration, ConfigError> {
    if d > max {
        return Err(bad(format!(
            "{key}: {} is longer than the most, {}",
            humantime::format_duration(d),
            humantime::format_duration(max)
        )));
    }
    Ok(d)
}

fn duration(key: &str, text: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    match text {
        None => Ok(default),
        Some(t) => humantime::parse_duration(t).map_err(|e| bad(format!("{key}: {t:?} is not a duration ({e})"))),
    }
}

fn mode(key: &str, text: Option<&str>, default: u32) -> Result<u32, ConfigError> {
    match text {
        None => Ok(default),
        Some(t) => match u32::from_str_radix(t.trim_start_matches("0o"), 8) {
            Ok(m) if m <= 0o777 => Ok(m),
            _ => Err(bad(format!("{key}: {t:?} is not an octal file mode like \"0660\""))),
        },
    }
}

fn addr(key: &str, text: Option<&str>) -> Result<Option<SocketAddr>, ConfigError> {
    text.map(|t| t.parse().map_err(|e| bad(format!("{key}: {t:?} is not HOST:PORT ({e})")))).transpose()
}

impl Config {
    /// Builds the configuration from flags and the file they name, and validates it.
    pub fn load(args: &Args) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let f = &file;
        let profile_name =
            args.sim_profile.clone().or(f.sim.profile.clone()).unwrap_or_else(|| "atlas-training".into());
        let profile = npu_sim::Profile::by_name(&profile_name).map_err(bad)?;
        let sim = SimConfig {
            profile,
            devices: args.sim_devices.or(f.sim.devices).unwrap_or(1),
            options: npu_sim::SimOptions {
                lanes: f.sim.lanes.unwrap_or(8) as usize,
                create_latency: duration(
                    "sim.create_latency",
                    f.sim.create_latency.as_deref(),
                    Duration::from_micros(20),
                )?,
                contention_window: f.sim.contention_window.unwrap_or(64),
            },
        };
        let budget = BudgetConfig {
            safety_margin: f.budget.safety_margin.unwrap_or(0),
            batch_size: f.budget.batch_size.unwrap_or(64),
            batch_pause: duration("budget.batch_pause", f.budget.batch_pause.as_deref(), Duration::ZERO)?,
            native_pacing: bounded(
                "budget.native_pacing",
                duration("budget.native_pacing", f.budget.native_pacing.as_deref(), DEFAULT_NATIVE_PACING)?,
                MAX_NATIVE_PACING,
            )?,
            create_retries: f.budget.create_retries.unwrap_or(5),
            retry_backoff: duration(
                "budget.retry_backoff",
                f.budget.retry_backoff.as_deref(),
                Duration::from_millis(5),
            )?,
            pool_max: f.budget.pool_max.unwrap_or(256),
            prewarm: f.budget.prewarm.unwrap_or(0),
            max_wait: duration("budget.max_wait", f.budget.max_wait.as_deref(), Duration::from_secs(600))?,
            cuda_streams_per_device: f.budget.cuda_streams_per_device.unwrap_or(1024),
        };
        let limits = Limits {
            max_sessions_per_tenant: f.limits.max_sessions_per_tenant.unwrap_or(1024),
            max_pending_requests: f.limits.max_pending_requests.unwrap_or(256),
            max_callbacks_in_flight: f.limits.max_callbacks_in_flight.unwrap_or(65536),
            requests_per_second: f.limits.requests_per_second.unwrap_or(100_000),
            request_burst: f.limits.request_burst.unwrap_or(200_000),
            max_streams_per_request: f.limits.max_streams_per_request.unwrap_or(1024),
            max_user_data: f.limits.max_user_data.unwrap_or(64 * 1024),
            max_native_processes: f.limits.max_native_processes.unwrap_or(1024),
            max_connections_per_uid: f.limits.max_connections_per_uid.unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_UID),
            max_concurrent_calls: f.limits.max_concurrent_calls.unwrap_or(DEFAULT_MAX_CONCURRENT_CALLS),
            max_report_streams_per_session: f.limits.max_report_streams_per_session.unwrap_or(16),
            max_report_bytes: f.limits.max_report_bytes.unwrap_or(64 << 20),
            declare_grace: duration(
                "limits.declare_grace",
                f.limits.declare_grace.as_deref(),
                Duration::from_secs(60),
            )?,
            callback_deadline: duration(
                "limits.callback_deadline",
                f.limits.callback_deadline.as_deref(),
                Duration::from_secs(60),
            )?,
            max_pending_reports: f.limits.max_pending_reports.unwrap_or(65536),
        };
        let lease_text = args.lease.clone().or(f.lease.clone());
        let config = Config {
            socket: args.socket.clone().or(f.socket.clone()).unwrap_or_else(npud_proto::default_socket_path),
            socket_mode: mode("socket_mode", f.socket_mode.as_deref(), 0o660)?,
            socket_dir_mode: mode("socket_dir_mode", f.socket_dir_mode.as_deref(), 0o750)?,
            socket_group: f.socket_group.as_deref().map(group_id).transpose()?,
            listen: addr("listen", args.listen.as_deref().or(f.listen.as_deref()))?,
            insecure_tcp: args.insecure_tcp || f.insecure_tcp.unwrap_or(false),
            tls: tls_files(args, f)?,
            backend: args.backend.or(f.backend).unwrap_or(BackendKind::Sim),
            acl_library: args.acl_library.clone().or(f.acl_library.clone()),
            cuda_library: args.cuda_library.clone().or(f.cuda_library.clone()),
            sim,
            policy: args.policy.or(f.policy).unwrap_or(Policy::Managed),
            metrics: addr("metrics", args.metrics.as_deref().or(f.metrics.as_deref()))?,
            state_dir: args.state_dir.clone().or(f.state_dir.clone()),
            lease: duration("lease", lease_text.as_deref(), Duration::from_secs(10))?,
            named_lease: duration("named_lease", f.named_lease.as_deref(), Duration::from_secs(3600))?,
            max_lease: duration("max_lease", f.max_lease.as_deref(), Duration::from_secs(24 * 3600))?,
            shutdown_grace: duration("shutdown_grace", f.shutdown_grace.as_deref(), Duration::from_secs(5))?,
            health_interval: duration("health_interval", f.health_interval.as_deref(), Duration::from_millis(500))?,
            health_timeout: duration("health_timeout", f.health_timeout.as_deref(), Duration::from_secs(2))?,
            check_invariants: f.check_invariants.unwrap_or(false),
            budget,
            limits,
            tenants: file.tenants.clone(),
            default_quota: f.default_quota.unwrap_or_default(),
            default_quota_given: f.default_quota.is_some(),
            refuse_unknown: f.refuse_unknown.unwrap_or(false),
            admin_uids: f.admin_uids.clone().unwrap_or_else(|| vec![0]),
            log_format: args.log_format.clone().or(f.log_format.clone()).unwrap_or_else(|| "text".into()),
            proc_root: f.identity.proc_root.clone().unwrap_or_else(|| PathBuf::from("/proc")),
            kubernetes: f.kubernetes.resolve(args.device_plugin_dir.as_ref())?,
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.sim.devices == 0 || self.sim.devices > 64 {
            return Err(bad(format!("sim devices must be 1..=64, got {}", self.sim.devices)));
        }
        if self.sim.options.lanes == 0 || self.sim.options.lanes > 1024 {
            return Err(bad("sim.lanes must be 1..=1024"));
        }
        if self.sim.options.create_latency > Duration::from_secs(1) {
            return Err(bad("sim.create_latency must be at most 1s"));
        }
        for (key, lease) in [("lease", self.lease), ("named_lease", self.named_lease)] {
            if lease < Duration::from_millis(100) || lease > self.max_lease {
                return Err(bad(format!(
                    "{key} must be between 100ms and max_lease ({}), got {}",
                    humantime::format_duration(self.max_lease),
                    humantime::format_duration(lease)
                )));
            }
        }
        let b = &self.budget;
        if b.batch_size == 0 || b.batch_size > 4096 {
            return Err(bad("budget.batch_size must be 1..=4096"));
        }
        if b.create_retries > 100 {
            return Err(bad("budget.create_retries must be at most 100"));
        }
        if b.safety_margin >= self.sim.profile.stream_limit && self.backend == BackendKind::Sim {
            return Err(bad("budget.safety_margin leaves no streams to hand out"));
        }
        if b.prewarm > b.pool_max {
            return Err(bad(format!("budget.prewarm {} exceeds budget.pool_max {}", b.prewarm, b.pool_max)));
        }
        if self.limits.max_streams_per_request == 0 || self.limits.max_streams_per_request > 4096 {
            return Err(bad("limits.max_streams_per_request must be 1..=4096"));
        }
        if self.limits.max_connections_per_uid == 0
            || self.limits.max_concurrent_calls == 0
            || self.limits.max_report_streams_per_session == 0
            || self.limits.max_report_bytes < 64 * 1024
        {
            return Err(bad(
                "limits.max_connections_per_uid, max_concurrent_calls and max_report_streams_per_session must be at least 1, max_report_bytes at least 64 KiB",
            ));
        }
        if self.limits.max_sessions_per_tenant == 0
            || self.limits.max_pending_requests == 0
            || self.limits.max_callbacks_in_flight == 0
        {
            return Err(bad(
                "limits.max_sessions_per_tenant, max_pending_requests and max_callbacks_in_flight must be at least 1",
            ));
        }
        if self.limits.requests_per_second > 0 && self.limits.request_burst == 0 {
            return Err(bad("limits.request_burst must be at least 1 when requests_per_second is set"));
        }
        if self.limits.max_user_data > 4 << 20 {
            return Err(bad("limits.max_user_data must be at most 4 MiB"));
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(bad(format!("log format must be text or json, got {:?}", self.log_format)));
        }
        self.default_quota.validate("default_quota").map_err(bad)?;
        let mut seen = BTreeMap::new();
        for t in &self.tenants {
            crate::types::check_tenant_name(&t.name)
                .and_then(|()| crate::types::check_not_derived(&t.name))
                .map_err(|e| bad(format!("tenant {:?}: {e}", t.name)))?;
            t.quota.validate(&format!("tenant {}", t.name)).map_err(bad)?;
            if let Some(n) = t.process_streams.filter(|n| !(1..=MAX_PROCESS_STREAMS).contains(n)) {
                return Err(bad(format!(
                    "tenant {}: process_streams must be 1..={MAX_PROCESS_STREAMS}, got {n}",
                    t.name
                )));
            }
            if seen.insert(t.name.as_str(), ()).is_some() {
                return Err(bad(format!("tenant {:?} is defined twice", t.name)));
            }
        }
        for t in &self.tenants {
            for c in &t.containers {
                if c.len() < 12 || c.len() > 64 || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(format!("tenant {:?}: container {c:?} is not 12..=64 hex digits", t.name)));
                }
            }
        }
        let mut uids = BTreeMap::new();
        for t in &self.tenants {
            for uid in &t.uids {
                if let Some(other) = uids.insert(*uid, t.name.as_str()) {
                    return Err(bad(format!("uid {uid} is mapped to both {other:?} and {:?}", t.name)));
                }
            }
        }
        if self.listen.is_some() && self.tls.is_none() && !self.insecure_tcp {
            return Err(bad(
                "--listen needs --tls-cert and --tls-key (and usually --client-ca); pass --insecure-tcp to accept plain TCP on a trusted network",
            ));
        }
        if self.tls.is_some() && self.listen.is_none() {
            return Err(bad("--tls-cert/--tls-key are for --listen; the Unix socket needs no TLS"));
        }
        for t in &self.tenants {
            for h in &t.token_sha256 {
                if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad(format!(
                        "tenant {:?}: token_sha256 must be 64 hex digits (sha256sum of the token)",
                        t.name
                    )));
                }
            }
        }
        Ok(())
    }
}

/// TLS material for `--listen`, read now so a missing or unreadable file fails start-up
/// with exit 64 instead of at the first connection.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Option<Vec<u8>>,
    pub client_auth_optional: bool,
}

fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| bad(format!("{what} {}: {e}", path.display())))?;
    if !bytes.starts_with(b"-----BEGIN") && !String::from_utf8_lossy(&bytes).contains("-----BEGIN") {
        return Err(bad(format!("{what} {} is not PEM", path.display())));
    }
    Ok(bytes)
}

fn tls_files(args: &Args, f: &FileConfig) -> Result<Option<TlsFiles>, ConfigError> {
    let cert = args.tls_cert.clone().or(f.tls_cert.clone());
    let key = args.tls_key.clone().or(f.tls_key.clone());
    let ca = args.client_ca.clone().or(f.client_ca.clone());
    let (cert, key) = match (cert, key) {
        (None, None) if ca.is_none() => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        _ => return Err(bad("TLS needs both --tls-cert and --tls-key")),
    };
    let optional = match f.tls_client_auth.as_deref() {
        None | Some("required") => false,
        Some("optional") => true,
        Some(other) => return Err(bad(format!("tls_client_auth must be required or optional, got {other:?}"))),
    };
    Ok(Some(TlsFiles {
        cert_pem: read_pem("--tls-cert", &cert)?,
        key_pem: read_pem("--tls-key", &key)?,
        client_ca_pem: ca.map(|p| read_pem("--client-ca", &p)).transpose()?,
        client_auth_optional: optional,
    }))
}

/// A group by number or by name (looked up in /etc/group, no libc call needed).
fn group_id(text: &str) -> Result<u32, ConfigError> {
    if let Ok(gid) = text.parse() {
        return Ok(gid);
    }
    let groups =
        std::fs::read_to_string("/etc/group").map_err(|e| bad(format!("socket_group: cannot read /etc/group: {e}")))?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            Some((f.next()?, f.nth(1)?))
        })
        .find(|(name, _)| *name == text)
        .and_then(|(_, gid)| gid.parse().ok())
        .ok_or_else(|| bad(format!("socket_group: no group named {text:?}")))
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read config {}: {e}", path.display())))?;
    if text.len() > 1 << 20 {
        return Err(bad(format!("config {} is larger than 1 MiB", path.display())));
    }
    toml::from_str(&text).map_err(|e| bad(format!("config {}: {e}", path.display())))
}

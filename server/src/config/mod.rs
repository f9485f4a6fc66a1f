//! Typed configuration: a TOML file overlaid with command-line flags over named defaults,
//! validated as a whole before any socket is bound or device opened. A bad config exits
//! with 64 (EX_USAGE) and lists every problem it has.
//!
//! `flags` is npud's command line, `file` the TOML format, `defaults` every default by
//! name, `parse` text → typed values, `validate` the whole-config rules, `kubernetes` the
//! `[kubernetes]` section.

pub mod defaults;
pub mod descriptors;
pub mod device_ids;
pub mod dra;
pub mod faults;
mod file;
pub mod flags;
pub mod kubernetes;
pub(crate) mod parse;
mod reload;
mod tls;
mod validate;

use crate::types::Quota;
pub use flags::Args;
use parse::{Problems, addr, bounded, duration, group_id, mode};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tls::tls_files;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// npu-sim, embedded: no hardware needed.
    Sim,
    /// Ascend NPUs through AscendCL (libascendcl.so).
    Acl,
    /// NVIDIA GPUs through the CUDA driver (libcuda.so.1).
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

impl TenantConfig {
    /// Whether the entry brings any peer into the tenant, or makes it an admin.
    pub fn maps_peers(&self) -> bool {
        self.admin
            || !(self.uids.is_empty()
                && self.gids.is_empty()
                && self.containers.is_empty()
                && self.pod_uids.is_empty()
                && self.cert_names.is_empty()
                && self.token_sha256.is_empty())
    }
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
    /// How long a fall of a device's untracked count that the books do not explain is held
    /// before it is believed (zero: at once). See `daemon::reconcile`.
    pub untracked_hold: Duration,
    /// What a process's first graph capture on a device is admitted for, with no earlier
    /// capture there and no `NPUD_CAPTURE_STREAMS` (the welcome says it; docs/interposer.md).
    pub capture_headroom: u32,
    /// The MPS server's client limit per GPU, where NVIDIA's MPS runs (devices' client
    /// slots; docs/hardware.md).
    pub mps_clients: u32,
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
    /// Connections (gRPC and budget wire) one tenant may keep open on the Unix socket, so
    /// one tenant cannot take every descriptor npud has.
    pub max_connections_per_tenant: u32,
    /// Connections all tenants together may keep open (the host admin has
    /// [`defaults::ADMIN_CONNECTIONS`] more).
    pub max_connections: u32,
    /// The descriptor limit the connection limits were checked against.
    pub descriptors: u64,
    /// Blocking calls one tenant may have in flight.
    pub max_blocking_calls: u32,
    /// Bytes one tenant's launched, undelivered callback reports may hold.
    pub max_callback_report_bytes: usize,
    /// Calls one HTTP/2 connection may have in flight (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_calls: u32,
    /// Report streams one session may keep open (a process needs one; reconnects overlap).
    pub max_report_streams_per_session: u32,
    /// Bytes of undelivered reports (callback payloads) one session may have queued.
    pub max_report_bytes: usize,
    /// How long after start the daemon accepts declarations of streams that interposed
    /// processes held before it restarted.
    pub declare_grace: Duration,
    /// Streams one tenant's holders may leave untracked on a device until a measurement
    /// settles them (and no more than its max_streams): `policy::ledger::left`.
    pub max_untracked_per_tenant: u32,
    /// Streams one tenant may hold past its max_streams on a device through capture
    /// claims (and no more than its max_streams).
    pub max_capture_debt_per_tenant: u32,
    /// npud's ceiling for what clients' calls hold (calls in flight, replies not yet
    /// read), in MiB: `tenancy::replies`.
    pub client_memory_mib: u32,
    /// One tenant's share of it, across all its connections, in MiB.
    pub client_memory_per_tenant_mib: u32,
    /// How long a reply may wait for its peer to read it before its connection is closed.
    pub reply_deadline: Duration,
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
    /// Where the cgroup filesystem is mounted (`/sys/fs/cgroup`): whose directories a
    /// peer's container is checked against (who made them).
    pub cgroup_root: PathBuf,
    /// The container runtime's CRI socket (`[kubernetes] cri_socket`): the second source
    /// of a pod container's pod uid.
    pub cri_socket: Option<PathBuf>,
    /// The kubelet device plugin (`[kubernetes]`, `--device-plugin-dir`); off when `None`.
    pub kubernetes: Option<crate::config::kubernetes::KubernetesConfig>,
    /// How the devices' own fault signals are read (`[faults]`).
    pub faults: faults::FaultsConfig,
}

/// TLS material for `--listen`, read at load time (see `tls::tls_files`).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Option<Vec<u8>>,
    pub client_auth_optional: bool,
}

impl Config {
    /// Builds the configuration from flags, the file they name and the named defaults,
    /// and validates it; the error lists every problem found.
    pub fn load(args: &Args) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => file::read(path)?,
            None => file::FileConfig::default(),
        };
        let mut p = Problems::default();
        let config = Self::assemble(args, &file, &mut p);
        if let Some(config) = &config {
            config.validate(&mut p);
        }
        p.finish()?;
        config.ok_or_else(|| ConfigError::new("the configuration could not be assembled"))
    }

    /// Flags over file over defaults. Values that do not parse are noted in `p` and their
    /// defaults used, so validation still sees (and reports on) everything else; `None`
    /// only when the simulator profile is unknown.
    fn assemble(args: &Args, f: &file::FileConfig, p: &mut Problems) -> Option<Config> {
        use defaults as d;
        let profile_name = args.sim_profile.clone().or(f.sim.profile.clone()).unwrap_or_else(|| d::SIM_PROFILE.into());
        let profile = match npu_sim::Profile::by_name(&profile_name) {
            Ok(profile) => profile,
            Err(e) => {
                p.push(e);
                return None;
            }
        };
        let sim = SimConfig {
            profile,
            devices: args.sim_devices.or(f.sim.devices).unwrap_or(d::SIM_DEVICES),
            options: npu_sim::SimOptions {
                lanes: f.sim.lanes.unwrap_or(d::SIM_LANES) as usize,
                create_latency: p.take(
                    duration("sim.create_latency", f.sim.create_latency.as_deref(), d::SIM_CREATE_LATENCY),
                    d::SIM_CREATE_LATENCY,
                ),
                contention_window: f.sim.contention_window.unwrap_or(d::SIM_CONTENTION_WINDOW),
            },
        };
        let mut dur = |key: &str, text: &Option<String>, default: Duration| {
            p.take(duration(key, text.as_deref(), default), default)
        };
        let b = &f.budget;
        let native_pacing = dur("budget.native_pacing", &b.native_pacing, d::NATIVE_PACING);
        let untracked_hold = dur("budget.untracked_hold", &b.untracked_hold, d::UNTRACKED_HOLD);
        let (batch_pause, retry_backoff) = (
            dur("budget.batch_pause", &b.batch_pause, d::BATCH_PAUSE),
            dur("budget.retry_backoff", &b.retry_backoff, d::RETRY_BACKOFF),
        );
        let max_wait = dur("budget.max_wait", &b.max_wait, d::MAX_WAIT);
        let l = &f.limits;
        let nofile = descriptors::soft_limit();
        let most_connections = descriptors::most_connections(nofile);
        let limits = Limits {
            max_sessions_per_tenant: l.max_sessions_per_tenant.unwrap_or(d::MAX_SESSIONS_PER_TENANT),
            max_pending_requests: l.max_pending_requests.unwrap_or(d::MAX_PENDING_REQUESTS),
            max_callbacks_in_flight: l.max_callbacks_in_flight.unwrap_or(d::MAX_CALLBACKS_IN_FLIGHT),
            requests_per_second: l.requests_per_second.unwrap_or(d::REQUESTS_PER_SECOND),
            request_burst: l.request_burst.unwrap_or(d::REQUEST_BURST),
            max_streams_per_request: l.max_streams_per_request.unwrap_or(d::MAX_STREAMS_PER_REQUEST),
            max_user_data: l.max_user_data.unwrap_or(d::MAX_USER_DATA),
            max_native_processes: l.max_native_processes.unwrap_or(d::MAX_NATIVE_PROCESSES),
            max_connections_per_tenant: l
                .max_connections_per_tenant
                .unwrap_or_else(|| descriptors::per_tenant_default(l.max_connections.unwrap_or(most_connections))),
            max_connections: l.max_connections.unwrap_or(most_connections),
            descriptors: nofile,
            max_blocking_calls: l.max_blocking_calls.unwrap_or(d::MAX_BLOCKING_CALLS),
            max_callback_report_bytes: l.max_callback_report_bytes.unwrap_or(d::MAX_CALLBACK_REPORT_BYTES),
            max_concurrent_calls: l.max_concurrent_calls.unwrap_or(d::MAX_CONCURRENT_CALLS),
            max_report_streams_per_session: l
                .max_report_streams_per_session
                .unwrap_or(d::MAX_REPORT_STREAMS_PER_SESSION),
            max_report_bytes: l.max_report_bytes.unwrap_or(d::MAX_REPORT_BYTES),
            declare_grace: dur("limits.declare_grace", &l.declare_grace, d::DECLARE_GRACE),
            callback_deadline: dur("limits.callback_deadline", &l.callback_deadline, d::CALLBACK_DEADLINE),
            max_pending_reports: l.max_pending_reports.unwrap_or(d::MAX_PENDING_REPORTS),
            max_untracked_per_tenant: l.max_untracked_per_tenant.unwrap_or(d::MAX_UNTRACKED_PER_TENANT),
            max_capture_debt_per_tenant: l.max_capture_debt_per_tenant.unwrap_or(d::MAX_CAPTURE_DEBT_PER_TENANT),
            client_memory_mib: l.client_memory_mib.unwrap_or(d::CLIENT_MEMORY_MIB),
            client_memory_per_tenant_mib: l.client_memory_per_tenant_mib.unwrap_or(d::CLIENT_MEMORY_PER_TENANT_MIB),
            reply_deadline: dur("limits.reply_deadline", &l.reply_deadline, d::REPLY_DEADLINE),
        };
        let lease = dur("lease", &args.lease.clone().or(f.lease.clone()), d::LEASE);
        let named_lease = dur("named_lease", &f.named_lease, d::NAMED_LEASE);
        let max_lease = dur("max_lease", &f.max_lease, d::MAX_LEASE);
        let shutdown_grace = dur("shutdown_grace", &f.shutdown_grace, d::SHUTDOWN_GRACE);
        let health_interval = dur("health_interval", &f.health_interval, d::HEALTH_INTERVAL);
        let health_timeout = dur("health_timeout", &f.health_timeout, d::HEALTH_TIMEOUT);
        let budget = BudgetConfig {
            safety_margin: b.safety_margin.unwrap_or(d::SAFETY_MARGIN),
            batch_size: b.batch_size.unwrap_or(d::BATCH_SIZE),
            batch_pause,
            native_pacing: p
                .take(bounded("budget.native_pacing", native_pacing, d::MAX_NATIVE_PACING), d::NATIVE_PACING),
            untracked_hold: p
                .take(bounded("budget.untracked_hold", untracked_hold, d::MAX_UNTRACKED_HOLD), d::UNTRACKED_HOLD),
            create_retries: b.create_retries.unwrap_or(d::CREATE_RETRIES),
            retry_backoff,
            pool_max: b.pool_max.unwrap_or(d::POOL_MAX),
            prewarm: b.prewarm.unwrap_or(d::PREWARM),
            max_wait,
            cuda_streams_per_device: b.cuda_streams_per_device.unwrap_or(d::CUDA_STREAMS_PER_DEVICE),
            capture_headroom: b.capture_headroom.unwrap_or(d::CAPTURE_HEADROOM),
            mps_clients: b.mps_clients.unwrap_or(d::MPS_CLIENTS),
        };
        // As a node's device plugin, pods' processes of any uid (runAsUser, user
        // namespaces, rootless runtimes) connect: the socket accepts every uid, and who a
        // peer is comes from the kernel (SO_PEERCRED and its cgroup), not from file modes.
        let plugin = f.kubernetes.enabled() || args.device_plugin_dir.is_some() || args.kubernetes_mode.is_some();
        let (socket_mode, dir_mode) = match plugin {
            true => (d::PLUGIN_SOCKET_MODE, d::PLUGIN_SOCKET_DIR_MODE),
            false => (d::SOCKET_MODE, d::SOCKET_DIR_MODE),
        };
        Some(Config {
            socket: args.socket.clone().or(f.socket.clone()).unwrap_or_else(npud_proto::default_socket_path),
            socket_mode: p.take(mode("socket_mode", f.socket_mode.as_deref(), socket_mode), socket_mode),
            socket_dir_mode: p.take(mode("socket_dir_mode", f.socket_dir_mode.as_deref(), dir_mode), dir_mode),
            socket_group: p.take(f.socket_group.as_deref().map(group_id).transpose(), None),
            listen: p.take(addr("listen", args.listen.as_deref().or(f.listen.as_deref())), None),
            insecure_tcp: args.insecure_tcp || f.insecure_tcp.unwrap_or(false),
            tls: p.take(tls_files(args, f), None),
            backend: args.backend.or(f.backend).unwrap_or(BackendKind::Sim),
            acl_library: args.acl_library.clone().or(f.acl_library.clone()),
            cuda_library: args.cuda_library.clone().or(f.cuda_library.clone()),
            sim,
            policy: args.policy.or(f.policy).unwrap_or(Policy::Managed),
            metrics: p.take(addr("metrics", args.metrics.as_deref().or(f.metrics.as_deref())), None),
            state_dir: args.state_dir.clone().or(f.state_dir.clone()),
            lease,
            named_lease,
            max_lease,
            shutdown_grace,
            health_interval,
            health_timeout,
            check_invariants: f.check_invariants.unwrap_or(false),
            budget,
            limits,
            tenants: f.tenants.clone(),
            default_quota: f.default_quota.unwrap_or_default(),
            default_quota_given: f.default_quota.is_some(),
            refuse_unknown: f.refuse_unknown.unwrap_or(false),
            admin_uids: f.admin_uids.clone().unwrap_or_else(|| d::ADMIN_UIDS.to_vec()),
            log_format: args.log_format.clone().or(f.log_format.clone()).unwrap_or_else(|| d::LOG_FORMAT.into()),
            proc_root: f.identity.proc_root.clone().unwrap_or_else(|| PathBuf::from(d::PROC_ROOT)),
            cgroup_root: f.identity.cgroup_root.clone().unwrap_or_else(|| PathBuf::from(d::CGROUP_ROOT)),
            cri_socket: p.take(f.kubernetes.cri_socket(), None),
            kubernetes: p
                .take(f.kubernetes.resolve(args.device_plugin_dir.as_ref(), args.kubernetes_mode.as_deref()), None),
            faults: p.take(f.faults.resolve(), faults::FaultsConfig::default()),
        })
    }
}

#[cfg(test)]
mod tests;

//! The file format: every key optional (flags and named defaults fill the rest), unknown
//! keys refused so a typo is an error and not a silently ignored setting.

use super::{BackendKind, ConfigError, Policy, TenantConfig, defaults};
use crate::types::Quota;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The file format: every key optional, flags win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) socket: Option<PathBuf>,
    pub(super) socket_mode: Option<String>,
    pub(super) socket_dir_mode: Option<String>,
    pub(super) socket_group: Option<String>,
    pub(super) listen: Option<String>,
    pub(super) insecure_tcp: Option<bool>,
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) client_ca: Option<PathBuf>,
    /// "required" (default with a client CA) or "optional" (bearer tokens without certs).
    pub(super) tls_client_auth: Option<String>,
    pub(super) backend: Option<BackendKind>,
    pub(super) acl_library: Option<PathBuf>,
    pub(super) cuda_library: Option<PathBuf>,
    pub(super) policy: Option<Policy>,
    pub(super) metrics: Option<String>,
    pub(super) state_dir: Option<PathBuf>,
    pub(super) lease: Option<String>,
    pub(super) named_lease: Option<String>,
    pub(super) max_lease: Option<String>,
    pub(super) shutdown_grace: Option<String>,
    pub(super) health_interval: Option<String>,
    pub(super) health_timeout: Option<String>,
    pub(super) check_invariants: Option<bool>,
    pub(super) log_format: Option<String>,
    #[serde(default)]
    pub(super) sim: FileSim,
    #[serde(default)]
    pub(super) budget: FileBudget,
    #[serde(default)]
    pub(super) limits: FileLimits,
    #[serde(default)]
    pub(super) tenants: Vec<TenantConfig>,
    pub(super) default_quota: Option<Quota>,
    pub(super) refuse_unknown: Option<bool>,
    pub(super) admin_uids: Option<Vec<u32>>,
    #[serde(default)]
    pub(super) identity: FileIdentity,
    #[serde(default)]
    pub(super) kubernetes: super::kubernetes::FileKubernetes,
    #[serde(default)]
    pub(super) faults: super::faults::FileFaults,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileIdentity {
    pub(super) proc_root: Option<PathBuf>,
    pub(super) cgroup_root: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSim {
    pub(super) profile: Option<String>,
    pub(super) devices: Option<u32>,
    pub(super) lanes: Option<u32>,
    pub(super) create_latency: Option<String>,
    pub(super) contention_window: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileBudget {
    pub(super) safety_margin: Option<u32>,
    pub(super) batch_size: Option<u32>,
    pub(super) batch_pause: Option<String>,
    pub(super) native_pacing: Option<String>,
    pub(super) untracked_hold: Option<String>,
    pub(super) create_retries: Option<u32>,
    pub(super) retry_backoff: Option<String>,
    pub(super) pool_max: Option<u32>,
    pub(super) prewarm: Option<u32>,
    pub(super) max_wait: Option<String>,
    pub(super) cuda_streams_per_device: Option<u32>,
    pub(super) capture_headroom: Option<u32>,
    pub(super) mps_clients: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimits {
    pub(super) max_sessions_per_tenant: Option<u32>,
    pub(super) max_pending_requests: Option<u32>,
    pub(super) max_callbacks_in_flight: Option<u32>,
    pub(super) requests_per_second: Option<u32>,
    pub(super) request_burst: Option<u32>,
    pub(super) max_streams_per_request: Option<u32>,
    pub(super) max_user_data: Option<usize>,
    pub(super) callback_deadline: Option<String>,
    pub(super) max_pending_reports: Option<usize>,
    pub(super) max_native_processes: Option<u32>,
    /// `max_connections_per_uid` is its old name (the limit was per uid).
    #[serde(alias = "max_connections_per_uid")]
    pub(super) max_connections_per_tenant: Option<u32>,
    pub(super) max_connections: Option<u32>,
    pub(super) max_blocking_calls: Option<u32>,
    pub(super) max_callback_report_bytes: Option<usize>,
    pub(super) max_concurrent_calls: Option<u32>,
    pub(super) max_report_streams_per_session: Option<u32>,
    pub(super) max_report_bytes: Option<usize>,
    pub(super) declare_grace: Option<String>,
    pub(super) max_untracked_per_tenant: Option<u32>,
    pub(super) max_capture_debt_per_tenant: Option<u32>,
    pub(super) client_memory_mib: Option<u32>,
    pub(super) client_memory_per_tenant_mib: Option<u32>,
    pub(super) reply_deadline: Option<String>,
}

/// Reads and parses the file `--config` names (bounded: a config is small).
pub(super) fn read(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = crate::files::read_text_bounded(path, defaults::MAX_FILE_BYTES)
        .map_err(|e| ConfigError::new(format!("cannot read config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| ConfigError::new(format!("config {}: {e}", path.display())))
}

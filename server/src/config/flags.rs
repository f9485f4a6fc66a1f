//! Command-line flags of `npud` (the contract of DESIGN.md). Every flag can also be set in
//! the `--config` file; a flag wins over the file.

use crate::config::{BackendKind, Policy};
use clap::Parser;
use std::path::PathBuf;

#[derive(Debug, Parser, Default)]
#[command(
    name = "npud",
    version,
    about = "Owns accelerator devices and their stream budget; serves streams and events to many tenants over gRPC",
    after_help = "Examples:\n  npud --socket /tmp/npud.sock                    # one simulated atlas-training device\n  npud --sim-profile atlas-a2 --sim-devices 2     # two simulated A2 devices\n  npud --config /etc/npud/npud.toml --state-dir /var/lib/npud"
)]
pub struct Args {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Unix socket to serve on [default: $NPUD_SOCKET, /run/npud/npud.sock for root, else $XDG_RUNTIME_DIR/npud.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Also serve gRPC on TCP (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Server certificate chain (PEM) for --listen; needs --tls-key.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that signs TCP clients' certificates: mutual TLS on --listen (required,
    /// unless the config file's `tls_client_auth` is "optional").
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Accept plain TCP on --listen (no TLS): only on a trusted network.
    #[arg(long)]
    pub insecure_tcp: bool,
    /// Where streams come from: the embedded simulator, AscendCL or the CUDA driver [default: sim].
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// AscendCL library for --backend acl [default: $ASCEND_HOME_PATH/lib64/libascendcl.so, else libascendcl.so on the loader's path].
    #[arg(long, value_name = "PATH")]
    pub acl_library: Option<PathBuf>,
    /// CUDA driver library for --backend cuda [default: libcuda.so.1, else libcuda.so].
    #[arg(long, value_name = "PATH")]
    pub cuda_library: Option<PathBuf>,
    /// Simulated device: atlas-training (2048 streams), atlas-a2, atlas-a3 (1984), atlas-inference
    /// (1024), atlas-200i-a2 (512) [default: atlas-training].
    #[arg(long, value_name = "NAME")]
    pub sim_profile: Option<String>,
    /// Number of simulated devices for --backend sim [default: 1].
    #[arg(long, value_name = "N")]
    pub sim_devices: Option<u32>,
    /// managed: quotas, fair queue, pacing, pool. passthrough: straight to the device.
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// Serve Prometheus metrics on HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<String>,
    /// Where quotas set at run time are persisted.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Lease of client sessions, e.g. 10s: a client that stops renewing loses its resources after it.
    #[arg(long, value_name = "DURATION")]
    pub lease: Option<String>,
    /// Log format: text or json.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Serve the kubelet's device plugin API from DIR (its kubelet.sock is DIR/kubelet.sock;
    /// npud's own socket goes in DIR): streams become the `[kubernetes] resource_name`.
    #[arg(long, value_name = "DIR")]
    pub device_plugin_dir: Option<PathBuf>,
    /// How pods are booked on Kubernetes: device-plugin, dra (a DRA kubelet plugin, which
    /// reads ResourceClaims from the API server) or both; overrides `[kubernetes] mode`.
    #[arg(long, value_name = "MODE", env = "NPUD_KUBERNETES_MODE")]
    pub kubernetes_mode: Option<String>,
    /// Log level or filter (error, warn, info, debug, trace, or a RUST_LOG-style filter).
    /// Without it, RUST_LOG applies, else info.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

//! Every default of the configuration, named, in one place: what npud does when neither a
//! flag nor the file says otherwise. DESIGN.md and docs/configuration.md quote these.

use std::time::Duration;

/// The simulator's device profile (the 2048-stream training part).
pub const SIM_PROFILE: &str = "atlas-training";
pub const SIM_DEVICES: u32 = 1;
/// Hardware queues the simulator runs tasks on, per device.
pub const SIM_LANES: u32 = 8;
pub const SIM_CREATE_LATENCY: Duration = Duration::from_micros(20);
/// Concurrent creations past which the simulator fails as the vendor's runtime does.
pub const SIM_CONTENTION_WINDOW: u32 = 64;

pub const SAFETY_MARGIN: u32 = 0;
pub const BATCH_SIZE: u32 = 64;
pub const BATCH_PAUSE: Duration = Duration::ZERO;
/// Longest a native creation batch keeps a device: far above what creating a torch_npu
/// process's ~70 streams takes, so it only matters for a process that never says it is done.
pub const NATIVE_PACING: Duration = Duration::from_secs(2);
pub const MAX_NATIVE_PACING: Duration = Duration::from_secs(24 * 3600);
/// How long a fall of the untracked count that npud's books do not explain is held before
/// it is believed: well above the quarter second an interposed process may take to report
/// streams it destroyed, so a measurement in between never frees them twice.
pub const UNTRACKED_HOLD: Duration = Duration::from_secs(2);
pub const MAX_UNTRACKED_HOLD: Duration = Duration::from_secs(3600);
pub const CREATE_RETRIES: u32 = 5;
pub const RETRY_BACKOFF: Duration = Duration::from_millis(5);
pub const POOL_MAX: u32 = 256;
pub const PREWARM: u32 = 0;
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// CUDA has no fixed stream limit: npud hands out this many per device.
pub const CUDA_STREAMS_PER_DEVICE: u32 = 1024;
/// Streams a process's first graph capture on a device is admitted for (no history, no
/// hint): a torch_npu NPUGraph of one stream and a few side streams, a vLLM-Ascend graph
/// with its communication streams.
pub const CAPTURE_HEADROOM: u32 = 8;
/// MPS client contexts per device on Volta and later, through CUDA 13.0 (NVIDIA's MPS
/// documentation, "Client-Server Connection Limits"; 16 before Volta).
pub const MPS_CLIENTS: u32 = 48;

pub const MAX_SESSIONS_PER_TENANT: u32 = 1024;
pub const MAX_PENDING_REQUESTS: u32 = 256;
pub const MAX_CALLBACKS_IN_FLIGHT: u32 = 65536;
pub const REQUESTS_PER_SECOND: u32 = 100_000;
pub const REQUEST_BURST: u32 = 200_000;
pub const MAX_STREAMS_PER_REQUEST: u32 = 1024;
pub const MAX_USER_DATA: usize = 64 * 1024;
pub const MAX_NATIVE_PROCESSES: u32 = 1024;
/// Connections one tenant may keep open on the Unix socket (less where the descriptor
/// limit is small: see `config::descriptors`).
pub const MAX_CONNECTIONS_PER_TENANT: u32 = 512;
/// Connections all tenants together may keep open, at most.
pub const MAX_CONNECTIONS: u32 = 65536;
/// Connections only the host admin may take, beyond every other limit: `npuctl status`
/// works while tenants are at theirs.
pub const ADMIN_CONNECTIONS: u32 = 16;
/// The most descriptors npud raises its soft limit to.
pub const MAX_DESCRIPTORS: u64 = 1 << 20;
/// Blocking calls (synchronize, event synchronize) one tenant may have in flight: each
/// holds a task, a timer and, on the vendor backends, a thread of the blocking pool.
pub const MAX_BLOCKING_CALLS: u32 = 256;
/// Bytes one tenant's launched, undelivered callback reports may hold (user data and a
/// fixed cost each), across all its sessions.
pub const MAX_CALLBACK_REPORT_BYTES: usize = 64 << 20;
/// Streams one tenant's holders may leave untracked (gone, or reporting fewer) until a
/// measurement of the device settles them, per device; the tenant's quota bounds it too.
/// Half a device: eight torch_npu processes of one tenant exiting at once leave about 570,
/// all withheld until measured; a tenant with no quota flooding sessions withholds no more.
pub const MAX_UNTRACKED_PER_TENANT: u32 = 1024;
/// Streams a tenant may hold past its max_streams through capture claims (its debt), per
/// device; its quota bounds it too.
pub const MAX_CAPTURE_DEBT_PER_TENANT: u32 = 256;
/// Calls in flight per HTTP/2 connection.
/// Calls one HTTP/2 connection may have in flight (SETTINGS_MAX_CONCURRENT_STREAMS): a
/// client past it waits for a call to end, it is not refused. h2 keeps state for every
/// stream a connection ever had at once, so this bounds each connection's memory too.
pub const MAX_CONCURRENT_CALLS: u32 = 100;
/// npud's ceiling for what clients' calls hold: well under the DaemonSet's 512 MiB limit,
/// with npud's own books beside it.
pub const CLIENT_MEMORY_MIB: u32 = 96;
/// One tenant's share: about a hundred HTTP/2 connections, or a thousand calls in flight.
pub const CLIENT_MEMORY_PER_TENANT_MIB: u32 = 16;
/// How long a reply may wait for its peer to read it: a peer that keeps its HTTP/2
/// receive window shut longer is closed, and what it held freed.
pub const REPLY_DEADLINE: Duration = Duration::from_secs(30);
pub const MAX_REPORT_STREAMS_PER_SESSION: u32 = 16;
pub const MAX_REPORT_BYTES: usize = 64 << 20;
pub const DECLARE_GRACE: Duration = Duration::from_secs(60);
pub const CALLBACK_DEADLINE: Duration = Duration::from_secs(60);
pub const MAX_PENDING_REPORTS: usize = 65536;

pub const SOCKET_MODE: u32 = 0o660;
pub const SOCKET_DIR_MODE: u32 = 0o750;
/// The same as the node's device plugin: every uid may connect (docs/security.md).
pub const PLUGIN_SOCKET_MODE: u32 = 0o666;
pub const PLUGIN_SOCKET_DIR_MODE: u32 = 0o755;
/// Lease of anonymous sessions.
pub const LEASE: Duration = Duration::from_secs(10);
/// Lease of named sessions, which outlive one process.
pub const NAMED_LEASE: Duration = Duration::from_secs(3600);
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
pub const HEALTH_INTERVAL: Duration = Duration::from_millis(500);
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How often npud asks whether the processes behind open budget sessions still run (a
/// connection can outlive its process; `daemon::exits`).
pub const PROCESS_CHECK: Duration = Duration::from_secs(1);
/// Uids that are admins when the file names none.
pub const ADMIN_UIDS: &[u32] = &[0];
pub const LOG_FORMAT: &str = "text";
pub const PROC_ROOT: &str = "/proc";
/// Where the cgroup filesystem is mounted, as systemd mounts it.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The largest config file read.
pub const MAX_FILE_BYTES: usize = 1 << 20;

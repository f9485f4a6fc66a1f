//! The `npud.v1` gRPC contract, generated from `proto/npud/v1/*.proto`.
//!
//! Kept in its own crate so the daemon, the Rust client and the CLI share one definition,
//! and so clients in other languages can be generated from the same files.

pub mod codes;
pub mod flags;
pub mod frame;
pub mod identity;
pub mod soc;

/// Generated messages and services of package `npud.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("npud.v1");
}

/// The kubelet's device plugin API, package `v1beta1` (k8s.io/kubelet), vendored.
#[allow(clippy::all, missing_docs)]
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");
}

/// The kubelet's pod-resources API, package `v1` (k8s.io/kubelet; List only), vendored.
#[allow(clippy::all, missing_docs)]
pub mod podresources {
    tonic::include_proto!("v1");
}

/// The container runtime interface, package `runtime.v1` (k8s.io/cri-api; the container
/// status call alone), vendored: which pod a container belongs to, from the runtime.
#[allow(clippy::all, missing_docs)]
pub mod cri {
    tonic::include_proto!("runtime.v1");
}

/// The kubelet's DRA plugin API, package `k8s.io.kubelet.pkg.apis.dra.v1`, vendored.
#[allow(clippy::all, missing_docs)]
pub mod dra {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// The kubelet's DRA resource health API, package `v1alpha1` (KEP-4680), vendored.
#[allow(clippy::all, missing_docs)]
pub mod dra_health {
    tonic::include_proto!("v1alpha1");
}

/// The kubelet's plugin registration API, package `pluginregistration` (v1), vendored.
#[allow(clippy::all, missing_docs)]
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}

/// Metadata key (and budget-wire hello field) through which a container presents the
/// allocation token its device-plugin allocation mounted into it.
pub const ALLOCATION_METADATA_KEY: &str = "npud-allocation";

/// Where Allocate mounts a container's allocation token (`NPUD_ALLOCATION` names it):
/// the one path a set-uid program reads it from, whatever its environment says.
pub const CONTAINER_TOKEN_PATH: &str = "/run/npud-allocation/token";

/// The socket of an npud run by root (the socket rule's default for root, and where the
/// DaemonSet serves): the one socket a set-uid program connects to.
pub const ROOT_SOCKET: &str = "/run/npud/npud.sock";

/// The allocation token in the file a container's `NPUD_ALLOCATION` names, trimmed; None
/// when it cannot be read or is empty. The path may name anything: the open never blocks
/// (a FIFO), and only a regular file is read, 4 KiB of it at most (the token is one short
/// line).
pub fn read_allocation_token(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).ok()?;
    allocation_token_of(file)
}

/// The allocation token in `file`, opened by the caller (a set-uid program opens it with
/// its real uid's rights); as [`read_allocation_token`].
pub fn allocation_token_of(file: std::fs::File) -> Option<String> {
    use std::io::Read;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// Encoded `FileDescriptorSet` of the whole package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/npud_descriptor.bin"));

/// Metadata key that names the session of a session-scoped call.
pub const SESSION_METADATA_KEY: &str = "npud-session";

/// The socket rule both `npud` and `npuctl` follow: `--socket`, else `$NPUD_SOCKET`, else
/// `/run/npud/npud.sock` for root and `$XDG_RUNTIME_DIR/npud.sock` (or
/// `/tmp/npud-$UID/npud.sock`) otherwise. This function covers the last two steps.
pub fn default_socket_path() -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    if let Some(p) = std::env::var_os("NPUD_SOCKET").filter(|p| !p.is_empty()) {
        return p.into();
    }
    // The owner of /proc/self is the effective uid, without an unsafe libc call.
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    if uid == 0 {
        return ROOT_SOCKET.into();
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir).join("npud.sock"),
        None => format!("/tmp/npud-{uid}/npud.sock").into(),
    }
}

/// The first bytes of a budget-wire connection (see `budget.proto`): 8 bytes, as long as
/// the HTTP/2 client preface's first 8 (`PRI * HT`), so the daemon tells the two apart
/// from one read on its one socket.
pub const BUDGET_PREFACE: &[u8; 8] = b"NPUDBUD1";

/// Largest budget-wire frame either side accepts.
pub const BUDGET_MAX_FRAME: usize = 64 * 1024;

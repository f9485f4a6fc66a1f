//! What every booked container gets, whether the device plugin's Allocate or a DRA claim's
//! CDI spec gives it: npud's socket (its directory, read-only), the fail-closed switch,
//! and the interposer with the `/etc/ld.so.preload` that loads it in every process.

use std::path::Path;

/// One bind mount into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

/// The variables and mounts of a booked container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edits {
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
}

/// The edits every booked container gets from an npud serving `socket`.
pub fn booked(socket: &Path, interposer: Option<&super::interposer::Installed>) -> Edits {
    let socket_dir = socket.parent().unwrap_or(Path::new("/"));
    let env = vec![
        ("NPUD_SOCKET".to_string(), socket.display().to_string()),
        // Fail closed: a container npud cannot be reached from (it is restarting, its
        // socket is not there) waits for it a moment and is then refused its streams;
        // it never takes them unadmitted.
        ("NPUD_REQUIRED".to_string(), "1".to_string()),
    ];
    // Read-only: clients only connect (a socket on a read-only mount still accepts
    // connections), and a pod's root must not replace npud's socket for the next pod.
    let mut mounts = vec![Mount {
        container_path: socket_dir.display().to_string(),
        host_path: socket_dir.display().to_string(),
        read_only: true,
    }];
    // An unmodified framework image is admitted: glibc's loader preloads what
    // /etc/ld.so.preload names in every process, after what the image's or the pod
    // spec's own LD_PRELOAD names, which stays as it was (docs/security.md).
    if let Some(i) = interposer {
        mounts.push(Mount {
            container_path: i.container_path.clone(),
            host_path: i.library.display().to_string(),
            read_only: true,
        });
        mounts.push(Mount {
            container_path: super::interposer::LD_SO_PRELOAD.into(),
            host_path: i.preload_file.display().to_string(),
            read_only: true,
        });
    }
    Edits { env, mounts }
}

//! Each device's node on the host, as the driver names it, and a process holding the
//! nodes of the devices it uses. The Ascend driver gives every NPU a character device,
//! `/dev/davinci<N>` with N its physical id (shared/reference/acl.md, "Device numbering":
//! the physical id is the N of `/dev/davinciN`); a container is given the nodes of its
//! NPUs, and its device cgroup lets it open those and no others. Here the nodes are named
//! by `NPU_SIM_DEVICE_NODES`, one path per physical id in order (the tests use ptys:
//! openable character devices with distinct device numbers), and the runtime, when it
//! starts, opens the node of every device the process's container shows it and holds
//! them for the process's life, as a runtime that initialises its devices does. Unset,
//! no node is opened, and `npudFakeDeviceNode` names none.

use std::path::PathBuf;
use std::sync::Mutex;

/// The nodes this process holds open.
static HELD: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());

/// The node of each physical device, by physical id.
pub fn paths() -> Vec<PathBuf> {
    std::env::var("NPU_SIM_DEVICE_NODES")
        .map(|list| list.split(',').filter(|p| !p.trim().is_empty()).map(|p| PathBuf::from(p.trim())).collect())
        .unwrap_or_default()
}

/// Opens and holds the nodes of `physical` (the devices the container shows the
/// process). A node that cannot be opened is left: the container's device cgroup says no.
pub fn open_visible(physical: &[u32]) {
    use std::os::unix::fs::OpenOptionsExt;
    let paths = paths();
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    for p in physical {
        let Some(path) = paths.get(*p as usize) else { continue };
        if let Ok(f) = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOCTTY).open(path) {
            held.push(f);
        }
    }
}

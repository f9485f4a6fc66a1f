//! Which devices a pod really holds: the device files its processes hold open. The
//! kubelet's ids are the vendor plugin's word, and under Volcano (MindX DL's scheduler)
//! the Ascend plugin mounts the NPUs the pod's annotation names instead (`plugin.go`,
//! Allocate, `useVolcano`); an id scheme npud does not know (a vNPU) names no device at
//! all. What a container can open is what its device cgroup lets it, so a process of the
//! pod holding a device's node open is first-hand evidence that the pod has that device;
//! a node that merely exists in the container is not (root in a pod can mknod one).
//!
//! The pod's processes are every process in its cgroup (`cgroup.procs`, the pod's
//! directory and below), whether or not the interposer runs in them; each one's open
//! descriptors (`/proc/<pid>/fd`) are matched by device number (`st_rdev`) against the
//! nodes the vendor's driver names for npud's devices (`Backend::device_node`), never
//! against a major number npud would have to assume.

use super::Daemon;
use crate::tenancy::cgroup::{Hierarchy, Mounted, pod_dirs};
use crate::types::Tenant;
use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The most processes, cgroups and descriptors one look at a pod reads.
const MAX_PIDS: usize = 4096;
const MAX_CGROUPS: usize = 1024;
const MAX_FDS: usize = 65_536;

/// Device number (st_rdev) → npud's device, for the devices whose node the driver names.
pub(super) fn node_map(backend: &dyn crate::backend::Backend) -> HashMap<u64, u32> {
    let mut map = HashMap::new();
    for d in backend.devices() {
        let Some(path) = backend.device_node(d.id) else { continue };
        match std::fs::metadata(&path) {
            Ok(m) if m.file_type().is_char_device() => {
                map.insert(m.rdev(), d.id);
            }
            Ok(_) => tracing::warn!(device = d.id, node = %path.display(), "a device's node is no character device"),
            Err(e) => {
                tracing::debug!(device = d.id, node = %path.display(), error = %e, "a device's node cannot be read")
            }
        }
    }
    map
}

impl Daemon {
    /// The devices pod `uid`'s processes hold open now.
    pub(crate) fn held_by_pod(&self, uid: &str) -> BTreeSet<u32> {
        let mut held = BTreeSet::new();
        if self.device_nodes.is_empty() {
            return held;
        }
        for pid in pod_pids(&Mounted { root: self.config.cgroup_root.clone() }, uid) {
            devices_open(&self.config.proc_root.join(pid.to_string()).join("fd"), &self.device_nodes, &mut held);
        }
        held
    }

    /// Where the processes of `tenant`'s pod hold devices open that it is not booked on,
    /// books it there instead, within its allocation, and says so once; true when it
    /// moved. What the pod's processes hold there already counts at once, even past the
    /// room; the rest of its booking is reserved in binding order, as any booking.
    pub(crate) fn follow_held_devices(&self, tenant: &Tenant) -> bool {
        let Some(all) = &self.allocations else { return false };
        let Some(uid) = all.pod_of(tenant) else { return false };
        let held = self.held_by_pod(&uid);
        let booked: BTreeSet<u32> =
            all.booking(tenant).map(|b| b.devices.keys().copied().collect()).unwrap_or_default();
        // Holding part of its booking is a pod still starting (a TP-8 pod's first ranks):
        // only a device held outside it is news.
        if held.is_subset(&booked) {
            return false;
        }
        // The kubelet's ids were wrong the first time: the held devices replace them. Once
        // moved, the booking only grows to the devices more of its processes open.
        let target: Vec<u32> = match all.moved(tenant) {
            true => booked.union(&held).copied().collect(),
            false => held.into_iter().collect(),
        };
        let (moved, names) = all.rebook(tenant, &target);
        if moved {
            let pod = names.map_or_else(|| tenant.to_string(), |n| format!("{}/{}", n.namespace, n.pod));
            tracing::info!(%pod, from = ?booked, to = ?target, "a pod's processes hold other devices than it was booked on: its booking follows them");
            self.metrics.booking_moved();
            self.sync_booking(tenant);
        }
        moved
    }
}

/// Every process in pod `uid`'s cgroup and below (bounded), in whichever hierarchy has it.
fn pod_pids(cgroups: &Mounted, uid: &str) -> BTreeSet<u32> {
    let mut pids = BTreeSet::new();
    let mut todo: Vec<std::path::PathBuf> = Vec::new();
    for hierarchy in [Hierarchy::Unified, Hierarchy::V1("name=systemd".into())] {
        for (_, dirs) in pod_dirs(uid) {
            todo.extend(dirs.iter().map(|d| cgroups.dir(&hierarchy, d)).filter(|d| d.is_dir()));
        }
    }
    let mut seen = 0;
    while let Some(dir) = todo.pop() {
        seen += 1;
        if seen > MAX_CGROUPS || pids.len() >= MAX_PIDS {
            break;
        }
        let procs = crate::files::read_text_bounded(&dir.join("cgroup.procs"), 1 << 20).unwrap_or_default();
        pids.extend(procs.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).take(MAX_PIDS));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            todo.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
    }
    pids
}

/// Adds the devices whose nodes the descriptors in `fd_dir` name to `held`.
fn devices_open(fd_dir: &Path, nodes: &HashMap<u64, u32>, held: &mut BTreeSet<u32>) {
    let Ok(entries) = std::fs::read_dir(fd_dir) else { return };
    for entry in entries.flatten().take(MAX_FDS) {
        // Followed: the descriptor's own file, as the kernel keeps it open.
        if let Ok(m) = std::fs::metadata(entry.path())
            && m.file_type().is_char_device()
            && let Some(d) = nodes.get(&m.rdev())
        {
            held.insert(*d);
        }
    }
}

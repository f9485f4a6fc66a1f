//! Where a process runs, from its cgroup file (`/proc/<pid>/cgroup`, v1 or v2; the
//! systemd and cgroupfs drivers) and from who made the directories of that cgroup: on the
//! host, in a container its runtime or the kubelet made, or somewhere else.
//!
//! A name is not evidence: a user who owns a delegated subtree (systemd's
//! `user@<uid>.service`) can make `kubepods-…-pod<uid>.slice/cri-containerd-<id>.scope`
//! there and move itself in. So a container counts only where
//! 1. its layout is one a runtime or the kubelet makes, at the place they make it (the
//!    top of the hierarchy: [`layout`]), and
//! 2. every directory from the hierarchy's top down to the container's own is owned by
//!    uid 0 and writable by its owner alone: only root could have made the container's
//!    directory there, and no one else could have made one of its parents.
//!
//! The rule reads the one hierarchy that places processes, whichever the host runs: the
//! unified one (cgroup v2, and the hybrid layout's `unified`), else systemd's own v1
//! hierarchy (`name=systemd`), else the first v1 controller's. It holds for both drivers,
//! which differ only in names. Paths are as npud's cgroup namespace shows them; a path
//! outside it (`/../…`) cannot be checked and names no container. docs/security.md says
//! this with each runtime's layout.

pub mod layout;

pub use layout::{Container, is_host_path};

/// Where a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// One of the host's own places (a session, a service, the root).
    Host,
    /// A container its runtime made (checked as the module says).
    Container(Container),
    /// Neither: a container-shaped path npud cannot verify, or a directory outside
    /// systemd's tree. The process is its uid's tenant; this says why (for the log).
    Other(String),
}

/// A hierarchy of the cgroup file: the unified one (`0::`), or a v1 hierarchy by the
/// controllers its line names (`name=systemd`, `cpu,cpuacct`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Hierarchy {
    Unified,
    V1(String),
}

/// Who owns a cgroup directory and its mode bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub mode: u32,
}

/// Reads cgroup directories' owners: the cgroup filesystem as mounted (`/sys/fs/cgroup`),
/// or a tree in tests.
pub trait Owners {
    /// The owner of directory `path` (from the hierarchy's top, `/` the top itself) of
    /// `hierarchy`. An error for anything that is not a directory.
    fn owner(&self, hierarchy: &Hierarchy, path: &str) -> std::io::Result<Owner>;
}

/// Owners read from a mounted cgroup filesystem at `root`, where systemd mounts them: the
/// unified hierarchy at the root (pure v2) or at `unified` (hybrid), v1 hierarchies each
/// at the name of their controllers (`systemd` for `name=systemd`).
pub struct Mounted {
    pub root: std::path::PathBuf,
}

impl Mounted {
    /// Directory `path` (from the hierarchy's top) of `hierarchy`, where it is mounted.
    pub fn dir(&self, hierarchy: &Hierarchy, path: &str) -> std::path::PathBuf {
        self.top(hierarchy).join(path.trim_start_matches('/'))
    }

    fn top(&self, hierarchy: &Hierarchy) -> std::path::PathBuf {
        match hierarchy {
            Hierarchy::Unified if self.root.join("cgroup.controllers").exists() => self.root.clone(),
            Hierarchy::Unified => self.root.join("unified"),
            Hierarchy::V1(c) => self.root.join(c.strip_prefix("name=").unwrap_or(c)),
        }
    }
}

impl Owners for Mounted {
    fn owner(&self, hierarchy: &Hierarchy, path: &str) -> std::io::Result<Owner> {
        use std::os::unix::fs::MetadataExt;
        let dir = self.top(hierarchy).join(path.trim_start_matches('/'));
        // Not followed: a link is no directory a runtime made.
        let meta = std::fs::symlink_metadata(&dir)?;
        if !meta.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is no directory", dir.display()),
            ));
        }
        Ok(Owner { uid: meta.uid(), mode: meta.mode() & 0o7777 })
    }
}

/// The line that places the process: the unified hierarchy's where it is used, else
/// systemd's v1 hierarchy, else the first line's. On a hybrid host other v1 controllers
/// can hold any process anywhere (a resource manager's `memory:/jobs/<id>`), which says
/// nothing about containers.
fn placing(cgroup: &str) -> Option<(Hierarchy, &str)> {
    let lines: Vec<(&str, &str)> = cgroup
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((controllers, path.trim()))
        })
        .collect();
    let unified = lines.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| (Hierarchy::Unified, *p));
    let systemd = lines.iter().find(|(c, _)| *c == "name=systemd").map(|(c, p)| (Hierarchy::V1(c.to_string()), *p));
    match (unified, systemd) {
        (Some(u), _) if u.1 != "/" => Some(u),
        (_, Some(s)) if s.1 != "/" => Some(s),
        (Some(u), _) => Some(u),
        (None, Some(s)) => Some(s),
        (None, None) => lines.first().map(|(c, p)| (Hierarchy::V1(c.to_string()), *p)),
    }
}

/// Segments that say a runtime placed the process, whatever else the path holds: such a
/// path is never the host's, even under `system.slice` (a quadlet's or `ctr`'s container).
const RUNTIME_MARKERS: [&str; 8] = ["kubepods", "docker", "libpod", "crio", "containerd", "nerdctl", "lxc", "machine-"];

/// The path of the cgroup that places the process: the unified hierarchy's, else
/// systemd's v1 hierarchy's, else the first line's.
pub fn placing_path(cgroup: &str) -> Option<&str> {
    placing(cgroup).map(|(_, path)| path)
}

/// Where the process whose cgroup file is `cgroup` runs, its directories' owners read
/// through `owners`.
pub fn place_of(cgroup: &str, owners: &dyn Owners) -> Place {
    let Some((hierarchy, path)) = placing(cgroup) else {
        return match cgroup.trim().is_empty() {
            // No cgroup support at all: the host.
            true => Place::Host,
            false => Place::Other(format!("not a cgroup file: {:?}", cgroup.chars().take(128).collect::<String>())),
        };
    };
    let shown = || path.chars().take(256).collect::<String>();
    if let Some(claim) = layout::claim_in(path) {
        return match made_by_root(owners, &hierarchy, path, claim.dirs) {
            Ok(()) => Place::Container(claim.container),
            Err(why) => Place::Other(format!("cgroup {}: {why}", shown())),
        };
    }
    let marked = path.split('/').any(|seg| seg == ".." || RUNTIME_MARKERS.iter().any(|m| seg.contains(m)));
    if is_host_path(path) && !marked {
        return Place::Host;
    }
    Place::Other(format!("cgroup {}: no container a runtime made, nor one of the host's places", shown()))
}

/// Checks that every directory from the hierarchy's top down through the first `dirs` of
/// `path` is owned by uid 0 and writable by its owner alone; the error says which is not.
fn made_by_root(owners: &dyn Owners, hierarchy: &Hierarchy, path: &str, dirs: usize) -> Result<(), String> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).take(dirs).collect();
    let mut dir = String::from("/");
    for i in 0..=segs.len() {
        if i > 0 {
            if i > 1 {
                dir.push('/');
            }
            dir.push_str(segs[i - 1]);
        }
        match owners.owner(hierarchy, &dir) {
            Ok(o) if o.uid != 0 => return Err(format!("{dir} is owned by uid {} (a delegated subtree)", o.uid)),
            Ok(o) if o.mode & 0o022 != 0 => return Err(format!("{dir} is writable by others (mode {:o})", o.mode)),
            Ok(_) => {}
            Err(e) => return Err(format!("{dir} cannot be checked: {e}")),
        }
    }
    Ok(())
}

/// Whether pod `uid`'s cgroup exists, as the kubelet makes it (either driver, any QoS
/// level, in the hierarchy that places processes), root's. None where the kubelet's tree
/// itself is not there to look at (no `kubepods` in any hierarchy npud can read): silence,
/// which proves nothing either way.
pub fn pod_alive(owners: &dyn Owners, uid: &str) -> Option<bool> {
    let mut seen_tree = false;
    for hierarchy in [Hierarchy::Unified, Hierarchy::V1("name=systemd".into())] {
        for (root, pods) in pod_dirs(uid) {
            if owners.owner(&hierarchy, root).is_err() {
                continue;
            }
            seen_tree = true;
            if pods.iter().any(|p| matches!(owners.owner(&hierarchy, p), Ok(o) if o.uid == 0)) {
                return Some(true);
            }
        }
    }
    seen_tree.then_some(false)
}

/// Where the kubelet puts pod `uid`'s cgroup: its tree's top for each driver, and the
/// pod's directory under it at each QoS level.
pub fn pod_dirs(uid: &str) -> [(&'static str, [String; 3]); 2] {
    let under = uid.replace('-', "_");
    [
        (
            "/kubepods.slice",
            [
                format!("/kubepods.slice/kubepods-pod{under}.slice"),
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{under}.slice"),
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{under}.slice"),
            ],
        ),
        (
            "/kubepods",
            [
                format!("/kubepods/pod{uid}"),
                format!("/kubepods/burstable/pod{uid}"),
                format!("/kubepods/besteffort/pod{uid}"),
            ],
        ),
    ]
}

#[cfg(test)]
mod tests;

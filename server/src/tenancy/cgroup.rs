//! Where a process runs, read from its cgroup file (`/proc/<pid>/cgroup`, v1 or v2; the
//! systemd and cgroupfs drivers): on the host, in a container npud can name, or in a
//! container it cannot. The last fails closed: such a peer is refused, never taken for
//! the host (where root is an admin).
//!
//! The layouts, as the runtimes write them (the path after `0::` on cgroup v2, or after
//! `N:controller:` on v1):
//! - docker: `/system.slice/docker-<id>.scope` (systemd driver), `/docker/<id>` (cgroupfs)
//! - podman as root: `/machine.slice/libpod-<id>.scope`; rootless:
//!   `/user.slice/user-<uid>.slice/user@<uid>.service/user.slice/libpod-<id>.scope`
//! - containerd under Kubernetes: `…/kubepods-<qos>-pod<uid>.slice/cri-containerd-<id>.scope`
//!   (systemd), `/kubepods/<qos>/pod<uid>/<id>` (cgroupfs); CRI-O: `…/crio-<id>.scope`
//! - containerd's `ctr run` (cgroupfs): `/<namespace>/<container id>`, ids that are names
//!   (`/default/job1`); nerdctl (systemd): `/system.slice/nerdctl-<id>.scope`
//! - LXC 4 and later: `/lxc.payload.<name>`; earlier: `/lxc/<name>`
//! - systemd-nspawn: `/machine.slice/machine-<name>.scope`

/// The container a process runs in, as its cgroup path tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The runtime's container id: 64 hex digits, or a name (`ctr`, LXC, nspawn), which
    /// carries its namespace where the runtime has one (`default.job1`).
    pub id: String,
    /// "docker", "containerd", "crio", "podman", "nerdctl", "lxc", "nspawn" or "kubepods".
    pub runtime: &'static str,
    /// The Kubernetes pod uid, when the path names one.
    pub pod_uid: Option<String>,
}

impl Container {
    /// How a tenant name shows it: the first 12 digits of a hex id (as `docker ps` does),
    /// a name whole (up to 48 characters, those a tenant name allows).
    pub fn short(&self) -> String {
        if is_container_id(&self.id) {
            return self.id[..12].to_string();
        }
        self.id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
            .take(48)
            .collect()
    }
}

/// Where a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Host,
    Container(Container),
    /// In a container (its cgroup path is a runtime's) that npud cannot name: the path.
    Unnamed(String),
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Segments that say a runtime placed the process, whatever else the path holds.
const RUNTIME_MARKERS: [&str; 8] = ["kubepods", "docker", "libpod", "crio", "containerd", "nerdctl", "lxc", "machine-"];

/// The host's own places under systemd: sessions, services and the init scope.
fn is_host_path(path: &str) -> bool {
    path == "/" || path == "/init.scope" || path.starts_with("/user.slice") || path.starts_with("/system.slice")
}

/// The path that says where a process is placed: the unified hierarchy's (`0::`) where
/// it is used, else the systemd hierarchy's (`name=systemd`), else the first line's. On a
/// hybrid host other v1 controllers can hold any process anywhere (a resource manager's
/// `memory:/jobs/<id>`), which says nothing about containers.
fn placing_path(cgroup: &str) -> Option<&str> {
    let lines: Vec<(&str, &str)> = cgroup
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((controllers, path.trim()))
        })
        .collect();
    let unified = lines.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| *p);
    let systemd = lines.iter().find(|(c, _)| *c == "name=systemd").map(|(_, p)| *p);
    match (unified, systemd) {
        (Some(p), _) if p != "/" => Some(p),
        (_, Some(p)) if p != "/" => Some(p),
        (Some(p), _) => Some(p),
        (None, Some(p)) => Some(p),
        (None, None) => lines.first().map(|(_, p)| *p),
    }
}

/// Where the process whose cgroup file is `cgroup` runs.
pub fn place_of(cgroup: &str) -> Place {
    if let Some(c) = hex_container_in(cgroup) {
        return Place::Container(c);
    }
    let Some(path) = placing_path(cgroup) else {
        // Not a cgroup file: nothing says the process is the host's.
        return match cgroup.trim().is_empty() {
            true => Place::Host,
            false => Place::Unnamed(cgroup.chars().take(256).collect()),
        };
    };
    if let Some(c) = named_container(path) {
        return Place::Container(c);
    }
    let marked = path.split('/').any(|seg| RUNTIME_MARKERS.iter().any(|m| seg.contains(m)));
    if marked || !is_host_path(path) {
        // Not the host's (a runtime's scope, or a directory outside systemd's tree): a
        // container, whose id this path does not give.
        return Place::Unnamed(path.chars().take(256).collect());
    }
    Place::Host
}

/// A container named by a 64-hex id on any line: a runtime's id is strong evidence in
/// whichever hierarchy it shows.
fn hex_container_in(cgroup: &str) -> Option<Container> {
    cgroup.lines().find_map(|line| hex_container(line.splitn(3, ':').nth(2).unwrap_or(line)))
}

/// Finds a named container in a cgroup file.
pub fn container_of(cgroup: &str) -> Option<Container> {
    match place_of(cgroup) {
        Place::Container(c) => Some(c),
        Place::Host | Place::Unnamed(_) => None,
    }
}

/// A container named by a 64-hex id in one of the runtimes' scopes or directories.
fn hex_container(path: &str) -> Option<Container> {
    let mut pod_uid = None;
    let mut found: Option<Container> = None;
    for seg in path.split('/') {
        let seg = seg.strip_suffix(".scope").or_else(|| seg.strip_suffix(".slice")).unwrap_or(seg);
        // kubepods-besteffort-pod<uid>.slice (systemd) or pod<uid> (cgroupfs)
        if let Some(p) = seg.rsplit_once("-pod").map(|(_, p)| p).or_else(|| seg.strip_prefix("pod"))
            && p.len() >= 32
            && p.bytes().all(|b| b.is_ascii_hexdigit() || b == b'_' || b == b'-')
        {
            pod_uid = Some(p.replace('_', "-"));
        }
        let candidates: [(&str, &'static str); 6] = [
            ("cri-containerd-", "containerd"),
            ("crio-", "crio"),
            ("docker-", "docker"),
            ("libpod-", "podman"),
            ("nerdctl-", "nerdctl"),
            ("", "docker"),
        ];
        for (prefix, runtime) in candidates {
            if let Some(id) = seg.strip_prefix(prefix).filter(|id| is_container_id(id)) {
                let runtime = if prefix.is_empty() && path.contains("kubepods") { "kubepods" } else { runtime };
                found = Some(Container { id: id.to_ascii_lowercase(), runtime, pod_uid: None });
                break;
            }
        }
    }
    found.map(|mut c| {
        c.pod_uid = pod_uid;
        c
    })
}

/// A container its runtime names: LXC's, systemd-nspawn's, or `ctr`'s in a containerd
/// namespace (`/<namespace>/<id>`, exactly two segments, outside systemd's tree).
fn named_container(path: &str) -> Option<Container> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 128
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let named = |id: &str, runtime| name_ok(id).then(|| Container { id: id.to_string(), runtime, pod_uid: None });
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if let Some(name) = segs.first().and_then(|s| s.strip_prefix("lxc.payload.")) {
        return named(name, "lxc");
    }
    if let ["lxc", name, ..] = segs.as_slice() {
        return named(name, "lxc");
    }
    if let Some(name) = segs.iter().find_map(|s| s.strip_prefix("machine-").and_then(|m| m.strip_suffix(".scope"))) {
        return named(&name.replace("\\x2d", "-"), "nspawn");
    }
    match segs.as_slice() {
        [ns, id]
            if !is_host_path(path)
                && !ns.ends_with(".slice")
                && !ns.ends_with(".scope")
                && !RUNTIME_MARKERS.iter().any(|m| ns.contains(m))
                && name_ok(ns) =>
        {
            named(&format!("{ns}.{id}"), "containerd")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;

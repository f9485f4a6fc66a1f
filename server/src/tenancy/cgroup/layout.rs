//! The cgroup layouts container runtimes and the kubelet make, each anchored where its
//! maker puts it: at the top of the hierarchy (the kubelet's default `--cgroup-root=/`,
//! systemd's `system.slice` and `machine.slice`, a runtime's own top-level directory).
//! A layout found anywhere else (under `user@1000.service`, say) is nobody's container:
//! any user with a delegated subtree can make directories with such names there.
//!
//! The first layout from the top names the container; directories below it are that
//! container's (a container that makes cgroups of its own stays itself).
//!
//! Sources, as each maker names its directories:
//! - the kubelet (`pkg/kubelet/cm/qos_container_manager_linux.go`,
//!   `pod_container_manager_linux.go`, `cgroup_manager_linux.go`): `kubepods[/<qos>]/pod<uid>`
//!   with the cgroupfs driver; `kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice`
//!   with the systemd driver, which writes the uid's `-` as `_`. Guaranteed pods have no
//!   QoS level. The container's scope below the pod is its runtime's:
//!   `cri-containerd-<id>.scope` (containerd), `crio-<id>.scope` (CRI-O),
//!   `docker-<id>.scope` (cri-dockerd); with cgroupfs, the bare `<id>`.
//! - Docker (moby `daemon/oci_linux.go`): `system.slice/docker-<id>.scope`, or `docker/<id>`.
//! - nerdctl: `system.slice/nerdctl-<id>.scope`.
//! - podman as root (`libpod/runtime_ctr.go`): `machine.slice/libpod-<id>.scope`, in a pod
//!   `machine.slice/machine-libpod_pod_<pod id>.slice/libpod-<id>.scope`; with cgroupfs
//!   `libpod_parent/libpod-<id>`.
//! - containerd's `ctr run` with cgroupfs: `<namespace>/<id>`, exactly two directories.
//! - LXC 4 and later `lxc.payload.<name>`, earlier `lxc/<name>`; systemd-nspawn
//!   `machine.slice/machine-<name>.scope`.

/// A container a cgroup path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The runtime's container id: 64 hex digits, or a name (`ctr`, LXC, nspawn), which
    /// carries its namespace where the runtime has one (`default.job1`).
    pub id: String,
    /// "docker", "containerd", "crio", "podman", "nerdctl", "lxc", "nspawn" or "kubepods".
    pub runtime: &'static str,
    /// The Kubernetes pod uid, when the path is the kubelet's.
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

/// A layout found in a path: the container, and how many directories from the top down
/// to the container's own make it (those whose owners say who made them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub container: Container,
    pub dirs: usize,
}

pub(super) fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A pod uid as the kubelet writes it into a directory name: a UUID (the systemd driver
/// writes its `-` as `_`), or the 32 hex digits of a static pod's uid. Lower-cased, with `-`.
fn pod_uid(s: &str) -> Option<String> {
    let uid = s.replace('_', "-").to_ascii_lowercase();
    let hex = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = uid.split('-').collect();
    let uuid = parts.len() == 5 && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12]) && parts.iter().all(|p| hex(p));
    (uuid || (uid.len() == 32 && hex(&uid))).then_some(uid)
}

/// A name a runtime gives a container (ctr, LXC, nspawn): letters, digits, `.`, `_`, `-`.
fn name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 128 && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn hex_in(seg: &str, prefix: &str, suffix: &str) -> Option<String> {
    let id = seg.strip_prefix(prefix)?.strip_suffix(suffix)?;
    is_container_id(id).then(|| id.to_ascii_lowercase())
}

fn claim(id: String, runtime: &'static str, pod_uid: Option<String>, dirs: usize) -> Option<Claim> {
    Some(Claim { container: Container { id, runtime, pod_uid }, dirs })
}

/// The kubelet's pod directory and the container's below it, from segment `at` on.
fn kubepods(segs: &[&str], systemd: bool) -> Option<Claim> {
    let qos = |s: &str| matches!(s, "burstable" | "besteffort");
    // The QoS level's directory, where there is one.
    let at = match (systemd, segs.get(1)) {
        (true, Some(s)) if s.strip_prefix("kubepods-").and_then(|s| s.strip_suffix(".slice")).is_some_and(qos) => 2,
        (false, Some(s)) if qos(s) => 2,
        _ => 1,
    };
    let pod = segs.get(at)?;
    let uid = match systemd {
        true => pod.strip_suffix(".slice").and_then(|p| p.rsplit_once("-pod")).map(|(_, u)| u)?,
        false => pod.strip_prefix("pod")?,
    };
    let uid = pod_uid(uid)?;
    let scope = segs.get(at + 1)?;
    let found = match systemd {
        true => [("cri-containerd-", "containerd"), ("crio-", "crio"), ("docker-", "docker")]
            .into_iter()
            .find_map(|(prefix, runtime)| hex_in(scope, prefix, ".scope").map(|id| (id, runtime))),
        false => is_container_id(scope).then(|| (scope.to_ascii_lowercase(), "kubepods")),
    };
    let (id, runtime) = found?;
    claim(id, runtime, Some(uid), at + 2)
}

/// The container `path` (a cgroup path, from the hierarchy's top) names, by the layouts
/// above, anchored at the top.
pub fn claim_in(path: &str) -> Option<Claim> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segs.iter().any(|s| *s == "." || *s == "..") {
        // Outside npud's cgroup namespace (or not a path): nothing can be checked.
        return None;
    }
    match segs.as_slice() {
        ["kubepods.slice", ..] => kubepods(&segs, true),
        ["kubepods", ..] => kubepods(&segs, false),
        ["system.slice", scope, ..] => [("docker-", "docker"), ("nerdctl-", "nerdctl")]
            .into_iter()
            .find_map(|(prefix, runtime)| hex_in(scope, prefix, ".scope").map(|id| (id, runtime)))
            .and_then(|(id, runtime)| claim(id, runtime, None, 2)),
        ["docker", id, ..] if is_container_id(id) => claim(id.to_ascii_lowercase(), "docker", None, 2),
        ["machine.slice", pod, scope, ..] if pod.starts_with("machine-libpod_pod_") && pod.ends_with(".slice") => {
            claim(hex_in(scope, "libpod-", ".scope")?, "podman", None, 3)
        }
        ["machine.slice", scope, ..] => match hex_in(scope, "libpod-", ".scope") {
            Some(id) => claim(id, "podman", None, 2),
            None => {
                let name = scope.strip_prefix("machine-")?.strip_suffix(".scope")?.replace("\\x2d", "-");
                name_ok(&name).then_some(())?;
                claim(name, "nspawn", None, 2)
            }
        },
        ["libpod_parent", scope, ..] => claim(hex_in(scope, "libpod-", "")?, "podman", None, 2),
        [first, ..] if first.starts_with("lxc.payload.") => {
            let name = &first["lxc.payload.".len()..];
            name_ok(name).then_some(())?;
            claim(name.to_string(), "lxc", None, 1)
        }
        ["lxc", name, ..] if name_ok(name) => claim(name.to_string(), "lxc", None, 2),
        [ns, id] if ctr_namespace(ns) && name_ok(id) => claim(format!("{ns}.{id}"), "containerd", None, 2),
        _ => None,
    }
}

/// A containerd namespace as `ctr run` places containers in it with cgroupfs: not one of
/// systemd's units nor another maker's directory.
fn ctr_namespace(ns: &str) -> bool {
    name_ok(ns)
        && !ns.ends_with(".slice")
        && !ns.ends_with(".scope")
        && !ns.ends_with(".service")
        && !matches!(ns, "kubepods" | "docker" | "lxc" | "libpod_parent" | "init.scope")
}

/// Whether `path` is one of the host's own places under systemd: sessions, services,
/// the init scope, the root.
pub fn is_host_path(path: &str) -> bool {
    path == "/" || path == "/init.scope" || path.starts_with("/user.slice") || path.starts_with("/system.slice")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e1c2b5a6978d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5968778695a4b3c2d1e";

    #[test]
    fn a_layout_counts_only_at_the_top() {
        let pod = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope"
        );
        let c = claim_in(&pod).expect("the kubelet's");
        assert_eq!((c.container.runtime, c.dirs), ("containerd", 4));
        assert_eq!(c.container.pod_uid.as_deref(), Some("1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"));
        for nested in [
            format!("/user.slice/user-1000.slice/user@1000.service{pod}"),
            format!("/user.slice/user-1000.slice/user@1000.service/system.slice/docker-{ID}.scope"),
            format!("/user.slice/user-1000.slice/user@1000.service/machine.slice/libpod-{ID}.scope"),
            format!("/somewhere{pod}"),
        ] {
            assert_eq!(claim_in(&nested), None, "{nested}");
        }
    }

    /// A container that makes cgroups of its own that look like another's stays itself.
    #[test]
    fn the_outermost_container_is_the_one() {
        let other = "b".repeat(64);
        let path = format!(
            "/system.slice/docker-{ID}.scope/kubepods.slice/kubepods-poddeadbeef_0000_4000_8000_000000000000.slice/cri-containerd-{other}.scope"
        );
        let c = claim_in(&path).expect("docker's");
        assert_eq!(
            (c.container.id.as_str(), c.container.runtime, c.container.pod_uid, c.dirs),
            (ID, "docker", None, 2)
        );
    }

    #[test]
    fn pod_uids_are_uuids_or_a_static_pods_hex() {
        assert_eq!(
            pod_uid("1A2B3C4D_5e6f_7a8b_9c0d_1e2f3a4b5c6d").as_deref(),
            Some("1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
        );
        assert_eq!(pod_uid(&"a".repeat(32)), Some("a".repeat(32)));
        for bad in ["", "1a2b", "1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6dxx", &"g".repeat(32), "../../../x"] {
            assert_eq!(pod_uid(bad), None, "{bad}");
        }
    }

    #[test]
    fn paths_outside_the_namespace_name_nothing() {
        assert_eq!(claim_in(&format!("/../../system.slice/docker-{ID}.scope")), None);
        assert_eq!(claim_in("/default/.."), None);
    }
}

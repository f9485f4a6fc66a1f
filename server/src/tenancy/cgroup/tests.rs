use super::*;
use std::collections::HashMap;

const ID: &str = "3f4e1c2b5a6978d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5968778695a4b3c2d1e";
const POD: &str = "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d";

/// Cgroup directories by hierarchy and path, with their owners: what `mkdir` by each
/// maker would leave.
#[derive(Default)]
struct Tree(HashMap<(Hierarchy, String), Owner>);

const ROOT_MADE: Owner = Owner { uid: 0, mode: 0o755 };

impl Tree {
    /// Every directory of `path` (and the top) in `hierarchy`, made by root unless
    /// `owned` names a uid for the directories from depth `from` on.
    fn with(mut self, hierarchy: Hierarchy, path: &str, owned: Option<(usize, u32)>) -> Tree {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        self.0.entry((hierarchy.clone(), "/".into())).or_insert(ROOT_MADE);
        for i in 1..=segs.len() {
            let dir = format!("/{}", segs[..i].join("/"));
            let owner = match owned {
                Some((from, uid)) if i >= from => Owner { uid, mode: 0o755 },
                _ => ROOT_MADE,
            };
            self.0.entry((hierarchy.clone(), dir)).or_insert(owner);
        }
        self
    }

    /// The path's directories made by root in the unified hierarchy.
    fn root_made(path: &str) -> Tree {
        Tree::default().with(Hierarchy::Unified, path, None)
    }
}

impl Owners for Tree {
    fn owner(&self, hierarchy: &Hierarchy, path: &str) -> std::io::Result<Owner> {
        self.0.get(&(hierarchy.clone(), path.to_string())).copied().ok_or_else(|| std::io::ErrorKind::NotFound.into())
    }
}

fn named(text: &str, tree: &Tree) -> (String, &'static str, Option<String>) {
    match place_of(text, tree) {
        Place::Container(c) => (c.id, c.runtime, c.pod_uid),
        other => panic!("no container in {text}: {other:?}"),
    }
}

/// Each runtime's layout, from a real path (the module's list), made by root.
#[test]
fn recognises_the_runtimes_on_cgroup_v1_and_v2() {
    let pod = Some(POD.to_string());
    let hex = |runtime, pod: Option<String>| (ID.to_string(), runtime, pod);
    let cases = [
        (format!("0::/system.slice/docker-{ID}.scope"), hex("docker", None)),
        (format!("12:pids:/docker/{ID}\n1:name=systemd:/docker/{ID}"), hex("docker", None)),
        (format!("0::/machine.slice/libpod-{ID}.scope"), hex("podman", None)),
        (
            format!("0::/machine.slice/machine-libpod_pod_{}.slice/libpod-{ID}.scope", "c".repeat(64)),
            hex("podman", None),
        ),
        (
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope"
            ),
            hex("containerd", pod.clone()),
        ),
        (
            format!(
                "0::/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope"
            ),
            hex("containerd", pod.clone()),
        ),
        (format!("0::/kubepods/burstable/pod{POD}/{ID}"), hex("kubepods", pod.clone())),
        (format!("0::/kubepods/pod{POD}/{ID}"), hex("kubepods", pod.clone())),
        (format!("1:name=systemd:/kubepods/besteffort/pod{POD}/{ID}\n0::/"), hex("kubepods", pod.clone())),
        (
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/crio-{ID}.scope"
            ),
            hex("crio", pod.clone()),
        ),
        (format!("0::/system.slice/nerdctl-{ID}.scope"), hex("nerdctl", None)),
        ("0::/default/job1".to_string(), ("default.job1".to_string(), "containerd", None)),
        ("12:pids:/k8s.io/build-7".to_string(), ("k8s.io.build-7".to_string(), "containerd", None)),
        ("0::/lxc.payload.c1".to_string(), ("c1".to_string(), "lxc", None)),
        ("10:cpu:/lxc/web".to_string(), ("web".to_string(), "lxc", None)),
        ("0::/machine.slice/machine-fedora\\x2dbox.scope".to_string(), ("fedora-box".to_string(), "nspawn", None)),
    ];
    for (text, expected) in cases {
        let (hierarchy, path) = placing(&text).unwrap();
        let tree = Tree::default().with(hierarchy, path, None);
        assert_eq!(named(&text, &tree), expected, "{text}");
    }
}

#[test]
fn the_hosts_own_places_are_the_host() {
    for text in [
        "0::/user.slice/user-1000.slice/session-2.scope",
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox.scope",
        "0::/system.slice/sshd.service",
        "0::/",
        "12:pids:/init.scope",
        "",
        // A hybrid host whose v1 memory controller a job manager placed the process in.
        "9:name=systemd:/\n4:memory:/process_api/1d74afdecb4d008bcdec65da2a6000c2\n0::/",
    ] {
        assert_eq!(place_of(text, &Tree::default()), Place::Host, "{text}");
    }
}

/// A runtime's path npud cannot verify, or a directory outside systemd's tree, is no
/// container and never the host: the uid's tenant.
#[test]
fn what_npud_cannot_verify_is_neither_a_container_nor_the_host() {
    for text in [
        "0::/docker/abc",
        "0::/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/sandbox.scope",
        "0::/system.slice/docker-short.scope",
        "0::/a/b/c",
        "0::/../../system.slice/sshd.service",
        "garbage",
    ] {
        let tree = placing(text).map(|(_, path)| Tree::root_made(path)).unwrap_or_default();
        assert!(matches!(place_of(text, &tree), Place::Other(_)), "{text}: {:?}", place_of(text, &tree));
    }
    let shown = Container { id: "default.a name/with odd bytes".into(), runtime: "containerd", pod_uid: None };
    assert_eq!(shown.short(), "default.a_name_with_odd_bytes");
    assert_eq!(Container { id: ID.into(), runtime: "docker", pod_uid: None }.short(), &ID[..12]);
}

/// Issue 66: a user who owns a delegated subtree makes each runtime's layout there, or
/// where a runtime would (had it write access): never a container.
#[test]
fn a_layout_a_user_made_is_no_container() {
    let pod = format!(
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope"
    );
    let user = "/user.slice/user-1000.slice/user@1000.service";
    for path in [
        format!("{user}{pod}"),
        format!("{user}/system.slice/docker-{ID}.scope"),
        format!("{user}/machine.slice/libpod-{ID}.scope"),
    ] {
        let text = format!("0::{path}\n");
        // systemd hands `user@1000.service` and all below to uid 1000.
        let tree = Tree::default().with(Hierarchy::Unified, &path, Some((3, 1000)));
        assert!(matches!(place_of(&text, &tree), Place::Other(_)), "{path}: {:?}", place_of(&text, &tree));
    }
    // At the top, with a parent or the container's own directory not root's.
    for (from, uid) in [(1, 1000), (3, 1000), (4, 1000)] {
        let text = format!("0::{pod}\n");
        let tree = Tree::default().with(Hierarchy::Unified, &pod, Some((from, uid)));
        let place = place_of(&text, &tree);
        assert!(matches!(&place, Place::Other(why) if why.contains("uid 1000")), "depth {from}: {place:?}");
    }
    // A parent others may write to: anyone could have made the container's directory.
    let mut tree = Tree::root_made(&pod);
    tree.0.insert((Hierarchy::Unified, "/kubepods.slice".into()), Owner { uid: 0, mode: 0o777 });
    assert!(matches!(place_of(&format!("0::{pod}\n"), &tree), Place::Other(why) if why.contains("writable")));
    // Directories that are not there (a planted cgroup file) verify nothing either.
    assert!(
        matches!(place_of(&format!("0::{pod}\n"), &Tree::default()), Place::Other(why) if why.contains("cannot be checked"))
    );
}

/// On v1 the hierarchy that places processes is systemd's; the owners are read there,
/// not in another controller's, whatever the other lines say.
#[test]
fn owners_are_read_in_the_placing_hierarchy() {
    let docker = format!("/docker/{ID}");
    let text = format!("5:memory:{docker}\n1:name=systemd:{docker}\n");
    let systemd = Hierarchy::V1("name=systemd".into());
    let only_memory = Tree::default().with(Hierarchy::V1("memory".into()), &docker, None);
    assert!(matches!(place_of(&text, &only_memory), Place::Other(_)));
    assert_eq!(named(&text, &Tree::default().with(systemd, &docker, None)).1, "docker");
    // A container id on another controller's line alone names nothing.
    let text = format!("5:memory:{docker}\n1:name=systemd:/user.slice\n0::/user.slice\n");
    assert_eq!(place_of(&text, &Tree::default().with(Hierarchy::V1("memory".into()), &docker, None)), Place::Host);
}

/// The mounted tree: the unified hierarchy at the root of a pure v2 host, at `unified`
/// on a hybrid one; v1 hierarchies by their controllers' names.
#[test]
fn the_mounted_tree_finds_each_hierarchy_where_systemd_mounts_it() {
    let root = tempfile::tempdir().unwrap();
    let m = Mounted { root: root.path().to_path_buf() };
    std::fs::create_dir_all(root.path().join("unified/a")).unwrap();
    std::fs::create_dir_all(root.path().join("systemd/b")).unwrap();
    std::fs::create_dir_all(root.path().join("cpu,cpuacct/c")).unwrap();
    assert!(m.owner(&Hierarchy::Unified, "/a").is_ok());
    assert!(m.owner(&Hierarchy::V1("name=systemd".into()), "/b").is_ok());
    assert!(m.owner(&Hierarchy::V1("cpu,cpuacct".into()), "/c").is_ok());
    std::fs::write(root.path().join("cgroup.controllers"), "").unwrap();
    std::fs::create_dir_all(root.path().join("a")).unwrap();
    std::fs::write(root.path().join("a/file"), "").unwrap();
    assert!(m.owner(&Hierarchy::Unified, "/a").is_ok());
    assert!(m.owner(&Hierarchy::Unified, "/a/file").is_err(), "a file is no cgroup");
    std::os::unix::fs::symlink(root.path().join("a"), root.path().join("link")).unwrap();
    assert!(m.owner(&Hierarchy::Unified, "/link").is_err(), "a link is not followed");
}

/// Issue 67: a pod lives while the kubelet's cgroup for it does, whichever driver and QoS
/// level; where the kubelet's tree cannot be seen at all, nothing is known.
#[test]
fn a_pod_lives_while_its_cgroup_does() {
    let uid = "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d";
    let under = uid.replace('-', "_");
    for path in [
        format!("/kubepods.slice/kubepods-pod{under}.slice"),
        format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{under}.slice"),
        format!("/kubepods/burstable/pod{uid}"),
        format!("/kubepods/pod{uid}"),
    ] {
        assert_eq!(pod_alive(&Tree::root_made(&path), uid), Some(true), "{path}");
        let v1 = Tree::default().with(Hierarchy::V1("name=systemd".into()), &path, None);
        assert_eq!(pod_alive(&v1, uid), Some(true), "v1: {path}");
        let other = Tree::root_made(&path.replace("1a2b", "ffff"));
        assert_eq!(pod_alive(&other, uid), Some(false), "another pod's: {path}");
    }
    assert_eq!(pod_alive(&Tree::root_made("/system.slice/sshd.service"), uid), None, "no kubelet tree seen");
    let handed = Tree::default().with(Hierarchy::Unified, &format!("/kubepods/pod{uid}"), Some((2, 1000)));
    assert_eq!(pod_alive(&handed, uid), Some(false), "a directory a user owns is no pod's");
}

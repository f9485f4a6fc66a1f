use super::*;

const ID: &str = "3f4e1c2b5a6978d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5968778695a4b3c2d1e";
const POD: &str = "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d";

fn named(path: &str) -> (String, &'static str, Option<String>) {
    match place_of(path) {
        Place::Container(c) => (c.id, c.runtime, c.pod_uid),
        other => panic!("no container in {path}: {other:?}"),
    }
}

/// Each runtime's layout, from a real path (the module's list).
#[test]
fn recognises_the_runtimes_on_cgroup_v1_and_v2() {
    let pod = Some(POD.to_string());
    let hex = |runtime, pod: Option<String>| (ID.to_string(), runtime, pod);
    let cases = [
        (format!("0::/system.slice/docker-{ID}.scope"), hex("docker", None)),
        (format!("12:pids:/docker/{ID}\n11:cpu:/docker/{ID}"), hex("docker", None)),
        (format!("0::/machine.slice/libpod-{ID}.scope"), hex("podman", None)),
        (format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"), hex("podman", None)),
        (
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{ID}.scope"
            ),
            hex("containerd", pod.clone()),
        ),
        (format!("0::/kubepods/burstable/pod{POD}/{ID}"), hex("kubepods", pod.clone())),
        (format!("11:memory:/kubepods/besteffort/pod{POD}/{ID}"), hex("kubepods", pod.clone())),
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
        assert_eq!(named(&text), expected, "{text}");
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
        assert_eq!(place_of(text), Place::Host, "{text}");
    }
}

/// A runtime's path npud cannot take an id from is a container all the same: refused,
/// never the host.
#[test]
fn a_container_npud_cannot_name_is_not_the_host() {
    for text in [
        "0::/docker/abc",
        "0::/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/sandbox.scope",
        "0::/system.slice/docker-short.scope",
        "0::/a/b/c",
        "garbage",
    ] {
        assert!(matches!(place_of(text), Place::Unnamed(_)), "{text}: {:?}", place_of(text));
    }
    let shown = Container { id: "default.a name/with odd bytes".into(), runtime: "containerd", pod_uid: None };
    assert_eq!(shown.short(), "default.a_name_with_odd_bytes");
    assert_eq!(Container { id: ID.into(), runtime: "docker", pod_uid: None }.short(), &ID[..12]);
}

//! Issue 7: identity and isolation. Two containers that both run as uid 0 are two
//! tenants (container ids come from the peer's cgroup, read through the inspector's
//! proc root); two uids are two tenants; neither can see, use, destroy or wait on the
//! other's streams and events, nor receive its reports.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::host::{FakeHost, Host};
use npud_tests::{Daemon, Peer, bin};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

const CONTAINER_A: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const CONTAINER_B: &str = "b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1";

fn plant_cgroup(host: &FakeHost, pid: u32, line: &str) {
    host.plant(pid, line);
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

fn error_of(v: &Value) -> &str {
    v["error"].as_str().unwrap_or_else(|| panic!("expected an error, got {v}"))
}

/// Everything `intruder` tries on `owner`'s resources fails exactly as for a missing one.
fn assert_isolated(owner: &mut Peer, intruder: &mut Peer) {
    let mine = owner.ask("create 2");
    let stream = mine["handles"][0].as_u64().unwrap();
    let event = owner.ask("event-create")["handle"].as_u64().unwrap();
    assert_eq!(owner.ask(&format!("event-record {event} {stream}"))["ok"], true);
    owner.ask(&format!("subscribe 1 {stream}"));
    let listed = intruder.ask("list");
    let theirs: Vec<u64> = listed["handles"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    let owned: Vec<u64> = mine["handles"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert!(owned.iter().all(|h| !theirs.contains(h)), "the owner's streams are invisible in list: {listed}");
    let missing = stream ^ 0x0000_0fff_0000_0000;
    for cmd in ["get", "destroy", "sync", "query"] {
        let foreign = intruder.ask(&format!("{cmd} {stream}"));
        assert_eq!(error_of(&foreign), "NotFound", "{cmd} on a foreign stream: {foreign}");
        let absent = intruder.ask(&format!("{cmd} {missing}"));
        assert_eq!(foreign["reason"], absent["reason"], "{cmd}: foreign looks like missing");
    }
    let own = intruder.ask("create 1")["handles"][0].as_u64().unwrap();
    assert_eq!(error_of(&intruder.ask(&format!("wait-event {own} {event}"))), "NotFound");
    assert_eq!(error_of(&intruder.ask(&format!("event-record {event} {own}"))), "NotFound");
    assert_eq!(error_of(&intruder.ask(&format!("event-sync {event}"))), "NotFound");
    // The owner's callbacks and exceptions never reach the intruder's report stream.
    for _ in 0..5 {
        owner.ask(&format!("launch {stream}"));
    }
    let seen = intruder.ask("reports 300");
    assert!(seen["streams"].as_array().unwrap().iter().all(|s| s.as_u64() != Some(stream)), "{seen}");
    let delivered = owner.ask("reports 300");
    let about_stream = delivered["streams"].as_array().unwrap().iter().filter(|s| s.as_u64() == Some(stream)).count();
    assert_eq!(about_stream, 5, "{delivered}");
    // Still intact for its owner.
    assert_eq!(owner.ask(&format!("sync {stream}"))["ok"], true);
}

#[test]
fn two_containers_running_as_root_are_two_isolated_tenants() {
    let fake = FakeHost::new();
    let config =
        format!("{}[[tenants]]\nname = \"team-a\"\ncontainers = [\"{}\"]\n", fake.config(), &CONTAINER_A[..16]);
    let d = Daemon::builder().config(&config).start();
    let socket = d.socket.to_str().unwrap().to_string();
    let mut a = Peer::spawn(&socket, None);
    plant_cgroup(&fake, a.pid, &format!("0::/system.slice/docker-{CONTAINER_A}.scope\n"));
    let mut b = Peer::spawn(&socket, None);
    plant_cgroup(
        &fake,
        b.pid,
        &format!(
            "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{CONTAINER_B}.scope\n"
        ),
    );
    assert_eq!(a.ask("tenant")["tenant"], "team-a");
    // A pod's containers are one tenant, named by the pod.
    assert_eq!(b.ask("tenant")["tenant"], "pod-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d");
    assert_isolated(&mut a, &mut b);
    assert_isolated(&mut b, &mut a);
    // Root inside a container is not an admin of the host's daemon.
    let denied = b.ask("set-quota team-a 1");
    assert_eq!(error_of(&denied), "PermissionDenied", "{denied}");
    // The host's root still is (a process whose cgroup says it is on the host)…
    let mut host = Peer::spawn(&socket, None);
    plant_cgroup(&fake, host.pid, "0::/user.slice/user-0.slice/session-1.scope\n");
    let allowed = host.ask("set-quota team-a 9");
    assert!(allowed.get("error").is_none(), "{allowed}");
    // …and a process whose cgroup cannot be read gets no identity at all, never host root:
    // npuctl's pid has no entry in this test's /proc.
    let out = d.npuctl(&["quota", "set", "team-a", "--max-streams", "9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cgroup could not be read"), "{out:?}");
}

/// Issue 32: a pod's processes live in their own pid namespace. SO_PEERCRED reports the
/// peer's pid in npud's namespace, so npud must run in the host's (the DaemonSet's
/// `hostPID: true`) to read the peer's cgroup; then a client in its own pid namespace gets
/// its container's tenant, as it would on a node.
#[test]
fn a_client_in_its_own_pid_namespace_gets_its_containers_tenant() {
    if !Command::new("unshare").args(["--pid", "--fork", "true"]).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: this machine cannot make pid namespaces (unshare --pid)");
        return;
    }
    let fake = FakeHost::new();
    let config = fake.config();
    let d = Daemon::builder().config(&config).start();
    let socket = d.socket.to_str().unwrap().to_string();
    let mut pod = Peer::spawn_under(&socket, None, &["unshare", "--pid", "--fork"]);
    plant_cgroup(
        &fake,
        pod.pid,
        &format!(
            "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-{CONTAINER_B}.scope\n"
        ),
    );
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap();
    assert_ne!(ns(&pod.pid.to_string()), ns("self"), "the client runs in a pid namespace of its own");
    assert_eq!(pod.ask("tenant")["tenant"], "pod-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d");
    let deployed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/kubernetes/base/daemonset.yaml"));
    assert!(
        deployed.unwrap().lines().any(|l| l.trim() == "hostPID: true"),
        "the shipped DaemonSet runs in the host's pid namespace"
    );
}

#[test]
fn two_uids_are_two_isolated_tenants() {
    if !is_root() {
        eprintln!("skipped: running a client under another uid needs root");
        return;
    }
    let d = Daemon::builder().config("socket_mode = \"0666\"").start();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = d.socket.to_str().unwrap().to_string();
    let mut root = Peer::spawn(&socket, None);
    let mut nobody = Peer::spawn(&socket, Some(65534));
    assert_eq!(root.ask("tenant")["tenant"], "root");
    assert_eq!(nobody.ask("tenant")["tenant"], "uid-65534");
    assert_isolated(&mut root, &mut nobody);
    assert_isolated(&mut nobody, &mut root);
    let denied = nobody.ask("set-quota root 1");
    assert_eq!(error_of(&denied), "PermissionDenied", "{denied}");
}

#[test]
fn the_socket_has_restrictive_modes_and_refuses_symlinks_and_foreign_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let socket_dir = dir.path().join("run/npud");
    let socket = socket_dir.join("npud.sock");
    let mut child = npud_tests::Reaped::spawn(Command::new(bin("npud")).arg("--socket").arg(&socket));
    assert!(npud_tests::eventually(std::time::Duration::from_secs(10), || socket.exists()));
    assert_eq!(std::fs::metadata(&socket_dir).unwrap().permissions().mode() & 0o777, 0o750);
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o660);
    child.kill().unwrap();
    child.wait().unwrap();

    // A symlink where the socket should be is never followed.
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
    let out = Command::new(bin("npud")).arg("--socket").arg(&link).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("symlink"), "{}", String::from_utf8_lossy(&out.stderr));

    // A socket owned by someone else is never replaced.
    if is_root() {
        let foreign = dir.path().join("foreign.sock");
        drop(std::os::unix::net::UnixListener::bind(&foreign).unwrap());
        std::os::unix::fs::chown(&foreign, Some(65534), None).unwrap();
        let out = Command::new(bin("npud")).arg("--socket").arg(&foreign).output().unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("owned by uid 65534"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Issues 58 and 66: identity fails closed. Root in a container that `ctr run` made
/// (`/default/job1`, an id that is a name, its directories root's) is that container's
/// tenant and no admin. Root in a runtime's cgroup npud cannot take an id from, or under a
/// host cgroup in a pid namespace other than the host's, is proven neither a container nor
/// the host: uid 0's own tenant (`uid-0`, not `root`), never an admin. An unprivileged uid
/// there (a rootless container) keeps its uid's tenant.
#[test]
fn root_in_a_container_npud_cannot_name_is_its_uids_tenant_and_never_the_host() {
    if !is_root() {
        eprintln!("skipped: needs root to run peers as another uid");
        return;
    }
    let fake = FakeHost::new();
    let config = format!("socket_mode = \"0666\"\n{}", fake.config());
    let d = Daemon::builder().config(&config).start();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = d.socket.to_str().unwrap().to_string();
    let mut named = Peer::spawn(&socket, None);
    fake.plant(named.pid, "0::/default/job1\n");
    assert_eq!(named.ask("tenant")["tenant"], "container-default.job1");
    assert_eq!(error_of(&named.ask("set-quota container-default.job1 1")), "PermissionDenied", "never an admin");
    let sandbox = "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d.slice/sandbox.scope\n";
    let mut unnamed = Peer::spawn(&socket, None);
    fake.plant(unnamed.pid, sandbox);
    assert_eq!(unnamed.ask("tenant")["tenant"], "uid-0");
    assert_eq!(error_of(&unnamed.ask("set-quota uid-0 1")), "PermissionDenied", "never an admin");
    // A host cgroup in a pid namespace of its own (the link as the kernel would show it).
    let host_cgroup = "0::/user.slice/user-0.slice/session-1.scope\n";
    let mut root_elsewhere = Peer::spawn(&socket, None);
    fake.plant(root_elsewhere.pid, host_cgroup);
    fake.set_pid_namespace_depth(root_elsewhere.pid, 1);
    assert_eq!(root_elsewhere.ask("tenant")["tenant"], "uid-0");
    assert_eq!(error_of(&root_elsewhere.ask("set-quota uid-0 1")), "PermissionDenied");
    let mut rootless = Peer::spawn(&socket, Some(65534));
    fake.plant(rootless.pid, host_cgroup);
    fake.set_pid_namespace_depth(rootless.pid, 1);
    assert_eq!(rootless.ask("tenant")["tenant"], "uid-65534", "a rootless container keeps its uid's tenant");
    let mut host = Peer::spawn(&socket, None);
    fake.plant(host.pid, host_cgroup);
    assert_eq!(host.ask("tenant")["tenant"], "root");
    assert_eq!(host.ask("set-quota uid-0 5")["ok"], true, "the proven host root is the admin\n{}", d.log());
}

/// Issue 56: a pod's processes run as any uid (`runAsUser`), or as root of a user
/// namespace of their own (`hostUsers: false`, rootless runtimes). Through the socket's
/// device-plugin modes (0666 in a 0755 directory) they connect, and the kernel's
/// credentials and their cgroup make them their pod's tenant, not a uid's.
#[test]
fn a_pods_process_as_another_uid_or_in_a_user_namespace_is_its_pods_tenant() {
    let userns = ["--reuid=1000", "--regid=1000", "--clear-groups", "unshare", "--user", "--map-root-user", "true"];
    if !is_root() || !Command::new("setpriv").args(userns).status().is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: needs root, setpriv(1) and user namespaces");
        return;
    }
    let fake = FakeHost::new();
    let dp = tempfile::tempdir().unwrap();
    let config = fake.config();
    let d = Daemon::builder().config(&config).args(&["--device-plugin-dir", dp.path().to_str().unwrap()]).start();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777, 0o666, "every uid may connect");
    let socket = d.socket.to_str().unwrap().to_string();
    let pod = |uid: &str| format!("0::/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{CONTAINER_A}.scope\n");
    let mut as_1000 = Peer::spawn(&socket, Some(1000));
    plant_cgroup(&fake, as_1000.pid, &pod("0a1b2c3d_4e5f_6a7b_8c9d_0e1f2a3b4c5d"));
    assert_eq!(as_1000.ask("tenant")["tenant"], "pod-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d");
    let wrapper = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "unshare", "--user", "--map-root-user"];
    let mut in_userns = Peer::spawn_under(&socket, None, &wrapper);
    plant_cgroup(&fake, in_userns.pid, &pod("9f8e7d6c_5b4a_3928_1706_f5e4d3c2b1a0"));
    assert_eq!(in_userns.ask("tenant")["tenant"], "pod-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0");
}

/// Issue 58 item 7: `socket_group` reaches the socket's directory. A member of the group
/// (here a process whose gid is the group's, under another uid) needs search permission
/// on npud's own 0750 directory as well as write permission on the 0660 socket; before, the
/// directory stayed root:root and it got EACCES.
#[test]
fn a_member_of_socket_group_can_connect_through_npuds_own_directory() {
    if !is_root() {
        eprintln!("skipped: running a client under another uid needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket_dir = dir.path().join("npud");
    let socket = socket_dir.join("npud.sock");
    // The group of nobody, by number (no /etc/group entry is needed for a number).
    let d = Daemon::builder().socket(&socket).config("socket_group = \"65534\"").start();
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&socket_dir).unwrap();
    assert_eq!((meta.gid(), meta.permissions().mode() & 0o777), (65534, 0o750), "the directory is the group's");
    assert_eq!(std::fs::metadata(&socket).unwrap().gid(), 65534, "and so is the socket");
    let mut member = Peer::spawn(socket.to_str().unwrap(), Some(65534));
    assert_eq!(member.ask("tenant")["tenant"], "uid-65534", "the group's member connects\n{}", d.log());
}

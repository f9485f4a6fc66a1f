//! Issue 66: identity from who made the cgroup, not from its name. A hostile uid 1000 owns
//! a delegated subtree (systemd's `user@1000.service`, handed over with `chown`) and makes
//! every runtime's layout there; it is `uid-1000` each time, held to that uid's quota and
//! connections. The layouts the kubelet and the runtimes make (root's, at their places)
//! are still their pod's or container's tenant. A uid-0 peer is root only when its pid
//! namespace is proven the host's. Where a CRI socket is configured, the runtime's pod
//! uid must agree with the cgroup's.
//!
//! Each case runs on a tree built as root (`FakeHost`), and again on the machine's own
//! cgroups (v2, and v1's `name=systemd`) where it may make them: only that run skips,
//! loudly.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::host::{FakeHost, Host, RealHost};
use npud_tests::{Daemon, Peer, eventually};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The hostile user.
const USER: u32 = 1000;

/// A container id and a pod uid no other test (nor another run on the machine) uses.
fn ids() -> (String, String) {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let seed = format!("{:08x}{:04x}", std::process::id(), n);
    let id = format!("{seed}{}", "c".repeat(64 - seed.len()));
    let pod = format!("{}-{}-4{}-8{}-{}", &seed[..8], &seed[8..12], &seed[9..12], &seed[9..12], "d".repeat(12));
    (id, pod)
}

/// The layouts the kubelet and the runtimes make, each with the tenant npud names it.
fn verified_layouts() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (driver_systemd, qos) in [(true, Some("burstable")), (true, Some("besteffort")), (true, None)]
        .into_iter()
        .chain([(false, Some("burstable")), (false, Some("besteffort")), (false, None)])
    {
        let (id, pod) = ids();
        let u = pod.replace('-', "_");
        let path = match (driver_systemd, qos) {
            (true, Some(q)) => {
                format!("/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{u}.slice/cri-containerd-{id}.scope")
            }
            (true, None) => format!("/kubepods.slice/kubepods-pod{u}.slice/crio-{id}.scope"),
            (false, Some(q)) => format!("/kubepods/{q}/pod{pod}/{id}"),
            (false, None) => format!("/kubepods/pod{pod}/{id}"),
        };
        out.push((path, format!("pod-{pod}")));
    }
    for layout in ["/system.slice/docker-{}.scope", "/docker/{}", "/machine.slice/libpod-{}.scope"] {
        let (id, _) = ids();
        out.push((layout.replace("{}", &id), format!("container-{}", &id[..12])));
    }
    out
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// npud pointed at `host`, its socket open to every uid; `extra` is more of its config.
fn start(host: &dyn Host, extra: &str) -> Daemon {
    let config = format!("socket_mode = \"0666\"\n{}[default_quota]\nmax_streams = 256\n{extra}", host.config());
    let d = Daemon::builder().config(&config).start();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn peer(d: &Daemon, uid: Option<u32>) -> Peer {
    Peer::spawn(d.socket.to_str().unwrap(), uid)
}

fn error_of(v: &Value) -> String {
    v["error"].as_str().map(str::to_string).unwrap_or_else(|| panic!("expected an error, got {v}"))
}

/// The kubelet's and the runtimes' own layouts: each its pod's or container's tenant.
fn the_runtimes_layouts_are_their_tenants(host: &dyn Host) {
    let d = start(host, "");
    for (path, tenant) in verified_layouts() {
        let mut p = peer(&d, None);
        host.place(p.pid, &path, None);
        assert_eq!(p.ask("tenant")["tenant"], tenant.as_str(), "{path}\n{}", d.log());
    }
}

/// Each runtime's layout made in uid 1000's own subtree: `uid-1000`, never a pod or
/// container; it sees nothing of the pod it named, and can touch none of it.
fn layouts_a_user_made_are_its_uids_tenant(host: &dyn Host) {
    let d = start(host, "");
    let (victim_id, victim_pod) = ids();
    let u = victim_pod.replace('-', "_");
    let pod_path = format!(
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{victim_id}.scope"
    );
    let mut victim = peer(&d, None);
    host.place(victim.pid, &pod_path, None);
    assert_eq!(victim.ask("tenant")["tenant"], format!("pod-{victim_pod}").as_str(), "{}", d.log());
    let held: Vec<u64> =
        victim.ask("create 4")["handles"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    let (id, _) = ids();
    let (own, depth) = host.delegated(USER);
    for path in [
        format!("{own}{pod_path}"),
        format!("{own}/system.slice/docker-{id}.scope"),
        format!("{own}/machine.slice/libpod-{id}.scope"),
    ] {
        let mut hostile = peer(&d, Some(USER));
        host.place(hostile.pid, &path, Some((depth, USER)));
        assert_eq!(hostile.ask("tenant")["tenant"], "uid-1000", "{path}\n{}", d.log());
        assert_eq!(hostile.ask("list")["handles"], serde_json::json!([]), "none of the pod's streams");
        assert_eq!(error_of(&hostile.ask(&format!("destroy {}", held[0]))), "NotFound");
    }
    // The kubelet's own layout, at its place, but from the pod's directory down handed to
    // uid 1000 (as `Delegate=` would): not root's making, so no pod.
    let (id, pod) = ids();
    let mut handed = peer(&d, Some(USER));
    host.place(handed.pid, &format!("/kubepods/besteffort/pod{pod}/{id}"), Some((3, USER)));
    assert_eq!(handed.ask("tenant")["tenant"], "uid-1000", "{}", d.log());
    assert_eq!(victim.ask("list")["handles"].as_array().unwrap().len(), 4, "the pod's streams are intact");
}

/// Five container ids of its own making: one tenant, held to its own quota of 256.
fn five_self_made_containers_share_one_quota(host: &dyn Host) {
    let d = start(host, "");
    let mut granted = 0;
    let mut peers = Vec::new();
    for _ in 0..5 {
        let (id, _) = ids();
        let mut p = peer(&d, Some(USER));
        let (own, depth) = host.delegated(USER);
        host.place(p.pid, &format!("{own}/system.slice/docker-{id}.scope"), Some((depth, USER)));
        let answer = p.ask("create-on 0 100 0");
        if answer["handles"].is_array() {
            granted += 100;
        }
        peers.push(p);
    }
    assert_eq!(granted, 200, "two asks of 100 fit uid 1000's 256, the third does not\n{}", d.log());
    // What is left of the one quota, 56, and not a stream more, whichever container asks.
    let (id, _) = ids();
    let mut sixth = peer(&d, Some(USER));
    let (own, depth) = host.delegated(USER);
    host.place(sixth.pid, &format!("{own}/system.slice/docker-{id}.scope"), Some((depth, USER)));
    assert!(sixth.ask("create-on 0 56 0")["handles"].is_array(), "{}", d.log());
    assert!(peers[0].ask("create-on 0 1 0")["error"].is_string(), "256 in all");
}

#[test]
fn the_runtimes_layouts_are_their_pods_and_containers_tenants() {
    the_runtimes_layouts_are_their_tenants(&FakeHost::new());
    on_real_cgroups("the runtimes' layouts", the_runtimes_layouts_are_their_tenants);
}

#[test]
fn layouts_a_user_made_in_its_own_subtree_are_its_uids_tenant() {
    if !is_root() {
        eprintln!("SKIPPED LOUDLY: running a peer as uid 1000 needs root");
        return;
    }
    layouts_a_user_made_are_its_uids_tenant(&FakeHost::new());
    on_real_cgroups("user-made layouts", layouts_a_user_made_are_its_uids_tenant);
}

#[test]
fn five_self_made_container_ids_get_one_uids_quota() {
    if !is_root() {
        eprintln!("SKIPPED LOUDLY: running a peer as uid 1000 needs root");
        return;
    }
    five_self_made_containers_share_one_quota(&FakeHost::new());
    on_real_cgroups("five self-made containers", five_self_made_containers_share_one_quota);
}

/// Runs `case` on the machine's v2 cgroups and on v1's `name=systemd`, each where this
/// machine lets a test make cgroups; says loudly which it skipped.
fn on_real_cgroups(what: &str, case: fn(&dyn Host)) {
    for (name, host) in [("cgroup v2", RealHost::v2()), ("cgroup v1 name=systemd", RealHost::v1_systemd())] {
        match host {
            Ok(host) => case(&host),
            Err(why) => eprintln!("SKIPPED LOUDLY: {what} on this machine's {name}: {why}"),
        }
    }
}

/// A client holding `count` connections to npud (HTTP/2 preface and SETTINGS sent), as
/// uid 1000; it connects on its first line, and answers each later one with how many
/// npud has not closed.
struct Holder(npud_tests::Reaped, std::io::BufReader<std::process::ChildStdout>);

const HOLD: &str = r#"
import socket, sys
sys.stdin.readline()
socks = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
    except OSError:
        pass  # npud closed it at once: over the limit
    socks.append(s)
print("opened", flush=True)
for line in sys.stdin:
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            alive += 1 if s.recv(65536) != b"" else 0
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    socks = [s for s in socks if s.fileno() >= 0]
    print(alive, flush=True)
"#;

impl Holder {
    fn start(d: &Daemon, count: u32, host: &FakeHost) -> Holder {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("python3");
        cmd.args(["-c", HOLD, d.socket.to_str().unwrap(), &count.to_string()])
            .uid(USER)
            .gid(USER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        // The holder waits on stdin before it connects: its cgroup is planted first.
        let mut child = npud_tests::Reaped::spawn(&mut cmd);
        let (id, _) = ids();
        let (own, depth) = host.delegated(USER);
        host.place(child.id(), &format!("{own}/system.slice/docker-{id}.scope"), Some((depth, USER)));
        let stdout = child.stdout.take().unwrap();
        let mut holder = Holder(child, std::io::BufReader::new(stdout));
        use std::io::Write;
        writeln!(holder.0.stdin.as_mut().unwrap(), "connect").unwrap();
        let mut line = String::new();
        holder.1.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "opened", "the holder could not open its connections (its stderr is the test's)");
        holder
    }

    fn alive(&mut self) -> u32 {
        use std::io::{BufRead, Write};
        writeln!(self.0.stdin.as_mut().unwrap(), "count").unwrap();
        let mut line = String::new();
        self.1.read_line(&mut line).unwrap();
        line.trim().parse().unwrap()
    }
}

/// 80 connections from uid 1000 through five self-made containers: its own limit of 64
/// applies to all of them, and a root pod's process still connects (with five tenants'
/// worth, 80, the node's total would have been taken).
#[test]
fn eighty_connections_through_self_made_cgroups_leave_room_for_a_pod() {
    if !is_root() {
        eprintln!("SKIPPED LOUDLY: running a client as uid 1000 needs root");
        return;
    }
    let host = FakeHost::new();
    let d = start(&host, "[limits]\nmax_connections_per_tenant = 64\nmax_connections = 80\n");
    let mut holders: Vec<Holder> = (0..5).map(|_| Holder::start(&d, 16, &host)).collect();
    assert!(
        eventually(Duration::from_secs(20), || holders.iter_mut().map(Holder::alive).sum::<u32>() == 64),
        "uid 1000 keeps 64 of its 80\n{}",
        d.log()
    );
    let (id, pod) = ids();
    let mut pod_process = peer(&d, None);
    host.place(pod_process.pid, &format!("/kubepods/besteffort/pod{pod}/{id}"), None);
    assert_eq!(pod_process.ask("tenant")["tenant"], format!("pod-{pod}").as_str(), "{}", d.log());
    assert_eq!(holders.iter_mut().map(Holder::alive).sum::<u32>(), 64);
}

/// A uid-0 peer whose pid namespace npud cannot read (its status gone, as under hidepid),
/// or that runs in a pid namespace of its own, is `uid-0` and no admin; the proven host
/// root is `root` and the admin.
#[test]
fn root_is_the_admin_only_where_its_pid_namespace_is_proven() {
    let host = FakeHost::new();
    let d = start(&host, "");
    let host_cgroup = "0::/user.slice/user-0.slice/session-1.scope\n";
    let mut unread = peer(&d, None);
    host.plant(unread.pid, host_cgroup);
    std::fs::remove_file(host.proc().join(unread.pid.to_string()).join("status")).unwrap();
    assert_eq!(unread.ask("tenant")["tenant"], "uid-0");
    assert_eq!(error_of(&unread.ask("set-quota uid-0 5")), "PermissionDenied");
    let mut nested = peer(&d, None);
    host.plant(nested.pid, host_cgroup);
    host.set_pid_namespace_depth(nested.pid, 1);
    assert_eq!(nested.ask("tenant")["tenant"], "uid-0");
    assert_eq!(error_of(&nested.ask("set-quota uid-0 5")), "PermissionDenied");
    let mut proven = peer(&d, None);
    host.plant(proven.pid, host_cgroup);
    assert_eq!(proven.ask("tenant")["tenant"], "root");
    assert_eq!(proven.ask("set-quota uid-0 5")["ok"], true, "{}", d.log());
}

/// The capabilities the shipped unit gives npud, as `setpriv` arguments.
fn unit_capabilities() -> String {
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/systemd/npud.service")).unwrap();
    let line = unit.lines().find_map(|l| l.strip_prefix("CapabilityBoundingSet=")).expect("the unit bounds them");
    let caps: Vec<String> =
        line.split_whitespace().map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase())).collect();
    format!("-all,{}", caps.join(","))
}

/// npud with exactly the shipped unit's capabilities, on the machine's own /proc: it
/// proves the host root (the admin) without CAP_SYS_PTRACE, and a root process in a pid
/// namespace of its own (a container with no cgroup of its own, `--cgroups=disabled`) is
/// `uid-0`, no admin, even under a host cgroup.
#[test]
fn with_the_units_capabilities_root_in_its_own_pid_namespace_is_no_admin() {
    let unshared = Command::new("unshare").args(["--pid", "--fork", "true"]).status().is_ok_and(|s| s.success());
    if !is_root() || !unshared {
        eprintln!("SKIPPED LOUDLY: needs root and pid namespaces (unshare --pid)");
        return;
    }
    let caps = unit_capabilities();
    let d = Daemon::builder()
        .config("socket_mode = \"0666\"\n")
        .wrapped(&["setpriv", &format!("--bounding-set={caps}"), "--inh-caps=-all"])
        .start();
    let npud_caps = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let bounding = npud_caps.lines().find(|l| l.starts_with("CapBnd:")).unwrap().to_string();
    assert_eq!(bounding, "CapBnd:\t0000000000000003", "npud runs with CAP_CHOWN and CAP_DAC_OVERRIDE alone");
    let out = d.npuctl(&["quota", "set", "uid-0", "--max-streams", "5"]);
    assert!(out.status.success(), "the host root is proven and the admin: {out:?}\n{}", d.log());
    let mut contained = Peer::spawn_under(d.socket.to_str().unwrap(), None, &["unshare", "--pid", "--fork"]);
    assert_eq!(contained.ask("tenant")["tenant"], "uid-0", "{}", d.log());
    assert_eq!(error_of(&contained.ask("set-quota uid-0 9")), "PermissionDenied");
}

/// With a CRI socket configured, a pod container is named by its pod only when the
/// runtime's `io.kubernetes.pod.uid` label agrees; where the runtime names another pod, or
/// knows no such container, the peer is refused, with its cgroup named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_container_runtime_must_agree_with_the_cgroup_about_the_pod() {
    let host = FakeHost::new();
    let cri = host.dir.path().join("cri.sock");
    let runtime = npud_tests::kubelet::Runtime::serve(&cri);
    let d = start(&host, &format!("[kubernetes]\ncri_socket = {:?}\n", cri.to_str().unwrap()));
    let path = |id: &str, pod: &str| format!("/kubepods/besteffort/pod{pod}/{id}");
    let (agreed, pod) = ids();
    runtime.run(&agreed, &pod);
    let (moved, _) = ids();
    let (other_id, other_pod) = ids();
    runtime.run(&moved, &other_pod);
    let _ = other_id;
    let (unknown, _) = ids();
    tokio::task::block_in_place(|| {
        let mut p = peer(&d, None);
        host.place(p.pid, &path(&agreed, &pod), None);
        assert_eq!(p.ask("tenant")["tenant"], format!("pod-{pod}").as_str(), "{}", d.log());
        for (id, says) in [(&moved, format!("belongs to pod {other_pod}")), (&unknown, "knows no such".to_string())] {
            let mut p = peer(&d, None);
            host.place(p.pid, &path(id, &pod), None);
            let refused = p.ask("tenant");
            assert_eq!(error_of(&refused), "Unauthenticated", "{refused}");
            let message = refused["message"].as_str().unwrap();
            assert!(message.contains(&path(id, &pod)) && message.contains(&says), "names its cgroup: {message}");
        }
    });
    // A runtime that does not answer (restarting, say) strips no pod of its identity: the
    // cgroup's word stands.
    let silent = start(&host, &format!("[kubernetes]\ncri_socket = {:?}\n", host.dir.path().join("gone.sock")));
    tokio::task::block_in_place(|| {
        let mut p = peer(&silent, None);
        host.place(p.pid, &path(&agreed, &pod), None);
        assert_eq!(p.ask("tenant")["tenant"], format!("pod-{pod}").as_str(), "{}", silent.log());
        assert!(silent.log().contains("did not answer"), "and says so:\n{}", silent.log());
    });
}

/// Issue 76: `kubectl exec` into npud's pod runs a process in npud's own container, in
/// npud's own cgroup: it is npud's operator (`root`, the admin) as host root is. A process
/// in another container of that pod, or in npud's cgroup as another uid, gains nothing.
#[test]
fn a_process_in_npuds_own_container_is_its_admin_and_no_other_is() {
    let host = FakeHost::new();
    let d = start(&host, "");
    let (id, pod) = ids();
    let u = pod.replace('-', "_");
    let slice = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice");
    let npuds = format!("0::{slice}/cri-containerd-{id}.scope\n");
    host.plant(d.pid(), &npuds);
    let mut exec = peer(&d, None);
    host.plant(exec.pid, &npuds);
    assert_eq!(exec.ask("tenant")["tenant"], "root", "{}", d.log());
    assert_eq!(exec.ask("set-quota uid-0 5")["ok"], true, "{}", d.log());
    let (sidecar, _) = ids();
    let mut side = peer(&d, None);
    host.plant(side.pid, &format!("0::{slice}/cri-containerd-{sidecar}.scope\n"));
    assert_eq!(side.ask("tenant")["tenant"], format!("pod-{pod}"));
    assert_eq!(error_of(&side.ask("set-quota uid-0 5")), "PermissionDenied");
    let mut user = peer(&d, Some(USER));
    host.plant(user.pid, &npuds);
    assert_eq!(user.ask("tenant")["tenant"], format!("pod-{pod}"), "npud's cgroup, not npud's uid");
    assert_eq!(error_of(&user.ask("set-quota uid-0 5")), "PermissionDenied");
}

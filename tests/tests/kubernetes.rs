//! Issue 15: npud as the node's device plugin for streams, against a fake kubelet written
//! here from the published API (the Registration service on a temporary kubelet.sock):
//! registration, units per device, health, Allocate, the allocation as a quota, a token
//! refused to another tenant, the allocation gone with its pod (the pod-resources API on a
//! temporary socket), and registering again after a kubelet restart.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::deviceplugin as dp;
use npud_tests::kubelet::{HOST_CGROUP, Kubelet, Pods, plant, plugin};
use npud_tests::{Client, Daemon, SessionOptions, StreamOptions, Target, eventually_async};
use std::path::Path;
use std::time::Duration;
use tokio_stream::StreamExt;

async fn next_devices(watch: &mut tonic::Streaming<dp::ListAndWatchResponse>) -> Vec<dp::Device> {
    tokio::time::timeout(Duration::from_secs(15), watch.next())
        .await
        .expect("an update")
        .expect("open")
        .expect("ok")
        .devices
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_sees_streams_and_a_pods_allocation_becomes_its_quota() {
    let dir = tempfile::tempdir().unwrap();
    let dp_dir = dir.path().join("dp");
    std::fs::create_dir(&dp_dir).unwrap();
    let mut kubelet = Kubelet::start(&dp_dir);
    let pods = Pods::serve(&dir.path().join("pod-resources.sock"));
    let config = format!(
        "[kubernetes]\nstream_unit = 8\npod_resources_socket = {:?}\nallocation_grace = \"2s\"\n",
        dir.path().join("pod-resources.sock").to_str().unwrap()
    );
    // Its own state directory: allocations are written there (never under /var/lib/npud).
    let state = dir.path().join("state");
    let d = Daemon::builder()
        .tcp()
        .state_dir(&state)
        .args(&["--device-plugin-dir", dp_dir.to_str().unwrap()])
        .config(&config)
        .start();
    let reg = tokio::time::timeout(Duration::from_secs(10), kubelet.registered.recv()).await;
    let reg = reg.ok().flatten().unwrap_or_else(|| panic!("npud registered within 10 s:\n{}", d.log()));
    assert_eq!(
        (reg.version.as_str(), reg.endpoint.as_str(), reg.resource_name.as_str()),
        ("v1beta1", "npud.sock", "npud.io/streams")
    );

    // ListAndWatch: floor(capacity / 8) healthy units of device 0.
    let mut p = plugin(&dp_dir).await;
    assert_eq!(
        p.get_device_plugin_options(dp::Empty {}).await.unwrap().into_inner(),
        dp::DevicePluginOptions::default()
    );
    let capacity = d.device0()["capacity"].as_u64().unwrap() as usize;
    let mut watch = p.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    let units = next_devices(&mut watch).await;
    assert_eq!(units.len(), capacity / 8);
    assert!(units.iter().all(|u| u.health == "Healthy" && u.id.starts_with("npud-0-")));

    // A fenced device's units turn Unhealthy, and come back with it.
    let c = d.client().await;
    c.admin().inject_fault(npud_tests::stall(0, true)).await.unwrap();
    assert!(next_devices(&mut watch).await.iter().all(|u| u.health == "Unhealthy"), "fenced");
    c.admin().inject_fault(npud_tests::stall(0, false)).await.unwrap();
    assert!(next_devices(&mut watch).await.iter().all(|u| u.health == "Healthy"), "recovered");

    // Allocate 4 units: the socket, the variables, the token file.
    let ids: Vec<String> = units[..4].iter().map(|u| u.id.clone()).collect();
    pods.set(Some(&ids)); // the kubelet lists the container once it is admitted
    let request =
        dp::AllocateRequest { container_requests: vec![dp::ContainerAllocateRequest { devices_ids: ids.clone() }] };
    let answer = p.allocate(request).await.unwrap().into_inner();
    assert_eq!(answer.container_responses.len(), 1);
    let container = &answer.container_responses[0];
    assert_eq!(
        (container.envs["NPUD_STREAMS"].as_str(), container.envs["NPUD_ALLOCATED_STREAMS"].as_str()),
        ("32", "32")
    );
    assert_eq!(Path::new(&container.envs["NPUD_SOCKET"]), d.socket.as_path());
    let token_mount = container.mounts.iter().find(|m| m.container_path == container.envs["NPUD_ALLOCATION"]).unwrap();
    assert!(token_mount.read_only);
    let socket_mount = container.mounts.iter().find(|m| Path::new(&m.host_path) == d.socket.parent().unwrap());
    assert!(socket_mount.expect("the socket's directory").read_only, "read-only: a pod cannot replace the socket");
    let token = std::fs::read_to_string(&token_mount.host_path).unwrap();
    let bad = dp::AllocateRequest {
        container_requests: vec![dp::ContainerAllocateRequest { devices_ids: vec!["gpu-0".into()] }],
    };
    assert_eq!(p.allocate(bad).await.unwrap_err().code(), tonic::Code::InvalidArgument);

    // The container that presents the token gets 32 streams and a 33rd is refused.
    let options = SessionOptions { allocation: Some(token.clone()), ..Default::default() };
    let pod = Client::connect_with(Target::Socket(d.socket.clone()), options.clone()).await.unwrap();
    let dev = pod.device(0);
    let held = dev.create_streams(32, StreamOptions::default()).await.expect("the allocation's 32 streams");
    let more = dev.create_stream(StreamOptions { wait: Duration::ZERO, ..Default::default() }).await;
    assert_eq!(more.unwrap_err().code(), Some(tonic::Code::ResourceExhausted), "beyond the allocation");
    let tenant = d.npuctl_json(&["tenant", "list"]);
    let mine = tenant.as_array().unwrap().iter().find(|t| t["name"] == pod.tenant()).unwrap().clone();
    let quota = &mine["quota"];
    assert_eq!((quota["max_streams"].as_u64(), mine["source"].as_str()), (Some(32), Some("allocation")), "{mine}");
    // Reserved on its device (the node's one device).
    assert_eq!(d.device0()["reserved"], 32, "{}", d.device0());
    // npuctl status shows the pod its share.
    let status = d.npuctl_json(&["status"]);
    let row = status["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == pod.tenant()).unwrap().clone();
    assert_eq!((row["allocated_streams"].as_u64(), row["max_streams"].as_u64()), (Some(32), Some(32)), "{row}");
    drop(held);

    // Another tenant presenting the same token is refused.
    let endpoint = d.endpoint.clone().unwrap();
    let thief = Client::connect_with(Target::Endpoint(endpoint), options).await;
    assert_eq!(thief.unwrap_err().code(), Some(tonic::Code::PermissionDenied));

    // While pod-resources lists the pod, the allocation stays (longer than the grace).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quota_of = |name: &str| {
        let list = d.npuctl_json(&["tenant", "list"]);
        list.as_array().unwrap().iter().find(|t| t["name"] == name).map(|t| t["quota"]["max_streams"].clone())
    };
    assert_eq!(quota_of(pod.tenant()), Some(serde_json::json!(32)), "the running pod keeps its allocation");
    // The pod goes: its allocation, quota and sessions go with it. Presented by a process
    // in no pod (this test's), it ends by complete listings: 2 s of them without it.
    pods.set(None);
    let tenant = pod.tenant().to_string();
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            quota_of(&tenant) != Some(serde_json::json!(32)) && !Path::new(&token_mount.host_path).exists()
        })
        .await,
        "the gone pod's quota is no longer its allocation:\n{}",
        d.log()
    );
    drop(pod);

    // The kubelet restarts, and refuses npud's first two registrations: npud tries again.
    kubelet.stop();
    let mut kubelet = Kubelet::start_refusing(&dp_dir, 2);
    let again = tokio::time::timeout(Duration::from_secs(5), kubelet.registered.recv()).await;
    let again = again.ok().flatten().unwrap_or_else(|| panic!("npud registered again within 5 s:\n{}", d.log()));
    assert_eq!(again.resource_name, "npud.io/streams");
    assert!(
        eventually_async(Duration::from_secs(10), || async { dp_dir.join("npud.sock").exists() }).await,
        "npud serves its socket again"
    );
    let mut p = plugin(&dp_dir).await;
    let mut watch = p.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    assert_eq!(next_devices(&mut watch).await.len(), capacity / 8);
}

/// An unmodified AscendCL program in a pod: the interposer (LD_PRELOAD, as Allocate sets
/// it) presents the mounted token in its hello, and the program's share is the allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmodified_program_in_a_pod_gets_its_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let dp_dir = dir.path().join("dp");
    std::fs::create_dir(&dp_dir).unwrap();
    let mut kubelet = Kubelet::start(&dp_dir);
    let shared = dir.path().join("budget");
    let d = npud_tests::native::acl_builder(&shared, &["--device-plugin-dir", dp_dir.to_str().unwrap()])
        .state_dir(&dir.path().join("state"))
        .start();
    let registered = tokio::time::timeout(Duration::from_secs(10), kubelet.registered.recv()).await;
    assert!(registered.ok().flatten().is_some(), "npud registered:\n{}", d.log());
    let mut p = plugin(&dp_dir).await;
    let ids: Vec<String> = (0..8).map(|i| format!("npud-0-{i}")).collect(); // 8 units: 64 streams
    let request = dp::AllocateRequest { container_requests: vec![dp::ContainerAllocateRequest { devices_ids: ids }] };
    let answer = p.allocate(request).await.unwrap().into_inner();
    let container = &answer.container_responses[0];
    let token =
        &container.mounts.iter().find(|m| m.container_path == container.envs["NPUD_ALLOCATION"]).unwrap().host_path;
    let (program, _) = npud_tests::native::acl_apps();
    let mut cmd = npud_tests::native::acl_command(program, &shared, Some((&d, 61)));
    cmd.env("NPUD_ALLOCATION", token).args(["60", "-1"]);
    let mut app = npud_tests::native::App::spawn(cmd);
    let started = tokio::task::spawn_blocking(move || (app.started(), app)).await.unwrap();
    let (verdict, app) = started;
    // 60 streams and the default one: 61 of the allocation's 64, so 3 are left.
    assert_eq!(verdict, Ok(vec!["60".to_string(), "available".to_string(), "3".to_string()]), "{}", d.log());
    tokio::task::spawn_blocking(move || app.release()).await.unwrap();
}

/// Allocate mounts the socket's directory read-only: a pod's processes still connect (a
/// socket on a read-only mount accepts connections), but root in the pod can no longer
/// replace npud's socket for the next pod. Needs root and unshare(1) to build the mount.
#[test]
fn the_socket_serves_through_a_read_only_mount_that_cannot_replace_it() {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
    let unshare = std::process::Command::new("unshare").arg("--version").output().is_ok_and(|o| o.status.success());
    if !root || !unshare {
        eprintln!("skipped: needs root and unshare(1) for a mount namespace");
        return;
    }
    let d = Daemon::start();
    let view = tempfile::tempdir().unwrap();
    let (dir, ro) = (d.socket.parent().unwrap().display().to_string(), view.path().display().to_string());
    let npuctl = npud_tests::bin("npuctl").display().to_string();
    let name = d.socket.file_name().unwrap().to_string_lossy().to_string();
    let script = format!(
        "mount --bind {dir} {ro} && mount -o remount,bind,ro {ro} && {npuctl} --socket {ro}/{name} device list >/dev/null \
         && ! rm -f {ro}/{name} 2>/dev/null && ! ln -sf /tmp/impostor {ro}/{name} 2>/dev/null"
    );
    let out = std::process::Command::new("unshare").args(["--mount", "sh", "-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(d.socket.exists() && d.npuctl(&["device", "list"]).status.success(), "npud's socket is untouched");
}

/// In Kubernetes mode identity fails closed: a pod's container (its cgroup says so) that
/// presents no allocation gets `[kubernetes] unallocated_quota` (no streams by default),
/// refused with a reason its owner can act on, instead of the default quota (256 streams
/// in the shipped configmap against the 32 it was allocated). Host processes keep theirs.
#[test]
fn a_pods_container_without_an_allocation_gets_no_streams() {
    let dir = tempfile::tempdir().unwrap();
    let dp_dir = dir.path().join("dp");
    let fake = npud_tests::host::FakeHost::new();
    std::fs::create_dir_all(&dp_dir).unwrap();
    let config = format!("{}[kubernetes]\nenabled = true\n", npud_tests::host::Host::config(&fake));
    let state = dir.path().join("state");
    let d = Daemon::builder()
        .state_dir(&state)
        .args(&["--device-plugin-dir", dp_dir.to_str().unwrap()])
        .config(&config)
        .start();
    let plant = |pid: u32, cgroup: &str| plant(&fake, pid, cgroup);
    let socket = d.socket.to_str().unwrap().to_string();
    let id = "c".repeat(64);
    let mut pod = npud_tests::Peer::spawn(&socket, None);
    plant(
        pod.pid,
        &format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{id}.scope\n"
        ),
    );
    let refused = pod.ask("create 1");
    assert_eq!(refused["reason"], "QUOTA_EXCEEDED", "{refused}");
    assert!(refused["message"].as_str().unwrap_or("").contains("no npud.io/streams allocation"), "{refused}");
    let mut host = npud_tests::Peer::spawn(&socket, None);
    plant(host.pid, HOST_CGROUP);
    assert!(host.ask("create 1")["handles"].as_array().is_some_and(|h| h.len() == 1), "a host process keeps its quota");
}

/// A restarted container is a new tenant and the kubelet does not call Allocate again, and
/// after an npud restart whoever presented a token first was bound to it. The token now
/// binds to the pod (its uid, from the cgroup), the binding is written beside the token:
/// another container of the same pod keeps the allocation, another pod is refused, before
/// and after npud restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_is_bound_to_its_pod_across_container_and_npud_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (dp_dir, state) = (dir.path().join("dp"), dir.path().join("state"));
    let fake = npud_tests::host::FakeHost::new();
    std::fs::create_dir_all(&dp_dir).unwrap();
    let mut kubelet = Kubelet::start(&dp_dir);
    let config = format!("{}[kubernetes]\nenabled = true\n", npud_tests::host::Host::config(&fake));
    let start = || {
        Daemon::builder()
            .state_dir(&state)
            .args(&["--device-plugin-dir", dp_dir.to_str().unwrap()])
            .config(&config)
            .start()
    };
    let mut d = start();
    let reg = tokio::time::timeout(Duration::from_secs(10), kubelet.registered.recv()).await;
    assert!(reg.ok().flatten().is_some(), "registered: {}", d.log());
    let ids: Vec<String> = (0..4).map(|i| format!("npud-0-{i}")).collect();
    let request = dp::AllocateRequest { container_requests: vec![dp::ContainerAllocateRequest { devices_ids: ids }] };
    let answer = plugin(&dp_dir).await.allocate(request).await.unwrap().into_inner();
    let container = &answer.container_responses[0];
    let token = container.mounts.iter().find(|m| m.container_path == container.envs["NPUD_ALLOCATION"]).unwrap();
    let token = token.host_path.clone();
    // A container of `pod` (its cgroup planted for npud to read) presenting the token.
    let in_pod = |socket: &Path, pod: &str, container: char| {
        let wrapper = format!("NPUD_ALLOCATION={token} \"$0\" \"$@\"");
        let peer = npud_tests::Peer::spawn_under(socket.to_str().unwrap(), None, &["sh", "-c", &wrapper]);
        let cgroup = format!(
            "0::/kubepods.slice/kubepods-pod{pod}.slice/cri-containerd-{}.scope\n",
            container.to_string().repeat(64)
        );
        plant(&fake, peer.pid, &cgroup);
        peer
    };
    let (pod_a, pod_b) = ("1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d", "9f8e7d6c_5b4a_3928_1706_f5e4d3c2b1a0");
    let refused = |answer: serde_json::Value| answer["reason"] == "TENANT_REFUSED";
    let mut first = in_pod(&d.socket, pod_a, 'a');
    assert_eq!(first.ask("create 32")["handles"].as_array().map(Vec::len), Some(32), "its allocation");
    assert!(first.ask("create 1")["handles"].is_null(), "not a stream more");
    assert!(refused(in_pod(&d.socket, pod_b, 'b').ask("tenant")), "another pod's container");
    // Two containers of one pod are one tenant: while the first holds the allocation, a
    // second gets nothing more.
    let mut second = in_pod(&d.socket, pod_a, 'c');
    assert!(second.ask("create 1")["handles"].is_null(), "one allocation, however many containers present it");
    drop(second);
    drop(first);
    // A restarted container (a new container id in the same pod) gets the allocation once
    // the old one's streams are back (its session's lease lapsed).
    let mut restarted = in_pod(&d.socket, pod_a, 'd');
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut made = restarted.ask("create 32");
    while made["handles"].as_array().map(Vec::len) != Some(32) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        made = restarted.ask("create 32");
    }
    assert_eq!(made["handles"].as_array().map(Vec::len), Some(32), "a restarted container keeps it: {made}");
    drop(restarted);
    d.kill9();
    let d = start();
    assert!(refused(in_pod(&d.socket, pod_b, 'e').ask("tenant")), "still refused after npud restarts");
    let mut again = in_pod(&d.socket, pod_a, 'f');
    assert_eq!(again.ask("create 32")["handles"].as_array().map(Vec::len), Some(32), "{}", d.log());
    drop(kubelet);
}

/// Units are a node-level credit: the kubelet's unit ids say nothing about the device a
/// pod opens. Where npud cannot learn the pod's devices (here no pod-resources at all), the
/// allocation is booked per acquisition: on whatever device the pod asks, never refused a
/// second device because of the first, and capped at the allocation over all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_devices_a_pod_is_booked_per_acquisition_up_to_its_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let dp_dir = dir.path().join("dp");
    std::fs::create_dir(&dp_dir).unwrap();
    let mut kubelet = Kubelet::start(&dp_dir);
    let d = Daemon::builder()
        .tcp()
        .state_dir(&dir.path().join("state"))
        .args(&["--sim-devices", "2", "--device-plugin-dir", dp_dir.to_str().unwrap()])
        .config("[kubernetes]\nenabled = true\n")
        .start();
    assert!(kubelet.registration().await.is_some());
    let mut p = plugin(&dp_dir).await;
    // 4 units the kubelet took from "device 0"; the pod opens both devices.
    let ids: Vec<String> = (0..4).map(|i| format!("npud-0-{i}")).collect();
    let token = std::fs::read_to_string(npud_tests::kubelet::allocate(&mut p, &ids).await.token).unwrap();
    let options = SessionOptions { allocation: Some(token), ..Default::default() };
    let pod = Client::connect_with(Target::Socket(d.socket.clone()), options).await.unwrap();
    let now = StreamOptions { wait: Duration::ZERO, ..Default::default() };
    let on_1 = pod.device(1).create_streams(20, now.clone()).await.expect("20 on device 1");
    let on_0 = pod
        .device(0)
        .create_streams(12, now.clone())
        .await
        .expect("the rest on device 0: never refused a second device");
    for device in [0, 1] {
        let e = pod.device(device).create_stream(now.clone()).await.unwrap_err();
        assert_eq!(e.code(), Some(tonic::Code::ResourceExhausted), "32 in all: {e}");
    }
    drop(on_1);
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            pod.device(0).create_streams(20, now.clone()).await.map(drop).is_ok()
        })
        .await,
        "what device 1 gave back can be taken on device 0"
    );
    drop(on_0);
    let list = d.npuctl_json(&["status"]);
    let rows = list["allocations"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "a row per device: {list}");
    assert!(rows.iter().all(|r| r["mode"] == "fallback" && r["allocated"] == 32 && r["reserved"] == 0), "{list}");
}

/// A pod's end is its allocation's end: once the kubelet removes the pod's cgroup (it kills
/// the pod's processes first; here one holder's connection outlives it anyway) and the
/// grace passes, the allocation, its reservation and binding go, nothing of it stays
/// booked, and the holder that is left gets nothing more: its container is a pod's without
/// an allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_end_is_its_allocations_end_and_a_lingering_holder_gets_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let dp_dir = dir.path().join("dp");
    let fake = npud_tests::host::FakeHost::new();
    std::fs::create_dir_all(&dp_dir).unwrap();
    let mut kubelet = Kubelet::start(&dp_dir);
    let pods = Pods::serve(&dir.path().join("pod-resources.sock"));
    let config = format!(
        "{}[kubernetes]\nenabled = true\npod_resources_socket = {:?}\nallocation_grace = \"2s\"\n",
        npud_tests::host::Host::config(&fake),
        dir.path().join("pod-resources.sock").to_str().unwrap()
    );
    let d = Daemon::builder()
        .state_dir(&dir.path().join("state"))
        .args(&["--device-plugin-dir", dp_dir.to_str().unwrap()])
        .config(&config)
        .start();
    assert!(tokio::time::timeout(Duration::from_secs(10), kubelet.registered.recv()).await.ok().flatten().is_some());
    plant(&fake, std::process::id(), HOST_CGROUP);
    let host = d.client().await;
    let ids: Vec<String> = (0..4).map(|i| format!("npud-0-{i}")).collect();
    pods.set(Some(&ids));
    let request = dp::AllocateRequest { container_requests: vec![dp::ContainerAllocateRequest { devices_ids: ids }] };
    let answer = plugin(&dp_dir).await.allocate(request).await.unwrap().into_inner();
    let c = &answer.container_responses[0];
    let token = c.mounts.iter().find(|m| m.container_path == c.envs["NPUD_ALLOCATION"]).unwrap().host_path.clone();
    let wrapper = format!("NPUD_ALLOCATION={token} \"$0\" \"$@\"");
    let mut holder = npud_tests::Peer::spawn_under(d.socket.to_str().unwrap(), None, &["sh", "-c", &wrapper]);
    let cgroup = format!(
        "0::/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-{}.scope\n",
        "d".repeat(64)
    );
    plant(&fake, holder.pid, &cgroup);
    assert_eq!(holder.ask("create 8")["handles"].as_array().map(Vec::len), Some(8));
    let on_device = async || host.devices().await.unwrap()[0].clone();
    assert_eq!((on_device().await.in_use, on_device().await.reserved), (8, 32));
    // The pod stops being listed and its cgroup goes; its holder's connection is still open.
    pods.set(None);
    npud_tests::host::Host::remove_pod(&fake, "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d");
    assert!(
        eventually_async(Duration::from_secs(30), || async {
            let dev = on_device().await;
            dev.in_use == 0 && dev.reserved == 0 && !Path::new(&token).exists()
        })
        .await,
        "the allocation, its reservation and its streams went: {:?}\n{}",
        on_device().await,
        d.log()
    );
    // Its session went with the pod; the client opens a new one (presenting the token of
    // an allocation that is gone) and is refused, or is refused as a pod without one.
    for _ in 0..3 {
        let more = holder.ask("create 1");
        assert!(more["handles"].is_null(), "the lingering holder gets nothing more: {more}");
        let why = more["reason"].as_str().unwrap_or("");
        assert!(["UNKNOWN_SESSION", "TENANT_REFUSED", "QUOTA_EXCEEDED"].contains(&why), "{more}");
    }
    assert_eq!(on_device().await.in_use, 0);
}

//! Issue 75: npud upgraded on a busy node with no failed start-up. A new npud stands by
//! beside the serving one (a DaemonSet rolling with `maxSurge: 1`) and takes the node over
//! when the old one is told to stop; a process never needs npud within what it holds (and
//! a pod's process within its cushion); `NPUD_CONNECT_WAIT` bounds the whole wait; and an
//! operator's escape hatch lets pods run while npud is gone.

use npud_tests::kubelet::Container;
use npud_tests::native::App;
use npud_tests::node::{DEVICES, Node, NodeOptions};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn ascend(devices: &[u32]) -> Option<(&'static str, Vec<String>)> {
    Some(("huawei.com/Ascend910", devices.iter().map(|d| format!("Ascend910-{d}")).collect()))
}

fn pod_uid() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{:08x}-{:04x}-4000-8000-0000000000e0", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn on(npu: u32, streams: u32) -> Vec<u32> {
    (0..DEVICES).map(|d| if d == npu { streams } else { 0 }).collect()
}

/// The program's answer to `line`.
fn step(app: &mut App, line: &str) -> String {
    app.say(line);
    tokio::task::block_in_place(|| app.line())
}

/// How long the kubelet may count a node's units unhealthy during a handover: from the old
/// plugin's stream ending to the new one's next list. The old plugin ends only once the new
/// one is registered, and the new one lists again as soon as it hears so: about 10 ms here
/// (npud-bench measures it); the bound leaves a loaded two-core machine room.
const UNHEALTHY_BOUND: Duration = Duration::from_secs(2);

/// Forty processes start on eight pods while a new npud (with a new interposer) takes the
/// node over from the old one, as the DaemonSet rolls it: none fails, npud's count equals
/// the driver's after, and the kubelet saw the units unhealthy once, briefly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_start_ups_during_an_upgrade_all_succeed_and_are_counted() {
    let o = NodeOptions { interposer: true, kubelet_watches: true, ..Default::default() };
    let mut node = Node::with(o).await.unwrap();
    node.settles_at(&[0; 8]).await;
    let mut pods = Vec::new();
    for npu in 0..DEVICES {
        let (ids, a) = node.allocate(20, npu * 29).await;
        let uid = pod_uid();
        node.pods.add_pod("ml", &format!("server-{npu}"), vec![Container::new("main", &ids, ascend(&[npu]))]);
        pods.push((uid, a));
    }
    // The new release's interposer differs, so it is installed under a new hash.
    let source = node.dir.path().join("libnpud_preload.so");
    let next_lib = node.dir.path().join("libnpud_preload-next.so");
    let mut bytes = std::fs::read(&source).unwrap();
    bytes.extend_from_slice(b"\0next release");
    std::fs::write(&next_lib, bytes).unwrap();
    let next = node.successor(|c| c.replace(source.to_str().unwrap(), next_lib.to_str().unwrap()));
    let healthy = node.kubelet.watch.lock().unwrap().healthy;
    assert!(healthy > 0, "the kubelet lists the units");
    let go = node.go("go");
    let apps: Vec<App> = (0..40u32)
        .map(|i| {
            let npu = i % DEVICES;
            let (uid, a) = &pods[npu as usize];
            node.program(a, (uid, 'a'), (&npu.to_string(), 0), 20, &go)
        })
        .collect();
    std::fs::write(&go, b"").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    node.hand_over(next).await;
    let (verdicts, apps) = tokio::task::spawn_blocking(move || {
        let mut apps = apps;
        let verdicts: Vec<_> = apps.iter_mut().map(App::started).collect();
        (verdicts, apps)
    })
    .await
    .unwrap();
    for (i, v) in verdicts.iter().enumerate() {
        assert!(v.as_ref().is_ok_and(|w| w[0] == "20"), "process {i}: {v:?}\n{}", node.d.log());
    }
    // Five processes of 20 streams and a default stream on each NPU.
    node.settles_at(&[105; 8]).await;
    {
        let watch = node.kubelet.watch.lock().unwrap();
        assert_eq!(watch.windows.len(), 1, "the units were unhealthy once, between the plugins: {watch:?}");
        eprintln!("the units were unhealthy for {:?} during the handover", watch.windows[0]);
        assert!(watch.windows[0] <= UNHEALTHY_BOUND, "unhealthy for {:?}", watch.windows[0]);
        assert_eq!(watch.healthy, healthy, "every unit healthy again");
    }
    assert!(node.d.log().contains("took over the socket"), "{}", node.d.log());
    tokio::task::spawn_blocking(move || apps.into_iter().for_each(App::release)).await.unwrap();
    node.settles_at(&[0; 8]).await;
}

/// A pod's process that grows within its cushion while npud is killed and started again
/// 10 s later runs on and is counted once npud is back; one that grows past its cushion
/// meanwhile is refused at once (207008), not after a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_its_cushion_a_process_needs_no_npud_and_past_it_is_refused_at_once() {
    let mut node = Node::start().await;
    let (ids, a) = node.allocate(10, 0).await;
    let uid = pod_uid();
    node.pods.set_pods(&[("ml", "grows", vec![Container::new("main", &ids, ascend(&[2]))])]);
    let mut grows = node.steps(&a, (&uid, 'a'), 2, 17);
    let mut past = node.steps(&a, (&uid, 'b'), 2, 9);
    assert_eq!(step(&mut grows, "+16"), "held 16");
    assert_eq!(step(&mut past, "+8"), "held 8");
    // Both settled: what they were granted is what they use.
    node.settles_at(&on(2, 26)).await;
    node.d.kill9();
    assert_eq!(step(&mut grows, "+3"), "held 19", "within its cushion of 4");
    let asked = Instant::now();
    let refused = step(&mut past, "+5");
    assert!(refused.starts_with("fail aclrtCreateStream 207008"), "past its cushion: {refused}");
    assert!(refused.contains("npud is unreachable"), "and told why: {refused}");
    assert!(asked.elapsed() < Duration::from_secs(5), "at once, not after NPUD_CONNECT_WAIT: {:?}", asked.elapsed());
    // It ended there, and is reaped as its container's init would.
    assert!(!tokio::task::block_in_place(|| past.child.wait()).unwrap().success());
    tokio::time::sleep(Duration::from_secs(10)).await;
    node.start_npud_again().await;
    // The process declares what it made meanwhile: npud counts it as the driver does.
    node.settles_at(&on(2, 20)).await;
    assert_eq!(step(&mut grows, "+1"), "held 20");
    node.settles_at(&on(2, 21)).await;
    drop(grows.child.stdin.take());
    assert_eq!(tokio::task::block_in_place(|| grows.line()), "done");
    node.settles_at(&[0; 8]).await;
}

/// With npud gone, a pod's new process that sets `NPUD_CONNECT_WAIT=3s` is refused once 3 s
/// have passed in all, not twice that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connect_wait_bounds_the_whole_wait() {
    let mut node = Node::start().await;
    let (ids, mut a) = node.allocate(4, 0).await;
    let uid = pod_uid();
    node.pods.set_pods(&[("ml", "late", vec![Container::new("main", &ids, ascend(&[1]))])]);
    node.d.kill9();
    a.envs.insert("NPUD_CONNECT_WAIT".into(), "3s".into());
    let started = Instant::now();
    let mut app = node.steps(&a, (&uid, 'a'), 1, 4);
    let said = tokio::task::block_in_place(|| app.line());
    let waited = started.elapsed();
    assert!(said.starts_with("fail"), "{said}");
    // The lower bound is the wait itself; the upper leaves a loaded machine a second to
    // start the program and print.
    assert!(
        waited >= Duration::from_millis(2900) && waited <= Duration::from_millis(4500),
        "refused after {waited:?}, for a 3 s wait"
    );
}

/// The escape hatch: npud gone, the operator creates `bypass` in the socket directory, and
/// a pod's process runs unadmitted; once npud is back and the hatch is removed, its streams
/// are counted, it is admitted as before, and nothing is left when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_escape_hatch_lets_pods_run_without_npud_and_they_are_counted_after() {
    let mut node = Node::start().await;
    let (ids, a) = node.allocate(4, 0).await;
    let uid = pod_uid();
    node.pods.set_pods(&[("ml", "hatch", vec![Container::new("main", &ids, ascend(&[5]))])]);
    let hatch = node.d.socket.with_file_name("bypass");
    node.d.kill9();
    std::fs::write(&hatch, b"").unwrap();
    let started = Instant::now();
    let mut app = node.steps(&a, (&uid, 'a'), 5, 5);
    assert_eq!(step(&mut app, "+4"), "held 4", "run unadmitted");
    assert!(started.elapsed() < Duration::from_secs(5), "without waiting for npud: {:?}", started.elapsed());
    node.start_npud_again().await;
    std::fs::remove_file(&hatch).unwrap();
    node.settles_at(&on(5, 5)).await;
    assert_eq!(step(&mut app, "+2"), "held 6", "admitted as before");
    node.settles_at(&on(5, 7)).await;
    drop(app.child.stdin.take());
    assert_eq!(tokio::task::block_in_place(|| app.line()), "done");
    node.settles_at(&[0; 8]).await;
}

/// Two rollouts in a row: the first successor serves its own handover socket (the npud it
/// replaced leaves it in place on its way out), so the second rollout is a handover too,
/// and a process running through both is counted after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upgrade_is_a_handover_too() {
    let o = NodeOptions { kubelet_watches: true, ..Default::default() };
    let mut node = Node::with(o).await.unwrap();
    let (ids, a) = node.allocate(4, 0).await;
    let uid = pod_uid();
    node.pods.set_pods(&[("ml", "twice", vec![Container::new("main", &ids, ascend(&[3]))])]);
    let mut app = node.steps(&a, (&uid, 'a'), 3, 9);
    assert_eq!(step(&mut app, "+8"), "held 8");
    node.settles_at(&on(3, 9)).await;
    for round in 0..2 {
        let next = node.successor(str::to_string);
        node.hand_over(next).await;
        assert!(node.d.log().contains("took over the socket"), "round {round}:\n{}", node.d.log());
        assert_eq!(step(&mut app, "+1"), format!("held {}", 9 + round), "round {round}");
        node.settles_at(&on(3, 10 + round)).await;
    }
    assert_eq!(node.kubelet.watch.lock().unwrap().windows.len(), 2, "one brief window per handover");
    drop(app.child.stdin.take());
    assert_eq!(tokio::task::block_in_place(|| app.line()), "done");
    node.settles_at(&[0; 8]).await;
}

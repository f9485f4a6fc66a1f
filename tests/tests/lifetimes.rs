//! Issue 67: an allocation lives as long as its pod, whatever the kubelet's listing says.
//! On the fake 8-NPU node, unmodified AscendCL programs in pods: a kubelet restart whose
//! `List` is empty, then partial, for 300 listings each strips no pod of anything; a
//! container restarted in the window (and after an npud restart) is admitted with its
//! token; init and sidecar containers are booked once per unit; a pod whose cgroup is gone
//! is released with its files after the grace; an allocation never presented ends only
//! after the grace of complete listings. Each on a tree built as root, in both cgroup
//! drivers' layouts; the kubelet restart and a pod's end again on the machine's own
//! cgroups (v2, v1's `name=systemd`) where it allows, skipping loudly where not.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::kubelet::{Container, spread_ids};
use npud_tests::native::App;
use npud_tests::node::{Cgroups, DEVICES, Node, NodeOptions};
use npud_tests::{eventually, eventually_async};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const ASCEND: &str = "huawei.com/Ascend910";

fn ascend(devices: &[u32]) -> Option<(&'static str, Vec<String>)> {
    Some((ASCEND, devices.iter().map(|d| format!("Ascend910-{d}")).collect()))
}

/// A pod uid no other test (nor another run on the machine's cgroups) uses.
fn pod_uid() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{:08x}-{:04x}-4000-8000-000000000000", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Asks `app` to step (`+N`, `-N`) and returns what it held after, or panics with npud's
/// log on a refusal.
fn step(app: &mut App, line: &str, node: &Node) -> u32 {
    app.say(line);
    let said = app.line();
    match said.strip_prefix("held ") {
        Some(n) => n.parse().unwrap(),
        None => panic!("{line:?} was answered {said:?}\n{}", node.d.log()),
    }
}

/// The files an allocation keeps on the host: its token, and the installed interposers.
fn files(node: &Node, tokens: &[PathBuf]) -> Vec<PathBuf> {
    let lib = node.dir.path().join("lib");
    let mut out: Vec<PathBuf> = tokens.to_vec();
    out.extend(std::fs::read_dir(&lib).unwrap().flatten().map(|e| e.path()));
    out.sort();
    out
}

/// Four 1-NPU pods hold streams through a kubelet restart: `List` empty for 300 listings,
/// then partial (every other pod) for 300. Every pod keeps its booking, every ask they
/// make meanwhile is granted, no token or interposer file goes, a container restarted
/// in the empty window (and one after an npud restart in the partial one) is admitted
/// with its token, and npud's count equals the driver's after.
async fn through_a_kubelet_restart(o: NodeOptions<'_>) {
    let mut node = Node::with(o).await.unwrap();
    let mut apps = Vec::new();
    let mut tokens = Vec::new();
    let mut pods = Vec::new();
    for i in 0..4 {
        let (ids, a) = node.allocate(4, i * 10).await;
        let uid = pod_uid();
        node.pods.add_pod("ml", &format!("server-{i}"), vec![Container::new("main", &ids, ascend(&[i]))]);
        let mut app = node.steps(&a, (&uid, 'a'), i, 9);
        assert_eq!(step(&mut app, "+8", &node), 8);
        tokens.push(a.token.clone());
        apps.push(app);
        pods.push((uid, a));
    }
    let mut expect = vec![0; DEVICES as usize];
    expect[..4].fill(9); // 8 and the default stream
    node.settles_at(&expect).await;
    let before = files(&node, &tokens);
    let booked = node.books().await;
    // The kubelet restarts: a new Registration socket, then its listing catches up.
    node.kubelet.restart();
    assert!(node.kubelet.registration().await.is_some(), "npud registers again\n{}", node.d.log());
    node.pods.restart(300, 300);
    let served = node.pods.served();
    let mut restarted = false;
    let mut npud_restarted = false;
    while !node.pods.caught_up() {
        for app in &mut apps {
            assert_eq!(step(app, "+1", &node), 9, "an ask while the kubelet lists nothing");
            assert_eq!(step(app, "-1", &node), 8);
        }
        let listed = node.pods.served() - served;
        if !restarted && listed > 100 {
            // Pod 0's container restarts while `List` is empty: its new process presents
            // the same token.
            restarted = true;
            apps.remove(0).release();
            let mut again = node.steps(&pods[0].1, (&pods[0].0, 'b'), 0, 9);
            assert_eq!(step(&mut again, "+8", &node), 8, "the restarted container is its pod's again");
            apps.insert(0, again);
        }
        if !npud_restarted && listed > 400 {
            // npud is killed and started again while the listing is partial: the
            // allocations are read back, the running processes declare again, and pod 1's
            // container restarts and presents its token.
            npud_restarted = true;
            node.restart_npud().await;
            apps.remove(1).release();
            let mut again = node.steps(&pods[1].1, (&pods[1].0, 'c'), 1, 9);
            assert_eq!(step(&mut again, "+8", &node), 8, "admitted across an npud restart");
            apps.insert(1, again);
        }
    }
    assert!(restarted && npud_restarted, "the outage lasted 600 listings");
    assert_eq!(files(&node, &tokens), before, "no token or interposer file went");
    node.settles_at(&expect).await;
    assert_eq!(node.books().await, booked, "every pod kept its booking");
    // Their processes end; the pods live on (their cgroups are there): their room stays
    // theirs. (Their end is `a_gone_pod`'s, with a grace short enough to wait for.)
    for app in apps {
        app.release();
    }
    node.settles_at(&[0; 8]).await;
    let reserved: Vec<u32> = node.books().await.iter().map(|b| b.1).collect();
    assert_eq!(reserved, [32, 32, 32, 32, 0, 0, 0, 0]);
}

fn outage_options(cgroups: Cgroups, systemd_driver: bool) -> NodeOptions<'static> {
    NodeOptions { period: "20ms", grace: "60s", cgroups, systemd_driver, interposer: true, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_keep_their_bookings_through_a_kubelet_restart_systemd_driver() {
    through_a_kubelet_restart(outage_options(Cgroups::Fake, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_keep_their_bookings_through_a_kubelet_restart_cgroupfs_driver() {
    through_a_kubelet_restart(outage_options(Cgroups::Fake, false)).await;
}

/// A pod whose cgroup is gone is released, with its token file, once the grace has
/// passed: never before it.
async fn a_gone_pod(o: NodeOptions<'_>) {
    let mut node = Node::with(o).await.unwrap();
    let (ids, a) = node.allocate(4, 0).await;
    let uid = pod_uid();
    node.pods.set_pods(&[("ml", "short", vec![Container::new("main", &ids, ascend(&[2]))])]);
    let mut app = node.steps(&a, (&uid, 'a'), 2, 9);
    assert_eq!(step(&mut app, "+8", &node), 8);
    node.settles_at(&[0, 0, 9, 0, 0, 0, 0, 0]).await;
    assert_eq!(node.books().await[2], (9, 32));
    app.release();
    let ended = Instant::now();
    node.end_pod(&uid);
    let released =
        eventually_async(Duration::from_secs(30), || async { node.books().await[2] == (0, 0) && !a.token.exists() })
            .await;
    assert!(released, "released with its files: {:?}\n{}", node.books().await, node.d.log());
    assert!(ended.elapsed() >= Duration::from_secs(3), "not before the grace of 3 s: {:?}", ended.elapsed());
}

fn gone_options(cgroups: Cgroups, systemd_driver: bool) -> NodeOptions<'static> {
    NodeOptions { period: "100ms", grace: "3s", cgroups, systemd_driver, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_cgroup_is_gone_is_released_after_the_grace_in_both_drivers_layouts() {
    a_gone_pod(gone_options(Cgroups::Fake, true)).await;
    a_gone_pod(gone_options(Cgroups::Fake, false)).await;
}

/// The kubelet restart and a pod's end on the machine's own cgroups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_machines_own_cgroups_pods_live_as_their_cgroups_do() {
    for cgroups in [Cgroups::RealV2, Cgroups::RealV1] {
        let usable = match cgroups {
            Cgroups::RealV1 => npud_tests::host::RealHost::v1_systemd(),
            _ => npud_tests::host::RealHost::v2(),
        };
        if let Err(why) = usable {
            eprintln!("SKIPPED LOUDLY: pods' lives on this machine's {cgroups:?} cgroups: {why}");
            continue;
        }
        through_a_kubelet_restart(outage_options(cgroups, cgroups == Cgroups::RealV2)).await;
        a_gone_pod(gone_options(cgroups, cgroups == Cgroups::RealV1)).await;
    }
}

/// An allocation never presented ends only after the grace of complete listings: a
/// kubelet that lists nothing for longer than the grace ends nothing, then complete
/// listings without it end it within the grace; the running pod's stays throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_never_presented_ends_after_the_grace_of_complete_listings() {
    let mut node = Node::with(NodeOptions { period: "20ms", grace: "2s", ..Default::default() }).await.unwrap();
    let (ids, a) = node.allocate(2, 0).await;
    let (never_ids, never) = node.allocate(2, 40).await;
    let uid = pod_uid();
    let running = ("ml", "running", vec![Container::new("main", &ids, ascend(&[1]))]);
    node.pods.set_pods(&[running.clone(), ("ml", "never-started", vec![Container::new("main", &never_ids, None)])]);
    let mut app = node.steps(&a, (&uid, 'a'), 1, 5);
    assert_eq!(step(&mut app, "+4", &node), 4);
    // The never-started pod goes from the listing while the kubelet restarts: 300
    // listings (6 s, three graces) of nothing.
    node.pods.set_pods(&[running]);
    node.pods.restart(300, 0);
    assert!(eventually(Duration::from_secs(60), || node.pods.caught_up()), "the outage passed");
    assert!(never.token.exists(), "empty listings are not complete: nothing ended\n{}", node.d.log());
    let ended = Instant::now();
    assert!(
        eventually(Duration::from_secs(30), || !never.token.exists()),
        "complete listings without it end it\n{}",
        node.d.log()
    );
    assert!(ended.elapsed() < Duration::from_secs(30));
    assert!(a.token.exists(), "the running pod's allocation stays");
    assert_eq!(step(&mut app, "+4", &node), 8, "and its process goes on");
    app.release();
}

/// A regular init container of 2 units, then its app container of 4 (the kubelet hands
/// the init container's 2 on and adds 2): both admitted, the pod booked 4 units at a time,
/// never 6, and the init container's allocation (never listed) lives on with its pod.
/// Nothing is left once the pod ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_container_and_its_app_container_are_one_booking() {
    let mut node = Node::with(NodeOptions { period: "20ms", grace: "2s", ..Default::default() }).await.unwrap();
    let init_ids = spread_ids(2, DEVICES, 0);
    let init = npud_tests::kubelet::allocate(&mut node.plugin, &init_ids).await;
    let mut app_ids = init_ids.clone();
    app_ids.extend(spread_ids(2, DEVICES, 50));
    let app_a = npud_tests::kubelet::allocate(&mut node.plugin, &app_ids).await;
    // The kubelet never lists a regular init container.
    node.pods.set_pods(&[("ml", "with-init", vec![Container::new("main", &app_ids, ascend(&[4]))])]);
    let uid = pod_uid();
    let mut init_c = node.steps(&init, (&uid, 'a'), 4, 16);
    assert_eq!(step(&mut init_c, "+15", &node), 15);
    node.settles_at(&[0, 0, 0, 0, 16, 0, 0, 0]).await;
    let served = node.pods.served();
    assert!(eventually(Duration::from_secs(30), || node.pods.served() > served + 200), "200 listings pass");
    assert_eq!(step(&mut init_c, "-1", &node), 14);
    assert_eq!(step(&mut init_c, "+1", &node), 15, "the init container keeps its allocation while it runs");
    init_c.release();
    let mut app = node.steps(&app_a, (&uid, 'b'), 4, 32);
    assert_eq!(step(&mut app, "+31", &node), 31, "{}", node.d.log());
    node.settles_at(&[0, 0, 0, 0, 32, 0, 0, 0]).await;
    assert_eq!(node.books().await[4], (32, 32), "one booking of 4 units, not 6");
    app.say("+1");
    assert!(app.line().starts_with("fail aclrtCreateStream 207008"), "the pod's 32 are all it has");
    drop(app);
    node.end_pod(&uid);
    node.pods.set_pods(&[]);
    let gone = eventually_async(Duration::from_secs(30), || async {
        node.books().await[4] == (0, 0) && !init.token.exists() && !app_a.token.exists()
    })
    .await;
    assert!(gone, "nothing left: {:?}\n{}", node.books().await, node.d.log());
}

/// A restartable init container (a sidecar), which the kubelet lists, beside its app
/// container: both admitted, one pod tenant, its units and the app's booked together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_and_its_app_container_are_one_pod_tenant() {
    let mut node = Node::with(NodeOptions { period: "20ms", ..Default::default() }).await.unwrap();
    let (sidecar_ids, sidecar) = node.allocate(1, 0).await;
    let (app_ids, app_a) = node.allocate(2, 30).await;
    node.pods.set_pods(&[(
        "ml",
        "with-sidecar",
        vec![Container::new("proxy", &sidecar_ids, ascend(&[5])), Container::new("main", &app_ids, ascend(&[5]))],
    )]);
    let uid = pod_uid();
    let mut side = node.steps(&sidecar, (&uid, 'a'), 5, 5);
    let mut app = node.steps(&app_a, (&uid, 'b'), 5, 13);
    assert_eq!(step(&mut side, "+4", &node), 4);
    assert_eq!(step(&mut app, "+12", &node), 12);
    node.settles_at(&[0, 0, 0, 0, 0, 18, 0, 0]).await;
    assert_eq!(node.books().await[5], (18, 24), "3 units booked together");
    // Each container's own units, not just its own: the pod's 24 are one budget.
    assert_eq!(step(&mut side, "+6", &node), 10, "{}", node.d.log());
    let status = node.host.status().await.unwrap();
    let tenants: std::collections::BTreeSet<String> =
        status.native_holders.iter().map(|h| h.tenant.clone()).filter(|t| t.starts_with("pod-")).collect();
    assert_eq!(tenants.into_iter().collect::<Vec<_>>(), vec![format!("pod-{uid}")], "{status:?}");
    side.release();
    app.release();
}

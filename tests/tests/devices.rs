//! Issue 69: a pod is booked on the NPUs it really holds, its processes share its
//! allocation as they use it, and a holder's growth is not refused while the device has
//! room. On the fake 8-NPU node, each NPU with a device node (a pty) that the fake driver
//! names and its processes hold open while they use the runtime; npud's count is compared
//! with the driver's throughout.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use npud_tests::kubelet::Container;
use npud_tests::native::{App, Shared, acl_builder, acl_command, acl_steps_app, native_created};
use npud_tests::node::{DEVICES, Node, NodeOptions};
use npud_tests::wire::Wire;
use npud_tests::{eventually, eventually_async, metric};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn ascend(devices: &[u32]) -> Option<(&'static str, Vec<String>)> {
    Some(("huawei.com/Ascend910", devices.iter().map(|d| format!("Ascend910-{d}")).collect()))
}

fn pod_uid() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{:08x}-{:04x}-4000-8000-0000000000d0", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn step(app: &mut App, line: &str, log: &dyn Fn() -> String) -> u32 {
    app.say(line);
    let said = app.line();
    said.strip_prefix("held ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line:?}: {said:?}\n{}", log()))
}

fn on(npu: u32, streams: u32) -> Vec<u32> {
    (0..DEVICES).map(|d| if d == npu { streams } else { 0 }).collect()
}

/// Under Volcano the vendor plugin mounts the NPUs the pod's annotation names, not the
/// kubelet's ids: the kubelet lists NPU 2, the pod's container holds NPU 5. Its process is
/// admitted there, its booking follows it (the log, the metric, `status` say so), and
/// npud's count equals the driver's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_booking_follows_the_npus_its_processes_hold() {
    let mut node = Node::with(NodeOptions { device_nodes: true, ..Default::default() }).await.unwrap();
    let (ids, a) = node.allocate(10, 0).await;
    node.pods.set_pods(&[("ml", "volcano", vec![Container::new("main", &ids, ascend(&[2]))])]);
    let uid = pod_uid();
    let mut app = node.steps(&a, (&uid, 'a'), 5, 80);
    let log = || node.d.log();
    assert_eq!(step(&mut app, "+20", &log), 20);
    node.settles_at(&on(5, 21)).await;
    let status = node.host.status().await.unwrap();
    let row = status.allocations.iter().find(|r| r.pod == "volcano").unwrap();
    assert_eq!((row.device, row.mode.as_str(), row.booked), (5, "moved", 80), "{status:?}");
    assert!(node.d.log().contains("its booking follows them"), "{}", node.d.log());
    assert!(metric(node.metrics, "npud_booking_moves_total").is_some_and(|n| n >= 1.0));
    app.release();
    node.settles_at(&[0; 8]).await;
}

/// A two-NPU pod whose first process holds one of its two NPUs is still starting: its
/// booking stays where the kubelet put it. A process of it holding an NPU outside the
/// booking moves it to the NPUs the pod's processes hold, and npud equals the driver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holding_part_of_a_booking_moves_nothing_and_holding_outside_it_does() {
    let mut node = Node::with(NodeOptions { device_nodes: true, ..Default::default() }).await.unwrap();
    let (ids, a) = node.allocate(20, 0).await;
    node.pods.set_pods(&[("ml", "tp2", vec![Container::new("main", &ids, ascend(&[1, 2]))])]);
    let uid = pod_uid();
    let log = || node.d.log();
    let mut first = node.steps(&a, (&uid, 'a'), 1, 40);
    assert_eq!(step(&mut first, "+10", &log), 10);
    node.settles_at(&on(1, 11)).await;
    // Three of npud's rounds (1 s each): still booked on both.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let placed = |status: &pb::StatusResponse| {
        let mut rows: Vec<(u32, String, u32)> = status
            .allocations
            .iter()
            .filter(|r| r.pod == "tp2")
            .map(|r| (r.device, r.mode.clone(), r.booked))
            .collect();
        rows.sort();
        rows
    };
    let status = node.host.status().await.unwrap();
    assert_eq!(placed(&status), vec![(1, "devices".into(), 80), (2, "devices".into(), 80)], "{status:?}");
    assert_eq!(metric(node.metrics, "npud_booking_moves_total"), Some(0.0));

    let mut second = node.steps(&a, (&uid, 'b'), 6, 40);
    assert_eq!(step(&mut second, "+5", &log), 5);
    let mut held = on(1, 11);
    held[6] = 6;
    node.settles_at(&held).await;
    let status = node.host.status().await.unwrap();
    assert_eq!(placed(&status), vec![(1, "moved".into(), 80), (6, "moved".into(), 80)], "{status:?}\n{}", log());
    first.release();
    second.release();
    node.settles_at(&[0; 8]).await;
}

/// A pod none of whose processes holds an NPU open (its process is no AscendCL program)
/// stays booked where the kubelet's ids say: a node that exists proves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_no_process_of_the_pod_holds_moves_nothing() {
    let mut node = Node::with(NodeOptions { device_nodes: true, ..Default::default() }).await.unwrap();
    let (ids, a) = node.allocate(4, 0).await;
    node.pods.set_pods(&[("ml", "still", vec![Container::new("main", &ids, ascend(&[2]))])]);
    let mut peer = node.peer(&a.token, &pod_uid(), 'a');
    assert_eq!(peer.ask("create-on 2 4 0")["handles"].as_array().map(Vec::len), Some(4));
    // Three of npud's rounds (1 s each).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = node.host.status().await.unwrap();
    let row = status.allocations.iter().find(|r| r.pod == "still").unwrap();
    assert_eq!((row.device, row.mode.as_str()), (2, "devices"), "{status:?}");
    assert_eq!(metric(node.metrics, "npud_booking_moves_total"), Some(0.0));
}

/// A one-NPU pod whose vendor devices npud cannot learn (booked per acquisition) asks at
/// start-up for all of its 800 streams (its container shows it one NPU), not an eighth:
/// where the NPU is busy it waits, then runs; 0 failed in 20 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_npu_pod_booked_per_acquisition_waits_for_its_whole_start_up_in_20_runs() {
    let mut node = Node::start().await;
    for run in 0..20 {
        let (ids, a) = node.allocate(100, run * 100).await;
        node.pods.set_pods(&[("ml", "fallback", vec![Container::new("main", &ids, None)])]);
        // Another tenant (this host process) holds most of NPU 3.
        let mut blocker = Wire::hello(&node.d.socket, pb::BudgetHello::default());
        // The last run's streams may still be leaving the device (npud's books are empty
        // before the driver's count falls): the blocker waits for its room, as a tenant would.
        let blocked = blocker.acquire(3, 1900, 30_000);
        assert!(matches!(blocked, Ok(Reply::Acquired(_))), "run {run}: {blocked:?}\n{}", node.d.log());
        let uid = pod_uid();
        let go = node.go(&format!("go-{run}"));
        let mut app = node.program(&a, (&uid, 'a'), ("3", 0), 799, &go);
        std::fs::write(&go, b"").unwrap();
        // It waits for room (it would have failed at its 147th stream asking for 100).
        let waiting = eventually_async(Duration::from_secs(20), || async {
            node.host.status().await.unwrap().devices[3].queued_requests == 1
        })
        .await;
        assert!(waiting, "run {run}: the pod's start-up waits whole\n{}", node.d.log());
        drop(blocker);
        let verdict = tokio::task::block_in_place(|| app.started());
        assert_eq!(verdict, Ok(vec!["799".into(), "available".into(), "0".into()]), "run {run}\n{}", node.d.log());
        node.settles_at(&on(3, 800)).await;
        tokio::task::block_in_place(|| app.release());
        node.end_pod(&uid);
        node.pods.set_pods(&[]);
        let gone = eventually_async(Duration::from_secs(20), || async { node.books().await[3] == (0, 0) }).await;
        assert!(gone, "run {run}: {:?}", node.books().await);
        node.settles_at(&[0; 8]).await;
    }
}

/// In a one-NPU pod allocated 80, a process making 60 streams, then, once it has settled,
/// a second making 10: both admitted at once (the first gave back what it did not use),
/// and npud's count equals the driver's once both settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_processes_share_its_allocation_as_they_use_it() {
    let mut node = Node::start().await;
    let (ids, a) = node.allocate(10, 0).await;
    node.pods.set_pods(&[("ml", "shared", vec![Container::new("main", &ids, ascend(&[4]))])]);
    let uid = pod_uid();
    let log = || node.d.log();
    let mut first = node.steps(&a, (&uid, 'a'), 4, 80);
    assert_eq!(step(&mut first, "+60", &log), 60);
    node.settles_at(&on(4, 61)).await;
    let mut second = node.steps(&a, (&uid, 'b'), 4, 80);
    assert_eq!(step(&mut second, "+10", &log), 10, "admitted at once");
    node.settles_at(&on(4, 72)).await;
    first.release();
    second.release();
    node.settles_at(&[0; 8]).await;
}

/// 40 processes, each granted its start-up (41) and then making 1 to 10 more, while
/// newcomers wait on the same device for more room than it has: every growth is granted
/// (the device has room for it), none waits or fails, and npud equals the driver.
#[test]
fn forty_processes_outgrow_their_first_grant_with_newcomers_queued() {
    let shared = Shared::new();
    let d = acl_builder(&shared.path, &[]).start();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let mut apps: Vec<App> = (0..40)
        .map(|_| {
            let mut cmd = acl_command(acl_steps_app(), &shared.path, Some((&d, 41)));
            cmd.env("NPUD_WAIT", "60s");
            App::spawn(cmd)
        })
        .collect();
    let log = || d.log();
    for app in &mut apps {
        assert_eq!(step(app, "+40", &log), 40);
    }
    // What each process made is reported (npud's count is the driver's): until a report
    // comes, npud withholds a stream it cannot tell from one made outside its books.
    let settled = |n: u32| {
        eventually(Duration::from_secs(20), || native_created(&d) as u32 == n && shared.held_by_others(d.pid()) == n)
    };
    assert!(eventually(Duration::from_secs(20), || d.in_use() == 40 * 41) && settled(40 * 41));
    // Newcomers (another tenant's processes: here, sessions of this one holding nothing)
    // ask for more than is left, and wait.
    let left = capacity - 40 * 41;
    let mut newcomers: Vec<Wire> = (0..4).map(|_| Wire::hello(&d.socket, pb::BudgetHello::default())).collect();
    for w in &mut newcomers {
        w.send(Call::Acquire(pb::AcquireBudgetRequest {
            device: 0,
            count: left + 50,
            wait_ms: 60_000,
            ..Default::default()
        }));
    }
    assert!(eventually(Duration::from_secs(10), || d.device0()["queued_requests"] == 4), "{}", d.device0());
    let mut grown = 0;
    for (i, app) in apps.iter_mut().enumerate() {
        let more = 1 + (i as u32 * 7) % 10;
        grown += more;
        assert_eq!(step(app, &format!("+{more}"), &log), 40 + more, "growth {i} while newcomers wait");
        assert!(
            settled(40 * 41 + grown),
            "reported: npud {} driver {}",
            native_created(&d),
            shared.held_by_others(d.pid())
        );
    }
    assert!(grown <= left);
    assert!(
        eventually(Duration::from_secs(20), || d.in_use() as u32 == 40 * 41 + grown
            && shared.held_by_others(d.pid()) as u32 == 40 * 41 + grown),
        "npud {} driver {}",
        d.in_use(),
        shared.held_by_others(d.pid())
    );
    drop(newcomers);
    for app in apps {
        app.release();
    }
    assert!(eventually(Duration::from_secs(20), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
}

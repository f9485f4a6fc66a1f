//! Issue 55: pods of one or several NPUs on an 8-NPU node. A fake kubelet serves both of
//! its gRPC APIs, and its pod-resources `List` lists each container's `npud.io/streams`
//! units beside the NPUs Ascend's device plugin gave it (`huawei.com/Ascend910`,
//! `Ascend910-<physical id>`); unmodified AscendCL programs run under the interposer in
//! each pod's view of its devices, and npud books each pod on the NPUs it was given.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::eventually_async;
use npud_tests::kubelet::{Container, allocate, pod_tenant, spread_ids};
use npud_tests::native::{App, Shared};
use npud_tests::node::{DEVICES, Node};
use std::time::Duration;

const ASCEND: &str = "huawei.com/Ascend910";

async fn release(apps: Vec<App>) {
    tokio::task::spawn_blocking(move || apps.into_iter().for_each(App::release)).await.unwrap();
}

fn pod_uid(i: u32) -> String {
    format!("{i:08x}_0000_4000_8000_000000000000")
}

fn ascend(devices: &[u32]) -> Option<(&'static str, Vec<String>)> {
    Some((ASCEND, devices.iter().map(|d| format!("Ascend910-{d}")).collect()))
}

/// Eight 1-NPU pods at once, each allocated 1,800 streams whose unit ids the kubelet took
/// from every device, each making 1,799 streams on its NPU: all start, each booked and
/// reserved on its own NPU, and npud's count equals the driver's on all eight devices
/// before, during (never below it) and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_one_npu_pods_are_each_booked_on_the_npu_they_were_given() {
    let mut node = Node::start().await;
    node.settles_at(&[0; 8]).await;
    let mut allocated = Vec::new();
    for i in 0..DEVICES {
        let (ids, a) = node.allocate(225, i * 29).await;
        assert_eq!((a.envs["NPUD_STREAMS"].as_str(), a.envs["NPUD_ALLOCATED_STREAMS"].as_str()), ("1800", "1800"));
        node.pods.add_pod("ml", &format!("server-{i}"), vec![Container::new("main", &ids, ascend(&[i]))]);
        allocated.push(a);
    }
    let go = node.go("go");
    let apps: Vec<App> = (0..DEVICES)
        .map(|i| node.program(&allocated[i as usize], (&pod_uid(i + 1), 'a'), (&i.to_string(), 0), 1799, &go))
        .collect();
    std::fs::write(&go, b"").unwrap(); // all eight start at once
    let watching = {
        let (host, budget, pid) = (node.d.client().await, node.budget.clone(), node.d.pid());
        tokio::spawn(async move {
            // While they start: npud's books never below what the driver holds. The driver
            // is read first: npud's books only grow while they start, so a stream the
            // driver shows was booked before npud is read.
            for _ in 0..200 {
                let shared = Shared::at(&budget);
                let driver: Vec<u32> = (0..DEVICES).map(|d| shared.held_on(d, pid)).collect();
                let books: Vec<u32> = host.devices().await.unwrap().iter().map(|x| x.in_use).collect();
                if !books.iter().zip(&driver).all(|(b, d)| b >= d) {
                    return Err(format!("npud {books:?} below the driver {driver:?}"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(())
        })
    };
    let (verdicts, apps) = npud_tests::native::started_all(apps).await;
    for (i, v) in verdicts.iter().enumerate() {
        assert_eq!(v, &Ok(vec!["1799".into(), "available".into(), "0".into()]), "pod {i}:\n{}", node.d.log());
    }
    let watched = watching.await.unwrap();
    assert!(watched.is_ok(), "{watched:?}\n{}", node.d.log());
    node.settles_at(&[1800; 8]).await;
    assert_eq!(node.books().await, vec![(1800, 1800); 8], "each reserved on its own NPU");
    let status = node.host.status().await.unwrap();
    for i in 0..DEVICES {
        let row = status.allocations.iter().find(|r| r.pod == format!("server-{i}")).unwrap();
        assert_eq!((row.device, row.booked, row.in_use, row.mode.as_str()), (i, 1800, 1800, "devices"), "{row:?}");
        assert_eq!((row.namespace.as_str(), row.container.as_str()), ("ml", "main"));
    }
    // Metrics name each pod by namespace and name, not by a container id.
    for i in 0..DEVICES {
        for (name, want) in [
            ("npud_pod_booked_streams", 1800.0),
            ("npud_pod_reserved_streams", 1800.0),
            ("npud_tenant_streams", 1800.0),
        ] {
            let key = format!("{name}{{tenant=\"ml/server-{i}\",device=\"{i}\"}}");
            assert_eq!(npud_tests::metric(node.metrics, &key), Some(want), "{key}");
        }
    }
    release(apps).await;
    node.settles_at(&[0; 8]).await;
}

/// A tensor-parallel pod: one process per NPU. Its container was given all eight NPUs and
/// 8 × 1,600 streams; every rank is admitted on its own NPU, booked and reserved there.
/// Then two TP-4 pods on disjoint halves, and the TP-8 pod again where npud cannot learn
/// its devices (no vendor resource listed): booked per acquisition, still on all eight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensor_parallel_pods_are_admitted_on_every_npu_they_use() {
    let mut node = Node::start().await;
    let all: Vec<u32> = (0..DEVICES).collect();
    let view = "0,1,2,3,4,5,6,7";

    // TP-8, its devices listed.
    let (ids, a) = node.allocate(1600, 0).await;
    node.pods.set_pods(&[("ml", "tp8", vec![Container::new("main", &ids, ascend(&all))])]);
    let go = node.go("go-tp8");
    let apps: Vec<App> = all.iter().map(|r| node.program(&a, (&pod_uid(1), 'a'), (view, *r), 1599, &go)).collect();
    std::fs::write(&go, b"").unwrap();
    let (verdicts, apps) = npud_tests::native::started_all(apps).await;
    assert!(verdicts.iter().all(|v| v.as_ref().is_ok_and(|w| w[0] == "1599")), "{verdicts:?}\n{}", node.d.log());
    node.settles_at(&[1600; 8]).await;
    assert_eq!(node.books().await, vec![(1600, 1600); 8]);
    release(apps).await;
    node.settles_at(&[0; 8]).await;
    node.pods.set_pods(&[]);
    node.end_pod(&pod_uid(1));
    let gone = eventually_async(Duration::from_secs(20), || async { node.books().await == vec![(0, 0); 8] }).await;
    assert!(gone, "the TP-8 pod's bookings go with it: {:?}", node.books().await);

    // Two TP-4 pods on disjoint halves.
    let (ids_a, a) = node.allocate(800, 0).await;
    let (ids_b, b) = node.allocate(800, 100).await;
    node.pods.set_pods(&[
        ("ml", "tp4-a", vec![Container::new("main", &ids_a, ascend(&[0, 1, 2, 3]))]),
        ("ml", "tp4-b", vec![Container::new("main", &ids_b, ascend(&[4, 5, 6, 7]))]),
    ]);
    let go = node.go("go-tp4");
    let mut apps: Vec<App> = (0..4).map(|r| node.program(&a, (&pod_uid(2), 'b'), ("0,1,2,3", r), 1599, &go)).collect();
    apps.extend((0..4).map(|r| node.program(&b, (&pod_uid(3), 'c'), ("4,5,6,7", r), 1599, &go)));
    std::fs::write(&go, b"").unwrap();
    let (verdicts, apps) = npud_tests::native::started_all(apps).await;
    assert!(verdicts.iter().all(|v| v.as_ref().is_ok_and(|w| w[0] == "1599")), "{verdicts:?}\n{}", node.d.log());
    node.settles_at(&[1600; 8]).await;
    assert_eq!(node.books().await, vec![(1600, 1600); 8], "each half booked by its own pod");
    let status = node.host.status().await.unwrap();
    let mut halves: Vec<(String, u32)> = status.allocations.iter().map(|r| (r.pod.clone(), r.device)).collect();
    halves.sort_by_key(|h| h.1);
    let expect: Vec<(String, u32)> = (0..8).map(|d| (if d < 4 { "tp4-a" } else { "tp4-b" }.to_string(), d)).collect();
    assert_eq!(halves, expect, "{status:?}");
    release(apps).await;
    node.settles_at(&[0; 8]).await;
    node.pods.set_pods(&[]);
    node.end_pod(&pod_uid(2));
    node.end_pod(&pod_uid(3));
    let gone = eventually_async(Duration::from_secs(20), || async { node.books().await == vec![(0, 0); 8] }).await;
    assert!(gone, "{:?}", node.books().await);

    // TP-8 again, no vendor resource listed: booked per acquisition on every NPU.
    let (ids, a) = node.allocate(1600, 0).await;
    node.pods.set_pods(&[("ml", "tp8-unlisted", vec![Container::new("main", &ids, None)])]);
    let go = node.go("go-fallback");
    let apps: Vec<App> = all.iter().map(|r| node.program(&a, (&pod_uid(4), 'd'), (view, *r), 1599, &go)).collect();
    std::fs::write(&go, b"").unwrap();
    let (verdicts, apps) = npud_tests::native::started_all(apps).await;
    assert!(verdicts.iter().all(|v| v.as_ref().is_ok_and(|w| w[0] == "1599")), "{verdicts:?}\n{}", node.d.log());
    node.settles_at(&[1600; 8]).await;
    let status = node.host.status().await.unwrap();
    assert!(status.allocations.iter().all(|r| r.mode == "fallback"), "{status:?}");
    release(apps).await;
    node.settles_at(&[0; 8]).await;
}

/// Tokens and init containers: three containers of one pod presenting one token hold at
/// most its allocation together; an init container whose unit ids the kubelet hands on to
/// its app container (a second Allocate with the same ids) is booked once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_one_budget_and_an_init_containers_units_book_once() {
    let mut node = Node::start().await;
    // 4 units: 32 streams, on NPU 2.
    let (ids, a) = node.allocate(4, 0).await;
    node.pods.set_pods(&[("ml", "three", vec![Container::new("main", &ids, ascend(&[2]))])]);
    let pod = pod_uid(5);
    let mut containers: Vec<_> = ['a', 'b', 'c'].iter().map(|c| node.peer(&a.token, &pod, *c)).collect();
    let made: Vec<usize> = [20, 12, 1]
        .iter()
        .zip(&mut containers)
        .map(|(n, c)| c.ask(&format!("create-on 2 {n} 0"))["handles"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(made, [20, 12, 0], "three holders of one token hold its 32 at most");
    assert_eq!(node.books().await[2], (32, 32));
    drop(containers);

    // An init container, then its app container given the same unit ids again.
    let (ids, init) = node.allocate(8, 10).await;
    let app = allocate(&mut node.plugin, &ids).await;
    let pod = pod_uid(6);
    node.pods.add_pod(
        "ml",
        "with-init",
        vec![Container::new("init", &ids, ascend(&[5])), Container::new("main", &ids, ascend(&[5]))],
    );
    let mut init_c = node.peer(&init.token, &pod, 'd');
    assert_eq!(init_c.ask("create-on 5 64 0")["handles"].as_array().map(Vec::len), Some(64));
    assert_eq!(init_c.ask("destroy-all")["destroyed"], 64);
    drop(init_c);
    let mut app_c = node.peer(&app.token, &pod, 'e');
    assert_eq!(app_c.ask("create-on 5 64 0")["handles"].as_array().map(Vec::len), Some(64), "{}", node.d.log());
    assert!(app_c.ask("create-on 5 1 0")["handles"].is_null(), "one booking of 64, not two");
    assert_eq!(node.books().await[5], (64, 64), "reserved once");
    let tenant = pod_tenant(&pod);
    let list = node.host.admin().list_tenants(npud_tests::proto::ListTenantsRequest {}).await.unwrap().into_inner();
    let row = list.tenants.iter().find(|t| t.name == tenant).unwrap();
    assert_eq!((row.quota.unwrap().max_streams, row.source.as_str()), (64, "allocation"), "{row:?}");
}

/// A pod whose NPU is taken waits in that device's queue, holding nothing, and starts when
/// room returns; `status` shows it waiting there. Reservations go oldest binding first, so
/// the newer pod never takes the running pod's room (not even while the running pod holds
/// less than it was given) and is never refused as "can never be granted"; the room
/// returns when the running pod ends. The same in 20 runs, each on a fresh node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_npu_is_full_waits_for_it_the_same_in_20_runs() {
    for run in 0..20 {
        let mut node = Node::start_on(false).await;
        let (ids_a, ids_b) = (spread_ids(225, DEVICES, 0), spread_ids(100, DEVICES, 40));
        let (a, b) = (allocate(&mut node.plugin, &ids_a).await, allocate(&mut node.plugin, &ids_b).await);
        node.pods.set_pods(&[
            ("ml", "running", vec![Container::new("main", &ids_a, ascend(&[3]))]),
            ("ml", "ninth", vec![Container::new("main", &ids_b, ascend(&[3]))]),
        ]);
        let host = &node.host;
        let mut running = node.peer(&a.token, &pod_uid(100 + run), 'a');
        for n in [1000, 800] {
            let made = running.ask(&format!("create-on 3 {n} 0"));
            assert_eq!(made["handles"].as_array().map(Vec::len), Some(n), "run {run}: {made}");
        }
        let mut ninth = node.peer(&b.token, &pod_uid(200 + run), 'a');
        ninth.send("create-on 3 800 60000");
        let waiting = eventually_async(Duration::from_secs(20), || async {
            let status = host.status().await.unwrap();
            let row = status.allocations.iter().find(|r| r.pod == "ninth" && r.device == 3).cloned();
            status.devices[3].queued_requests == 1 && row.is_some_and(|r| r.waiting == 800 && r.in_use == 0)
        })
        .await;
        assert!(waiting, "run {run}: the ninth pod waits on device 3: {:?}", host.status().await.unwrap());
        let dev = host.devices().await.unwrap()[3].clone();
        assert_eq!((dev.in_use, dev.reserved), (1800, 1800 + (dev.capacity - 1800)), "run {run}: oldest first");
        // The running pod gives its streams back but runs on: its room stays its own.
        assert_eq!(running.ask("destroy-all")["destroyed"], 1800);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(host.devices().await.unwrap()[3].queued_requests, 1, "run {run}: still waiting");
        // The running pod ends: its processes, then its cgroup, then its listing.
        drop(running);
        node.end_pod(&pod_uid(100 + run));
        node.pods.set_pods(&[("ml", "ninth", vec![Container::new("main", &ids_b, ascend(&[3]))])]);
        let got = ninth.answer();
        assert_eq!(got["handles"].as_array().map(Vec::len), Some(800), "run {run}: it starts once room is back: {got}");
        assert_eq!(host.devices().await.unwrap()[3].reserved, 800, "run {run}: reserved in full now");
    }
}

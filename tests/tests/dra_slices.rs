//! Issue 78: the node's ResourceSlice. npud publishes one device per NPU on the fake
//! 8-NPU node to a fake API server, with a `streams` consumable capacity and its request
//! policy, `allowMultipleAllocations`, and the attributes that pair it with Huawei's DRA
//! driver's NPU; a fault takes an NPU out and recovery brings it back; a steady node (and
//! an npud restarted on it) writes nothing. A small allocator following KEP-5075's rules
//! then places claims against what was published, and npud books what it placed.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::dra::{Allocator, DRIVER, NODE, claim, named, plugin, prepare};
use npud_tests::node::{DEVICES, Node, NodeOptions};
use std::time::Duration;

async fn published(node: &Node, devices: usize) -> serde_json::Value {
    let api = node.api.as_ref().unwrap();
    let name = format!("{NODE}-{DRIVER}");
    let seen = npud_tests::eventually(Duration::from_secs(30), || {
        api.slices().get(&name).and_then(|s| s["spec"]["devices"].as_array().map(Vec::len)) == Some(devices)
    });
    assert!(seen, "{:?}\n{}", api.slices(), node.d.log());
    api.slices()[&name].clone()
}

fn names(slice: &serde_json::Value) -> Vec<String> {
    slice["spec"]["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_string()).collect()
}

/// One slice for the node: every NPU as `npu-<n>` with npud's capacity for claims, shared
/// by many claims, a request policy, and Huawei's `npu.huawei.com/physicId` beside npud's
/// own identity attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_publishes_every_npu_with_its_streams_for_claims() {
    let node = Node::with(NodeOptions { dra: true, ..Default::default() }).await.unwrap();
    let slice = published(&node, DEVICES as usize).await;
    let spec = &slice["spec"];
    assert_eq!((spec["driver"].as_str(), spec["nodeName"].as_str()), (Some(DRIVER), Some(NODE)));
    assert_eq!(spec["pool"], serde_json::json!({"name": NODE, "generation": 1, "resourceSliceCount": 1}));
    let books = node.host.devices().await.unwrap();
    for (i, d) in spec["devices"].as_array().unwrap().iter().enumerate() {
        assert_eq!(d["name"], format!("npu-{i}"));
        assert_eq!(d["allowMultipleAllocations"], true);
        let streams = &d["capacity"]["streams"];
        assert_eq!(streams["value"], books[i].capacity.to_string(), "what npud hands out there");
        let policy = &streams["requestPolicy"];
        assert_eq!(policy["default"], "8");
        assert_eq!(
            policy["validRange"],
            serde_json::json!({"min": "1", "max": books[i].capacity.to_string(), "step": "1"})
        );
        let attrs = &d["attributes"];
        assert_eq!(attrs["npu.huawei.com/physicId"], serde_json::json!({"int": books[i].physical_id}));
        assert_eq!(attrs["physicalId"], attrs["npu.huawei.com/physicId"]);
        assert_eq!(attrs["vendor"], serde_json::json!({"string": "huawei"}));
        assert!(attrs["model"]["string"].is_string());
    }
}

/// Health as the kubelet's DRAResourceHealth watch gets it: (device, healthy) each.
async fn health_of(
    watch: &mut tonic::Streaming<npud_proto::dra_health::NodeWatchResourcesResponse>,
) -> Vec<(String, bool)> {
    let next = tokio::time::timeout(Duration::from_secs(30), watch.message()).await.unwrap().unwrap().unwrap();
    next.devices
        .iter()
        .map(|d| {
            let id = d.device.as_ref().unwrap();
            assert_eq!(id.pool_name, NODE);
            (id.device_name.clone(), d.health == npud_proto::dra_health::HealthStatus::Healthy as i32)
        })
        .collect()
}

/// A fault on NPU 3 republishes the slice without it (a new pool generation), and the
/// kubelet's health watch hears it unhealthy; recovery republishes it with NPU 3 again,
/// healthy. Then a steady node writes nothing for 60 s, nor does an npud restarted on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_republishes_and_a_steady_node_writes_nothing() {
    use npud_proto::dra_health::dra_resource_health_client::DraResourceHealthClient;
    let mut node = Node::with(NodeOptions { dra: true, faults: true, ..Default::default() }).await.unwrap();
    let api_writes = |node: &Node| node.api.as_ref().unwrap().slice_writes();
    published(&node, 8).await;
    assert_eq!(api_writes(&node), 1);
    let mut health = DraResourceHealthClient::new(npud_tests::dra::served(&node.dra_paths().0).await);
    let request = npud_proto::dra_health::NodeWatchResourcesRequest {};
    let mut watch = health.node_watch_resources(request).await.unwrap().into_inner();
    let all_healthy: Vec<(String, bool)> = (0..8).map(|i| (format!("npu-{i}"), true)).collect();
    assert_eq!(health_of(&mut watch).await, all_healthy);
    node.fault(3, Some("8C03A000"));
    let slice = published(&node, 7).await;
    assert!(!names(&slice).contains(&"npu-3".to_string()));
    assert_eq!(slice["spec"]["pool"]["generation"], 2);
    let mut sick = all_healthy.clone();
    sick[3].1 = false;
    assert_eq!(health_of(&mut watch).await, sick);
    node.fault(3, None);
    assert_eq!(health_of(&mut watch).await, all_healthy);
    let slice = published(&node, 8).await;
    assert_eq!(slice["spec"]["pool"]["generation"], 3);
    assert_eq!(api_writes(&node), 3);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(api_writes(&node), 3, "a steady node writes nothing\n{}", node.d.log());
    node.restart_npud().await;
    assert!(
        npud_tests::eventually(Duration::from_secs(30), || node.d.log().contains("is as npud would publish it")),
        "{}",
        node.d.log()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(api_writes(&node), 3, "nor an npud restarted on it\n{}", node.d.log());
}

/// The scheduler's side: claims of `C/2 + 1` streams each (C an NPU's published capacity)
/// placed by KEP-5075's rules against the published slice: eight fit, one per NPU, and the
/// ninth does not; npud books each on the NPU it was placed on, exactly. A claim that
/// names no amount consumes the policy's default; one over an NPU's max fits nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_claims_fit_the_published_capacity_and_the_ninth_does_not() {
    let node = Node::with(NodeOptions { dra: true, ..Default::default() }).await.unwrap();
    let slice = published(&node, 8).await;
    let capacity: u64 = slice["spec"]["devices"][0]["capacity"]["streams"]["value"].as_str().unwrap().parse().unwrap();
    let mut allocator = Allocator::new(&slice);
    assert_eq!(Allocator::new(&slice).allocate(Some(capacity + 1), |_| true), None, "over max: nowhere");
    assert_eq!(Allocator::new(&slice).allocate(None, |_| true), Some(("npu-0".into(), 8)), "the default");
    let half = capacity / 2 + 1;
    let placed: Vec<(String, u64)> = (0..8).map(|_| allocator.allocate(Some(half), |_| true).unwrap()).collect();
    assert_eq!(
        placed.iter().map(|p| p.0.clone()).collect::<Vec<_>>(),
        (0..8).map(|i| format!("npu-{i}")).collect::<Vec<_>>()
    );
    assert_eq!(allocator.allocate(Some(half), |_| true), None, "the ninth fits nowhere");
    let api = node.api.as_ref().unwrap();
    let mut kubelet = plugin(&node.dra_paths().0).await;
    for (i, (device, consumed)) in placed.iter().enumerate() {
        let uid = format!("{i:08x}-3333-4000-8000-00000000a110");
        let pod = format!("{i:08x}-4444-4000-8000-00000000a110");
        api.put_claim(claim("ml", &format!("c{i}"), &uid, &pod, &[(device, Some(*consumed as u32))]));
        assert_eq!(prepare(&mut kubelet, vec![named("ml", &uid, &format!("c{i}"))]).await[&uid].error, "");
    }
    let reserved: Vec<u64> = node.books().await.iter().map(|b| u64::from(b.1)).collect();
    assert_eq!(reserved, vec![half; 8]);
}

//! Issue 74: a device's own word on its health. On the fake 8-NPU node the fake DCMI reports
//! the error codes a test injects, classed by a table in Ascend's device plugin's format; on
//! the fake 8-GPU node the fake NVML raises the XIDs a test injects. A faulted device's
//! units go Unhealthy at the kubelet, asks on it are refused naming the fault, other
//! devices are untouched, and a cleared DCMI fault admits again.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::deviceplugin::{self as dp, device_plugin_client::DevicePluginClient};
use npud_proto::v1::{self as pb, budget_reply::Reply};
use npud_tests::kubelet::Container;
use npud_tests::node::{DEVICES, Node, NodeOptions};
use npud_tests::wire::Wire;
use npud_tests::{StreamOptions, eventually_async};
use std::time::Duration;

/// The units' health per device, as ListAndWatch says it now (its first answer).
async fn units(plugin: &mut DevicePluginClient<tonic::transport::Channel>, device: u32) -> Vec<String> {
    let mut stream = plugin.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    let now = stream.message().await.unwrap().unwrap();
    let prefix = format!("npud-{device}-");
    now.devices.into_iter().filter(|d| d.id.starts_with(&prefix)).map(|d| d.health).collect()
}

/// All of `device`'s units say `health`, within a few seconds (npud reads faults every
/// 500 ms and ListAndWatch looks every 500 ms: a second by design).
async fn units_become(node: &mut Node, device: u32, health: &str) -> bool {
    let plugin = &mut node.plugin;
    for _ in 0..50 {
        let now = units(plugin, device).await;
        if !now.is_empty() && now.iter().all(|h| h == health) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A budget-wire ask of one stream on `device` from the host: Ok, or npud's refusal.
fn ask(node: &Node, device: u32) -> Result<(), String> {
    let mut w = Wire::hello(&node.d.socket, pb::BudgetHello::default());
    match w.acquire(device, 1, 0) {
        Ok(Reply::Acquired(_)) => Ok(()),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(e.message),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulted_npu_is_unhealthy_refused_by_name_and_admitted_again_once_cleared() {
    let mut node = Node::with(NodeOptions { faults: true, ..Default::default() }).await.unwrap();
    assert!(units_become(&mut node, 3, "Healthy").await);

    // A NotHandleFault code changes nothing.
    node.fault(3, Some("80E21007"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(units(&mut node.plugin, 3).await.iter().all(|h| h == "Healthy"));
    assert!(ask(&node, 3).is_ok());

    // A RestartNPU code: NPU 3's units Unhealthy, its asks refused by name, NPU 2 untouched.
    node.fault(3, Some("8C03A000"));
    assert!(units_become(&mut node, 3, "Unhealthy").await, "{}", node.d.log());
    let refused = ask(&node, 3).expect_err("no ask on a faulted NPU");
    assert!(refused.contains("0x8C03A000") && refused.contains("RestartNPU"), "{refused}");
    assert!(units(&mut node.plugin, 2).await.iter().all(|h| h == "Healthy"));
    assert!(ask(&node, 2).is_ok(), "another NPU is admitted to");
    let e = node.host.device(3).create_streams(1, StreamOptions::default()).await.expect_err("nor a daemon stream");
    assert!(e.to_string().contains("0x8C03A000"), "{e}");
    let devices = node.host.devices().await.unwrap();
    assert!(!devices[3].healthy && devices[3].fault.contains("RestartNPU"), "{:?}", devices[3]);
    let status = node.host.status().await.unwrap();
    assert!(status.devices[3].fault.contains("0x8C03A000") && status.devices[2].fault.is_empty(), "{status:?}");
    assert!(node.d.log().contains("the device reports a fault"), "{}", node.d.log());
    assert_eq!(npud_tests::metric(node.metrics, "npud_device_faulted{device=\"3\"}"), Some(1.0));

    // Cleared: Healthy, and admitted again.
    node.fault(3, None);
    assert!(units_become(&mut node, 3, "Healthy").await, "{}", node.d.log());
    assert!(ask(&node, 3).is_ok());
    let cleared =
        eventually_async(Duration::from_secs(5), || async { node.host.devices().await.unwrap()[3].fault.is_empty() })
            .await;
    assert!(cleared);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xid_79_faults_its_gpu_and_an_ignored_xid_13_changes_nothing() {
    let mut node = Node::with(NodeOptions { cuda_mig: Some(""), faults: true, ..Default::default() }).await.unwrap();
    assert!(units_become(&mut node, 5, "Healthy").await);

    // XID 13 (a graphics engine exception: the application's, NVIDIA's plugin ignores it).
    node.xid(2, 13);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(units(&mut node.plugin, 2).await.iter().all(|h| h == "Healthy"));
    assert!(ask(&node, 2).is_ok());

    // XID 79: the GPU has fallen off the bus.
    node.xid(5, 79);
    assert!(units_become(&mut node, 5, "Unhealthy").await, "{}", node.d.log());
    let refused = ask(&node, 5).expect_err("no ask on a GPU that raised XID 79");
    assert!(refused.contains("XID 79"), "{refused}");
    assert!(ask(&node, 4).is_ok(), "another GPU is admitted to");
}

/// A pod's process holding streams on NPU 3, within its grant: its next stream needs no
/// ask, yet once NPU 3 reports a fault the interposer has heard it from npud (the budget
/// share it asks for while holding streams) and refuses that stream, giving the fault as
/// aclGetRecentErrMsg's text. Once the fault clears, a process there is admitted again,
/// and npud's count equals the driver's throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_hears_of_its_npus_fault_before_its_next_stream() {
    let mut node = Node::with(NodeOptions { faults: true, ..Default::default() }).await.unwrap();
    let (ids, a) = node.allocate(10, 0).await;
    let uid = format!("{:08x}-0000-4000-8000-0000000000f4", std::process::id());
    let pods =
        |name: &str| vec![Container::new(name, &ids, Some(("huawei.com/Ascend910", vec!["Ascend910-3".into()])))];
    node.pods.set_pods(&[("ml", "holder", pods("main"))]);
    let mut app = node.steps(&a, (&uid, 'a'), 3, 80);
    app.say("+20");
    assert_eq!(app.line(), "held 20", "{}", node.d.log());
    let on3 = |n: u32| (0..DEVICES).map(|d| if d == 3 { n } else { 0 }).collect::<Vec<_>>();
    node.settles_at(&on3(21)).await;

    node.fault(3, Some("8C03A000"));
    assert!(units_become(&mut node, 3, "Unhealthy").await, "{}", node.d.log());
    // Each stream within the grant is made until the interposer has heard (it asks every
    // two seconds); the first after that is refused, and the program stops there.
    let mut said = String::new();
    for _ in 0..60 {
        app.say("+1");
        said = app.line();
        if said.starts_with("fail") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(said.starts_with("fail aclrtCreateStream 207"), "{said}\n{}", node.d.log());
    assert!(said.contains("0x8C03A000") && said.contains("RestartNPU"), "the reason names the fault: {said}");
    assert!(!app.child.wait().unwrap().success());
    node.settles_at(&[0; DEVICES as usize]).await;

    node.fault(3, None);
    assert!(units_become(&mut node, 3, "Healthy").await, "{}", node.d.log());
    let mut again = node.steps(&a, (&uid, 'b'), 3, 80);
    again.say("+5");
    assert_eq!(again.line(), "held 5", "{}", node.d.log());
    node.settles_at(&on3(6)).await;
    again.release();
    node.settles_at(&[0; DEVICES as usize]).await;
}

//! Issue 77: npud as a DRA kubelet plugin. A fake kubelet registers it through the plugin
//! watcher's API and calls the DRA v1 service; a fake API server serves the ResourceClaims
//! (allocation results with the streams each consumes on an NPU, the pod each is reserved
//! for). Prepare books exactly a claim's streams on its NPU for its pod and returns a CDI
//! device whose spec gives containers npud's socket and the interposer; the pods'
//! processes run under the interposer with what the spec sets, and npud's count equals
//! the fake driver's throughout.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::dra::{DRIVER, claim, named, plugin, prepare, register, unprepare};
use npud_tests::kubelet::Allocated;
use npud_tests::native::App;
use npud_tests::node::{DEVICES, Node, NodeOptions};
use std::collections::HashMap;
use std::time::Duration;

fn pod_uid(i: u32) -> String {
    format!("{i:08x}-0000-4000-8000-00000000d7a0")
}

fn claim_uid(i: u32) -> String {
    format!("{i:08x}-1111-4000-8000-00000000c1a1")
}

async fn dra_node() -> Node {
    Node::with(NodeOptions { dra: true, interposer: true, ..Default::default() }).await.unwrap()
}

/// Where `spec` breaks CDI's JSON schema (tests/cdi, vendored).
fn schema_errors(spec: &serde_json::Value) -> Vec<String> {
    let read = |f: &str| -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cdi").join(f);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let registry = jsonschema::Registry::new().add("https://cdi.invalid/defs.json", read("defs.json")).unwrap();
    let registry = registry.prepare().unwrap();
    let validator = jsonschema::options()
        .with_registry(&registry)
        .with_base_uri("https://cdi.invalid/schema.json")
        .build(&read("schema.json"))
        .unwrap();
    validator.iter_errors(spec).map(|e| e.to_string()).collect()
}

/// `spec` keeps CDI's JSON schema, and the rules CDI's SPEC.md adds that a schema cannot
/// say: a kind is `vendor/class` and a device's name, each of letters, digits and `_.-`
/// (`:` too in a name), starting and ending alphanumeric; env entries are `NAME=value`;
/// container paths are absolute.
fn check_cdi(spec: &serde_json::Value) {
    let errors = schema_errors(spec);
    assert!(errors.is_empty(), "not a CDI spec: {errors:?}\n{spec:#}");
    let name_ok = |n: &str, extra: &[char]| {
        let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        ends(n.chars().next())
            && ends(n.chars().last())
            && n.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c) || extra.contains(&c))
    };
    let (vendor, class) = spec["kind"].as_str().unwrap().split_once('/').unwrap();
    assert!(name_ok(vendor, &[]) && name_ok(class, &[]), "{}", spec["kind"]);
    for device in spec["devices"].as_array().unwrap() {
        assert!(name_ok(device["name"].as_str().unwrap(), &[':']), "{}", device["name"]);
        let edits = &device["containerEdits"];
        for e in edits["env"].as_array().into_iter().flatten() {
            let (k, _) = e.as_str().unwrap().split_once('=').unwrap();
            assert!(!k.is_empty() && !k.contains(char::is_whitespace), "{e}");
        }
        for m in edits["mounts"].as_array().into_iter().flatten() {
            assert!(m["containerPath"].as_str().unwrap().starts_with('/'), "{m}");
        }
    }
}

/// What the CDI spec of claim `uid` sets: its variables, and (container path, host path)
/// of each mount; the spec is checked against CDI's schema on the way.
fn spec_of(node: &Node, uid: &str) -> (HashMap<String, String>, Vec<(String, String)>) {
    let path = node.dra_paths().2.join(format!("npud.io-streams_{uid}.json"));
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    check_cdi(&spec);
    assert_eq!((spec["cdiVersion"].as_str(), spec["kind"].as_str()), (Some("0.5.0"), Some("npud.io/streams")));
    let device = &spec["devices"][0];
    assert_eq!(device["name"].as_str(), Some(uid));
    let edits = &device["containerEdits"];
    let env = edits["env"].as_array().unwrap().iter().map(|e| {
        let (k, v) = e.as_str().unwrap().split_once('=').unwrap();
        (k.to_string(), v.to_string())
    });
    let mounts = edits["mounts"].as_array().unwrap().iter().map(|m| {
        assert!(m["options"].as_array().unwrap().iter().any(|o| o == "ro"), "read-only: {m}");
        (m["containerPath"].as_str().unwrap().to_string(), m["hostPath"].as_str().unwrap().to_string())
    });
    (env.collect(), mounts.collect())
}

/// What a pod's container gets from the claim's CDI spec, as the node runs its processes.
fn from_spec(env: HashMap<String, String>) -> Allocated {
    Allocated { envs: env, token: std::path::PathBuf::new() }
}

/// Registration names a DRA plugin of npud's driver at its endpoint, serving DRA v1. Eight
/// pods' claims, one per NPU, each consuming 200 streams there: each is booked and
/// reserved exactly there, each pod's process (under the interposer, with what the CDI
/// spec sets) makes 199 streams and its default one, and npud equals the driver. Another
/// process of a pod whose claim is used up waits for the pod's streams, not for others'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_claims_on_eight_npus_are_each_booked_exactly_and_their_pods_admitted() {
    let node = dra_node().await;
    let (endpoint, registration, _) = node.dra_paths();
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let info = register(&registration).await;
    assert_eq!((info.r#type.as_str(), info.name.as_str()), ("DRAPlugin", DRIVER));
    assert_eq!(info.endpoint, endpoint.to_str().unwrap());
    assert_eq!(info.supported_versions, vec!["v1.DRAPlugin".to_string()]);
    let api = node.api.as_ref().unwrap();
    let mut claims = Vec::new();
    for i in 0..DEVICES {
        api.put_claim(claim(
            "ml",
            &format!("streams-{i}"),
            &claim_uid(i),
            &pod_uid(i),
            &[(&format!("npu-{i}"), Some(200))],
        ));
        claims.push(named("ml", &claim_uid(i), &format!("streams-{i}")));
    }
    let mut kubelet = plugin(&endpoint).await;
    let answers = prepare(&mut kubelet, claims).await;
    assert_eq!(answers.len(), 8);
    for i in 0..DEVICES {
        let a = &answers[&claim_uid(i)];
        assert_eq!(a.error, "", "{}", node.d.log());
        assert_eq!(a.devices.len(), 1);
        let d = &a.devices[0];
        assert_eq!((d.pool_name.as_str(), d.device_name.clone()), (npud_tests::dra::NODE, format!("npu-{i}")));
        assert_eq!(d.request_names, vec!["streams".to_string()]);
        assert_eq!(d.cdi_device_ids, vec![format!("npud.io/streams={}", claim_uid(i))]);
    }
    assert_eq!(node.books().await, vec![(0, 200); 8], "each claim reserved on its own NPU");
    // The claim's status says what npud booked on which device (KEP-4817).
    let reported = &api.claim("ml", "streams-3")["status"]["devices"];
    assert_eq!(reported.as_array().map(Vec::len), Some(1), "{reported}");
    let entry = &reported[0];
    assert_eq!((entry["driver"].as_str(), entry["device"].as_str()), (Some(DRIVER), Some("npu-3")));
    assert_eq!(entry["shareID"], format!("{}-npu-3", claim_uid(3)));
    assert_eq!(entry["data"]["bookedStreams"], 200);
    assert_eq!(entry["conditions"][0]["type"], "Ready");
    // CDI's schema is a real check: a spec without a device's edits fails it.
    let broken = serde_json::json!({"cdiVersion": "0.5.0", "kind": "npud.io/streams", "devices": [{"name": "x"}]});
    assert_eq!(schema_errors(&broken), vec!["\"containerEdits\" is a required property".to_string()]);
    let (env, mounts) = spec_of(&node, &claim_uid(0));
    assert_eq!(env["NPUD_SOCKET"], node.d.socket.to_str().unwrap());
    assert_eq!(env["NPUD_REQUIRED"], "1");
    assert!(mounts.iter().any(|(c, _)| c == "/etc/ld.so.preload"), "the interposer is injected: {mounts:?}");
    assert!(mounts.iter().any(|(c, h)| c.ends_with(".so") && std::path::Path::new(h).is_file()), "{mounts:?}");
    let go = node.go("go");
    let a = from_spec(env);
    let apps: Vec<App> =
        (0..DEVICES).map(|i| node.program(&a, (&pod_uid(i), 'a'), (&i.to_string(), 0), 199, &go)).collect();
    std::fs::write(&go, b"").unwrap();
    let (verdicts, apps) = npud_tests::native::started_all(apps).await;
    for (i, v) in verdicts.iter().enumerate() {
        assert_eq!(v, &Ok(vec!["199".into(), "available".into(), "0".into()]), "pod {i}:\n{}", node.d.log());
    }
    node.settles_at(&[200; 8]).await;
    assert_eq!(node.books().await, vec![(200, 200); 8]);
    // One more process of pod 0 wants 10 streams on NPU 0: its claim is used up there, so
    // it waits (as the pod's row says) until the pod's first process gives its streams back.
    let extra = node.program(&a, (&pod_uid(0), 'b'), ("0", 0), 9, &go);
    let waits = npud_tests::eventually_async(Duration::from_secs(30), || async {
        let status = node.host.status().await.unwrap();
        status.allocations.iter().any(|r| r.pod == "pod-of-streams-0" && r.device == 0 && r.waiting > 0)
    });
    assert!(waits.await, "{:?}\n{}", node.host.status().await.unwrap().allocations, node.d.log());
    let mut apps = apps;
    let first = apps.remove(0);
    tokio::task::spawn_blocking(move || first.release()).await.unwrap();
    let (verdicts, extra) = npud_tests::native::started_all(vec![extra]).await;
    assert_eq!(verdicts[0].as_ref().map(|v| v[0].as_str()), Ok("9"), "{}", node.d.log());
    apps.extend(extra);
    tokio::task::spawn_blocking(move || apps.into_iter().for_each(App::release)).await.unwrap();
    node.settles_at(&[0; 8]).await;
    let claims: Vec<_> = (0..DEVICES).map(|i| named("ml", &claim_uid(i), &format!("streams-{i}"))).collect();
    let done = unprepare(&mut kubelet, claims).await;
    assert!(done.values().all(String::is_empty) && done.len() == 8, "{done:?}");
    assert_eq!(node.books().await, vec![(0, 0); 8], "unprepared: nothing booked");
}

/// Prepare twice, Unprepare of a claim never prepared, Unprepare twice, Prepare again
/// after an Unprepare, and Prepare again after npud restarts: each claim is booked once,
/// an npud restart keeps the booking (and answers without the API server), nothing is
/// left booked after the last Unprepare, and the claim's CDI spec goes with its pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_and_unprepare_are_idempotent_in_any_order_and_across_npud_restarts() {
    let mut node = dra_node().await;
    let (endpoint, registration, cdi) = node.dra_paths();
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let api = node.api.as_ref().unwrap();
    api.put_claim(claim("ns", "c", &claim_uid(1), &pod_uid(1), &[("npu-2", Some(48)), ("npu-5", Some(16))]));
    let c = || vec![named("ns", &claim_uid(1), "c")];
    let mut kubelet = plugin(&endpoint).await;
    let never = unprepare(&mut kubelet, vec![named("ns", &claim_uid(9), "other")]).await;
    assert_eq!(never[&claim_uid(9)], "", "unpreparing a claim never prepared is done already");
    let first = prepare(&mut kubelet, c()).await;
    let again = prepare(&mut kubelet, c()).await;
    assert_eq!(first, again);
    let reserved = |books: Vec<(u32, u32)>| books.iter().map(|b| b.1).collect::<Vec<_>>();
    assert_eq!(reserved(node.books().await), vec![0, 0, 48, 0, 0, 16, 0, 0], "booked once");
    // npud restarts: the booking is read back; Prepare answers the same without asking.
    node.restart_npud().await;
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let mut kubelet = plugin(&endpoint).await;
    assert_eq!(reserved(node.books().await), vec![0, 0, 48, 0, 0, 16, 0, 0], "kept across the restart");
    let after = prepare(&mut kubelet, c()).await;
    assert_eq!(after[&claim_uid(1)].error, "");
    assert_eq!(reserved(node.books().await), vec![0, 0, 48, 0, 0, 16, 0, 0], "still once");
    for _ in 0..2 {
        assert_eq!(unprepare(&mut kubelet, c()).await[&claim_uid(1)], "");
        assert_eq!(reserved(node.books().await), vec![0; 8], "{}", node.d.log());
    }
    // Prepared again (a pod re-created with the same claim): booked again, once.
    assert_eq!(prepare(&mut kubelet, c()).await[&claim_uid(1)].error, "");
    assert_eq!(reserved(node.books().await), vec![0, 0, 48, 0, 0, 16, 0, 0]);
    // The first booking's pod goes: its files go with it, not the spec the claim's live
    // booking uses.
    let spec = cdi.join(format!("npud.io-streams_{}.json", claim_uid(1)));
    node.place(std::process::id() + 1_000_000, &pod_uid(1), 'a');
    node.end_pod(&pod_uid(1));
    let swept = || node.d.log().contains("its claim was unprepared and its pod's cgroup is gone");
    assert!(npud_tests::eventually(Duration::from_secs(30), swept), "{}", node.d.log());
    assert!(spec.exists(), "the live booking's spec stays");
    assert_eq!(reserved(node.books().await), vec![0, 0, 48, 0, 0, 16, 0, 0]);
    // Unprepared for good: with the pod's cgroup gone, the spec goes too.
    assert_eq!(unprepare(&mut kubelet, c()).await[&claim_uid(1)], "");
    assert!(npud_tests::eventually(Duration::from_secs(30), || !spec.exists()), "{}", node.d.log());
    assert_eq!(reserved(node.books().await), vec![0; 8]);
}

/// A claim on an NPU whose room others took (a claim there already) is refused by
/// Prepare, saying how many streams are left; one on a faulted NPU is refused naming the
/// fault; neither books anything, and the refused claim is prepared once room returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_an_npu_without_room_or_faulted_is_refused_with_its_reason() {
    let node = Node::with(NodeOptions { dra: true, faults: true, ..Default::default() }).await.unwrap();
    let (endpoint, registration, _) = node.dra_paths();
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let capacity = node.host.devices().await.unwrap()[0].capacity;
    let api = node.api.as_ref().unwrap();
    api.put_claim(claim("ns", "big", &claim_uid(1), &pod_uid(1), &[("npu-0", Some(capacity - 10))]));
    api.put_claim(claim("ns", "more", &claim_uid(2), &pod_uid(2), &[("npu-0", Some(20))]));
    api.put_claim(claim("ns", "sick", &claim_uid(3), &pod_uid(3), &[("npu-1", Some(20))]));
    let mut kubelet = plugin(&endpoint).await;
    assert_eq!(prepare(&mut kubelet, vec![named("ns", &claim_uid(1), "big")]).await[&claim_uid(1)].error, "");
    let more = prepare(&mut kubelet, vec![named("ns", &claim_uid(2), "more")]).await;
    let why = &more[&claim_uid(2)].error;
    assert!(why.contains("npu-0 has 10 streams left") && why.contains("consumes 20"), "{why}");
    node.fault(1, Some("8C03A000"));
    assert!(
        npud_tests::eventually(Duration::from_secs(30), || node.d.log().contains("the device reports a fault")),
        "{}",
        node.d.log()
    );
    let sick = prepare(&mut kubelet, vec![named("ns", &claim_uid(3), "sick")]).await;
    let why = &sick[&claim_uid(3)].error;
    assert!(why.contains("npu-1 is faulted") && why.contains("RestartNPU"), "{why}");
    let reserved: Vec<u32> = node.books().await.iter().map(|b| b.1).collect();
    assert_eq!(reserved[..2], [capacity - 10, 0], "the refused claims booked nothing");
    assert_eq!(unprepare(&mut kubelet, vec![named("ns", &claim_uid(1), "big")]).await[&claim_uid(1)], "");
    assert_eq!(prepare(&mut kubelet, vec![named("ns", &claim_uid(2), "more")]).await[&claim_uid(2)].error, "");
    assert_eq!(node.books().await[0].1, 20);
}

/// The kubelet gives up on a Prepare while npud waits on the API server, and npud is
/// killed while another waits there: in each case the claim ends up booked once, by the
/// call that finishes it or by the kubelet's next one, and nothing is left half done (no
/// booking without its spec, no spec without its booking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_cut_at_its_await_or_by_npud_dying_books_a_claim_once() {
    let mut node = dra_node().await;
    let (endpoint, registration, cdi) = node.dra_paths();
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let api = node.api.as_ref().unwrap();
    api.put_claim(claim("ns", "a", &claim_uid(1), &pod_uid(1), &[("npu-1", Some(32))]));
    api.put_claim(claim("ns", "b", &claim_uid(2), &pod_uid(2), &[("npu-2", Some(16))]));
    let reserved = |books: Vec<(u32, u32)>| books.iter().map(|b| b.1).collect::<Vec<_>>();
    // The kubelet's call dropped while npud waits for the claim.
    api.delay_claims(Duration::from_secs(2));
    let call = {
        let endpoint = endpoint.clone();
        tokio::spawn(async move { prepare(&mut plugin(&endpoint).await, vec![named("ns", &claim_uid(1), "a")]).await })
    };
    assert!(npud_tests::eventually(Duration::from_secs(30), || api.gets() >= 1));
    call.abort();
    let _ = call.await;
    api.delay_claims(Duration::ZERO);
    let mut kubelet = plugin(&endpoint).await;
    assert_eq!(prepare(&mut kubelet, vec![named("ns", &claim_uid(1), "a")]).await[&claim_uid(1)].error, "");
    assert!(
        npud_tests::eventually_async(Duration::from_secs(30), || async {
            reserved(node.books().await) == vec![0, 32, 0, 0, 0, 0, 0, 0]
        })
        .await,
        "booked once: {:?}\n{}",
        node.books().await,
        node.d.log()
    );
    // npud killed while a Prepare waits on the API server: nothing of it is booked or
    // written, and the kubelet's next call books it.
    api.delay_claims(Duration::from_secs(30));
    let gets = api.gets();
    let call = {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            plugin(&endpoint)
                .await
                .node_prepare_resources(npud_proto::dra::NodePrepareResourcesRequest {
                    claims: vec![named("ns", &claim_uid(2), "b")],
                })
                .await
        })
    };
    assert!(npud_tests::eventually(Duration::from_secs(30), || api.gets() > gets));
    node.d.kill9();
    assert!(call.await.unwrap().is_err(), "the call died with npud");
    api.delay_claims(Duration::ZERO);
    node.start_npud_again().await;
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    assert_eq!(reserved(node.books().await), vec![0, 32, 0, 0, 0, 0, 0, 0], "the first kept, the second not begun");
    assert!(!cdi.join(format!("npud.io-streams_{}.json", claim_uid(2))).exists());
    let mut kubelet = plugin(&endpoint).await;
    assert_eq!(prepare(&mut kubelet, vec![named("ns", &claim_uid(2), "b")]).await[&claim_uid(2)].error, "");
    assert_eq!(reserved(node.books().await), vec![0, 32, 16, 0, 0, 0, 0, 0]);
}

/// What a hostile or broken kubelet might send is refused per claim, saying why, and
/// books nothing: a uid that would leave the CDI directory, a claim without a name, one
/// the API server does not have, too many claims in one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_claims_are_refused_each_saying_why_and_book_nothing() {
    let node = dra_node().await;
    let (endpoint, registration, cdi) = node.dra_paths();
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let mut kubelet = plugin(&endpoint).await;
    let answers = prepare(
        &mut kubelet,
        vec![
            named("ns", "../../etc/passwd", "x"),
            named("ns", &claim_uid(5), ""),
            named("ns", &claim_uid(6), "missing"),
        ],
    )
    .await;
    assert!(answers["../../etc/passwd"].error.contains("not a Kubernetes uid"), "{answers:?}");
    assert!(answers[&claim_uid(5)].error.contains("namespace and name"), "{answers:?}");
    assert!(answers[&claim_uid(6)].error.contains("not found"), "{answers:?}");
    let many: Vec<_> = (0..300).map(|i| named("ns", &claim_uid(100 + i), "c")).collect();
    let refused = kubelet.node_prepare_resources(npud_proto::dra::NodePrepareResourcesRequest { claims: many }).await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::InvalidArgument);
    assert_eq!(node.books().await.iter().map(|b| b.1).sum::<u32>(), 0);
    assert!(std::fs::read_dir(&cdi).map(|d| d.count()).unwrap_or(0) == 0, "no spec written");
}

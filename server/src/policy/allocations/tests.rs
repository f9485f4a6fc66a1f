use super::*;
use std::sync::Arc;

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_token_binds_to_its_pod_and_keeps_its_place_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let a = Allocations::new(dir.path().join("allocations"));
    let (token, file) = a
        .allocate(
            ids(&["npud-0-1", "npud-0-0", "npud-1-0"]),
            vec![(0, 16), (1, 8)],
            Some("libnpud_preload-ab.so".into()),
        )
        .unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    let (pod_tenant, other): (Tenant, Tenant) = (Arc::from("pod-1a2b"), Arc::from("pod-9f8e"));
    let (pod, other_pod) = (Some("1a2b"), Some("9f8e"));
    let placed = Some(Placement::Devices(vec![2, 5]));
    let bound = a.bind(&token, &pod_tenant, pod, placed.clone(), None).unwrap();
    assert_eq!((bound.allocation.total(), bound.allocation.seq), (24, 1));
    assert_eq!(a.booking("pod-1a2b").unwrap().devices, [(2, 12), (5, 12)].into(), "split evenly over its devices");
    assert!(
        a.bind(&format!("{token}\n"), &pod_tenant, pod, None, None).is_ok(),
        "again, and a trailing newline is fine"
    );
    assert_eq!(
        a.bind(&token, &other, other_pod, None, None).err().unwrap().reason,
        Reason::TenantRefused,
        "another pod"
    );
    assert_eq!(a.bind(&token, &other, None, None, None).err().unwrap().reason, Reason::TenantRefused, "the host");
    assert_eq!(a.bind("feed", &pod_tenant, pod, None, None).err().unwrap().reason, Reason::TenantRefused);
    // A restarted npud reads its allocations, bindings, order and placement back.
    let again = Allocations::new(dir.path().join("allocations"));
    assert!(again.bind(&token, &other, other_pod, None, None).is_err(), "still bound to its pod after a restart");
    assert_eq!(again.libraries(), ["libnpud_preload-ab.so"], "the interposer it mounted, read back");
    assert_eq!(again.in_binding_order(), vec![(pod_tenant.clone(), 2, 12), (pod_tenant.clone(), 5, 12)]);
    let names = PodNames { namespace: "ml".into(), pod: "server-0".into(), container: "main".into() };
    again.name_from(
        &[Listed {
            names: names.clone(),
            devices: vec![("npud.io/streams".into(), ids(&["npud-0-0", "npud-0-1", "npud-1-0"]))],
        }],
        "npud.io/streams",
    );
    assert_eq!(again.pod_name("pod-1a2b").as_deref(), Some("ml/server-0"));
    // Pod-resources: listed, kept; missing once, kept; missing twice, gone with its files.
    let live: std::collections::HashSet<Vec<String>> = [bound.allocation.ids.clone()].into();
    assert!(again.sweep(&live).is_empty());
    assert!(again.sweep(&Default::default()).is_empty(), "missing once");
    assert_eq!(again.sweep(&Default::default()).len(), 1, "missing twice");
    assert!(!file.exists() && again.list().is_empty() && again.booking("pod-1a2b").is_none());
}

/// An allocation booked by an npud before this one (whole, on one `device`) is read back
/// booked there, placed after the bindings that carry their order.
#[test]
fn a_binding_an_earlier_npud_wrote_is_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allocations");
    let a = Allocations::new(path.clone());
    let (_, file) = a.allocate(ids(&["npud-0-0"]), vec![(0, 8)], None).unwrap();
    std::fs::write(file.with_extension("bound"), "tenant container-aaaaaaaaaaaa\npod 1a2b\ndevice 3\n").unwrap();
    let back = Allocations::new(path);
    assert_eq!(back.in_binding_order(), vec![(Arc::from("container-aaaaaaaaaaaa"), 3, 8)]);
    assert!(std::fs::read_to_string(file.with_extension("bound")).unwrap().contains("seq 1"), "its order written down");
}

/// Every container of a pod is one tenant: its allocations add up, an allocation whose
/// devices are unknown floats over every device, and an init container's unit ids that
/// the kubelet hands on to the app container (a second Allocate, same ids) count once.
#[test]
fn a_pods_allocations_add_up_and_an_init_containers_count_once() {
    let dir = tempfile::tempdir().unwrap();
    let a = Allocations::new(dir.path().join("allocations"));
    let pod: Tenant = Arc::from("pod-1a2b");
    let (init, _) = a.allocate(ids(&["npud-0-0", "npud-0-1"]), vec![(0, 16)], None).unwrap();
    let (app, _) = a.allocate(ids(&["npud-0-1", "npud-0-0"]), vec![(0, 16)], None).unwrap();
    let (sidecar, _) = a.allocate(ids(&["npud-1-0"]), vec![(1, 8)], None).unwrap();
    a.bind(&init, &pod, Some("1a2b"), Some(Placement::Devices(vec![0])), None).unwrap();
    a.bind(&app, &pod, Some("1a2b"), Some(Placement::Devices(vec![1])), None).unwrap();
    a.bind(&sidecar, &pod, Some("1a2b"), Some(Placement::Fallback { spread: 4 }), None).unwrap();
    let b = a.booking("pod-1a2b").unwrap();
    assert_eq!(b.devices, [(1, 16)].into(), "the app container's booking replaces its init container's");
    assert_eq!((b.floating, b.total, b.spread), (8, 24, 4));
    assert_eq!((b.on(1), b.on(0)), (24, 8), "what the pod may hold there");
    assert_eq!((b.first_ask(1), b.first_ask(0)), (18, 2), "its booking and an even share of what floats");
    assert_eq!(split(10, 4), [3, 3, 2, 2]);
    assert_eq!(split(7, 0), Vec::<u32>::new());
}

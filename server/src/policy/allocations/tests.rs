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
    // Its pod's cgroup lives: kept, listed or not. Gone: kept for the grace, then gone with
    // its files.
    let t0 = std::time::Instant::now();
    let grace = std::time::Duration::from_secs(60);
    let sweep = |alive: bool, at: u64| {
        let alive = move |_: &str| Some(alive);
        let s = Sweep { listing: Some(&[]), resource: "npud.io/streams", alive: &alive, grace, now: at_(t0, at) };
        again.sweep(&s).len()
    };
    assert_eq!(sweep(true, 0), 0, "an empty listing ends nothing");
    assert_eq!(sweep(false, 1), 0, "its cgroup just went");
    assert_eq!(sweep(true, 30), 0, "back (a listing caught up late): the clock starts again");
    assert_eq!(sweep(false, 31), 0);
    assert_eq!(sweep(false, 90), 0, "59 s gone");
    assert_eq!(sweep(false, 91), 1, "60 s gone");
    assert!(!file.exists() && again.list().is_empty() && again.booking("pod-1a2b").is_none());
}

fn at_(t0: std::time::Instant, secs: u64) -> std::time::Instant {
    t0 + std::time::Duration::from_secs(secs)
}

fn listed(ns: &str, pod: &str, ids: &[String]) -> Listed {
    Listed {
        names: PodNames { namespace: ns.into(), pod: pod.into(), container: "main".into() },
        devices: vec![("npud.io/streams".into(), ids.to_vec())],
    }
}

/// Issue 67: an allocation never presented ends only after `grace` of complete listings;
/// a listing that leaves out a live pod's bound allocation (a kubelet that has not caught
/// up) is no evidence, and no listing at all is none either.
#[test]
fn an_allocation_never_presented_ends_only_on_complete_listings() {
    let dir = tempfile::tempdir().unwrap();
    let a = Allocations::new(dir.path().join("allocations"));
    let (bound_token, _) = a.allocate(ids(&["npud-0-0"]), vec![(0, 8)], None).unwrap();
    a.bind(&bound_token, &Arc::from("pod-1a2b"), Some("1a2b"), Some(Placement::Devices(vec![0])), None).unwrap();
    let (_, never) = a.allocate(ids(&["npud-0-1"]), vec![(0, 8)], None).unwrap();
    let running = listed("ml", "server", &ids(&["npud-0-0"]));
    let t0 = std::time::Instant::now();
    let grace = std::time::Duration::from_secs(60);
    let alive = |_: &str| Some(true);
    let sweep = |listing: Option<&[Listed]>, at: u64| {
        let s = Sweep { listing, resource: "npud.io/streams", alive: &alive, grace, now: at_(t0, at) };
        a.sweep(&s).len()
    };
    let complete = std::slice::from_ref(&running);
    for at in [0, 100, 200] {
        assert_eq!(sweep(Some(&[]), at), 0, "an empty listing is partial: the bound pod lives, unlisted");
        assert_eq!(sweep(None, at + 1), 0, "no listing");
    }
    assert_eq!(sweep(Some(complete), 300), 0, "the first complete listing without it");
    assert_eq!(sweep(Some(&[]), 330), 0, "a partial one between changes nothing");
    assert_eq!(sweep(Some(complete), 359), 0);
    assert!(never.exists());
    assert_eq!(sweep(Some(complete), 360), 1, "60 s of complete listings");
    assert!(!never.exists());
    assert_eq!(a.list().len(), 1, "the bound one stays");
}

/// Every container of a pod is one tenant: its allocations add up, an allocation whose
/// devices are unknown floats over every device, and a unit id counts once per pod: the
/// latest bound allocation holding it books it (an app container that reuses its init
/// container's ids, with more or fewer of them than it had).
#[test]
fn a_pods_allocations_add_up_and_each_unit_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let a = Allocations::new(dir.path().join("allocations"));
    let pod: Tenant = Arc::from("pod-1a2b");
    let (init, _) = a.allocate(ids(&["npud-0-0", "npud-0-1"]), vec![(0, 16)], None).unwrap();
    let (app, _) = a.allocate(ids(&["npud-0-1", "npud-0-0", "npud-0-2", "npud-0-3"]), vec![(0, 32)], None).unwrap();
    a.bind(&init, &pod, Some("1a2b"), Some(Placement::Devices(vec![0])), None).unwrap();
    assert_eq!(a.booking("pod-1a2b").unwrap().total, 16, "the init container alone");
    a.bind(&app, &pod, Some("1a2b"), Some(Placement::Devices(vec![1])), None).unwrap();
    let b = a.booking("pod-1a2b").unwrap();
    assert_eq!((b.total, b.devices.clone()), (32, [(1, 32)].into()), "4 units, the app's, on its device");
    // An app that asked fewer than its init container: the init's other unit stays booked.
    let other: Tenant = Arc::from("pod-9f8e");
    let (init, _) = a.allocate(ids(&["npud-1-0", "npud-1-1"]), vec![(1, 16)], None).unwrap();
    let (app, _) = a.allocate(ids(&["npud-1-1"]), vec![(1, 8)], None).unwrap();
    let (sidecar, _) = a.allocate(ids(&["npud-1-7"]), vec![(1, 8)], None).unwrap();
    a.bind(&init, &other, Some("9f8e"), Some(Placement::Devices(vec![2])), None).unwrap();
    a.bind(&app, &other, Some("9f8e"), Some(Placement::Devices(vec![3])), None).unwrap();
    a.bind(&sidecar, &other, Some("9f8e"), Some(Placement::Fallback { spread: 4 }), None).unwrap();
    let b = a.booking("pod-9f8e").unwrap();
    assert_eq!(b.devices, [(2, 8), (3, 8)].into(), "each unit once");
    assert_eq!((b.floating, b.total, b.spread), (8, 24, 4));
    assert_eq!((b.on(3), b.on(0)), (16, 8), "what the pod may hold there");
    assert_eq!((b.first_ask(3), b.first_ask(0)), (10, 2), "its booking and an even share of what floats");
    assert_eq!(split(10, 4), [3, 3, 2, 2]);
    assert_eq!(split(7, 0), Vec::<u32>::new());
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

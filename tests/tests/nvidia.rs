//! Issue 73: NVIDIA nodes as they are deployed. npud holds a GPU's context only while a
//! gRPC client uses streams there (a context is device memory, and on an EXCLUSIVE_PROCESS
//! GPU it would keep every workload off); it serves EXCLUSIVE_PROCESS and PROHIBITED GPUs
//! with books only; and where NVML shows GPUs in MIG mode, each MIG device is a device of
//! its own, which pods given it are booked on. On the fake CUDA driver and the fake NVML
//! (`NPU_SIM_CUDA_COMPUTE_MODE`, `NPU_SIM_CUDA_MIG`), which records each process's retained
//! contexts where another process can count them.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::kubelet::Container;
use npud_tests::native::{App, Shared, cuda_apps, cuda_command, nvidia_libraries, release_as_granted};
use npud_tests::node::{Node, NodeOptions};
use npud_tests::{Daemon, StreamOptions, eventually, eventually_async};
use std::path::Path;
use std::time::Duration;

/// npud on the fake CUDA driver and NVML (side by side in `dir`), on `shared`, with `env`.
fn npud(dir: &Path, shared: &Shared, env: &[(&str, &str)]) -> Daemon {
    let cuda = nvidia_libraries(dir);
    let mut b = Daemon::builder()
        .args(&["--backend", "cuda", "--cuda-library", cuda.to_str().unwrap()])
        .config("[budget]\npool_max = 0\n")
        .env("NPU_SIM_SHARED", shared.path.to_str().unwrap());
    for (k, v) in env {
        b = b.env(k, v);
    }
    b.start()
}

/// The GPUs process `pid` holds a context on, as the fake driver records them.
fn contexts_of(shared: &Shared, pid: u32) -> Vec<String> {
    let mut dir = shared.path.clone().into_os_string();
    dir.push(".contexts");
    let prefix = format!("{pid}-");
    let names =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect());
    names.unwrap_or_else(|_| Vec::new()).into_iter().filter(|n: &String| n.starts_with(&prefix)).collect()
}

/// On a GPU in EXCLUSIVE_PROCESS mode (as MPS sets it) npud starts, holds no context, books
/// an interposed program's streams as the driver counts them, and answers a gRPC stream
/// call with an error naming the mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exclusive_process_gpu_is_served_with_books_only() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    let d = npud(dir.path(), &shared, &[("NPU_SIM_CUDA_COMPUTE_MODE", "3")]);
    assert!(d.log().contains("EXCLUSIVE_PROCESS"), "{}", d.log());
    let c = d.client().await;
    let e = c.device(0).create_streams(1, StreamOptions::default()).await.expect_err("no streams of npud's there");
    assert!(e.to_string().contains("EXCLUSIVE_PROCESS"), "{e}");

    let (program, _) = cuda_apps();
    let mut cmd = cuda_command(program, &shared.path, Some((&d, 20)));
    cmd.args(["10", "-1"]);
    let mut app = App::spawn(cmd);
    assert_eq!(app.started(), Ok(vec!["10".into()]));
    let counted = tokio::task::block_in_place(|| {
        eventually(Duration::from_secs(10), || npud_tests::native::native_created(&d) == 10)
    });
    assert!(counted, "npud books the program's 10 streams: {}", npud_tests::native::native_created(&d));
    assert!(contexts_of(&shared, d.pid()).is_empty(), "npud holds no context: {:?}", contexts_of(&shared, d.pid()));
    tokio::task::block_in_place(|| app.release());
}

/// On a GPU in the default mode npud holds no context until a gRPC client makes a stream,
/// and lets it go once the last of its streams and events is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npud_holds_a_context_only_while_a_client_uses_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let shared = Shared::new();
    // No warm pool: a pooled stream is npud's own and keeps the context (docs/hardware.md).
    let d = npud(dir.path(), &shared, &[]);
    assert!(contexts_of(&shared, d.pid()).is_empty(), "none at start: {:?}", contexts_of(&shared, d.pid()));
    let c = d.client().await;
    let streams = c.device(0).create_streams(3, StreamOptions::default()).await.unwrap();
    assert_eq!(contexts_of(&shared, d.pid()), [format!("{}-0", d.pid())], "one, while its streams live");
    let event = c.device(0).create_event(Default::default()).await.unwrap();
    drop(streams);
    let held = eventually_async(Duration::from_secs(5), || async { d.in_use() == 0 }).await;
    assert!(held && contexts_of(&shared, d.pid()).len() == 1, "the event keeps it");
    drop(event);
    let gone = eventually_async(Duration::from_secs(10), || async { contexts_of(&shared, d.pid()).is_empty() }).await;
    assert!(gone, "released with the last: {:?}", contexts_of(&shared, d.pid()));
    // Health probes never open one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(contexts_of(&shared, d.pid()).is_empty());
}

/// An 8-GPU node, GPU 0 in MIG mode with two MIG devices and GPU 3 with three: npud's
/// devices are every MIG device (by its own `MIG-…` UUID) and the other GPUs, and a pod
/// that NVIDIA's plugin gave a MIG device is booked on that device alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_devices_are_devices_and_a_pod_is_booked_on_its_own() {
    let mut node = Node::with(NodeOptions { cuda_mig: Some("0:2,3:3"), ..Default::default() }).await.unwrap();
    let devices = node.host.devices().await.unwrap();
    let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
    assert_eq!(uuids.len(), 11, "{uuids:?}");
    assert_eq!(uuids.iter().filter(|u| u.starts_with("MIG-")).count(), 5, "{uuids:?}");
    let mig = uuids.iter().filter(|u| u.starts_with("MIG-")).nth(3).unwrap().clone();
    let on = uuids.iter().position(|u| *u == mig).unwrap() as u32;

    let (ids, _a) = node.allocate(4, 0).await;
    node.pods.set_pods(&[(
        "ml",
        "mig",
        vec![Container::new("main", &ids, Some(("nvidia.com/gpu", vec![mig.clone()])))],
    )]);
    // The pod's first connection presents the token, which binds and places it.
    let mut peer = node.peer(&_a.token, "00000000-0000-4000-8000-0000000000a1", 'a');
    let said = peer.ask("status");
    assert!(said.get("error").is_none(), "{said}");
    let booked = eventually_async(Duration::from_secs(10), || async {
        let status = node.host.status().await.unwrap();
        status.allocations.iter().any(|r| r.pod == "mig" && r.device == on && r.mode == "devices")
    })
    .await;
    let status = node.host.status().await.unwrap();
    assert!(booked, "booked on MIG device {on} ({mig}): {:?}\n{}", status.allocations, node.d.log());
    assert!(status.allocations.iter().filter(|r| r.pod == "mig").all(|r| r.device == on), "{:?}", status.allocations);
}

/// Under MPS (its control daemon's pipe present, the GPU in EXCLUSIVE_PROCESS mode) the
/// MPS server takes 4 clients here (`NPU_SIM_CUDA_MPS_CLIENTS`; 48 on a real Volta-or-later
/// GPU through CUDA 13.0): 10 programs natively, 6 fail to retain their context
/// (CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, 808); under npud, told the limit (`mps_clients`),
/// the 6 wait for a client slot in its fair queue and start as others end: 0 failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_over_the_mps_client_limit_wait_for_a_slot_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("mps");
    std::fs::create_dir_all(&pipe).unwrap();
    std::fs::write(pipe.join("control"), b"").unwrap();
    let mode = [("NPU_SIM_CUDA_COMPUTE_MODE", "3"), ("NPU_SIM_CUDA_MPS_CLIENTS", "4")];
    let (program, _) = cuda_apps();
    let spawn = |shared: &Shared, d: Option<&Daemon>| {
        let mut cmd = cuda_command(program, &shared.path, d.map(|d| (d, 5)));
        cmd.envs(mode).env("NPUD_WAIT", "60s").args(["5", "-1"]);
        App::spawn(cmd)
    };

    let bare = Shared::new();
    let mut apps: Vec<App> = (0..10).map(|_| spawn(&bare, None)).collect();
    let verdicts: Vec<_> = tokio::task::block_in_place(|| apps.iter_mut().map(App::started).collect());
    assert_eq!(verdicts.iter().filter(|v| **v == Err(808)).count(), 6, "{verdicts:?}");
    drop(apps);

    let shared = Shared::new();
    let cuda = nvidia_libraries(&dir.path().join("lib"));
    let d = Daemon::builder()
        .args(&["--backend", "cuda", "--cuda-library", cuda.to_str().unwrap()])
        .config("[budget]\nmps_clients = 4\n")
        .env("NPU_SIM_SHARED", shared.path.to_str().unwrap())
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe.to_str().unwrap())
        .env("NPU_SIM_CUDA_COMPUTE_MODE", "3")
        .start();
    let apps: std::collections::HashMap<u32, App> = (0..10)
        .map(|_| {
            let a = spawn(&shared, Some(&d));
            (a.child.id(), a)
        })
        .collect();
    // Each program that holds a slot (and so its streams) ends in turn: a slot frees, and a
    // waiting program takes it. Every one starts.
    tokio::task::block_in_place(|| release_as_granted(&d, apps, Duration::from_secs(120)));
}

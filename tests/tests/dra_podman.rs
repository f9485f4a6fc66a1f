//! Issue 77: the CDI spec npud writes for a prepared claim, applied by a real container
//! engine: Debian's podman runs a container with `--device npud.io/streams=<claim uid>`
//! (a CDI name), and inside it are what the spec says: npud's variables, its socket's
//! directory and the interposer mounted read-only, and `/etc/ld.so.preload` naming the
//! interposer, which the container's own programs then load.
//!
//! podman 4.3 reads specs from `/etc/cdi` and `/var/run/cdi` only, so the spec npud wrote
//! in the node's CDI directory is placed there for the test (and removed after). The
//! rootfs is built from the host's files; nothing is downloaded. Skipped, loudly, where
//! podman is missing or the test is not root.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::dra::{claim, named, plugin, prepare};
use npud_tests::native::loads;
use npud_tests::node::{Node, NodeOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn podman() -> Option<PathBuf> {
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")));
    let found = ["/usr/bin/podman", "/usr/local/bin/podman"].into_iter().map(PathBuf::from).find(|p| p.exists());
    if !root || found.is_none() {
        eprintln!("SKIPPED LOUDLY: applying a CDI spec with podman needs root and podman (apt-get install podman)");
        return None;
    }
    found
}

/// A rootfs with `env` and `cat` in `/bin`, and what they and the interposer load.
fn rootfs(dir: &Path) {
    for sub in ["bin", "lib", "lib64", "etc", "proc", "dev", "sys", "tmp"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let tools: Vec<PathBuf> = ["env", "cat"]
        .iter()
        .map(|t| ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(t)).find(|p| p.exists()).unwrap())
        .collect();
    for tool in &tools {
        std::fs::copy(tool, dir.join("bin").join(tool.file_name().unwrap())).unwrap();
    }
    for elf in tools.iter().cloned().chain([npud_tests::native::preload_library()]) {
        for lib in loads(&elf) {
            let inside = match lib.starts_with("/lib64") {
                true => dir.join(lib.strip_prefix("/").unwrap()),
                false => dir.join("lib").join(lib.file_name().unwrap()),
            };
            std::fs::copy(&lib, inside).unwrap();
        }
    }
}

/// Removes the spec placed in podman's directory, however the test ends.
struct Placed(PathBuf);

impl Drop for Placed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One command run in a podman container of `rootfs` given CDI device `device`; its output.
fn run_in(podman: &Path, state: &Path, rootfs: &Path, device: &str, command: &[&str]) -> String {
    let out = Command::new(podman)
        .arg("--root")
        .arg(state.join("storage"))
        .arg("--runroot")
        .arg(state.join("run"))
        // A sandbox's limits can be lower than podman's defaults, which it may not raise.
        .args(["run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"])
        .args(["--device", device, "--rootfs"])
        .arg(rootfs)
        .args(command)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "podman failed: {stderr}\n{stdout}");
    format!("{stdout}{stderr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_applies_the_cdi_spec_of_a_prepared_claim() {
    let Some(podman) = podman() else { return };
    let node = Node::with(NodeOptions { dra: true, interposer: true, ..Default::default() }).await.unwrap();
    let (endpoint, registration, cdi) = node.dra_paths();
    assert!(npud_tests::eventually(Duration::from_secs(30), || registration.exists()), "{}", node.d.log());
    let uid = format!("{:08x}-2222-4000-8000-00000000cd10", std::process::id());
    let api = node.api.as_ref().unwrap();
    api.put_claim(claim("ns", "c", &uid, "00000001-0000-4000-8000-0000000000aa", &[("npu-0", Some(8))]));
    let answer = prepare(&mut plugin(&endpoint).await, vec![named("ns", &uid, "c")]).await;
    assert_eq!(answer[&uid].error, "", "{}", node.d.log());
    let device = answer[&uid].devices[0].cdi_device_ids[0].clone();
    let name = format!("npud.io-streams_{uid}.json");
    std::fs::create_dir_all("/var/run/cdi").unwrap();
    let placed = Placed(Path::new("/var/run/cdi").join(&name));
    std::fs::copy(cdi.join(&name), &placed.0).unwrap();
    let state = tempfile::tempdir().unwrap();
    let root = state.path().join("rootfs");
    rootfs(&root);
    let env = run_in(&podman, state.path(), &root, &device, &["/bin/env"]);
    assert!(env.lines().any(|l| l == format!("NPUD_SOCKET={}", node.d.socket.display())), "{env}");
    assert!(env.lines().any(|l| l == "NPUD_REQUIRED=1"), "{env}");
    let preload = run_in(&podman, state.path(), &root, &device, &["/bin/cat", "/etc/ld.so.preload"]);
    let library = preload.lines().next().unwrap().trim().to_string();
    assert!(library.ends_with(".so") && !preload.contains("cannot be preloaded"), "{preload}");
    // The container's own programs load the interposer ld.so.preload names, and npud's
    // socket directory and the interposer are mounted read-only.
    let maps = run_in(&podman, state.path(), &root, &device, &["/bin/cat", "/proc/self/maps"]);
    assert!(maps.contains(&library), "cat loaded the interposer:\n{maps}");
    let mounts = run_in(&podman, state.path(), &root, &device, &["/bin/cat", "/proc/self/mountinfo"]);
    let socket_dir = node.d.socket.parent().unwrap().display().to_string();
    for path in [socket_dir.as_str(), library.as_str()] {
        let line = mounts.lines().find(|l| l.split_whitespace().nth(4) == Some(path));
        assert!(
            line.is_some_and(|l| l.split_whitespace().nth(5).is_some_and(|o| o.starts_with("ro"))),
            "{path}:\n{mounts}"
        );
    }
    // A claim npud never prepared has no spec: podman refuses its device.
    let unknown = Command::new(&podman)
        .arg("--root")
        .arg(state.path().join("storage"))
        .arg("--runroot")
        .arg(state.path().join("run"))
        .args(["run", "--rm", "--network", "none", "--device", "npud.io/streams=no-such-claim", "--rootfs"])
        .arg(&root)
        .arg("/bin/env")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unresolvable CDI devices"), "{unknown:?}");
    drop(placed);
}

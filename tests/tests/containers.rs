//! Issue 56: npud with a real container runtime. Two containers run by runc (the runtime
//! containerd, podman and CRI-O drive), each placed in the cgroup `ctr run` gives a
//! container it names (`/default/<id>`, containerd's default namespace), each in a pid
//! namespace of its own, run an unmodified AscendCL program under the interposer (its
//! `LD_PRELOAD`, npud's socket and the fake driver's shared budget bind-mounted in). They
//! are two tenants, each held to its quota, and npud's count equals the fake driver's.
//!
//! The rootfs is built here from the host's files (the program, the fake vendor
//! libraries, the interposer and the C library they load), so nothing is downloaded.
//! Skipped, loudly, where runc is missing or the test is not root.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{App, Shared, acl_builder, acl_steps_app, fake_dir, loads, preload_library};
use npud_tests::{Daemon, eventually};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Per-tenant quota for the containers (npud's `[default_quota]`).
const QUOTA: u64 = 100;

fn runc() -> Option<PathBuf> {
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")));
    let found = ["/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if !root || found.is_none() {
        eprintln!("SKIPPED LOUDLY: a real container runtime needs root and runc (apt-get install runc)");
        return None;
    }
    found
}

/// A rootfs with the program at `/prog`, every library in `/lib` and the interpreter where
/// the program names it.
fn rootfs(dir: &Path) {
    let program = acl_steps_app();
    let fake = fake_dir();
    let elves = [program.clone(), fake.join("libascendcl.so"), fake.join("libruntime.so"), preload_library()];
    for sub in ["lib", "lib64", "proc", "dev", "sys", "tmp", "run/npud", "budget"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::copy(program, dir.join("prog")).unwrap();
    for elf in &elves {
        if elf != program {
            std::fs::copy(elf, dir.join("lib").join(elf.file_name().unwrap())).unwrap();
        }
        for lib in loads(elf) {
            let inside = if lib.starts_with("/lib64") {
                dir.join(lib.strip_prefix("/").unwrap())
            } else {
                dir.join("lib").join(lib.file_name().unwrap())
            };
            std::fs::copy(&lib, inside).unwrap();
        }
    }
}

/// A bundle for container `id` in `dir`: the rootfs, and runc's default spec with the
/// program, its environment, the bind mounts and `ctr run`'s cgroup.
fn bundle(runc: &Path, dir: &Path, id: &str, socket_dir: &Path, budget_dir: &Path) {
    rootfs(&dir.join("rootfs"));
    assert!(Command::new(runc).args(["spec", "--bundle"]).arg(dir).status().unwrap().success());
    let path = dir.join("config.json");
    let mut spec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    spec["process"]["terminal"] = false.into();
    spec["process"]["args"] = serde_json::json!(["/prog"]);
    spec["process"]["env"] = serde_json::json!([
        "PATH=/",
        "LD_LIBRARY_PATH=/lib",
        "LD_PRELOAD=/lib/libnpud_preload.so",
        "NPUD_SOCKET=/run/npud/npud.sock",
        "NPUD_REQUIRED=1",
        // Its start-up grant: the default stream and the first 60 (what it asks past that
        // is asked for as it goes).
        "NPUD_STREAMS=61",
        "NPU_SIM_SHARED=/budget/budget",
    ]);
    spec["root"]["readonly"] = false.into();
    spec["linux"]["cgroupsPath"] = format!("/default/{id}").into();
    let mounts = spec["mounts"].as_array_mut().unwrap();
    for (host, inside) in [(socket_dir, "/run/npud"), (budget_dir, "/budget")] {
        mounts.push(serde_json::json!({
            "destination": inside, "type": "bind", "source": host, "options": ["rbind", "rw"]
        }));
    }
    std::fs::write(&path, serde_json::to_string_pretty(&spec).unwrap()).unwrap();
}

/// The container `id` running, its program's stdio piped.
fn run(runc: &Path, dir: &Path, id: &str) -> App {
    let mut cmd = Command::new(runc);
    cmd.args(["run", "--bundle"]).arg(dir).arg(id).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    App::spawn(cmd)
}

/// Deletes its containers when the test ends, however it ends.
struct Containers<'a> {
    runc: &'a Path,
    ids: &'a [String],
}

impl Drop for Containers<'_> {
    fn drop(&mut self) {
        for id in self.ids {
            let _ = Command::new(self.runc).args(["delete", "-f"]).arg(id).stderr(Stdio::null()).status();
        }
    }
}

/// npud's streams for `tenant` on device 0.
fn tenant_streams(d: &Daemon, tenant: &str) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["tenants"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["tenant"] == tenant && t["device"] == 0))
        .and_then(|t| t["streams"].as_u64())
        .unwrap_or(0)
}

#[test]
fn two_runc_containers_are_two_tenants_each_held_to_its_quota() {
    let Some(runc) = runc() else { return };
    let shared = Shared::new();
    let sockets = tempfile::tempdir().unwrap();
    std::fs::set_permissions(sockets.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = sockets.path().join("npud").join("npud.sock");
    let config =
        format!("socket_mode = \"0666\"\nsocket_dir_mode = \"0755\"\n[default_quota]\nmax_streams = {QUOTA}\n");
    let d = acl_builder(&shared.path, &[]).socket(&socket).config(&config).start();
    let npud = d.pid();
    let ids = [format!("npud-test-{}-a", std::process::id()), format!("npud-test-{}-b", std::process::id())];
    let cleanup = Containers { runc: &runc, ids: &ids };
    let bundles: Vec<tempfile::TempDir> = ids
        .iter()
        .map(|id| {
            let b = tempfile::tempdir().unwrap();
            bundle(&runc, b.path(), id, socket.parent().unwrap(), shared.path.parent().unwrap());
            b
        })
        .collect();
    let mut apps: Vec<App> = ids.iter().zip(&bundles).map(|(id, b)| run(&runc, b.path(), id)).collect();
    for app in &mut apps {
        app.send("+60");
        assert_eq!(app.line(), "held 60", "{}", d.log());
    }
    let tenants: Vec<String> = ids.iter().map(|id| format!("container-default.{id}")).collect();
    assert!(
        eventually(Duration::from_secs(10), || tenants.iter().all(|t| tenant_streams(&d, t) == 61)
            && shared.held_by_others(npud) == 122
            && d.in_use() == 122),
        "two tenants of 61 (60 and the default stream), as the driver counts: {:?} driver {}\n{}",
        tenants.iter().map(|t| tenant_streams(&d, t)).collect::<Vec<_>>(),
        shared.held_by_others(npud),
        d.log()
    );
    // The first container takes its whole quota; one more is refused by npud, as the device
    // would refuse it, and the program ends; the other container is untouched.
    apps[0].send("+39");
    assert_eq!(apps[0].line(), "held 99");
    apps[0].send("+1");
    let refused = apps[0].line();
    assert!(
        refused.starts_with("fail aclrtCreateStream 207008 npud: ") && refused.contains(&format!("of max {QUOTA}")),
        "held to its quota of {QUOTA}, and told so: {refused}"
    );
    assert!(
        eventually(Duration::from_secs(10), || tenant_streams(&d, &tenants[0]) == 0
            && tenant_streams(&d, &tenants[1]) == 61
            && shared.held_by_others(npud) == 61
            && d.in_use() == 61),
        "the ended container's streams went back, the other's stayed: driver {}\n{}",
        shared.held_by_others(npud),
        d.log()
    );
    apps[1].send("+39");
    assert_eq!(apps[1].line(), "held 99", "the other container's quota is its own");
    let mut second = apps.pop().unwrap();
    drop(second.child.stdin.take());
    assert_eq!(second.line(), "done");
    drop(cleanup);
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(npud) == 0));
}

//! Issue 71: the fake runtime answers as CANN's open runtime does (hicann/runtime @681ef76).
//! One C program checks each capture rule against both fake libraries, the way a program
//! nobody here wrote would meet it; the table in docs/hardware.md maps each rule to the
//! runtime's file and line. And the fake's shared budget counts every container's
//! processes, whatever their uid, when a pid namespace's inode and pid come round again.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{Shared, acl_apps, acl_capture_rules_app, acl_command};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The rules the program checks, each of which must say "ok".
const RULES: &[&str] = &[
    "old-event-record",
    "old-event-wait",
    "old-flag-event-record",
    "isolation",
    "ex-event-record",
    "default-stream-joins",
    "begin-on-flag-0x8",
    "begin-on-flag-0x10",
    "begin-on-flag-0x800",
    "begin-on-flag-0x1000",
    "flag-0x10000",
    "flag-0x80000000",
    "cp-with-fast-launch",
    "cp-with-acsq-lock",
    "huge",
    "failed-end-status",
    "failed-end-nulls-model",
    "add-to-model",
    "add-to-model-takes-a-stream",
    "add-to-model-again",
    "add-to-model-once",
    "add-to-model-no-model",
    "unregistered-stub",
    "launches-in-capture",
    "launches-cascade",
    "launches-wait-for-execution",
    "end",
    "execute",
    "launches-run-at-execution",
    "callback-in-capture",
    "callback-not-run-yet",
    "callback-at-each-execution",
    "to-model-not-sub-graph",
    "to-model-none",
    "rt-to-model-none",
];

/// Every rule holds on a training part, on the inference part (where HUGE streams are
/// refused) and with AscendCL and the runtime in one library.
#[test]
fn every_capture_rule_answers_as_the_open_runtime() {
    for (name, value) in [("", ""), ("NPU_SIM_PROFILE", "atlas-inference"), ("NPU_SIM_ACL_LAYOUT", "single")] {
        let shared = Shared::new();
        let mut cmd = acl_command(acl_capture_rules_app(), &shared.path, None);
        if !name.is_empty() {
            cmd.env(name, value);
        }
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for rule in RULES {
            assert!(text.lines().any(|l| l == format!("ok {rule}")), "{rule} ({name}={value}):\n{text}");
        }
        assert!(text.contains("done 0") && out.status.success(), "{name}={value}:\n{text}");
    }
}

/// Two containers' programs, one after the other, each pid 1 of a fresh pid namespace
/// (whose inode the kernel hands out again once the first is gone) and each under its own
/// uid: the first is killed holding streams, leaving its lives file and its line; the
/// second is counted by the driver all the same, its predecessor's streams are not, and
/// once it exits no lives file is left.
#[test]
fn containers_of_other_uids_reusing_a_namespace_and_pid_are_each_counted() {
    let works = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if rustix::process::geteuid().as_raw() != 0 || !works {
        eprintln!("skipped: it needs root and `unshare --pid` to run programs as pid 1 of a namespace");
        return;
    }
    let shared = Shared::new();
    let dir = shared.path.parent().unwrap();
    // A scratch directory every container may write, as the table is shared by all.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (program, _) = acl_apps();
    let run = |uid: u32, streams: u32| {
        let mut cmd = acl_command(std::path::Path::new("unshare"), &shared.path, None);
        cmd.args(["--pid", "--fork", "--mount-proc", "setpriv"])
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg(program)
            .args([streams.to_string().as_str(), "-1"])
            .stdin(Stdio::piped());
        npud_tests::native::App::spawn(cmd)
    };
    let mut first = run(1000, 30);
    assert!(first.started().is_ok());
    assert_eq!(shared.held_by_others(0), 31, "the first container's streams, default stream included");
    // Killed: its lives file and its line stay behind (nothing ran at its exit).
    let inner = pid_one_of(first.child.id());
    Command::new("kill").args(["-9", &inner.to_string()]).status().unwrap();
    let _ = first.child.wait();

    let mut second = run(1001, 10);
    assert!(second.started().is_ok());
    let counted = npud_tests::eventually(Duration::from_secs(10), || shared.held_by_others(0) == 11);
    assert!(counted, "only the second container's 11 count: {}", shared.held_by_others(0));
    second.release();
    let lives = {
        let mut p = shared.path.clone().into_os_string();
        p.push(".lives");
        std::path::PathBuf::from(p)
    };
    let left: Vec<_> =
        std::fs::read_dir(&lives).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "no lives file once both are gone: {left:?}");
    assert_eq!(shared.held_by_others(0), 0);
}

/// The pid (in this namespace) of the program `unshare --fork` started as its child.
fn pid_one_of(unshare: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
    children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("unshare's child")
}

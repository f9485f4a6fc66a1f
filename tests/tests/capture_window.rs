//! Issue 57: the capture window. While a capture goes on it takes streams the runtime's way
//! (a stream per join, joins chained; a cascade stream per full capture queue), and npud's
//! books for the process must never be below what the device holds for it, at any moment
//! of the capture: the interposer is admitted for each stream before the call that makes
//! it. `native/acl_capture_steps.c` stops at checkpoints mid-capture; at each, npud's count
//! for the process is compared with the fake driver's.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{App, Shared, acl_apps, acl_capture_steps_app, acl_command};
use npud_tests::{Daemon, bin, eventually};
use std::time::Duration;

/// What npud books for the holder with `pid`, all its entries together.
fn booked(d: &Daemon, pid: u32) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|h| h["pid"] == pid).filter_map(|h| h["streams"].as_u64()).sum())
}

/// The capture program under `npuctl run` with a start-up grant of 4 (what the `long`
/// mode's streams and its capture's own take: every join and cascade is past it), in `env`.
fn steps(d: &Daemon, shared: &Shared, env: &[(&str, &str)], args: &[&str]) -> App {
    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.arg("--socket").arg(&d.socket).args(["run", "--streams", "4", "--"]).arg(acl_capture_steps_app()).args(args);
    App::spawn(cmd)
}

/// Runs `args` to its end, checking at every checkpoint that npud books at least what the
/// driver holds for the process on `physical`, and at the end that the two are equal with
/// nothing untracked. Returns the program's final line.
fn never_below_the_device(d: &Daemon, shared: &Shared, env: &[(&str, &str)], args: &[&str], physical: u32) -> String {
    let mut app = steps(d, shared, env, args);
    let pid = app.child.id();
    let npud = d.pid();
    let mut checkpoints = 0;
    let last = loop {
        let line = app.line();
        let Some(at) = line.strip_prefix("at ") else { break line };
        let (ours, device) = (booked(d, pid), u64::from(shared.held_on(physical, npud)));
        assert!(ours >= device, "{args:?} at {at}: npud books {ours}, the device holds {device}\n{}", d.log());
        checkpoints += 1;
        app.send("");
    };
    assert!(last.starts_with("ok "), "{args:?}: {last}\n{}", d.log());
    assert!(checkpoints > 0, "{args:?} stopped at no checkpoint");
    assert!(
        eventually(Duration::from_secs(10), || booked(d, pid) >= u64::from(shared.held_on(physical, npud))
            && d.npuctl_json(&["device", "list"]).as_array().is_some_and(|a| a.iter().all(|v| v["untracked"] == 0))),
        "{args:?}: nothing outside the books once it ended\n{}",
        d.log()
    );
    drop(app.child.stdin.take());
    assert_eq!(app.line(), "done");
    assert!(app.child.wait().expect("wait").success());
    assert!(
        eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(npud) == 0),
        "{args:?}: everything returns\n{}",
        d.log()
    );
    last
}

#[test]
fn two_threads_capturing_thread_local_chains_are_booked_before_the_device_makes_them() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert_eq!(never_below_the_device(&d, &shared, &[], &["threads"], 0), "ok threads streams 8");
}

#[test]
fn a_fan_out_to_eight_with_chained_joins_is_booked_before_the_device_makes_it() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert_eq!(never_below_the_device(&d, &shared, &[], &["fanout"], 0), "ok fanout streams 17");
}

#[test]
fn five_thousand_tasks_on_a_side_stream_book_their_cascade_streams_first() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert_eq!(never_below_the_device(&d, &shared, &[], &["long"], 0), "ok long streams 4");
}

#[test]
fn a_reset_in_the_middle_of_a_capture_gives_everything_back() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert_eq!(never_below_the_device(&d, &shared, &[], &["reset"], 0), "ok reset streams 0");
}

/// The program sees physical device 1 as its device 0: the capture's streams are booked
/// there, where the driver makes them.
#[test]
fn a_capture_in_a_renumbered_device_is_booked_on_the_physical_device() {
    let shared = Shared::new();
    let d = npud_tests::native::acl_builder(&shared.path, &[]).env("NPU_SIM_DEVICES", "2").start();
    let env = [("NPU_SIM_DEVICES", "2"), ("ASCEND_RT_VISIBLE_DEVICES", "1")];
    assert_eq!(never_below_the_device(&d, &shared, &env, &["fanout"], 1), "ok fanout streams 17");
    assert_eq!(shared.held_on(0, d.pid()), 0, "nothing on physical 0");
}

/// The race issue 57 found: A's capture joins 39 streams on a device with 100 free; B asks
/// npud for 30 daemon streams right then. With A's joins booked, B is refused by npud (the
/// device has 19); were they not, npud would admit B and its creation fail on the device
/// with 207008. Twenty times, each on a fresh daemon.
#[test]
fn a_neighbour_asking_mid_capture_is_refused_by_npud_never_by_the_device() {
    for round in 0..20 {
        let shared = Shared::new();
        let d = shared.daemon(&[]);
        let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
        // Everything but 100 streams, held by a program under npud.
        let filler = capacity - 100;
        let (program, _) = acl_apps();
        let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
        cmd.arg("--socket").arg(&d.socket).args(["run", "--streams", &filler.to_string(), "--"]).arg(program);
        cmd.args([(filler - 1).to_string().as_str(), "-1"]);
        let mut held = App::spawn(cmd);
        assert!(held.started().is_ok(), "round {round}: the filler starts\n{}", d.log());
        // A: 1 default + 40 streams, then a capture of its own stream and 39 joins: 81.
        let mut a = steps(&d, &shared, &[], &["join", "39"]);
        assert_eq!(a.line(), "at made");
        a.send("");
        assert_eq!(a.line(), "at joined", "round {round}\n{}", d.log());
        let out = d.npuctl(&["stream", "create", "--count", "30", "--wait", "0s"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "round {round}: 30 more cannot fit the 19 left");
        assert!(
            !stderr.contains("207008") && !stderr.to_lowercase().contains("backend"),
            "round {round}: refused by npud, not by the device: {stderr}\n{}",
            d.log()
        );
        a.send("");
        assert_eq!(a.line(), "ok join streams 40");
        drop(a.child.stdin.take());
        assert_eq!(a.line(), "done");
        held.release();
        assert!(a.child.wait().expect("wait").success());
        assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
    }
}

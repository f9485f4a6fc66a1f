//! Issue 57: streams made below AscendCL, through the runtime layer (`libruntime.so`'s
//! `rt*`/`rts*` entry points, as GE, HCCL and some AscendCL builds make them), are admitted
//! and booked by the interposer exactly once, whichever layers a call passes through.
//!
//! The fakes are laid out as the layered runtime is (tests/fake-acl/src/runtime.rs): the
//! fake AscendCL reaches `rt*` through the dynamic symbol table, so the interposer's `rt*`
//! hooks see AscendCL's own calls, nested in its AscendCL hooks. `NPU_SIM_ACL_LAYOUT=single`
//! gives the other layout, where AscendCL calls its implementation directly.
//!
//! Each program runs under `npuctl run` and takes its steps when the test says; at every
//! checkpoint npud's count for it equals the fake driver's, and nothing is `untracked`.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{App, Shared, acl_command, native_created, rt_steps_apps};
use npud_tests::{Daemon, bin, eventually};
use std::path::Path;
use std::time::Duration;

/// The program under `npuctl run` with a start-up grant of `streams`, in `layout`.
fn run(d: &Daemon, shared: &Shared, program: &Path, streams: u32, layout: Option<&str>) -> App {
    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    if let Some(layout) = layout {
        cmd.env("NPU_SIM_ACL_LAYOUT", layout);
    }
    cmd.arg("--socket").arg(&d.socket).args(["run", "--streams", &streams.to_string(), "--"]).arg(program);
    App::spawn(cmd)
}

/// npud counts `on_device` streams created by the program (its default stream included),
/// the driver holds as many for it, and nothing on the device is outside npud's books.
fn books_equal_the_device(d: &Daemon, shared: &Shared, on_device: u32, what: &str) {
    let npud = d.pid();
    assert!(
        eventually(Duration::from_secs(10), || native_created(d) == u64::from(on_device)
            && shared.held_by_others(npud) == on_device
            && d.device0()["untracked"] == 0),
        "{what}: npud counts {} created and {} untracked; the driver holds {} (expected {on_device})\n{}",
        native_created(d),
        d.device0()["untracked"],
        shared.held_by_others(npud),
        d.log()
    );
}

/// Steps through making and destroying streams, checking the books at each.
fn steps_keep_the_books_equal(program: &Path, layout: Option<&str>) {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let mut app = run(&d, &shared, program, 40, layout);
    assert_eq!(app.line(), "ready", "{}", d.log());
    books_equal_the_device(&d, &shared, 1, "the device set (its default stream)");
    for (step, held, what) in [
        ("+12", 12, "made within the start-up grant"),
        ("-5", 7, "destroyed, some by the other layer"),
        ("+50", 57, "made past the grant, each admitted"),
        ("-20", 37, "destroyed again"),
    ] {
        app.send(step);
        assert_eq!(app.line(), format!("held {held}"), "{what}\n{}", d.log());
        books_equal_the_device(&d, &shared, held + 1, what);
    }
    done(&d, &shared, app);
}

/// A daemon whose tenant (the test's uid, `root`) may hold `quota` streams, and `program`
/// under `npuctl run` with a start-up grant of 20, its device set.
fn quota_and_ready(shared: &Shared, program: &Path, quota: u32) -> (Daemon, App) {
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", &quota.to_string()]).status.success());
    let mut app = run(&d, shared, program, 20, None);
    assert_eq!(app.line(), "ready", "{}", d.log());
    (d, app)
}

/// The program takes 29 more streams: with its default stream, the whole quota of 30.
fn the_whole_quota(d: &Daemon, shared: &Shared, app: &mut App) {
    app.send("+29");
    assert_eq!(app.line(), "held 29");
    books_equal_the_device(d, shared, 30, "the whole quota");
}

/// The program's input ends: it frees what it holds and exits, and everything returns.
fn done(d: &Daemon, shared: &Shared, mut app: App) {
    drop(app.child.stdin.take());
    assert_eq!(app.line(), "done");
    assert!(app.child.wait().expect("wait").success());
    everything_returns(d, shared);
}

/// Once the program is gone, npud and the driver hold nothing for it.
fn everything_returns(d: &Daemon, shared: &Shared) {
    assert!(
        eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0),
        "everything returns: {}",
        d.device0()
    );
}

#[test]
fn streams_made_only_through_the_runtime_layer_are_booked_once() {
    let [rt, _, _] = rt_steps_apps();
    steps_keep_the_books_equal(rt, None);
}

#[test]
fn both_layers_mixed_book_each_stream_once_in_the_layered_layout() {
    let [_, mixed, _] = rt_steps_apps();
    steps_keep_the_books_equal(mixed, None);
}

#[test]
fn both_layers_mixed_book_each_stream_once_in_the_single_library_layout() {
    let [_, mixed, _] = rt_steps_apps();
    steps_keep_the_books_equal(mixed, Some("single"));
}

#[test]
fn ascendcl_alone_over_the_layered_runtime_books_each_stream_once() {
    let [_, _, acl] = rt_steps_apps();
    steps_keep_the_books_equal(acl, None);
}

/// rtGetAvailStreamNum, as gert's `NeedRollBackToSingleStream` reads it, answers the
/// tenant's share under `npuctl run`, not the device's free count; the huge-stream type is
/// answered as the runtime answers it on a part without huge streams.
#[test]
fn the_runtime_layers_available_count_is_the_tenants_share() {
    let [rt, mixed, _] = rt_steps_apps();
    for program in [rt, mixed] {
        let shared = Shared::new();
        let (d, mut app) = quota_and_ready(&shared, program, 100);
        app.send("+10");
        assert_eq!(app.line(), "held 10");
        app.send("avail");
        // The grant of 20 holds the default stream and 10 more: 9 unused, and 80 the
        // tenant may still take; the device has about 2,000 free.
        assert_eq!(app.line(), "avail 89", "{}", d.log());
        app.send("huge");
        assert_eq!(app.line(), "huge 207000 0", "no huge streams on the simulated part");
        books_equal_the_device(&d, &shared, 11, "after the counts");
        done(&d, &shared, app);
    }
}

/// A tenant out of room: the runtime layer's create is refused by npud with the device's
/// own code (207008), the stream is never made, and the books still equal the device.
#[test]
fn a_runtime_layer_create_past_the_quota_is_refused_before_the_device() {
    let [rt, _, _] = rt_steps_apps();
    let shared = Shared::new();
    let (d, mut app) = quota_and_ready(&shared, rt, 30);
    the_whole_quota(&d, &shared, &mut app);
    app.send("+1");
    let line = app.line();
    assert!(line.starts_with("fail ") && line.ends_with(" 207008"), "refused as the device would: {line}");
    assert!(app.child.wait().expect("wait").code() == Some(1));
    everything_returns(&d, &shared);
}

/// A framework that loads libruntime.so itself, `RTLD_LOCAL`, and looks the runtime layer
/// up in its handle: its streams are booked through our `dlsym`, as AscendCL's are, and
/// nothing it probes for exists before it loads the library.
#[test]
fn runtime_layer_names_looked_up_in_a_local_handle_are_booked() {
    npud_tests::native::runs_natively_and_under_npud_with_the_books_equal(
        npud_tests::native::rt_dlsym_app(),
        "20",
        "ok 20",
        21,
    );
}

/// A capture's Begin that npud refuses (the tenant's quota is full) answers at once, as
/// the device answers 207008 natively: not after the grace npud gives an ask to be
/// measured again (2 s), at either layer. The program times the call itself.
#[test]
fn a_refused_capture_begin_answers_at_once_at_either_layer() {
    let [rt, _, acl] = rt_steps_apps();
    for program in [rt, acl] {
        let shared = Shared::new();
        let (d, mut app) = quota_and_ready(&shared, program, 30);
        the_whole_quota(&d, &shared, &mut app);
        app.send("begin");
        let line = app.line();
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["begin", code, ms] = words.as_slice() else { panic!("unexpected: {line}") };
        assert_eq!(*code, "207008", "refused as the device would: {line}\n{}", d.log());
        let ms: u64 = ms.parse().expect("milliseconds");
        assert!(ms < 1000, "{program:?}: the refused Begin took {ms} ms");
        books_equal_the_device(&d, &shared, 30, "nothing taken by the refused Begin");
        done(&d, &shared, app);
    }
}

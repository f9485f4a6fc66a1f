//! Issue 19: unmodified programs get their streams through npud. A small C program linked
//! against libascendcl (the fake, on one device budget shared by every process through
//! NPU_SIM_SHARED) runs as is, and under `npuctl run` with the interposer preloaded.
//! Processes hold their streams until their stdin closes, so every check happens at a
//! point the test chose, not at one a timer raced to.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{
    self, App, Shared, acl_command, holder_pids, native_created, native_held, release_as_granted,
};
use npud_tests::{Daemon, bin, eventually, free_port, metric};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Streams each program creates, and what it holds with its default stream.
const STREAMS: u32 = 60;
const HELD: u32 = STREAMS + 1;

fn programs() -> (&'static PathBuf, &'static PathBuf) {
    npud_tests::native::acl_apps()
}

/// The program on the shared budget, holding its streams until released; under npud it
/// runs through `npuctl run` with `run_args`, as a user starts it.
fn spawn(shared: &Shared, program: &Path, under: Option<(&Daemon, &[&str])>) -> App {
    let mut cmd = match under {
        Some((d, run_args)) => {
            let mut c = acl_command(&bin("npuctl"), &shared.path, None);
            c.arg("--socket").arg(&d.socket).arg("run").args(run_args).arg("--").arg(program);
            c
        }
        None => acl_command(program, &shared.path, None),
    };
    cmd.args([STREAMS.to_string().as_str(), "-1"]);
    App::spawn(cmd)
}

/// The program's verdict on its start-up: Ok(what aclrtGetStreamAvailableNum said) or
/// Err(the vendor code).
fn available(app: &mut App) -> Result<u32, i64> {
    app.started().map(|w| match w.as_slice() {
        [_, label, a] if label == "available" => a.parse().expect("a count"),
        _ => panic!("unexpected start-up line: ok {w:?}"),
    })
}

#[test]
fn forty_programs_collide_without_npud_and_all_start_under_it() {
    let (program, _) = programs();
    // Without npud: every process takes what it can; those that come last fail half-way.
    let shared = Shared::new();
    let mut apps: Vec<App> = (0..40).map(|_| spawn(&shared, program, None)).collect();
    let verdicts: Vec<Result<u32, i64>> = apps.iter_mut().map(available).collect();
    let failed = verdicts.iter().filter(|v| v.is_err()).count();
    assert!(failed > 0, "40 x {HELD} streams cannot fit 2048");
    assert!(verdicts.iter().filter_map(|v| v.err()).all(|c| c == 207008), "{verdicts:?}");
    for a in apps {
        drop(a); // the failed ones already exited; the rest end with their pipes
    }

    // Under npud: the programs that do not fit wait, whole, and nobody fails.
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let npud = d.pid();
    let capacity = d.device0()["capacity"].as_u64().unwrap();
    let fit = capacity / u64::from(HELD);
    let run = ["--streams", "61", "--wait", "5m"];
    // npuctl run execs the program: its pid is the one npud lists as a holder.
    let apps: HashMap<u32, App> = (0..40)
        .map(|_| {
            let a = spawn(&shared, program, Some((&d, &run)));
            (a.child.id(), a)
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(60), || d.device0()["queued_requests"].as_u64() == Some(40 - fit)
            && native_held(&d) == fit * u64::from(HELD)
            && u64::from(shared.held_by_others(npud)) == fit * u64::from(HELD)),
        "{fit} programs hold their whole need and the rest wait:\n{}",
        d.log()
    );
    // At this quiet point npud's count and the driver's are the same number.
    assert_eq!(u64::from(shared.held_by_others(npud)), native_held(&d), "npud counts what the driver counts");
    release_as_granted(&d, apps, Duration::from_secs(120));
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && native_held(&d) == 0), "{}", d.log());
    assert_eq!(shared.held_by_others(npud), 0, "the driver holds nothing for them either");
}

#[test]
fn a_program_that_looks_the_runtime_up_with_dlsym_is_admitted_too() {
    let (_, dl) = programs();
    let shared = Shared::new();
    let port = free_port();
    let d = shared.daemon(&["--metrics", &format!("127.0.0.1:{port}")]);
    let mut app = spawn(&shared, dl, Some((&d, &["--streams", "61"])));
    assert!(app.started().is_ok());
    assert_eq!(native_held(&d), u64::from(HELD), "dlopen + dlsym(handle) calls were admitted");
    assert_eq!(d.in_use(), u64::from(HELD));
    // One round trip admitted the whole start-up, not one per stream, and
    // aclrtGetStreamAvailableNum right after it was answered from that grant's reply…
    assert_eq!(metric(port, "npud_budget_calls_total{call=\"acquire\"}"), Some(1.0));
    assert_eq!(metric(port, "npud_budget_calls_total{call=\"share\"}").unwrap_or(0.0), 0.0);
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0));
    // …and destroying 60 streams and resetting the device gave it back in at most one (off
    // the program's path: a process that exits at once gives it back by closing).
    assert!(metric(port, "npud_budget_calls_total{call=\"release\"}").unwrap_or(0.0) <= 1.0);
}

#[test]
fn a_killed_program_gives_its_streams_back_at_once_and_a_queued_one_leaves_nothing() {
    let (program, _) = programs();
    let shared = Shared::new();
    // A lease of an hour: anything returned in this test came back without a lease wait.
    let d = shared.daemon(&["--lease", "1h"]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "61"]).status.success());
    let mut holder = spawn(&shared, program, Some((&d, &["--streams", "61"])));
    assert!(holder.started().is_ok());
    assert_eq!(d.in_use(), u64::from(HELD));
    // A second program of the same tenant waits: the quota is spent.
    let queued = spawn(&shared, program, Some((&d, &["--streams", "61", "--wait", "5m"])));
    assert!(eventually(Duration::from_secs(30), || d.device0()["queued_requests"].as_u64() == Some(1)));
    let mut queued = queued;
    queued.child.kill().unwrap();
    queued.child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || d.device0()["queued_requests"].as_u64() == Some(0)),
        "it left the queue"
    );
    assert_eq!(d.in_use(), u64::from(HELD), "and took nothing");
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "SIGKILL returned the streams:\n{}", d.log());
    assert_eq!(shared.held_by_others(d.pid()), 0);
}

#[test]
fn available_streams_are_the_tenants_share_shared_with_grpc_clients() {
    let (program, _) = programs();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "100"]).status.success());
    // The same tenant holds 10 daemon streams through gRPC: one ledger, one quota.
    let out = d.npuctl(&["stream", "create", "--count", "10"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut app = spawn(&shared, program, Some((&d, &["--streams", "61"])));
    let available = available(&mut app).expect("started");
    assert_eq!(available, 100 - 10 - HELD, "aclrtGetStreamAvailableNum answers the tenant's share");
    assert_eq!(d.in_use(), 10 + u64::from(HELD));
    app.release();
}

#[test]
fn a_restarted_npud_counts_exactly_what_ten_running_programs_hold() {
    let (program, _) = programs();
    let shared = Shared::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("npud.sock");
    let mut first = shared.daemon_on(Some(&socket), &[]);
    let mut apps: Vec<App> = (0..10).map(|_| spawn(&shared, program, Some((&first, &["--streams", "61"])))).collect();
    for a in &mut apps {
        assert!(a.started().is_ok());
    }
    let held = 10 * u64::from(HELD);
    assert_eq!(native_held(&first), held);
    let capacity = first.device0()["capacity"].as_u64().unwrap();
    first.kill9();

    let second = shared.daemon_on(Some(&socket), &[]);
    // The programs notice, reconnect and declare what they hold; npud's count is the
    // driver's, whatever the driver said was free when npud started.
    assert!(
        eventually(Duration::from_secs(30), || holder_pids(&second).len() == 10 && native_held(&second) == held),
        "the ten programs declared their streams:\n{}",
        second.log()
    );
    assert_eq!(second.in_use(), held, "one ledger");
    assert_eq!(u64::from(shared.held_by_others(second.pid())), held, "npud counts what the driver counts");

    assert_eq!(
        second.device0()["capacity"].as_u64(),
        Some(capacity),
        "sized from the product (aclrtGetSocName), not from what was free at the restart"
    );
    // New admissions respect the declared streams: asking for one more than is left waits…
    let ask = (capacity - held + 1).to_string();
    let mut big = spawn(&shared, program, Some((&second, &["--streams", ask.as_str(), "--wait", "5m"])));
    assert!(
        eventually(Duration::from_secs(30), || second.device0()["queued_requests"].as_u64() == Some(1)),
        "{}",
        second.log()
    );
    // …until one of the ten ends.
    apps.pop().unwrap().release();
    assert!(big.started().is_ok(), "granted once a declared holder went away");
    big.release();
    for a in apps {
        a.release();
    }
    assert!(eventually(Duration::from_secs(10), || second.in_use() == 0 && native_held(&second) == 0));
    assert_eq!(shared.held_by_others(second.pid()), 0);
}

#[test]
fn without_npud_streams_a_process_asks_for_its_tenants_process_streams() {
    let (program, _) = programs();
    let shared = Shared::new();
    let lib = npud_tests::fake_library("libascendcl.so");
    let d = Daemon::builder()
        .args(&["--backend", "acl", "--acl-library", lib.to_str().unwrap()])
        .config("[[tenants]]\nname = \"trainers\"\nuids = [0]\nprocess_streams = 90\n")
        .env("NPU_SIM_SHARED", shared.path.to_str().unwrap())
        .start();
    // No --streams: the process's start-up ask comes from its tenant's config.
    let mut app = spawn(&shared, program, Some((&d, &[])));
    let available = available(&mut app).expect("started");
    assert_eq!(native_held(&d), 90, "one grant of the tenant's process_streams");
    assert_eq!(shared.held_by_others(d.pid()), HELD, "of which the program made {HELD}");
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    // What it may still create: the unused part of its grant plus what the tenant may take.
    assert_eq!(available, capacity - HELD);
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
}

/// A process that grows far past its start-up ask (a framework making streams lazily, one
/// at a time) asks npud ahead where the device has room to spare: a dozen asks for a
/// thousand streams, not one round trip per stream. What it asked ahead and did not use
/// goes back once it is quiet, so npud's books end equal to what the driver holds.
#[test]
fn a_process_growing_one_stream_at_a_time_asks_ahead_and_gives_back_what_it_did_not_use() {
    let (program, _) = programs();
    let shared = Shared::new();
    let port = free_port();
    let d = shared.daemon(&["--metrics", &format!("127.0.0.1:{port}")]);
    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    cmd.arg("--socket").arg(&d.socket).args(["run", "--streams", "61", "--"]).arg(program).args(["1000", "-1"]);
    let mut app = App::spawn(cmd);
    assert!(available(&mut app).is_ok(), "{}", d.log());
    let asks = metric(port, "npud_budget_calls_total{call=\"acquire\"}").unwrap();
    assert!(asks <= 20.0, "{asks} asks for 1,001 streams");
    assert!(
        eventually(Duration::from_secs(10), || native_held(&d) == 1001 && shared.held_by_others(d.pid()) == 1001),
        "npud holds for the process what the driver does, nothing asked ahead: {} {}",
        native_held(&d),
        shared.held_by_others(d.pid())
    );
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
}

/// Events a process holds natively, from `status`.
fn native_events(d: &Daemon) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"].as_array().map_or(0, |a| a.iter().filter_map(|h| h["events"].as_u64()).sum())
}

/// An inference part's 1023-event table is shared like its streams: npud counts the
/// events interposed processes make, holds each tenant to its max_events, answers
/// aclrtGetEventAvailNum with the caller's share, and gets everything back at exit.
#[test]
fn events_on_an_inference_part_are_admitted_against_the_tenants_quota() {
    let program = npud_tests::native::acl_events_app();
    let shared = Shared::new();
    let lib = npud_tests::fake_library("libascendcl.so");
    let d = Daemon::builder()
        .args(&["--backend", "acl", "--acl-library", lib.to_str().unwrap()])
        .env("NPU_SIM_SHARED", shared.path.to_str().unwrap())
        .env("NPU_SIM_PROFILE", "atlas-inference")
        .start();
    assert_eq!(d.device0()["event_limit"], 1023, "{}", d.device0());
    assert!(d.npuctl(&["quota", "set", "root", "--max-events", "500"]).status.success());
    let events_app = |n: u32| {
        let mut cmd = acl_command(program, &shared.path, Some((&d, 4)));
        cmd.env("NPU_SIM_PROFILE", "atlas-inference").arg(n.to_string());
        App::spawn(cmd)
    };
    let mut first = events_app(400);
    let words = first.started().expect("400 events fit the quota");
    // Left to it: the tenant's 500 less the 400 it made.
    assert_eq!(words, ["400", "available", "100"]);
    let counted = native_events(&d);
    assert!((400..=400 + 32).contains(&counted), "npud counts the events with at most a chunk spare: {counted}");
    assert_eq!(d.device0()["events_in_use"].as_u64(), Some(counted));

    // A second process of the same tenant: the device still has 600 events, the quota 100.
    let mut second = events_app(400);
    assert_eq!(second.started(), Err(207007), "refused with the vendor's no-event code at the quota");
    let _ = second.child.wait();
    assert!(eventually(Duration::from_secs(10), || native_events(&d) == counted), "the refused process left nothing");

    first.release();
    assert!(eventually(Duration::from_secs(10), || native_events(&d) == 0 && d.in_use() == 0), "{}", d.log());
    assert_eq!(d.device0()["events_in_use"], 0);
}

/// A program written like the vendor's samples (device and host buffers, copies, memset)
/// runs on the fake library unchanged, alone and under npud.
#[test]
fn a_sample_style_program_with_memory_runs_on_the_fake_library_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::acl_memory_app());
}

/// Runs a program that prints `ok` or `fail <what>` on the fake library, then under npud,
/// and checks that npud's books and the driver hold nothing for it once it has exited.
fn says_ok_alone_and_under_npud(program: &std::path::Path) {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    for npud in [None, Some((&d, 4))] {
        let out = acl_command(program, &shared.path, npud).stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "under npud: {}", npud.is_some());
        assert!(out.status.success());
    }
    assert!(eventually(Duration::from_secs(10), || native_held(&d) == 0), "{}", d.log());
    assert_eq!(shared.held_by_others(d.pid()), 0, "the driver holds nothing for the program either");
}

/// aclrtLaunchHostFunc, the callback API with no thread of the program's own: an ordinary
/// program (`native/acl_host_func.c`, which checks each result itself: "fail
/// the-event-after-a-waiting-function-completed", "fail
/// functions-out-of-order-or-missing-or-on-main", ... otherwise) gets its functions run in
/// stream order on the runtime's thread, each holding back the stream's later work, and the
/// open runtime's refusals, natively on the fake and under npud; npud counts what the
/// driver counts: the default stream and the program's two.
#[test]
fn host_functions_run_in_stream_order_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(native::acl_host_func_app(), "16", "ok 16", 3);
}

/// Streams synchronised through device memory (aclrtValueWrite, aclrtValueWait): on an A2
/// part a wait holds its stream's later work until another stream writes the value it
/// waits for, waits already met hold nothing, and the runtime's refusals are its own
/// (`native/acl_value_ops.c` checks each); on a part without value tasks both calls are
/// ACL_ERROR_RT_FEATURE_NOT_SUPPORT. Natively and under npud alike, npud counting what the
/// driver counts: the default stream and the program's two.
#[test]
fn streams_synchronised_through_device_memory_natively_and_under_npud() {
    let program = native::acl_value_ops_app();
    native::runs_natively_and_under_npud_on(Some("atlas-a2"), program, "supported", "ok values", 3);
    native::runs_natively_and_under_npud_on(None, program, "unsupported", "ok unsupported", 3);
}

/// The open runtime's other way to set a device on Ascend 910 parts,
/// aclrtSetDeviceWithoutTsdVXX, makes the same default context and default stream as
/// aclrtSetDevice: npud admits the process's start-up there too and counts what the
/// driver holds, nothing untracked. On an inference part the vendor refuses it (200001),
/// with npud or without, and nothing stays booked.
#[test]
fn a_device_set_without_the_tsd_daemon_is_admitted_as_any_set() {
    let program = native::acl_app_without_tsd();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let mut alone = spawn(&shared, program, None);
    assert_eq!(available(&mut alone).map(|_| ()), Ok(()), "natively on an Ascend 910 part");
    alone.release();
    let mut app = spawn(&shared, program, Some((&d, &[])));
    assert!(app.started().is_ok());
    native::created_as_the_driver_holds(&d, &shared, HELD);
    native::released_to_nothing(&d, &shared, app);

    for under_npud in [false, true] {
        let mut cmd = if under_npud {
            let mut c = acl_command(&bin("npuctl"), &shared.path, None);
            c.arg("--socket").arg(&d.socket).arg("run").arg("--").arg(program);
            c
        } else {
            acl_command(program, &shared.path, None)
        };
        cmd.args([STREAMS.to_string().as_str(), "-1"]).env("NPU_SIM_PROFILE", "atlas-inference");
        let mut refused = App::spawn(cmd);
        assert_eq!(refused.started(), Err(200_001), "not an Ascend 910 part (under npud: {under_npud})");
    }
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "nothing stays booked: {}", d.device0());
}

/// A program that works on the default stream (NULL), as the vendor's samples do, runs on
/// the fake library unchanged, alone and under npud; the default streams take nothing
/// from the device beyond their contexts', and everything is back after it exits.
#[test]
fn a_program_on_the_null_stream_runs_on_the_fake_library_and_under_npud() {
    let program = npud_tests::native::acl_default_stream_app();
    says_ok_alone_and_under_npud(program);
    // An A2 part, where the default stream's failure mode may be set too.
    let shared = Shared::new();
    let mut cmd = acl_command(program, &shared.path, None);
    let out = cmd.env("NPU_SIM_PROFILE", "atlas-a2").stdin(std::process::Stdio::null()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "on an A2 part");
}

/// A tenant's limit on priorities (`highest_priority`) holds for the streams its programs
/// make themselves, which npud never sees: a program asking for a more urgent priority
/// gets a stream at the tenant's limit, as the runtime clamps a priority out of its range
/// (`native/acl_priorities.c` reads back each stream's: aclrtCreateStream's 0, 0, 6, -1
/// clamped to 0, and 7 raised to 1 by aclrtSetStreamAttribute). Alone and under npud
/// without a limit they are as asked; limited to 4, none is more urgent than 4. The books
/// stay equal to the driver's.
#[test]
fn a_tenants_priority_limit_holds_for_the_streams_its_programs_make() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let program = native::acl_priorities_app();
    let under_npud = || {
        let mut cmd = acl_command(&npud_tests::bin("npuctl"), &shared.path, None);
        cmd.arg("--socket").arg(&d.socket).args(["run", "--"]).arg(program);
        App::spawn(cmd)
    };
    let mut alone = App::spawn(acl_command(program, &shared.path, None));
    assert_eq!(alone.line(), "ok priorities 0 0 6 0 1");
    alone.release();
    let mut app = under_npud();
    assert_eq!(app.line(), "ok priorities 0 0 6 0 1", "no limit");
    app.release();
    assert!(d.npuctl(&["quota", "set", "root", "--highest-priority", "4"]).status.success());
    let mut app = under_npud();
    assert_eq!(app.line(), "ok priorities 4 4 6 4 4", "limited to 4");
    native::created_as_the_driver_holds(&d, &shared, 6);
    native::released_to_nothing(&d, &shared, app);
}

/// Events' ids and completion times (aclrtGetEventId, aclrtEventGetTimestamp, agreeing
/// with aclrtEventElapsedTime) and waits with a timeout (aclrtStreamWaitEventWithTimeout,
/// a negative one refused), as `native/acl_event_times.c` checks them, the same on the
/// fake library and under npud, which counts what the driver counts: the default stream,
/// the program's and the 6 that wait.
#[test]
fn event_ids_times_and_timed_waits_behave_as_the_runtime_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        native::acl_event_times_app(),
        "6",
        "ok times streams 6",
        8,
    );
}

/// A program that registers stream state callbacks (aclrtRegStreamStateCallback, as GE
/// and AscendC's runtime do) hears of every stream made and about to go, default streams
/// and a context's teardown included, in the order of the callbacks' names, and gets the
/// priorities aclrtCreateStreamWithConfig clamps into aclrtDeviceGetStreamPriorityRange's
/// 7..0; it sets and reads stream attributes as HCCL and torch_npu do
/// (aclrtSetStreamAttribute: priority, failure mode, cache-op-info switch, tag, overflow
/// check). `native/acl_stream_state.c` checks each itself. It runs the same on the fake
/// library and under npud, which counts what the driver counts: the default stream and
/// 4 + 10 of the program's.
#[test]
fn stream_state_callbacks_and_priorities_behave_as_the_runtime_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        native::acl_stream_state_app(),
        "10",
        "ok state streams 14",
        15,
    );
}

/// The program says hello to npud at aclInit, before it uses a device, so npud identifies
/// it and opens its session while the program goes on (a framework imports and builds its
/// model in between); a program that then never uses a device exits cleanly.
#[test]
fn an_interposed_program_says_hello_at_acl_init() {
    let [program, ..] = npud_tests::native::init_wait_apps();
    let shared = Shared::new();
    let port = free_port();
    let d = shared.daemon(&["--metrics", &format!("127.0.0.1:{port}")]);
    npud_tests::native::says_hello_at_init(&d, port, &shared, acl_command(program, &shared.path, Some((&d, 61))));
}

/// Under a quota smaller than the default start-up ask (71), an unmodified program started
/// without --streams asks for what the quota allows instead of failing at aclrtSetDevice.
#[test]
fn the_first_ask_never_exceeds_the_tenants_quota() {
    let (program, _) = programs();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "61"]).status.success());
    // Without --streams the welcome's quota shapes the first ask; with a --streams above
    // the quota the ask goes out with the hello, before the quota is known, is refused,
    // and is asked again within it.
    for run_args in [&[][..], &["--streams", "200"][..]] {
        let mut app = spawn(&shared, program, Some((&d, run_args)));
        assert_eq!(available(&mut app), Ok(0), "{run_args:?}: started with the whole quota, none left");
        assert_eq!(native_held(&d), u64::from(HELD));
        assert_eq!(shared.held_by_others(d.pid()), HELD, "the driver counts what npud books");
        app.release();
        assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
    }
}

/// A program npud refuses reads it as the device's own failure: the same code, recorded as
/// the thread's last error (aclrtPeekAtLastError, aclrtGetLastError, which clears it), and
/// npud's reason in aclGetRecentErrMsg (torch_npu puts that text in the exception it
/// raises), linked or looked up with dlsym alike. Natively, on a device with as little
/// room left, the fake answers the same, without a message. Nothing stays booked or held.
#[test]
fn a_refused_program_reads_npuds_refusal_as_the_devices_failure() {
    let (linked, dl) = programs();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    // Natively: another program leaves 30 streams of the device's 2048 (npud holds 3).
    let mut crowd = App::spawn({
        let mut c = acl_command(linked, &shared.path, None);
        c.args(["2014", "-1"]);
        c
    });
    assert!(crowd.started().is_ok());
    for program in [linked, dl] {
        let mut native = spawn(&shared, program, None);
        assert_eq!(native.line(), "fail 207008 after 29 last 207008/207008/0", "{}", program.display());
        // It exits without cleaning up, as a failed start-up does; the next one starts once
        // it has gone and the driver freed its 30 (on a loaded machine it can still be
        // exiting when its line is read).
        let _ = native.child.wait();
        assert!(eventually(Duration::from_secs(10), || shared.held_by_others(d.pid()) == 2015));
    }
    crowd.release();

    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "30"]).status.success());
    for program in [linked, dl] {
        let mut app = spawn(&shared, program, Some((&d, &["--wait", "0s"])));
        let line = app.line();
        assert!(
            line.starts_with("fail 207008 after 29 last 207008/207008/0 msg npud: device 0: no budget for 1 streams")
                && line.contains("tenant root holds 30 of max 30"),
            "{}: {line}",
            program.display()
        );
        assert!(
            eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0),
            "nothing stays booked or held: {}",
            d.device0()
        );
    }
}

/// A process that resets its device and sets it again asks npud anew; what its reset gave
/// up must go back first (the watcher sends it off the program's path, and cannot while
/// the program waits on the connection), or under a quota of exactly its start-up it would
/// wait for its own grant.
#[test]
fn a_process_that_resets_and_sets_its_device_again_never_waits_on_itself() {
    let (program, _) = programs();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", &HELD.to_string()]).status.success());
    let mut cmd = acl_command(program, &shared.path, Some((&d, HELD)));
    cmd.args([STREAMS.to_string().as_str(), "0", "0", "3"]).env("NPUD_WAIT", "20s");
    let mut app = App::spawn(cmd);
    let started = std::time::Instant::now();
    assert!(app.started().is_ok());
    assert_eq!(app.line(), "done", "three rounds, each admitted");
    assert!(started.elapsed() < Duration::from_secs(15), "no round waited out NPUD_WAIT");
    assert!(app.child.wait().unwrap().success());
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
}

/// A program that forks a worker after aclInit (multiprocessing's "fork" start): the child
/// is a process of its own to npud, with its own session and grant, and the parent's
/// session ends when the parent exits even though the child lives on (the child does not
/// keep its parent's connection open).
#[test]
fn a_forked_child_is_admitted_as_a_process_of_its_own() {
    let program = npud_tests::native::acl_fork_app();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let mut cmd = acl_command(program, &shared.path, Some((&d, HELD)));
    cmd.arg(STREAMS.to_string());
    let mut app = App::spawn(cmd);
    let mut ready = HashMap::new();
    for _ in 0..2 {
        let line = app.line();
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["ready", role, pid] => ready.insert(role.to_string(), pid.parse::<u32>().expect("a pid")),
            _ => panic!("unexpected line: {line}"),
        };
    }
    let (parent, child) = (ready["parent"], ready["child"]);
    assert_ne!(parent, child);
    assert_eq!(app.child.id(), parent);
    // The parent leaves first; its streams go back, the child's stay. (`wait` would close
    // the child's input first: it is kept open here.)
    let input = app.child.stdin.take();
    assert!(app.child.wait().expect("wait").success(), "the parent ran cleanly");
    assert!(
        eventually(Duration::from_secs(10), || holder_pids(&d) == vec![child]),
        "npud lists {:?}, not the child {child} alone\n{}",
        holder_pids(&d),
        d.log()
    );
    assert_eq!(native_held(&d), u64::from(HELD), "the child's own grant");
    assert_eq!(shared.held_by_others(d.pid()), HELD, "the driver counts the child's streams alone");
    drop(input);
    assert_eq!(app.line(), "done");
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
    assert!(eventually(Duration::from_secs(10), || shared.held_by_others(d.pid()) == 0), "the child's streams went");
    assert!(holder_pids(&d).is_empty());
}

/// A worker forked while another thread of its parent waits in npud's queue for the device
/// (that thread's ask holds the connection at the moment of the fork): the child must not
/// keep its parent's connection open, or the parent's ask would stay queued after the
/// parent died, and be granted to nobody, for as long as the child lives.
#[test]
fn a_child_forked_while_its_parent_waits_for_the_device_does_not_keep_the_parents_ask() {
    let (program, _) = programs();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", &HELD.to_string()]).status.success());
    let mut holder = spawn(&shared, program, Some((&d, &["--streams", &HELD.to_string()])));
    assert!(holder.started().is_ok());
    let mut cmd = acl_command(npud_tests::native::acl_fork_asking_app(), &shared.path, Some((&d, HELD)));
    cmd.env("NPUD_WAIT", "5m");
    let mut app = App::spawn(cmd);
    assert_eq!(app.line(), "started");
    assert!(
        eventually(Duration::from_secs(30), || d.device0()["queued_requests"].as_u64() == Some(1)),
        "the thread's ask waits: the tenant's quota is spent\n{}",
        d.log()
    );
    app.send("fork");
    let child = app.line();
    let child: u32 = child.strip_prefix("child ").and_then(|p| p.parse().ok()).expect("child PID");
    let parent = app.line();
    assert!(parent.starts_with("parent "), "{parent}");
    // The child keeps the input it shares with its parent open: it lives on.
    let input = app.child.stdin.take();
    assert!(app.child.wait().unwrap().success(), "the parent exited");
    assert!(Path::new(&format!("/proc/{child}")).exists(), "the child lives on");
    assert!(
        eventually(Duration::from_secs(10), || d.device0()["queued_requests"].as_u64() == Some(0)),
        "the dead parent's ask left the queue although its child lives\n{}",
        d.log()
    );
    holder.release();
    assert!(
        eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0),
        "nothing was granted to the dead parent: npud books {} and the driver holds {}\n{}",
        d.in_use(),
        shared.held_by_others(d.pid()),
        d.log()
    );
    drop(input); // the child ends
}

/// Threads that set the device and create their streams and events all at once, as a
/// framework's do: they share the device's one default stream, and npud books what they
/// create, not a whole start-up ask per thread (each thread asked for one before the first
/// grant was booked: 8 threads held 568 for 161 streams), nor a chunk of events each.
#[test]
fn threads_that_start_together_are_booked_as_the_device_holds_them() {
    const THREADS: u32 = 8;
    const EACH: u32 = 20;
    const EVENTS: u32 = 3;
    let program = npud_tests::native::acl_threads_app();
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    // The default stream once, whatever number of threads set the device.
    let streams = THREADS * EACH + 1;
    // Without npud first: the fake runtime, as the vendor's, makes one default context.
    let mut native = App::spawn({
        let mut c = acl_command(program, &shared.path, None);
        c.args([THREADS.to_string(), EACH.to_string()]);
        c
    });
    assert_eq!(native.line(), format!("ok {THREADS} {EACH}"));
    assert_eq!(shared.held_by_others(d.pid()), streams, "the driver, without npud");
    native.release();
    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    cmd.arg("--socket").arg(&d.socket).arg("run").arg("--").arg(program);
    cmd.args([THREADS.to_string(), EACH.to_string(), EVENTS.to_string()]);
    let mut app = App::spawn(cmd);
    assert_eq!(app.line(), format!("ok {THREADS} {EACH}"));
    assert_eq!(shared.held_by_others(d.pid()), streams, "the driver, under npud");
    // What the threads' growth asked ahead goes back once they are quiet.
    assert!(
        eventually(Duration::from_secs(5), || native_held(&d) == u64::from(streams)),
        "npud books what the device holds\n{}",
        d.log()
    );
    let events = u64::from(THREADS * EVENTS);
    let counted = native_events(&d);
    assert!((events..=events + 32).contains(&counted), "{events} events booked as {counted}: more than a chunk spare");
    drop(app.child.stdin.take());
    assert_eq!(app.line(), "done");
    assert!(app.child.wait().expect("wait").success());
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
    assert_eq!(shared.held_by_others(d.pid()), 0);
}

/// Threads that each create a context of their own (as HCCL and vLLM-Ascend's allocator
/// do) and streams in it, without aclrtSetCurrentContext: the vendor makes a created
/// context the thread's. Each context holds its default stream; destroying it gives back
/// that stream and every stream made in it.
#[test]
fn threads_with_contexts_of_their_own_are_booked_as_the_device_holds_them() {
    // Each context's default stream, and the device's own: the program never sets the
    // device, so its first aclrtCreateContext also makes the device's default stream
    // (the vendor's aclrtCreateContext page), which the last aclrtDestroyContext frees.
    let streams = CONTEXT_THREADS * (CONTEXT_STREAMS + 1) + 1;
    contexts_of_their_own("context", None, CONTEXT_THREADS, (streams, streams));
}

/// The same, then the main thread sets the device and creates one stream in its default
/// context: the default context uses the device's default stream, which the threads'
/// contexts already made, so the set itself takes none.
#[test]
fn a_device_set_after_contexts_were_made_there_takes_no_stream_of_its_own() {
    let before_set = CONTEXT_THREADS * (CONTEXT_STREAMS + 1) + 1;
    contexts_of_their_own("context+set", None, CONTEXT_THREADS, (before_set, before_set + 1));
}

/// On an inference part every context, the default one included, also holds a stream for
/// internal synchronisation (the vendor's aclrtSetDevice and aclrtCreateContext pages):
/// npud books those as the device holds them too.
#[test]
fn on_an_inference_part_every_context_holds_an_internal_sync_stream_too() {
    const THREADS: u32 = 4;
    // The device's stream, then each context's default and sync streams and its own.
    let before_set = 1 + THREADS * (2 + CONTEXT_STREAMS);
    // The set: the default context's sync stream (the device's stream exists); then one.
    contexts_of_their_own("context+set", Some("atlas-inference"), THREADS, (before_set, before_set + 2));
}

const CONTEXT_THREADS: u32 = 8;
const CONTEXT_STREAMS: u32 = 10;

/// `acl_threads` in `mode` natively, then under `npuctl run`, on the fake's `profile`:
/// the driver holds `streams.1` both times (`streams.0` before the set, with
/// "context+set"), and npud books them.
fn contexts_of_their_own(mode: &str, profile: Option<&str>, threads: u32, streams: (u32, u32)) {
    let each = CONTEXT_STREAMS;
    let (before_set, streams) = streams;
    let program = npud_tests::native::acl_threads_app();
    let shared = Shared::new();
    let mut daemon = npud_tests::native::acl_builder(&shared.path, &[]);
    if let Some(profile) = profile {
        daemon = daemon.env("NPU_SIM_PROFILE", profile);
    }
    let d = daemon.start();
    let args = [threads.to_string(), each.to_string(), "0".into(), mode.into()];
    let command = |program: &Path| {
        let mut c = acl_command(program, &shared.path, None);
        if let Some(profile) = profile {
            c.env("NPU_SIM_PROFILE", profile);
        }
        c
    };
    let mut native = App::spawn({
        let mut c = command(program);
        c.args(&args);
        c
    });
    if mode == "context+set" {
        assert_eq!(native.line(), format!("contexts {threads}"));
        assert_eq!(shared.held_by_others(d.pid()), before_set, "the driver, without npud, before the set");
        native.send("go");
    }
    assert_eq!(native.line(), format!("ok {threads} {each}"));
    assert_eq!(shared.held_by_others(d.pid()), streams, "the driver, without npud");
    // Not under npud, it is what npud cannot see: counted exactly, npud's own contexts apart.
    assert!(
        eventually(Duration::from_secs(10), || d.device0()["untracked"] == u64::from(streams)),
        "npud counts {} untracked\n{}",
        d.device0()["untracked"],
        d.log()
    );
    native.release();
    // npud's count of what the program created reaches `n`.
    let counts = |n: u32, what: &str| {
        assert!(
            eventually(Duration::from_secs(10), || native_created(&d) == u64::from(n)),
            "npud counts {what}: {} created, the driver {n}\n{}",
            native_created(&d),
            d.log()
        );
    };
    let mut cmd = command(&bin("npuctl"));
    cmd.arg("--socket").arg(&d.socket).arg("run").arg("--").arg(program).args(&args);
    let mut app = App::spawn(cmd);
    if mode == "context+set" {
        assert_eq!(app.line(), format!("contexts {threads}"));
        assert_eq!(shared.held_by_others(d.pid()), before_set, "the driver, under npud, before the set");
        counts(before_set, "the device's stream too");
        app.send("go");
    }
    assert_eq!(app.line(), format!("ok {threads} {each}"));
    assert_eq!(shared.held_by_others(d.pid()), streams, "the driver, under npud");
    counts(streams, "what the device holds");
    assert!(native_held(&d) >= u64::from(streams), "and its grant covers them");
    drop(app.child.stdin.take());
    assert_eq!(app.line(), "done");
    assert!(app.child.wait().expect("wait").success());
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
    assert_eq!(shared.held_by_others(d.pid()), 0);
}

/// `npuctl run` leaves as a shell would: with the program's own status once it ran, 127
/// when there is no such program and 126 when it cannot be executed, so a script tells
/// npuctl's failures from the program's.
#[test]
fn npuctl_run_exits_as_a_shell_does() {
    let dir = tempfile::tempdir().unwrap();
    let run = |program: &Path, args: &[&str]| {
        let out =
            std::process::Command::new(bin("npuctl")).arg("run").arg("--").arg(program).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, said) = run(&dir.path().join("absent"), &[]);
    assert_eq!(code, Some(127), "{said}");
    assert!(said.contains("cannot run") && said.contains("absent"), "{said}");
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "not a program").unwrap();
    let (code, said) = run(&plain, &[]);
    assert_eq!(code, Some(126), "{said}");
    assert!(said.contains("Permission denied"), "{said}");
    assert_eq!(run(Path::new("sh"), &["-c", "exit 3"]).0, Some(3), "the program's own status");
}

/// An interposer whose path holds a space or a colon cannot be named in LD_PRELOAD (the
/// loader splits the list there): `npuctl run` says so and runs nothing, where the program
/// would otherwise have run without the interposer, unadmitted.
#[test]
fn npuctl_run_refuses_an_interposer_path_ld_preload_cannot_carry() {
    let dir = tempfile::tempdir().unwrap();
    for odd in ["my libs", "libs:old"] {
        let lib = dir.path().join(odd).join("libnpud_preload.so");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::copy(native::preload_library(), &lib).unwrap();
        let marker = dir.path().join("ran");
        let out = std::process::Command::new(bin("npuctl"))
            .args(["run", "--library"])
            .arg(&lib)
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains("LD_PRELOAD cannot carry") && said.contains(odd), "{said}");
        assert!(!marker.exists(), "the program never ran");
    }
}

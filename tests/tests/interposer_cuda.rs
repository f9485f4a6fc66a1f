//! Issue 19, CUDA: unmodified CUDA driver programs get their streams through npud, whether
//! they link libcuda or fetch the driver through `cuGetProcAddress_v2` as the CUDA runtime
//! does. Processes hold their streams until their stdin closes, so every check happens at
//! a point the test chose.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{
    App, Shared, cuda_apps, cuda_command, cuda_daemon, native_created, native_held, release_as_granted,
};
use npud_tests::{Daemon, eventually};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

const STREAMS: u32 = 60;

/// The program on the shared budget, holding its streams until released.
fn spawn(program: &Path, shared: &Path, npud: Option<&Daemon>) -> App {
    let mut cmd = cuda_command(program, shared, npud.map(|d| (d, STREAMS)));
    cmd.args([STREAMS.to_string().as_str(), "-1"]).env("NPUD_WAIT", "5m");
    App::spawn(cmd)
}

#[test]
fn forty_cuda_programs_collide_without_npud_and_all_start_under_it() {
    let (program, _) = cuda_apps();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    // Without npud: the device runs out part-way and the late programs fail.
    let mut apps: Vec<App> = (0..40).map(|_| spawn(program, &shared, None)).collect();
    let verdicts: Vec<Result<Vec<String>, i64>> = apps.iter_mut().map(App::started).collect();
    assert!(verdicts.iter().any(Result::is_err), "40 x {STREAMS} streams cannot fit 2048");
    assert!(
        verdicts.iter().filter_map(|v| v.as_ref().err()).all(|&c| c == 2),
        "CUDA_ERROR_OUT_OF_MEMORY: {verdicts:?}"
    );
    drop(apps);

    let shared = dir.path().join("budget-npud");
    let d = cuda_daemon(&shared, &[]);
    let capacity = d.device0()["capacity"].as_u64().unwrap();
    let fit = capacity / u64::from(STREAMS);
    let apps: HashMap<u32, App> = (0..40)
        .map(|_| {
            let a = spawn(program, &shared, Some(&d));
            (a.child.id(), a)
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(60), || d.device0()["queued_requests"].as_u64() == Some(40 - fit)
            && native_held(&d) == fit * u64::from(STREAMS)),
        "{fit} programs hold their streams and the rest wait:\n{}",
        d.log()
    );
    release_as_granted(&d, apps, Duration::from_secs(120));
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && native_held(&d) == 0), "{}", d.log());
}

/// The hello goes out at cuInit, linked or fetched through cuGetProcAddress_v2 as the
/// CUDA runtime does, before the program uses a device.
#[test]
fn an_interposed_program_says_hello_at_cu_init() {
    let [_, linked, fetched] = npud_tests::native::init_wait_apps();
    let shared = Shared::new();
    let port = npud_tests::free_port();
    let d = cuda_daemon(&shared.path, &["--metrics", &format!("127.0.0.1:{port}")]);
    for program in [linked, fetched] {
        let cmd = cuda_command(program, &shared.path, Some((&d, STREAMS)));
        npud_tests::native::says_hello_at_init(&d, port, &shared, cmd);
    }
}

#[test]
fn a_program_that_fetches_the_driver_through_cu_get_proc_address_is_admitted() {
    let (_, program) = cuda_apps();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    let mut app = spawn(program, &shared, Some(&d));
    assert!(app.started().is_ok());
    assert_eq!(native_held(&d), u64::from(STREAMS), "streams made through cuGetProcAddress_v2 pointers were admitted");
    assert_eq!(d.in_use(), u64::from(STREAMS));
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "{}", d.log());
}

/// A CUDA program using stream flags, stream callbacks and cuCtxSynchronize runs on the
/// fake driver as on the real one, alone and under the interposer.
#[test]
fn a_program_using_stream_callbacks_runs_on_the_fake_driver_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::cuda_callbacks_app());
}

/// A CUDA program on the NULL stream (and CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), whose
/// work orders itself against blocking streams as the seed says, runs on the fake driver
/// unchanged, alone and under the interposer; the default streams are not admitted.
#[test]
fn a_program_on_the_null_stream_runs_on_the_fake_driver_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::cuda_default_stream_app());
}

/// The driver's edge cases (bad flags, unrecorded and untimed events, NULL handles, no
/// context, missing devices) answer as an H100's driver does, on the fake and under npud.
#[test]
fn the_drivers_edge_cases_answer_as_on_a_gpu_alone_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::cuda_edges_app());
}

/// The everyday driver calls a program makes around its streams (the primary context's
/// state and flags, a context's flags and API version, a stream's context, the device's
/// memory, 32-bit and stream-ordered memsets and copies, a module loaded from a file and
/// unloaded) answer as an H100's driver does, refusals included, on the fake and under npud.
#[test]
fn everyday_driver_calls_answer_as_on_a_gpu_alone_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::cuda_basics_app());
}

/// Streams synchronised through memory with the driver's stream memory operations: a wait
/// holds its stream's later work until another stream writes the value, waits already met
/// hold nothing, and the driver's refusals (alignment, unknown memory, flags, the pre-12
/// entry points) are an H100's, on the fake and under npud.
#[test]
fn streams_synchronised_through_memory_answer_as_on_a_gpu_alone_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::cuda_value_ops_app());
}

/// Green contexts' edge cases (bad resource types and flags, clamped priorities, streams
/// that outlive their green context, which green context a stream names) answer alike on
/// the fake and under npud.
#[test]
fn green_contexts_edge_cases_answer_alike_alone_and_under_npud() {
    says_ok_alone_and_under_npud(npud_tests::native::cuda_green_edges_app());
}

/// Runs a program that prints `ok` or `fail <what>` on the fake driver, then under npud,
/// and checks that npud's books and the driver hold nothing for it once it has exited.
fn says_ok_alone_and_under_npud(program: &std::path::Path) {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    for npud in [None, Some((&d, 4))] {
        let out = cuda_command(program, &shared, npud).stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "under npud: {}", npud.is_some());
        assert!(out.status.success());
    }
    assert!(eventually(Duration::from_secs(10), || native_held(&d) == 0), "{}", d.log());
    let driver = npud_tests::native::Shared::at(&shared);
    assert_eq!(driver.held_by_others(d.pid()), 0, "the driver holds nothing for the program either");
}

/// A program that creates and destroys streams in rounds, asking for one stream at start:
/// the interposer grows its budget a chunk at a time and gives it back, and every round
/// is admitted (the program scripts/gpu-check.sh times on a GPU).
#[test]
fn a_program_creating_in_rounds_grows_and_returns_its_budget() {
    let program = npud_tests::native::cuda_create_cost_app();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    for npud in [None, Some((&d, 1))] {
        let out = cuda_command(program, &shared, npud)
            .args(["16", "20"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let words: Vec<&str> = line.split(' ').collect();
        assert!(
            matches!(words.as_slice(), ["create_ns", c, "destroy_ns", x, "streams", "16", "rounds", "20"]
                if c.parse::<u64>().is_ok() && x.parse::<u64>().is_ok()),
            "under npud: {}: {line}",
            npud.is_some()
        );
        assert!(out.status.success());
    }
    assert!(eventually(Duration::from_secs(10), || native_held(&d) == 0 && d.in_use() == 0), "{}", d.log());
}

/// cudaDeviceReset (cuDevicePrimaryCtxReset) and the last cuDevicePrimaryCtxRelease take
/// the primary context's streams with them: npud must count them back while the program
/// goes on running, through a linked driver and through cuGetProcAddress alike.
#[test]
fn a_reset_or_released_primary_context_gives_its_streams_back() {
    let (linked, fetched) = cuda_apps();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    let driver = Shared::at(&shared);
    for (program, teardown) in [(linked, "reset"), (fetched, "release"), (fetched, "reset"), (linked, "release")] {
        let mut cmd = cuda_command(program, &shared, Some((&d, STREAMS)));
        cmd.args([STREAMS.to_string().as_str(), "-1", teardown]);
        let mut app = App::spawn(cmd);
        assert!(app.started().is_ok());
        assert!(eventually(Duration::from_secs(10), || native_held(&d) == u64::from(STREAMS)));
        assert_eq!(driver.held_by_others(d.pid()), STREAMS);
        app.say("go");
        assert_eq!(app.line(), "gone 0", "{teardown}");
        assert!(
            eventually(Duration::from_secs(10), || native_held(&d) == 0 && driver.held_by_others(d.pid()) == 0),
            "{teardown} of {}: npud {} (the program still runs)",
            program.display(),
            native_held(&d)
        );
        drop(app.child.stdin.take());
        assert!(app.child.wait().unwrap().success());
    }
    // CUDA has no device-wide free count: nothing is ever withheld as untracked.
    assert_eq!(d.device0()["untracked"], 0, "{}", d.device0());
    assert_eq!(d.device0()["available"], d.device0()["capacity"]);
}

/// Streams made in a green context (cuGreenCtxStreamCreate, CUDA 12.4+, or cuStreamCreate
/// with the green context current as a CUcontext) are admitted on the green context's
/// device like any other, through a linked driver and through cuGetProcAddress alike.
/// cuGreenCtxDestroy does not destroy them, and once it has run cuStreamDestroy cannot
/// either (709 on an H100, docs/hardware.md): the driver holds them until the process
/// exits, and so do npud's books. Destroyed before their context, they are counted back
/// at once. The best-known interposer hooks none of this
/// (shared/reference/interposition.md, section 2): a tenant could create past its quota
/// there.
#[test]
fn streams_made_in_a_green_context_are_admitted_and_kept_while_the_driver_holds_them() {
    let (linked, fetched) = npud_tests::native::cuda_green_apps();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    let driver = Shared::at(&shared);
    for (program, how) in [(linked, "green"), (fetched, "green"), (linked, "current"), (fetched, "current")] {
        for npud in [None, Some((&d, STREAMS))] {
            let booked = || if npud.is_some() { native_created(&d) } else { 0 };
            let counted = |n: u32| {
                eventually(Duration::from_secs(10), || {
                    driver.held_by_others(d.pid()) == n && booked() == u64::from(if npud.is_some() { n } else { 0 })
                })
            };
            let against = || format!("npud {} against the driver's {}", booked(), driver.held_by_others(d.pid()));
            let spawn = || {
                let mut cmd = cuda_command(program, &shared, npud);
                cmd.args([STREAMS.to_string().as_str(), how]);
                let mut app = App::spawn(cmd);
                assert_eq!(
                    app.started(),
                    Ok(vec![STREAMS.to_string(), "108".to_string()]),
                    "{} {how}",
                    program.display()
                );
                app
            };
            // Destroyed while their green context lives, they go as any stream does.
            let app = spawn();
            assert!(counted(STREAMS), "{}", against());
            app.release();
            assert!(counted(0), "destroyed first: {}", against());
            // Left behind by cuGreenCtxDestroy: held, by the driver and by npud, until exit.
            let mut app = spawn();
            app.say("go");
            assert_eq!(app.line(), "detached 0");
            app.say("destroy");
            assert_eq!(app.line(), format!("destroyed 0 {}", npud_proto::codes::cuda::CONTEXT_IS_DESTROYED));
            assert!(counted(STREAMS), "left by their green context: {}", against());
            drop(app.child.stdin.take());
            assert_eq!(app.line(), "done");
            assert!(app.child.wait().unwrap().success());
            assert!(counted(0), "after the process exits: {}", against());
        }
    }
    // A tenant's quota holds in a green context too: the 11th stream is refused as the
    // driver refuses one (CUDA_ERROR_OUT_OF_MEMORY), and nothing stays booked.
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "10"]).status.success());
    for (program, how) in [(linked, "green"), (fetched, "current")] {
        let mut cmd = cuda_command(program, &shared, Some((&d, 10)));
        cmd.args([STREAMS.to_string().as_str(), how]);
        let mut app = App::spawn(cmd);
        assert_eq!(app.started(), Err(2), "{}", program.display());
        assert!(!app.child.wait().unwrap().success(), "it exits at the refusal");
        assert!(eventually(Duration::from_secs(10), || native_held(&d) == 0 && driver.held_by_others(d.pid()) == 0));
    }
}

/// A tenant's limit on priorities holds in CUDA too (a lower number is more urgent; the
/// fake's range is 0 to -5, an H100's): `native/cuda_priorities.c` reads back
/// cuStreamCreate's 0 and cuStreamCreateWithPriority's -5, -1 and -100 (clamped to -5 by
/// the driver). Alone they are as asked; under a tenant limited to -2, none is more urgent
/// than -2, and the books stay equal to the driver's.
#[test]
fn a_tenants_priority_limit_holds_for_cuda_streams_too() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("budget");
    let d = cuda_daemon(&shared, &[]);
    let driver = Shared::at(&shared);
    let program = npud_tests::native::cuda_priorities_app();
    let mut alone = App::spawn(cuda_command(program, &shared, None));
    assert_eq!(alone.line(), "ok priorities 0 -5 -1 -5");
    alone.release();
    assert!(d.npuctl(&["quota", "set", "root", "--highest-priority", "-2"]).status.success());
    let mut app = App::spawn(cuda_command(program, &shared, Some((&d, 10))));
    assert_eq!(app.line(), "ok priorities 0 -2 -1 -2", "limited to -2");
    assert!(
        eventually(Duration::from_secs(10), || native_created(&d) == 4 && driver.held_by_others(d.pid()) == 4),
        "npud {} against the driver's {}",
        native_created(&d),
        driver.held_by_others(d.pid())
    );
    app.release();
    assert!(eventually(Duration::from_secs(10), || native_held(&d) == 0 && driver.held_by_others(d.pid()) == 0));
}

//! Issue 30: graph capture is admitted like creation. `native/acl_capture.c` builds graphs
//! with aclmdlRICaptureBegin/End as torch_npu's NPUGraph and vLLM-Ascend do; the fake
//! library takes a stream for each capture and each stream that joins it (the vendor's
//! warning made countable). npud must count what the models hold, as the driver does, hold
//! tenants to their quota at Begin, and get everything back at exit.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{
    self, App, Shared, acl_build_app, acl_capture_app, acl_capture_edges_app, acl_capture_external_app, acl_command,
    acl_graph_app,
};
use npud_tests::wire::{Wire, frame};
use npud_tests::{Daemon, bin, eventually};
use std::time::Duration;

/// The capture program under `npuctl run` with `run_args`.
fn capture(d: &Daemon, shared: &Shared, run_args: &[&str], args: &[&str]) -> App {
    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    cmd.arg("--socket").arg(&d.socket).arg("run").args(run_args).arg("--").arg(acl_capture_app()).args(args);
    App::spawn(cmd)
}

/// What npud counts for the holder with `pid`.
fn holder_streams(d: &Daemon, pid: u32) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"]
        .as_array()
        .and_then(|a| a.iter().find(|h| h["pid"] == pid))
        .and_then(|h| h["streams"].as_u64())
        .unwrap_or(0)
}

/// npud's count of the holder equals the driver's (the holder's line in the shared budget).
fn agree(d: &Daemon, shared: &Shared, pid: u32, expected: u64) -> bool {
    holder_streams(d, pid) == expected && u64::from(shared.held_on(0, d.pid())) == expected
}

#[test]
fn captured_graphs_are_counted_as_the_device_reports_them_and_return_at_exit() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    // One captured and one joined stream per graph; then three joined per graph.
    for (joined, teardown, per_graph) in [("1", "exit", 2u64), ("3", "destroy", 4)] {
        let mut app = capture(&d, &shared, &[], &["100", joined, teardown]);
        let started = app.started().unwrap();
        assert_eq!(started, vec!["100".to_string(), "streams".into(), (100 * per_graph).to_string()]);
        let pid = app.child.id();
        // The default stream, the main stream and the side streams besides the models'.
        let expected = 2 + joined.parse::<u64>().unwrap() + 100 * per_graph;
        assert!(
            eventually(Duration::from_secs(10), || agree(&d, &shared, pid, expected)),
            "npud counts {} for the models, the driver {}:\n{}",
            holder_streams(&d, pid),
            shared.held_on(0, d.pid()),
            d.log()
        );
        native::released_to_nothing(&d, &shared, app);
    }
}

#[test]
fn a_capture_with_no_room_in_the_quota_fails_at_begin_with_207008() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "120"]).status.success());
    let mut app = capture(&d, &shared, &[], &["100", "1", "destroy"]);
    let code = app.started().expect_err("100 graphs of 2 streams cannot fit 120");
    assert_eq!(code, 207008);
    let pid = app.child.id();
    let held = holder_streams(&d, pid);
    assert!(held <= 120 + 2, "no more than the quota plus one graph's worth: {held}");
    assert!(agree(&d, &shared, pid, held), "npud {held}, driver {}", shared.held_on(0, d.pid()));
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
}

/// A capture is admitted whole at Begin or refused there (issue 72): with no earlier
/// capture and no hint, its need is npud's `capture_headroom` (8), which a quota with one
/// stream left cannot give: Begin fails with 207008, npud logs why, and nothing is left
/// booked. With `NPUD_CAPTURE_STREAMS=1` Begin is admitted; its first join is past that
/// headroom, and is refused at once by the growth rule (the quota), the device's own
/// 207008, the capture invalidated as the runtime invalidates one it cannot give a stream.
/// Nothing is made unadmitted, so nothing is booked as debt.
#[test]
fn a_capture_that_cannot_have_its_need_is_refused_at_begin_and_past_it_at_the_join() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "6"]).status.success());
    // Start-up takes 5 (default, main, 3 side streams): one stream left in the quota.
    let mut app = capture(&d, &shared, &["--streams", "4"], &["2", "3", "destroy"]);
    assert_eq!(app.started(), Err(207008), "refused at Begin");
    let pid = app.child.id();
    assert!(agree(&d, &shared, pid, 5), "npud {}, driver {}", holder_streams(&d, pid), shared.held_on(0, d.pid()));
    assert!(d.log().contains("a graph capture's streams were refused"), "{}", d.log());
    app.release();

    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    cmd.env("NPUD_CAPTURE_STREAMS", "1");
    cmd.arg("--socket").arg(&d.socket).args(["run", "--streams", "4", "--"]).arg(acl_capture_app());
    let mut app = App::spawn({
        cmd.args(["2", "3", "destroy"]);
        cmd
    });
    assert_eq!(app.started(), Err(207008), "the join is refused as the device would refuse it");
    let pid = app.child.id();
    // The program stops at the failed join without ending the capture: the capture's own
    // stream stays held, on the device and in npud's books alike.
    assert!(
        eventually(Duration::from_secs(10), || agree(&d, &shared, pid, 6)),
        "npud {}, driver {}\n{}",
        holder_streams(&d, pid),
        shared.held_on(0, d.pid()),
        d.log()
    );
    assert!(!d.log().contains("booked as the tenant's debt"), "{}", d.log());
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
}

/// Issue 31's cut, for a capture's debt: booked without waiting, then the eviction of
/// pooled streams is awaited; a stray byte ends the connection right there. Whatever it
/// booked must go back with the connection. (A declaration on this backend claims only
/// streams already counted as untracked, so it never needs an eviction: no such window.)
#[test]
fn a_booking_cut_short_while_the_pool_is_evicted_leaves_nothing_booked() {
    use npud_proto::v1::{self as pb, budget_call::Call};
    use std::io::Write;
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    // A warm pool: 100 daemon streams made and released.
    let made = d.npuctl_json(&["stream", "create", "--count", "100"]);
    let handles: Vec<String> = made.as_array().unwrap().iter().map(|s| s["handle"].to_string()).collect();
    let mut destroy = vec!["stream", "destroy"];
    destroy.extend(handles.iter().map(String::as_str));
    assert!(d.npuctl(&destroy).status.success());
    assert!(eventually(Duration::from_secs(10), || {
        let now = d.device0();
        now["pooled"] == 100 && now["draining"] == 0
    }));
    let pooled = 100;
    // The holder takes all but the pool's room, so its debt can only be booked by evicting.
    // Its grant is a capture's (the streams its captures were asked for), which is what a
    // claim may match.
    let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
    let ask = pb::AcquireBudgetRequest { device: 0, count: capacity - pooled, capture: true, ..Default::default() };
    assert!(w.call(Call::Acquire(ask)).is_ok());
    let mut cut = frame(Call::Captured(pb::CapturedBudgetRequest { device: 0, count: 60, ..Default::default() }));
    cut.push(b'x');
    w.conn.write_all(&cut).unwrap();
    // npud ends the connection once it sees the stray byte while the call is pending; had
    // the call finished first, the byte starts a frame that never comes, and closing after
    // a while ends it the same way.
    w.closed_within(Duration::from_secs(5));
    drop(w);
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0), "nothing stays booked to nobody: {}", d.device0());
    assert_eq!(shared.held_by_others(d.pid()), 0, "nor on the driver");
}

/// Issue 31's first item, on a device that counts its own streams: a declaration (after a
/// restart) may claim only streams the device holds outside npud's books, so a process
/// holding nothing cannot declare the device away, and what it did declare really exists.
#[test]
fn a_declaration_claims_no_more_than_the_device_holds_outside_the_books() {
    use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let declare = |count: u32| -> (u32, Wire) {
        let mut w = Wire::hello(&d.socket, pb::BudgetHello { reports_created: true, ..Default::default() });
        match w.call(Call::Declare(pb::DeclareBudgetRequest { device: 0, count, ..Default::default() })) {
            Ok(Reply::Declared(r)) => (r.accepted, w),
            other => panic!("{other:?}"),
        }
    };
    // Nothing outside the books: nothing to declare.
    let (accepted, conn) = declare(5000);
    assert_eq!((accepted, d.in_use()), (0, 0), "a process holding nothing declares nothing");
    drop(conn);
    // A program npud cannot see holds 101 streams: at most those can be claimed.
    let (program, _) = npud_tests::native::acl_apps();
    let mut outside = App::spawn({
        let mut c = acl_command(program, &shared.path, None);
        c.args(["100", "-1"]);
        c
    });
    assert!(outside.started().is_ok());
    let (accepted, conn) = declare(5000);
    assert_eq!(accepted, 101, "what the device holds outside the books: {}", d.log());
    assert_eq!(d.in_use(), 101);
    assert!(eventually(Duration::from_secs(5), || d.device0()["untracked"] == 0), "{}", d.device0());
    let (again, second) = declare(5000);
    assert_eq!(again, 0, "the same streams cannot be declared twice");
    drop((conn, second));
    // A declaration cut short (a stray byte after it: npud ends the connection wherever the
    // call is) leaves nothing booked to nobody: the streams are untracked again.
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && d.device0()["untracked"] == 101));
    let mut w = Wire::hello(&d.socket, pb::BudgetHello { reports_created: true, ..Default::default() });
    let mut cut = frame(Call::Declare(pb::DeclareBudgetRequest { device: 0, count: 5000, ..Default::default() }));
    cut.push(b'x');
    std::io::Write::write_all(&mut w.conn, &cut).unwrap();
    w.closed_within(Duration::from_secs(5));
    drop(w);
    assert!(
        eventually(Duration::from_secs(10), || d.in_use() == 0 && d.device0()["untracked"] == 101),
        "{}",
        d.device0()
    );
    outside.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
}

/// Captured work runs when the model is executed, not when it is issued
/// (aclmdlRICaptureBegin): a program that captures a copy once and replays it with new
/// inputs (`native/acl_graph.c`, which checks every result itself: "fail
/// captured-work-ran-before-execute" or "fail replay-result" otherwise) gets each replay's
/// result, natively on the fake and under npud, and npud counts the model's stream as the
/// driver does until the program lets it go: the default stream, the program's stream and
/// the model's.
#[test]
fn a_captured_graph_replays_with_new_inputs_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(acl_graph_app(), "6", "ok 6 streams 1", 3);
}

/// A model built by hand (aclmdlRIBuildBegin, aclmdlRIBindStream, aclmdlRIEndTask,
/// aclmdlRIBuildEnd) holds no stream of its own: its streams are the program's persistent
/// ones (ACL_STREAM_PERSISTENT), whose work runs only when the model is executed. The
/// program (`native/acl_build.c`, which checks every result and refusal itself: "fail
/// persistent-work-ran-when-issued", "fail bind-not-persistent", ... otherwise) runs the
/// same natively on the fake and under npud, and npud counts what the driver counts: the
/// default stream, one plain and two persistent streams.
#[test]
fn a_model_built_by_hand_runs_natively_and_under_npud_with_the_books_equal() {
    native::runs_natively_and_under_npud_with_the_books_equal(acl_build_app(), "4", "ok 4 streams 2", 4);
}

/// Graphs synchronised with streams outside them and with each other through events with
/// the EXTERNAL flags (aclrtRecordEventWithFlag, aclrtStreamWaitEventWithFlag, as
/// vLLM-Ascend's graphs meet the eager streams around them): `native/acl_capture_external.c`
/// checks each result and each refusal's code itself, natively and under npud. An external
/// record or wait joins no stream into the capture, so each of its four models holds one
/// stream, and npud counts what the driver counts: the default stream, the program's three
/// and the models' four.
#[test]
fn graphs_synchronised_by_external_events_hold_one_stream_each_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        acl_capture_external_app(),
        "3",
        "ok external streams 4",
        8,
    );
}

/// A capture grows with its tasks, not only with the streams that join it: a capture
/// stream holds 2016 tasks, and the runtime binds one more stream to the model for each
/// 2016 after that (`native/acl_capture_edges.c long`: 5000 memsets, a model of 3). npud
/// counts what the driver counts: the default stream, the program's and the model's 3.
#[test]
fn a_long_capture_holds_a_stream_for_each_full_capture_stream_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(acl_capture_edges_app(), "long", "ok long streams 3", 5);
}

/// A capture begun in GLOBAL mode and ended from another thread fails with
/// ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD, and the runtime takes the stream out of
/// capture without destroying the model: its stream stays held until the program destroys
/// it through aclmdlRICaptureGetInfo's handle, resets the device or exits. npud keeps it
/// booked as long (an interposer that took the failure for the end of the capture gave it
/// back, and the driver held one stream more than npud counted).
#[test]
fn a_capture_ended_on_the_wrong_thread_keeps_its_model_booked_until_it_is_destroyed() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        acl_capture_edges_app(),
        "wrong-thread",
        "ok wrong-thread streams 1",
        3,
    );
}

/// A side stream that joins a capture and never joins back makes End fail with
/// ACL_ERROR_RT_STREAM_UNJOINED, and the runtime destroys the model with its streams (a
/// stream capturing on its own meanwhile cannot wait on that capture's event:
/// ACL_ERROR_STREAM_CAPTURE_CONFLICT); the same capture joined back ends with a model of
/// 2. The program checks the codes itself;
/// npud and the driver both count the default stream, the program's two and that model's.
#[test]
fn a_capture_whose_side_stream_never_joins_back_fails_and_frees_its_streams() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        acl_capture_edges_app(),
        "unjoined",
        "ok unjoined streams 2",
        5,
    );
}

/// The capture modes decide which thread may make the "unsafe" calls (aclrtMemset,
/// aclrtMemcpy) while a capture is under way: none in GLOBAL exchange mode during a GLOBAL
/// capture (ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT), a thread switched to RELAXED or
/// another thread in THREAD_LOCAL mode may; in a THREAD_LOCAL capture only the capturing
/// thread may not; in a RELAXED one any may (`native/acl_capture_edges.c modes` checks
/// each). The same natively and under npud, which counts what the driver counts: the
/// default stream, the program's and the last model's.
#[test]
fn capture_modes_decide_who_may_make_unsafe_calls_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        acl_capture_edges_app(),
        "modes",
        "ok modes streams 1",
        3,
    );
}

/// Begin refuses, before any stream is taken, a thread with no current context, a stream
/// of another context, a stream bound to a model and the default stream
/// (`ApiImpl::StreamBeginCapture`; `native/acl_capture_edges.c refusals` checks each
/// code). So a capture's streams are always on the current device, where the interposer
/// admits them. End refused the same way (no context, a NULL out-pointer) leaves the
/// capture going, and its proper End then keeps the model. Under npud a refused Begin
/// books nothing and a refused End gives nothing back (an interposer that took it for the
/// end of the capture never booked the model, and the driver held one stream more than
/// npud counted): the default stream, the program's and the model's.
#[test]
fn refused_begins_and_ends_leave_the_books_as_the_device_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        acl_capture_edges_app(),
        "refusals",
        "ok refusals streams 1",
        3,
    );
}

/// A graph goes with its context: a capture made in a context of its own
/// (aclrtCreateContext) whose model was never destroyed is freed by aclrtDestroyContext,
/// with the context's streams (the runtime's `TearDownModelsOnContextTearDown`;
/// `native/acl_capture_edges.c context` checks the device has as many free as before the
/// context). npud gives the model's streams back then too (an interposer that kept them
/// until a device reset counted one stream more than the driver held), and counts the
/// default stream and the program's.
#[test]
fn a_graph_goes_with_its_context_natively_and_under_npud() {
    native::runs_natively_and_under_npud_with_the_books_equal(
        acl_capture_edges_app(),
        "context",
        "ok context streams 0",
        2,
    );
}

/// What the runtime answers at a capture's edges, and a join that cannot get a stream
/// (`native/acl_capture_edges.c codes`): the codes the open runtime returns for a bad mode,
/// a NULL out-pointer, a thread with no context, an array too small; a join on a full
/// device fails with 207008 and invalidates the capture (status 2, End 507903), freeing its
/// stream. Under npud the join is refused by npud before the device, with the same answers
/// (the interposer invalidates the capture as the runtime does), and the books equal the
/// device throughout.
#[test]
fn a_captures_edges_and_a_join_with_no_stream_answer_as_the_runtime_natively_and_under_npud() {
    // The program fills the device but for one stream and begins a capture there, whose
    // join then gets none. Under npud a capture is admitted whole at Begin for the most an
    // earlier capture took (2, here): told it makes one (NPUD_CAPTURE_STREAMS, the
    // operator's word, which stands), Begin takes the last stream and the join is refused
    // by the growth rule, as the device refuses it natively.
    native::runs_natively_and_under_npud_with(
        None,
        &[("NPUD_CAPTURE_STREAMS", "1")],
        acl_capture_edges_app(),
        "codes",
        "ok codes streams 0",
        2,
    );
}

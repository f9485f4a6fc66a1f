//! Issue 30: graph capture is admitted like creation. `native/acl_capture.c` builds graphs
//! with aclmdlRICaptureBegin/End as torch_npu's NPUGraph and vLLM-Ascend do; the fake
//! library takes a stream for each capture and each stream that joins it (the vendor's
//! warning made countable). npud must count what the models hold, as the driver does, hold
//! tenants to their quota at Begin, and get everything back at exit.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::native::{App, Shared, acl_capture_app, acl_command};
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
        assert_eq!(d.device0()["untracked"], 0, "nothing is outside the books");
        app.release();
        assert!(
            eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0),
            "everything returns ({teardown}): {}",
            d.device0()
        );
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

#[test]
fn a_capture_that_grows_past_its_grant_is_its_tenants_debt() {
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    assert!(d.npuctl(&["quota", "set", "root", "--max-streams", "6"]).status.success());
    // Start-up takes 5 (default, main, 3 side streams); the first capture is admitted for
    // one stream and takes four.
    let mut app = capture(&d, &shared, &["--streams", "4"], &["2", "3", "destroy"]);
    assert_eq!(app.started(), Err(207008), "in debt, the next capture is refused");
    let pid = app.child.id();
    assert!(agree(&d, &shared, pid, 9), "booked as it is: npud {}, {}", holder_streams(&d, pid), d.log());
    assert!(d.log().contains("booked as the tenant's debt"));
    // Nothing more for the tenant until it is back under, through npud's own API too.
    let out = d.npuctl(&["stream", "create", "--wait", "0s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("over its quota"), "{stderr}");
    app.release();
    assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
    assert!(d.npuctl(&["stream", "create", "--wait", "0s"]).status.success(), "back under: {}", d.log());
}

/// One raw budget-wire frame: length, then the call.
fn frame(call: npud_proto::v1::budget_call::Call) -> Vec<u8> {
    use prost::Message;
    let body = npud_proto::v1::BudgetCall { call: Some(call) }.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Issue 31's cut: a call that books streams without waiting (a declaration after a
/// restart, a capture's debt) awaits the eviction of pooled streams; a stray byte ends the
/// connection right there. Whatever it booked must go back with the connection.
#[test]
fn a_booking_cut_short_while_the_pool_is_evicted_leaves_nothing_booked() {
    use npud_proto::v1::{self as pb, budget_call::Call};
    use std::io::{Read, Write};
    let shared = Shared::new();
    let d = shared.daemon(&[]);
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    for call in [
        Call::Declare(pb::DeclareBudgetRequest { device: 0, count: capacity, ..Default::default() }),
        Call::Captured(pb::CapturedBudgetRequest { device: 0, count: 60, ..Default::default() }),
    ] {
        // A warm pool: 100 daemon streams made and released.
        let made = d.npuctl_json(&["stream", "create", "--count", "100"]);
        let handles: Vec<String> = made.as_array().unwrap().iter().map(|s| s["handle"].to_string()).collect();
        let mut destroy = vec!["stream", "destroy"];
        destroy.extend(handles.iter().map(String::as_str));
        assert!(d.npuctl(&destroy).status.success());
        assert!(eventually(Duration::from_secs(10), || d.device0()["pooled"].as_u64() > Some(0)));
        if matches!(call, Call::Captured(_)) {
            // Debt needs a tenant at its quota: the pool then has no room beside it.
            assert!(d.npuctl(&["quota", "set", "root", "--max-streams", &(capacity / 2).to_string()]).status.success());
        }
        let mut conn = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        conn.write_all(npud_proto::BUDGET_PREFACE).unwrap();
        conn.write_all(&frame(Call::Hello(pb::BudgetHello::default()))).unwrap();
        let mut len = [0u8; 4];
        conn.read_exact(&mut len).unwrap();
        let mut welcome = vec![0u8; u32::from_be_bytes(len) as usize];
        conn.read_exact(&mut welcome).unwrap();
        if let Call::Captured(_) = call {
            let take = Call::Acquire(pb::AcquireBudgetRequest { device: 0, count: capacity / 2, ..Default::default() });
            conn.write_all(&frame(take)).unwrap();
            conn.read_exact(&mut len).unwrap();
            let mut acquired = vec![0u8; u32::from_be_bytes(len) as usize];
            conn.read_exact(&mut acquired).unwrap();
        }
        let mut cut = frame(call);
        cut.push(b'x');
        conn.write_all(&cut).unwrap();
        // npud ends the connection once it sees the stray byte while the call is pending; had
        // the call finished first, the byte starts a frame that never comes, and closing
        // after a while ends it the same way.
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        drop(conn);
        assert!(
            eventually(Duration::from_secs(10), || d.in_use() == 0),
            "nothing stays booked to nobody: {}",
            d.device0()
        );
        assert!(d.npuctl(&["quota", "set", "root", "--max-streams", &capacity.to_string()]).status.success());
    }
}

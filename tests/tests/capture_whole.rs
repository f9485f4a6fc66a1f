//! Issue 72: graph capture as frameworks run it, admitted whole at Begin. A capture is
//! granted its need at Begin, all of it or none (never waiting), and npud holds it as the
//! capture's headroom until End; what the capture makes within it is never refused, and a
//! neighbour asking for the rest of the device at any moment is refused by npud, never
//! failed by the device, whatever task kinds fill the capture, an operator's internal
//! launches (which no hook sees) included. `native/acl_frameworks.c` runs the captures.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_client::StreamOptions;
use npud_client::proto::ErrorReason;
use npud_tests::native::{App, Shared, acl_builder, acl_command, acl_frameworks_app};
use npud_tests::{Daemon, bin, eventually};
use std::time::Duration;

/// The program under `npuctl run` (tenant root), in `mode` with `args`.
fn framework(d: &Daemon, shared: &Shared, env: &[(&str, &str)], args: &[&str]) -> App {
    let mut cmd = acl_command(&bin("npuctl"), &shared.path, None);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.arg("--socket").arg(&d.socket).args(["run", "--streams", "16", "--"]).arg(acl_frameworks_app()).args(args);
    App::spawn(cmd)
}

/// The same program with no npud.
fn native(shared: &Shared, args: &[&str]) -> App {
    let mut cmd = acl_command(acl_frameworks_app(), &shared.path, None);
    cmd.args(args);
    App::spawn(cmd)
}

/// What npud holds and has heard created for the holder `pid`.
fn holder(d: &Daemon, pid: u32) -> (u64, u64) {
    let status = d.npuctl_json(&["status"]);
    let rows = status["native_holders"].as_array().cloned().unwrap_or_default();
    let mine = rows.iter().filter(|h| h["pid"] == pid);
    mine.fold((0, 0), |(s, c), h| (s + h["streams"].as_u64().unwrap_or(0), c + h["created"].as_u64().unwrap_or(0)))
}

/// Lines until the program's last one, answering each checkpoint after `at` looked.
fn run_to_end(app: &mut App, mut at: impl FnMut(&str)) -> Vec<String> {
    let mut said = Vec::new();
    loop {
        let line = app.line();
        if let Some(name) = line.strip_prefix("at ") {
            at(name);
            app.send("");
            continue;
        }
        let last = line.starts_with("ok ") || line.starts_with("fail ");
        said.push(line);
        if last {
            return said;
        }
    }
}

/// A daemon on the shared budget that TCP peers reach (tenant `tcp-anonymous`), with
/// `config` added.
fn daemon(shared: &Shared, config: &str) -> Daemon {
    acl_builder(&shared.path, &[]).tcp().config(config).start()
}

/// The neighbour, on `rt`: asks npud for the rest of device 0 (what it says is available)
/// and keeps what it gets. npud may refuse; the device must never fail what npud granted.
struct Neighbour {
    rt: tokio::runtime::Runtime,
    client: npud_client::Client,
    held: Vec<npud_client::Stream>,
    granted: u32,
    refused: u32,
}

impl Neighbour {
    fn new(d: &Daemon) -> Neighbour {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let client = rt.block_on(d.tcp_client());
        Neighbour { rt, client, held: Vec::new(), granted: 0, refused: 0 }
    }

    /// Gives back what it holds, then asks for all npud says is left.
    fn ask_for_the_rest(&mut self, d: &Daemon) {
        self.held.clear();
        let available = d.device0()["available"].as_u64().unwrap() as u32;
        match self.take(d, available) {
            true => self.granted += 1,
            false => self.refused += 1,
        }
    }

    /// Takes `n` streams (in asks of at most 1,024, npud's per-request bound), keeping
    /// them; false where npud refused one. A failure that is not npud's refusal is the
    /// device failing what npud granted.
    fn take(&mut self, d: &Daemon, mut n: u32) -> bool {
        while n > 0 {
            let ask = n.min(1024);
            let got = self.rt.block_on(self.client.device(0).create_streams(ask, StreamOptions::default()));
            match got {
                Ok(streams) => self.held.extend(streams),
                Err(e) => {
                    let npud_said_no = matches!(
                        e.reason(),
                        Some(ErrorReason::BudgetExhausted | ErrorReason::GrantWaitExpired | ErrorReason::QuotaExceeded)
                    );
                    assert!(npud_said_no, "the device failed what npud granted the neighbour: {e}\n{}", d.log());
                    return false;
                }
            }
            n -= ask;
        }
        true
    }
}

/// 10,000 launches over 8 joined streams and 600 operators on one of them (one cascade no
/// hook sees), with a neighbour asking for the rest of the device at every checkpoint and
/// keeping it while the capture goes on: the capture never fails, the device never fails
/// the neighbour, npud never books below what the device holds for the capture, and once
/// it ends npud's count is the driver's.
#[test]
fn a_launch_heavy_capture_never_lets_the_device_fail_a_neighbour() {
    let shared = Shared::new();
    let d = daemon(&shared, "[budget]\ncapture_headroom = 16\n");
    let mut neighbour = Neighbour::new(&d);
    let mut app = framework(&d, &shared, &[], &["heavy"]);
    let pid = app.child.id();
    let npud = d.pid();
    let mut checkpoints = 0;
    let said = run_to_end(&mut app, |at| {
        let (held, _) = holder(&d, pid);
        let device = u64::from(shared.held_on(0, npud));
        assert!(held >= device, "at {at}: npud holds {held} for the capture, the device {device}\n{}", d.log());
        neighbour.ask_for_the_rest(&d);
        checkpoints += 1;
    });
    assert_eq!(said.last().map(String::as_str), Some("ok heavy graphs 1 streams 9"), "{said:?}\n{}", d.log());
    assert_eq!(checkpoints, 7);
    assert!(neighbour.granted > 0, "the neighbour got the rest of the device at least once");
    neighbour.held.clear();
    // The cascade no hook saw is learnt at End: npud's count is the driver's.
    let settled = eventually(Duration::from_secs(20), || {
        let (_, created) = holder(&d, pid);
        created == u64::from(shared.held_on(0, npud)) && d.device0()["untracked"] == 0
    });
    assert!(settled, "npud {:?}, driver {}\n{}", holder(&d, pid), shared.held_on(0, npud), d.log());
    app.release();
}

/// torch_npu's NPUGraph flow and vLLM's descending captures (PIECEWISE then FULL) run
/// natively and under npud alike: 0 failed half-way.
#[test]
fn framework_captures_run_under_npud_as_they_run_natively() {
    for args in [&["npugraph"][..], &["vllm", "8", "4", "2"][..]] {
        let shared = Shared::new();
        let mut bare = native(&shared, args);
        let bare_said = run_to_end(&mut bare, |_| {});
        bare.release();
        let d = daemon(&shared, "");
        let mut app = framework(&d, &shared, &[], args);
        let said = run_to_end(&mut app, |_| {});
        assert_eq!(said, bare_said, "{args:?}\n{}", d.log());
        assert!(said.iter().all(|l| !l.starts_with("refused") && !l.starts_with("fail")), "{said:?}");
        app.release();
        assert!(eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0));
    }
}

/// Where the device cannot hold both tenants' captures (the neighbour holds all but 40
/// streams), vLLM's captures are refused at Begin, each with npud's reason, never
/// half-way; what began ends whole.
#[test]
fn captures_that_cannot_fit_beside_a_neighbour_are_refused_at_begin() {
    let shared = Shared::new();
    let d = daemon(&shared, "");
    let mut neighbour = Neighbour::new(&d);
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    assert!(neighbour.take(&d, capacity - 40), "the neighbour's streams");
    let mut app = framework(&d, &shared, &[], &["vllm", "8", "4", "2"]);
    let said = run_to_end(&mut app, |_| {});
    assert!(said.last().is_some_and(|l| l.starts_with("ok vllm")), "{said:?}\n{}", d.log());
    let refused = said.iter().filter(|l| l.starts_with("refused-at-begin") && l.ends_with(" 207008")).count();
    assert!(refused > 0, "some captures cannot fit: {said:?}");
    assert!(d.log().contains("a graph capture's streams were refused"), "{}", d.log());
    app.release();
}

/// A process's first capture, with no earlier capture and no NPUD_CAPTURE_STREAMS, is
/// admitted for npud's default headroom (8): with room it runs; where 8 do not fit beside
/// the neighbour it is refused at Begin with npud's reason, and the process holds what it
/// held before.
#[test]
fn a_first_capture_gets_the_default_headroom_or_is_refused_at_begin() {
    let shared = Shared::new();
    let d = daemon(&shared, "");
    let mut app = framework(&d, &shared, &[], &["first", "3"]);
    assert_eq!(run_to_end(&mut app, |_| {}), ["ok first graphs 1 streams 4"]);
    app.release();

    let mut neighbour = Neighbour::new(&d);
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    // The program's start-up takes 16 (`--streams 16`), of which it makes 10 (the default
    // stream, a main and 8 side streams): 6 of its own and 1 of the device's are left,
    // fewer than 8.
    assert!(neighbour.take(&d, capacity - 17), "the neighbour's streams");
    let mut app = framework(&d, &shared, &[], &["first", "3"]);
    let said = run_to_end(&mut app, |_| {});
    assert_eq!(said, ["refused-at-begin 0 207008", "ok first graphs 0 streams 0"], "{}", d.log());
    let pid = app.child.id();
    let agree = eventually(Duration::from_secs(10), || holder(&d, pid).1 == u64::from(shared.held_on(0, d.pid())));
    assert!(agree, "npud {:?}, driver {}", holder(&d, pid), shared.held_on(0, d.pid()));
    assert!(d.log().contains("a graph capture's streams were refused"), "{}", d.log());
    app.release();
}

//! The budget-wire client against a fake npud on a Unix socket.

use super::*;
use prost::Message;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;

/// npud's side of the wire, by hand.
fn read_call(s: &mut UnixStream) -> Call {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("a call's length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).expect("a call");
    pb::BudgetCall::decode(body.as_slice()).expect("a call").call.expect("a call body")
}

/// `reply` framed by hand: its length, big-endian, then the message.
fn reply_frame(reply: Reply) -> Vec<u8> {
    let body = pb::BudgetReply { reply: Some(reply) }.encode_to_vec();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn write_reply(s: &mut UnixStream, reply: Reply) {
    s.write_all(&reply_frame(reply)).expect("a reply");
}

/// npud played by `script` on a fresh socket, once the connection's preface is read:
/// the socket's path, the directory that holds it, and the thread to join.
fn fake_npud(
    script: impl FnOnce(UnixStream) + Send + 'static,
) -> (std::path::PathBuf, tempfile::TempDir, std::thread::JoinHandle<()>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("npud.sock");
    let listener = UnixListener::bind(&path).expect("bind");
    let npud = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut preface = vec![0u8; npud_proto::BUDGET_PREFACE.len()];
        s.read_exact(&mut preface).expect("preface");
        script(s);
    });
    (path, dir, npud)
}

/// Issue 31: a slow npud is a refusal (207008), never "unreachable" (which creates
/// without admission), and the grant it sends after the process gave up goes back.
#[test]
fn a_late_answer_is_a_refusal_and_a_late_grant_goes_back() {
    let (gave_up, told) = std::sync::mpsc::channel::<()>();
    let (path, _dir, npud) = fake_npud(move |mut s| {
        assert!(matches!(read_call(&mut s), Call::Hello(_)));
        write_reply(&mut s, Reply::Welcome(pb::BudgetWelcome { tenant: "t".into(), ..Default::default() }));
        assert!(matches!(read_call(&mut s), Call::Acquire(a) if a.count == 70));
        // Answers only once the process has given up on it.
        told.recv().expect("the client gave up");
        write_reply(&mut s, Reply::Acquired(pb::AcquireBudgetResponse::default()));
        let Call::Release(r) = read_call(&mut s) else { panic!("the late grant is given back first") };
        assert_eq!((r.device, r.count), (1, 70));
        write_reply(&mut s, Reply::Released(pb::ReleaseBudgetResponse::default()));
        assert!(matches!(read_call(&mut s), Call::Share(_)));
        write_reply(&mut s, Reply::Share(pb::BudgetShare { device: 1, ..Default::default() }));
    });
    let (mut conn, _) = Connection::open(&path, "test", "", None).expect("open");
    conn.patience = Duration::from_millis(100);
    let ask = pb::AcquireBudgetRequest { device: 1, count: 70, ..Default::default() };
    match conn.call(Call::Acquire(ask), Duration::ZERO) {
        Err(WireError::Refused { message, .. }) => assert!(message.contains("did not answer"), "{message}"),
        other => panic!("a slow answer is a refusal: {other:?}"),
    }
    assert!(!conn.closed_by_peer(), "the late answer is not taken for a broken connection");
    gave_up.send(()).expect("npud waits");
    conn.patience = ANSWER_TIMEOUT;
    let share = conn.call(Call::Share(pb::BudgetShareRequest { device: 1, ..Default::default() }), Duration::ZERO);
    assert!(matches!(share, Ok(Reply::Share(_))), "{share:?}");
    npud.join().expect("npud's side saw every call it expected");
}

/// Issue 33: the welcome and the grant npud sends in one write are both taken from one
/// read, and the answer to a report sent without waiting is read (and dropped) before
/// the next call's answer, by that call or by the watcher's settling.
#[test]
fn answers_in_one_read_and_a_reports_answer_are_kept_in_step() {
    let (path, _dir, npud) = fake_npud(|mut s| {
        assert!(matches!(read_call(&mut s), Call::Hello(_)));
        assert!(matches!(read_call(&mut s), Call::Acquire(a) if a.count == 70));
        // Both answers in one write.
        let mut both = reply_frame(Reply::Welcome(pb::BudgetWelcome { tenant: "t".into(), ..Default::default() }));
        both.extend(reply_frame(Reply::Acquired(pb::AcquireBudgetResponse::default())));
        s.write_all(&both).expect("answers");
        for _ in 0..2 {
            assert!(matches!(read_call(&mut s), Call::Created(c) if c.created == Some(70)));
            write_reply(&mut s, Reply::Created(pb::CreatedBudgetResponse::default()));
        }
        assert!(matches!(read_call(&mut s), Call::Share(_)));
        write_reply(&mut s, Reply::Share(pb::BudgetShare { device: 1, available: 7, ..Default::default() }));
    });
    let ask = pb::AcquireBudgetRequest { device: 1, count: 70, ..Default::default() };
    let (mut conn, answered) =
        Connection::open(&path, "test", "", Some((Call::Acquire(ask), Duration::ZERO))).expect("open");
    assert_eq!(conn.tenant, "t");
    assert!(matches!(answered, Some(Ok(Reply::Acquired(_)))), "{answered:?}");
    assert!(conn.input.is_empty(), "nothing left over");
    let report = || Call::Created(pb::CreatedBudgetRequest { device: 1, created: Some(70), ..Default::default() });
    conn.send_unanswered(report()).expect("sent");
    // Settled by the watcher once it has come…
    let settled = Instant::now();
    while !conn.owed.is_empty() {
        conn.settle_arrived().expect("still connected");
        assert!(settled.elapsed() < Duration::from_secs(20), "the report's answer came");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!conn.closed_by_peer(), "in step");
    // …or by the next call, before its own answer.
    conn.send_unanswered(report()).expect("sent");
    let share = conn.call(Call::Share(pb::BudgetShareRequest { device: 1, ..Default::default() }), Duration::ZERO);
    assert!(matches!(&share, Ok(Reply::Share(s)) if s.available == 7), "{share:?}");
    npud.join().expect("npud's side saw every call it expected");
}

/// A program that creates and destroys streams in a tight loop ends a batch each
/// round: thousands of reports whose answers the program's thread never waits for.
/// Only a bounded number may be in flight, or the unread answers fill the socket, npud
/// stops reading, and the program's next write blocks until the connection is lost
/// (found on an H100). The connection stays in step throughout.
#[test]
fn reports_in_a_tight_loop_never_fill_the_socket() {
    const ROUNDS: u32 = 20_000;
    let (path, _dir, npud) = fake_npud(|mut s| {
        assert!(matches!(read_call(&mut s), Call::Hello(_)));
        write_reply(&mut s, Reply::Welcome(pb::BudgetWelcome { tenant: "t".into(), ..Default::default() }));
        let mut reports = 0u32;
        loop {
            match read_call(&mut s) {
                Call::Created(_) => {
                    reports += 1;
                    write_reply(&mut s, Reply::Created(pb::CreatedBudgetResponse::default()));
                }
                Call::Share(_) => {
                    let available = reports;
                    write_reply(&mut s, Reply::Share(pb::BudgetShare { device: 1, available, ..Default::default() }));
                    return;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    });
    let (mut conn, _) = Connection::open(&path, "test", "", None).expect("open");
    let started = Instant::now();
    let mut sent = 0u32;
    for round in 0..ROUNDS {
        let report = Call::Created(pb::CreatedBudgetRequest { device: 1, created: Some(round), ..Default::default() });
        match conn.send_report(report) {
            Ok(true) => sent += 1,
            Ok(false) => {
                assert!(conn.owed.len() >= MAX_REPORTS_IN_FLIGHT, "held back only when that many are owed")
            }
            Err(e) => panic!("round {round}: the connection broke: {e}"),
        }
        assert!(conn.owed.len() <= MAX_REPORTS_IN_FLIGHT);
    }
    assert!(started.elapsed() < ANSWER_TIMEOUT, "no write waited for npud to read");
    // npud read every report sent, and the next call's answer is its own.
    let share = conn.call(Call::Share(pb::BudgetShareRequest { device: 1, ..Default::default() }), Duration::ZERO);
    assert!(matches!(&share, Ok(Reply::Share(s)) if s.available == sent), "{share:?} after {sent} reports");
    assert!(sent >= MAX_REPORTS_IN_FLIGHT as u32);
    npud.join().expect("npud's side saw every call it expected");
}

/// Issue 33: a connection started at aclInit sends its hello at once (npud opens the
/// session while the program goes on); the first ask, later, goes with nothing else,
/// and the welcome waiting for it is read first.
#[test]
fn a_connection_started_early_sends_its_hello_at_once_and_is_welcomed_at_the_first_ask() {
    let (hello_seen, seen) = std::sync::mpsc::channel::<()>();
    let (path, _dir, npud) = fake_npud(move |mut s| {
        assert!(matches!(read_call(&mut s), Call::Hello(h) if h.reports_created));
        write_reply(
            &mut s,
            Reply::Welcome(pb::BudgetWelcome { tenant: "t".into(), max_streams: 90, ..Default::default() }),
        );
        hello_seen.send(()).expect("the test waits");
        assert!(matches!(read_call(&mut s), Call::Acquire(a) if a.count == 70));
        write_reply(&mut s, Reply::Acquired(pb::AcquireBudgetResponse::default()));
    });
    let started = Connection::start(&path, "test", "", true).expect("started");
    assert!(!started.welcomed());
    seen.recv_timeout(Duration::from_secs(20)).expect("the hello went out before any call");
    let ask = pb::AcquireBudgetRequest { device: 1, count: 70, ..Default::default() };
    let (conn, answered) = started.finish(Some((Call::Acquire(ask), Duration::ZERO))).expect("finished");
    assert!(conn.welcomed());
    assert_eq!((conn.tenant.as_str(), conn.max_streams), ("t", 90));
    assert!(matches!(answered, Some(Ok(Reply::Acquired(_)))), "{answered:?}");
    npud.join().expect("npud's side saw every call it expected");
}

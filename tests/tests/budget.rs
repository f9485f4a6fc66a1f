//! Issue 19: the budget API as a gRPC service, for programs in any language that create
//! their streams themselves. One `BudgetService.Budget` stream is one session; creation
//! batches on a contended device are paced one at a time.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply, budget_service_client::BudgetServiceClient};
use npud_tests::{Daemon, eventually_async, metric, npud_channel};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

/// One open Budget stream: calls go in, replies come out in order.
struct Budget {
    calls: mpsc::Sender<pb::BudgetCall>,
    replies: tonic::Streaming<pb::BudgetReply>,
}

impl Budget {
    async fn open(d: &Daemon) -> Budget {
        let mut client = BudgetServiceClient::new(npud_channel(&d.socket).await);
        let (calls, rx) = mpsc::channel(4);
        let replies = client.budget(ReceiverStream::new(rx)).await.expect("Budget stream").into_inner();
        let mut b = Budget { calls, replies };
        match b.call(Call::Hello(pb::BudgetHello { program: "budget-test".into(), ..Default::default() })).await {
            Reply::Welcome(w) => assert_eq!(w.tenant, "root"),
            other => panic!("expected a welcome, got {other:?}"),
        }
        b
    }

    async fn send(&self, call: Call) {
        self.calls.send(pb::BudgetCall { call: Some(call) }).await.expect("stream open");
    }

    async fn reply(&mut self) -> Reply {
        self.replies.next().await.expect("a reply").expect("not a stream error").reply.expect("a reply body")
    }

    async fn call(&mut self, call: Call) -> Reply {
        self.send(call).await;
        self.reply().await
    }

    async fn acquire(&mut self, count: u32) -> Reply {
        self.call(Call::Acquire(pb::AcquireBudgetRequest { device: 0, count, wait_ms: 60_000, ..Default::default() }))
            .await
    }

    /// [`Budget::acquire`], which must be granted.
    async fn granted(&mut self, count: u32) -> pb::AcquireBudgetResponse {
        match self.acquire(count).await {
            Reply::Acquired(a) => a,
            other => panic!("{count} streams granted, got {other:?}"),
        }
    }
}

/// Takes the share of device 0 from which creation contends (three quarters: see
/// `CONTENDED_FROM`), so that later grants there are paced; this session's own batch is
/// reported over at once. Returns the session and how many it holds.
async fn crowd(d: &Daemon) -> (Budget, u64) {
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let taken = (capacity * 3).div_ceil(4);
    let mut b = Budget::open(d).await;
    let a = b.granted(taken).await;
    assert!(!a.unpaced, "three quarters taken: the device contends, and the batch holds its turn");
    assert!(matches!(b.call(Call::Created(pb::CreatedBudgetRequest::default())).await, Reply::Created(_)));
    (b, u64::from(taken))
}

async fn held(d: &Daemon) -> u64 {
    let status = d.client().await.status().await.expect("status");
    status.native_holders.iter().map(|h| u64::from(h.streams)).sum()
}

#[tokio::test]
async fn a_budget_stream_is_a_session_whose_holdings_go_back_when_it_ends() {
    let port = npud_tests::free_port();
    let d = Daemon::builder()
        .config("[budget]\nnative_pacing = \"0s\"\n")
        .args(&["--metrics", &format!("127.0.0.1:{port}")])
        .start();
    let mut b = Budget::open(&d).await;
    let a = b.granted(70).await;
    let share = a.share.expect("share");
    assert_eq!(share.holds, 70);
    assert_eq!(share.tenant_holds, 70);
    assert_eq!(held(&d).await, 70, "status lists the holder");
    assert_eq!(d.in_use(), 70, "one ledger with daemon streams");
    assert_eq!(metric(port, "npud_tenant_native_streams{tenant=\"root\",device=\"0\"}"), Some(70.0));
    assert_eq!(metric(port, "npud_tenant_streams{tenant=\"root\",device=\"0\"}"), Some(70.0));
    assert_eq!(metric(port, "npud_native_sessions"), Some(1.0));

    let Reply::Released(r) =
        b.call(Call::Release(pb::ReleaseBudgetRequest { device: 0, count: 20, ..Default::default() })).await
    else {
        panic!("released")
    };
    assert_eq!(r.share.expect("share").holds, 50);

    // A bad call is answered with the error a gRPC call would get, and the session goes on.
    let Reply::Error(e) = b
        .call(Call::Acquire(pb::AcquireBudgetRequest { device: 99, count: 1, wait_ms: 0, ..Default::default() }))
        .await
    else {
        panic!("device 99 does not exist")
    };
    assert_eq!(e.code, tonic::Code::InvalidArgument as i32, "{e:?}");
    assert_eq!(e.detail.expect("detail").reason, pb::ErrorReason::InvalidDevice as i32);
    assert!(e.message.contains("99"), "{}", e.message);
    let Reply::Share(s) = b.call(Call::Share(pb::BudgetShareRequest { device: 0, ..Default::default() })).await else {
        panic!("share")
    };
    assert_eq!(s.holds, 50, "the failed call changed nothing");

    drop(b); // the client goes away without a word
    assert!(eventually_async(Duration::from_secs(30), || async { d.in_use() == 0 }).await, "{}", d.log());
    assert_eq!(held(&d).await, 0);
}

#[tokio::test]
async fn a_second_batch_on_a_device_waits_until_the_first_says_it_created_its_streams() {
    // A window of an hour: only the sessions' own reports end a batch in this test.
    let d = Daemon::builder().config("[budget]\nnative_pacing = \"1h\"\n").start();
    let (_crowd, taken) = crowd(&d).await;
    let mut first = Budget::open(&d).await;
    let mut second = Budget::open(&d).await;
    let mut third = Budget::open(&d).await;
    assert!(matches!(first.acquire(10).await, Reply::Acquired(_)));

    second
        .send(Call::Acquire(pb::AcquireBudgetRequest { device: 0, count: 10, wait_ms: 60_000, ..Default::default() }))
        .await;
    // Its budget is there, its turn is not: no answer while the first batch is open.
    assert!(tokio::time::timeout(Duration::from_millis(500), second.reply()).await.is_err(), "answered early");
    assert!(matches!(
        first.call(Call::Created(pb::CreatedBudgetRequest { device: 0, ..Default::default() })).await,
        Reply::Created(_)
    ));
    let Reply::Acquired(a) = second.reply().await else { panic!("granted after the first batch ended") };
    assert!(a.waited_ms > 0, "the wait for the turn is reported");

    // A session that goes away mid-batch ends its batch too.
    third
        .send(Call::Acquire(pb::AcquireBudgetRequest { device: 0, count: 10, wait_ms: 60_000, ..Default::default() }))
        .await;
    assert!(tokio::time::timeout(Duration::from_millis(500), third.reply()).await.is_err(), "answered early");
    drop(second);
    assert!(matches!(third.reply().await, Reply::Acquired(_)));
    assert!(eventually_async(Duration::from_secs(30), || async { d.in_use() == taken + 20 }).await, "{}", d.log());
}

/// Pacing is for a device whose creations contend: on one with room, grants hold no turn,
/// are answered at once one beside the other, and say so (`unpaced`), so their holders
/// need not report at once; once three quarters are taken, grants are paced again.
#[tokio::test]
async fn grants_on_a_device_with_room_are_not_paced() {
    let d = Daemon::builder().config("[budget]\nnative_pacing = \"1h\"\n").start();
    let mut first = Budget::open(&d).await;
    let mut second = Budget::open(&d).await;
    let a = first.granted(10).await;
    assert!(a.unpaced, "{a:?}");
    // The first never reports, and the window is an hour: the second is answered anyway.
    let Reply::Acquired(b) =
        tokio::time::timeout(Duration::from_secs(30), second.acquire(10)).await.expect("answered at once")
    else {
        panic!("granted")
    };
    assert!(b.unpaced, "{b:?}");
    let (_crowd, taken) = crowd(&d).await;
    let mut third = Budget::open(&d).await;
    let c = third.granted(10).await;
    assert!(!c.unpaced, "three quarters taken: paced again");
    assert_eq!(d.in_use(), taken + 30);
}

/// `unpaced` means the device has room, not merely that the grant holds no turn: with
/// pacing off, a grant near the limit still says its holder is to report at once (its
/// new streams count twice until that report, granted and untracked on the device, and a
/// device near its limit cannot spare them).
#[tokio::test]
async fn with_pacing_off_a_grant_near_the_limit_still_wants_its_report_at_once() {
    let d = Daemon::builder().config("[budget]\nnative_pacing = \"0s\"\n").start();
    let mut first = Budget::open(&d).await;
    let a = first.granted(10).await;
    assert!(a.unpaced, "room on the device: {a:?}");
    let (_crowd, taken) = crowd(&d).await;
    let mut second = Budget::open(&d).await;
    let b = second.granted(10).await;
    assert!(!b.unpaced, "three quarters taken: {b:?}");
    assert_eq!(d.in_use(), taken + 20);
}

#[tokio::test]
async fn a_session_cancelled_while_it_waits_for_its_turn_takes_nothing() {
    let d = Daemon::builder().config("[budget]\nnative_pacing = \"1h\"\n").start();
    let (_crowd, taken) = crowd(&d).await;
    let mut first = Budget::open(&d).await;
    assert!(matches!(first.acquire(10).await, Reply::Acquired(_)));
    let waiting = Budget::open(&d).await;
    waiting
        .send(Call::Acquire(pb::AcquireBudgetRequest { device: 0, count: 30, wait_ms: 60_000, ..Default::default() }))
        .await;
    // Its grant is counted while it waits for the turn…
    assert!(eventually_async(Duration::from_secs(30), || async { d.in_use() == taken + 40 }).await, "{}", d.log());
    drop(waiting);
    // …and given back when it goes away before the turn comes.
    assert!(eventually_async(Duration::from_secs(30), || async { d.in_use() == taken + 10 }).await, "{}", d.log());
    assert_eq!(held(&d).await, taken + 10);
}

/// Issue 33: a client may send calls ahead of their answers on the budget wire (the
/// interposer sends its hello and first acquire in one write): they are answered in
/// order, and a process that dies while one of them waits for budget still leaves the
/// queue at once.
#[test]
fn calls_sent_ahead_are_answered_in_order_and_a_close_still_withdraws_a_wait() {
    use npud_tests::wire::{Wire, frame};
    use std::io::Write;
    let d = Daemon::builder().start();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let mut w = Wire::connect(&d.socket);
    let acquire = |count, wait_ms| Call::Acquire(pb::AcquireBudgetRequest { count, wait_ms, ..Default::default() });
    let mut bytes = frame(Call::Hello(pb::BudgetHello { program: "ahead".into(), ..Default::default() }));
    bytes.extend(frame(acquire(10, 0)));
    bytes.extend(frame(Call::Share(pb::BudgetShareRequest::default())));
    w.conn.write_all(&bytes).unwrap();
    assert!(matches!(w.reply(), Ok(Reply::Welcome(_))), "the hello first");
    assert!(matches!(w.reply(), Ok(Reply::Acquired(_))), "then the grant");
    match w.reply() {
        Ok(Reply::Share(s)) => assert_eq!(s.tenant_holds, 10, "then the share, which counts the grant: {s:?}"),
        other => panic!("expected the share, got {other:?}"),
    }
    assert_eq!(d.device0()["in_use"], 10);
    // The rest of the device is held; an ask that must wait, with a call sent behind it,
    // and then the process is gone.
    assert!(matches!(w.acquire(0, capacity - 10, 0), Ok(Reply::Acquired(_))));
    let mut waiter = Wire::hello(&d.socket, Default::default());
    let mut bytes = frame(acquire(5, 600_000));
    bytes.extend(frame(Call::Share(pb::BudgetShareRequest::default())));
    waiter.conn.write_all(&bytes).unwrap();
    assert!(npud_tests::eventually(Duration::from_secs(20), || d.device0()["queued_requests"] == 1), "it waits");
    drop(waiter);
    assert!(
        npud_tests::eventually(Duration::from_secs(20), || d.device0()["queued_requests"] == 0),
        "a closed connection leaves the queue though a call was sent behind its wait"
    );
    drop(w);
    assert!(npud_tests::eventually(Duration::from_secs(20), || d.device0()["in_use"] == 0), "and nothing stays booked");
}

/// Issue 33: answers that are ready together go out in one write, so a process that sent
/// its hello and first ask at once wakes once for both; an answer that has to wait holds
/// back none of the answers before it.
#[test]
fn answers_ready_together_come_in_one_read_and_a_wait_holds_back_none_before_it() {
    use npud_tests::wire::{Wire, frame};
    use prost::Message;
    use std::io::{Read, Write};
    let d = Daemon::builder().start();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let acquire = |count, wait_ms| Call::Acquire(pb::AcquireBudgetRequest { count, wait_ms, ..Default::default() });
    let hello = || frame(Call::Hello(pb::BudgetHello { program: "together".into(), ..Default::default() }));
    let mut w = Wire::connect(&d.socket);
    let mut bytes = hello();
    bytes.extend(frame(acquire(10, 0)));
    bytes.extend(frame(Call::Share(pb::BudgetShareRequest::default())));
    w.conn.write_all(&bytes).unwrap();
    // One read: whatever the first write of the daemon holds.
    let mut buf = vec![0u8; 4096];
    let n = w.conn.read(&mut buf).unwrap();
    let mut replies = Vec::new();
    let mut rest = &buf[..n];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let body = rest.get(4..4 + len).expect("whole answers only");
        replies.push(pb::BudgetReply::decode(body).unwrap().reply.unwrap());
        rest = &rest[4 + len..];
    }
    assert!(rest.is_empty(), "whole answers only");
    assert!(
        matches!(replies.as_slice(), [Reply::Welcome(_), Reply::Acquired(_), Reply::Share(_)]),
        "the welcome, the grant and the share in one read: {replies:?}"
    );
    // The rest of the device held, a second process's ask has to wait: its welcome comes
    // while it waits, not after.
    assert!(matches!(w.acquire(0, capacity - 10, 0), Ok(Reply::Acquired(_))));
    let mut waiter = Wire::connect(&d.socket);
    let mut bytes = hello();
    bytes.extend(frame(acquire(5, 600_000)));
    waiter.conn.write_all(&bytes).unwrap();
    assert!(matches!(waiter.reply(), Ok(Reply::Welcome(_))), "welcomed while its ask waits");
    assert!(npud_tests::eventually(Duration::from_secs(20), || d.device0()["queued_requests"] == 1), "it waits");
    drop(w);
    assert!(matches!(waiter.reply(), Ok(Reply::Acquired(_))), "granted once the holder is gone");
    assert_eq!(d.device0()["in_use"], 5);
}

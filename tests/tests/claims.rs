//! Issue 58, items 1 and 2: a `captured` claim is evidence of a capture npud admitted, not a
//! request. Played as a hostile local process would, with the generated messages on the
//! budget wire, and with the numbers: each of these booked streams on the code
//! before (a claim from a session that began no capture, a claim past other tenants'
//! reservations, an unlimited ceiling under the default quota, untracked streams of another
//! program booked to the claimer).
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use npud_tests::native::{App, Shared, acl_apps, acl_command};
use npud_tests::wire::Wire;
use npud_tests::{Daemon, eventually};
use std::time::Duration;

/// An ask of `count` streams on device 0, marked as a capture's or not.
fn acquire(w: &mut Wire, count: u32, capture: bool) -> Result<Reply, pb::BudgetError> {
    w.call(Call::Acquire(pb::AcquireBudgetRequest { device: 0, count, capture, ..Default::default() }))
}

/// A claim of `count` captured streams on device 0: Ok(accepted), or the refusal.
fn claim(w: &mut Wire, count: u32) -> Result<u32, pb::BudgetError> {
    match w.call(Call::Captured(pb::CapturedBudgetRequest { device: 0, count, ..Default::default() }))? {
        Reply::Captured(c) => Ok(c.accepted),
        other => panic!("not an answer to a claim: {other:?}"),
    }
}

/// A daemon with tenant root (the test's own uid) capped at `alpha`, and `tcp-anonymous`
/// (every TCP peer) reserving `reserved`: the victim, which holds nothing yet.
fn alpha_and_beta(shared: &Shared, alpha: Option<u32>, reserved: u32) -> Daemon {
    let root = alpha.map_or(String::new(), |max| format!("[[tenants]]\nname = \"root\"\nmax_streams = {max}\n"));
    let config = format!("{root}[[tenants]]\nname = \"tcp-anonymous\"\nreserved_streams = {reserved}\n");
    npud_tests::native::acl_builder(&shared.path, &[]).tcp().config(&config).start()
}

/// Beta, over TCP, takes its whole reservation of daemon streams at once.
fn beta_gets_its_reservation(d: &Daemon, reserved: u32) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let beta = d.tcp_client().await;
        assert_eq!(beta.tenant(), "tcp-anonymous");
        let streams = beta.device(0).create_streams(reserved, Default::default()).await;
        assert!(streams.is_ok(), "beta keeps its reservation of {reserved}: {:?}\n{}", streams.err(), d.log());
    });
}

/// Alpha (max 1,024) acquires 1,024, then claims 1,024 captured streams on a second
/// connection that began no capture: refused, nothing booked, and beta (reserved 1,000,
/// holding nothing) still gets all 1,000.
#[test]
fn a_claim_from_a_session_that_began_no_capture_is_refused() {
    let shared = Shared::new();
    let d = alpha_and_beta(&shared, Some(1024), 1000);
    let mut first = Wire::hello(&d.socket, pb::BudgetHello::default());
    assert!(matches!(acquire(&mut first, 1024, false), Ok(Reply::Acquired(_))));
    let mut second = Wire::hello(&d.socket, pb::BudgetHello::default());
    let refused = claim(&mut second, 1024).expect_err("no capture began on this session");
    assert!(refused.message.contains("no capture streams"), "{refused:?}");
    // Even on the session holding the grant: its streams were not a capture's.
    let refused = claim(&mut first, 1024).expect_err("its grant is not a capture's");
    assert!(refused.message.contains("no capture streams"), "{refused:?}");
    assert_eq!(d.in_use(), 1024, "nothing booked by the claims");
    beta_gets_its_reservation(&d, 1000);
}

/// A claim is matched against the capture streams npud granted the session, and its room
/// is what the device has after every other tenant's reservation: alpha, granted 1,000
/// capture streams, claims 1,024 more and gets no more than leaves beta's 1,000.
#[test]
fn a_claim_never_takes_another_tenants_reservation() {
    let shared = Shared::new();
    let d = alpha_and_beta(&shared, Some(1024), 1000);
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
    assert!(matches!(acquire(&mut w, 1000, true), Ok(Reply::Acquired(_))));
    let accepted = claim(&mut w, 1024).expect("a capture's claim");
    assert!(
        accepted <= capacity - 1000 - 1000,
        "{accepted} booked of a device of {capacity} with 1000 held and 1000 reserved for beta"
    );
    assert!(accepted > 0, "the room left is bookable");
    assert_eq!(d.in_use(), u64::from(1000 + accepted));
    beta_gets_its_reservation(&d, 1000);
}

/// An unconfigured tenant (the built-in quota: max_streams unlimited) says hello and claims
/// 4,096: refused (it began no capture). Granted 10 capture streams, it may claim no more
/// than 10: the ceiling is finite under every quota. Beta keeps its reservation.
#[test]
fn an_unconfigured_tenant_cannot_claim_the_device() {
    let shared = Shared::new();
    let d = alpha_and_beta(&shared, None, 1000);
    let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
    assert!(claim(&mut w, 4096).is_err(), "4,096 claimed with no capture");
    assert_eq!(d.in_use(), 0);
    assert!(matches!(acquire(&mut w, 10, true), Ok(Reply::Acquired(_))));
    let accepted = claim(&mut w, 4096).expect("a capture's claim, cut to its counter");
    assert_eq!(accepted, 10, "no more than the capture streams granted");
    let used_up = claim(&mut w, 4096).expect_err("the counter is used up");
    assert_eq!(used_up.detail.map(|d| d.reason), Some(pb::ErrorReason::InvalidArgumentOther as i32));
    assert_eq!(d.in_use(), 20);
    beta_gets_its_reservation(&d, 1000);
}

/// A 64-stream tenant's claim of 200 never books the streams an outside program holds
/// (128 of them, untracked). The rest of the device is taken (another tenant holds it), so
/// those untracked streams are the only room a claim could find: before, the claim took 64
/// of them onto the claimer's books (and kept them after that program exited); now it books
/// nothing, and they stay the outside program's, untracked, until it exits.
#[test]
fn a_claim_never_books_another_programs_untracked_streams() {
    let shared = Shared::new();
    let d = npud_tests::native::acl_builder(&shared.path, &[])
        .tcp()
        .config("[[tenants]]\nname = \"root\"\nmax_streams = 64\n")
        .start();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let (program, _) = acl_apps();
    let mut outside: App = App::spawn({
        let mut c = acl_command(program, &shared.path, None);
        c.args(["127", "-1"]);
        c
    });
    assert!(outside.started().is_ok());
    assert!(
        eventually(Duration::from_secs(10), || d.device0()["untracked"] == 128),
        "the outside program's 127 and its default stream: {}",
        d.device0()
    );
    // The claimer (root) is granted 64 capture streams; another tenant (every TCP peer is
    // tcp-anonymous, over BudgetService) takes all the room left.
    let mut w = Wire::hello(&d.socket, pb::BudgetHello { reports_created: true, ..Default::default() });
    assert!(matches!(acquire(&mut w, 64, true), Ok(Reply::Acquired(_))));
    let rest = capacity - 128 - 64;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (_calls, _replies, other) = rt.block_on(async {
        let channel =
            tonic::transport::Channel::from_shared(d.endpoint.clone().unwrap()).unwrap().connect().await.unwrap();
        let mut client = pb::budget_service_client::BudgetServiceClient::new(channel);
        let (calls, rx) = tokio::sync::mpsc::channel(4);
        let mut replies = client.budget(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let ask = Call::Acquire(pb::AcquireBudgetRequest { device: 0, count: rest, ..Default::default() });
        calls.send(pb::BudgetCall { call: Some(ask) }).await.unwrap();
        let reply = replies.message().await.unwrap().unwrap().reply.unwrap();
        (calls, replies, reply)
    });
    assert!(matches!(other, Reply::Acquired(_)), "the other tenant takes the rest: {other:?}");
    let in_use = d.in_use();
    let accepted = claim(&mut w, 200).expect("a capture's claim");
    assert_eq!(accepted, 0, "the only room was the outside program's untracked streams");
    assert_eq!(d.in_use(), in_use, "nothing booked");
    outside.release();
    assert!(
        eventually(Duration::from_secs(10), || d.device0()["untracked"] == 0),
        "gone with their program, the claimer's session still open: {}",
        d.device0()
    );
    drop(w);
}

/// Issue 68: a capture's counter falls as its streams go back. 16 rounds of acquiring 8
/// capture streams and releasing them leave no live capture: a claim of 128 then books
/// nothing (it booked all 128 before, streams that never existed). Nor does a claim past
/// the live capture's own streams, and one over the per-call bound is refused outright.
#[test]
fn recycled_and_oversized_claims_book_nothing_that_does_not_exist() {
    let shared = Shared::new();
    let d = npud_tests::native::acl_builder(&shared.path, &[]).start();
    let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
    for _ in 0..16 {
        assert!(matches!(acquire(&mut w, 8, true), Ok(Reply::Acquired(_))));
        let release = Call::Release(pb::ReleaseBudgetRequest { device: 0, count: 8, ..Default::default() });
        assert!(matches!(w.call(release), Ok(Reply::Released(_))));
    }
    let recycled = claim(&mut w, 128);
    assert!(recycled.is_err() || recycled == Ok(0), "no capture is live: {recycled:?}");
    assert_eq!(d.in_use(), 0, "nothing booked");
    // A live capture of 8: a claim books at most what it can have grown by.
    assert!(matches!(acquire(&mut w, 8, true), Ok(Reply::Acquired(_))));
    let accepted = claim(&mut w, 128).expect("a live capture's claim");
    assert!(accepted <= 8, "{accepted} booked for a capture of 8");
    assert_eq!(d.in_use() as u32, 8 + accepted);
    let oversized = claim(&mut w, 5000).expect_err("past the per-call bound");
    assert_eq!(
        oversized.detail.as_ref().map(|d| d.reason),
        Some(pb::ErrorReason::InvalidCount as i32),
        "{oversized:?}"
    );
    assert_eq!(d.in_use() as u32, 8 + accepted, "nothing more");
}

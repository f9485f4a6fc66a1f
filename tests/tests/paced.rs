//! Issue 58, item 5, end to end with the numbers: a tenant with max 16 holds 15 and
//! parks acquire(2, wait_ms = 2^32-1), which only its own release could satisfy; its other
//! connections take silent 1-stream grants. On a device 99% free, another tenant's eight
//! start-ups are each answered unpaced (before: 0 of 8, waits up to 1.6 s): an ask that
//! cannot be granted for its own quota is not contention.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use npud_tests::Daemon;
use npud_tests::wire::Wire;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_over_its_own_quota_does_not_pace_other_tenants() {
    let d = Daemon::builder()
        .tcp()
        .config("[[tenants]]\nname = \"root\"\nmax_streams = 16\n[budget]\nnative_pacing = \"5s\"\n")
        .start();
    let socket = d.socket.clone();
    // The tiny tenant: 15 held, then an ask for 2, from another of its processes (one
    // holding nothing: a holder's growth never waits), parked as long as the wire allows.
    let mut holder = Wire::hello(&socket, pb::BudgetHello::default());
    assert!(matches!(holder.acquire(0, 15, 0), Ok(Reply::Acquired(_))));
    let mut parker = Wire::hello(&socket, pb::BudgetHello::default());
    parker.send(Call::Acquire(pb::AcquireBudgetRequest {
        device: 0,
        count: 2,
        wait_ms: u32::MAX,
        ..Default::default()
    }));
    // Its other connections: silent 1-stream grants (never said created).
    let mut silent = Wire::hello(&socket, pb::BudgetHello::default());
    assert!(matches!(silent.acquire(0, 1, 0), Ok(Reply::Acquired(_))));
    assert!(
        npud_tests::eventually(Duration::from_secs(10), || d.device0()["queued_requests"] == 1),
        "the ask for 2 is parked: {}",
        d.device0()
    );
    // Another tenant (tcp-anonymous) starts eight processes' worth over BudgetService.
    let channel = tonic::transport::Channel::from_shared(d.endpoint.clone().unwrap()).unwrap().connect().await.unwrap();
    let mut unpaced = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..8 {
        let mut client = pb::budget_service_client::BudgetServiceClient::new(channel.clone());
        let (calls, rx) = tokio::sync::mpsc::channel(4);
        let mut replies = client.budget(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let ask =
            Call::Acquire(pb::AcquireBudgetRequest { device: 0, count: 71, wait_ms: 60_000, ..Default::default() });
        let asked = Instant::now();
        calls.send(pb::BudgetCall { call: Some(ask) }).await.unwrap();
        match replies.message().await.unwrap().unwrap().reply.unwrap() {
            Reply::Acquired(a) => unpaced += usize::from(a.unpaced),
            other => panic!("a start-up on a device 99% free: {other:?}"),
        }
        slowest = slowest.max(asked.elapsed());
        drop(calls);
    }
    assert_eq!(unpaced, 8, "every start-up answered unpaced (slowest {slowest:?})\n{}", d.log());
    drop((silent, parker));
    drop(holder);
}

//! Admission on the simulator, in-process: grants are whole, an unfilled grant gives its
//! budget back, released streams come back through the pool, native budget balances.

use super::*;
use crate::backend::sim::SimBackend;
use crate::config::{Args, Config};

/// Capacity of the test device: small, so the budget runs out quickly.
const CAPACITY: u32 = 8;

fn admission(policy: Policy) -> Arc<Admission> {
    let config = Config::load(&Args::default()).expect("the default configuration");
    let backend: Arc<dyn Backend> =
        Arc::new(SimBackend::new(&config.sim.profile, 1, &config.sim.options).expect("a simulated device"));
    Arc::new(Admission::new(
        backend,
        policy,
        config.budget,
        &[CAPACITY],
        Duration::from_secs(5),
        16,
        Arc::new(Metrics::new()),
    ))
}

fn tenant(name: &str) -> Tenant {
    Tenant::from(name)
}

const CLASS: Class = (0, 0);
/// Long enough never to expire on a loaded machine; the tests that need a refusal use zero.
const PATIENT: Duration = Duration::from_secs(600);

#[tokio::test]
async fn a_grant_is_whole_and_one_that_does_not_fit_takes_nothing() {
    let a = admission(Policy::Managed);
    let q = Quota::default();
    let first = a.grant(0, &tenant("a"), &q, 6, PATIENT).await.expect("6 of 8 fit");
    assert_eq!(a.view(0).in_use, 6);
    let e = a.grant(0, &tenant("b"), &q, 3, Duration::ZERO).await.err().expect("3 more do not fit");
    assert_eq!(e.reason, Reason::GrantWaitExpired);
    assert_eq!(a.view(0).in_use, 6, "the refused request took nothing");
    let outcome = first.fill(CLASS).await;
    assert!(outcome.failure.is_none());
    assert_eq!(outcome.streams.len(), 6);
}

#[tokio::test]
async fn a_grant_dropped_unfilled_gives_its_budget_back_and_the_queue_moves() {
    let a = admission(Policy::Managed);
    let q = Quota::default();
    let held = a.grant(0, &tenant("a"), &q, 8, PATIENT).await.expect("all of it");
    let waiter = {
        let a = Arc::clone(&a);
        tokio::spawn(async move { a.grant(0, &tenant("b"), &Quota::default(), 4, PATIENT).await.map(|g| g.waited()) })
    };
    while a.view(0).queued == 0 {
        tokio::task::yield_now().await;
    }
    drop(held);
    waiter.await.expect("the waiter ran").expect("granted once the first grant was dropped");
    let view = a.view(0);
    assert_eq!(view.in_use, 0, "the second grant was dropped unfilled too");
    assert_eq!(view.queued, 0);
}

#[tokio::test]
async fn released_streams_drain_into_the_pool_and_are_handed_out_again() {
    let a = admission(Policy::Managed);
    let t = tenant("a");
    let streams = a.grant(0, &t, &Quota::default(), 4, PATIENT).await.expect("granted").fill(CLASS).await.streams;
    let (tx, mut rx) = tokio::sync::watch::channel(None);
    a.release(0, &t, streams.iter().map(|(s, _)| (*s, CLASS)).collect(), false, Some(tx));
    rx.wait_for(Option::is_some).await.expect("drained");
    let view = a.view(0);
    assert_eq!((view.in_use, view.pooled), (0, 4));
    let again = a.grant(0, &t, &Quota::default(), 4, PATIENT).await.expect("granted").fill(CLASS).await;
    assert!(again.streams.iter().all(|(_, reused)| *reused), "{:?}", again.streams);
    assert_eq!(a.pool_hits(), 4);
    let other = a.grant(0, &t, &Quota::default(), 2, PATIENT).await.expect("granted").fill((3, 0)).await;
    assert!(other.streams.iter().all(|(_, reused)| !reused), "another priority is made fresh");
}

#[tokio::test]
async fn a_quota_caps_one_tenant_without_touching_another() {
    let a = admission(Policy::Managed);
    let small = Quota { max_streams: 2, ..Quota::default() };
    let _two = a.grant(0, &tenant("a"), &small, 2, PATIENT).await.expect("within the quota");
    let e = a.grant(0, &tenant("a"), &small, 1, Duration::ZERO).await.err().expect("over the quota");
    assert!(matches!(e.reason, Reason::GrantWaitExpired | Reason::QuotaExceeded), "{e:?}");
    let _b = a.grant(0, &tenant("b"), &Quota::default(), 6, Duration::ZERO).await.expect("b has the rest");
    assert_eq!(a.view(0).in_use, 8);
}

#[tokio::test]
async fn native_budget_is_acquired_and_released_in_the_same_ledger() {
    let a = admission(Policy::Managed);
    let t = tenant("proc");
    a.acquire_native(0, &t, &Quota::default(), 5, PATIENT, false).await.expect("native budget");
    assert_eq!(a.view(0).in_use, 5);
    assert!(a.grant(0, &tenant("b"), &Quota::default(), 4, Duration::ZERO).await.is_err(), "3 left");
    a.release_native(0, &t, 5);
    assert_eq!(a.view(0).in_use, 0);
}

/// Creation contends from three quarters of the device taken, or while grants wait for it.
#[tokio::test]
async fn a_device_contends_from_three_quarters_taken_or_a_queue() {
    let a = admission(Policy::Managed);
    let t = tenant("proc");
    assert!(!a.contended(0), "empty");
    a.acquire_native(0, &t, &Quota::default(), 5, PATIENT, false).await.expect("5 of 8");
    assert!(!a.contended(0), "5 of 8 taken");
    a.acquire_native(0, &t, &Quota::default(), 1, PATIENT, false).await.expect("6 of 8");
    assert!(a.contended(0), "6 of 8 taken");
    a.release_native(0, &t, 6);
    a.set_untracked(0, 6, a.view(0).lowered).await;
    assert!(a.contended(0), "streams outside the books are taken too");
    a.set_untracked(0, 0, a.view(0).lowered).await;
    assert!(!a.contended(0));
    a.acquire_native(0, &t, &Quota::default(), 8, PATIENT, false).await.expect("all of it");
    let waiter = {
        let a = Arc::clone(&a);
        tokio::spawn(
            async move { a.acquire_native(0, &tenant("b"), &Quota::default(), 1, PATIENT, false).await.is_ok() },
        )
    };
    while a.view(0).queued == 0 {
        tokio::task::yield_now().await;
    }
    a.release_native(0, &t, 8);
    assert!(waiter.await.expect("the waiter"), "granted once there is room");
    assert!(!a.contended(0), "1 of 8, nobody waiting");
}

#[tokio::test]
async fn passthrough_grants_without_counting() {
    let a = admission(Policy::Passthrough);
    let g = a.grant(0, &tenant("a"), &Quota::default(), 4, Duration::ZERO).await.expect("no ledger");
    assert_eq!(g.waited(), Duration::ZERO);
    assert_eq!(a.view(0).in_use, 0);
    assert_eq!(g.fill(CLASS).await.streams.len(), 4);
}

/// Issue 58, item 5: a tenant that parks an ask over its own quota (max 2, holding 1,
/// asking 2) waits for its own releases; it does not make the device contended, so no
/// other tenant's creation is paced for it. An ask the device's room keeps out does.
#[tokio::test]
async fn an_ask_only_its_own_quota_keeps_out_does_not_make_the_device_contended() {
    let a = admission(Policy::Managed);
    let small = Quota { max_streams: 2, ..Quota::default() };
    let held = a.grant(0, &tenant("tiny"), &small, 1, PATIENT).await.expect("one of its two");
    let parked = {
        let a = Arc::clone(&a);
        tokio::spawn(async move { a.grant(0, &tenant("tiny"), &small, 2, PATIENT).await.map(|g| g.waited()) })
    };
    while a.view(0).queued == 0 {
        tokio::task::yield_now().await;
    }
    assert!(!a.contended(0), "1 of 8 taken and an ask only its own quota keeps out");
    let big = a.grant(0, &tenant("big"), &Quota::default(), 6, PATIENT).await.expect("the room is there");
    let kept_out = {
        let a = Arc::clone(&a);
        tokio::spawn(
            async move { a.grant(0, &tenant("other"), &Quota::default(), 3, PATIENT).await.map(|g| g.waited()) },
        )
    };
    while a.view(0).queued < 2 {
        tokio::task::yield_now().await;
    }
    assert!(a.contended(0), "most of the device taken, and an ask its room keeps out");
    drop(big);
    drop(held);
    assert!(kept_out.await.unwrap().is_ok() && parked.await.unwrap().is_ok());
}

/// Issue 68: a capture claim goes through every cap a grant goes through, its tenant's
/// cap over every device included (a pod booked per acquisition): a pod capped at 6 that
/// holds 5 books one claimed stream, not the claim's 4.
#[tokio::test]
async fn a_capture_claim_stays_within_the_cap_over_every_device() {
    let a = admission(Policy::Managed);
    let pod = tenant("pod-a");
    a.set_spread_cap(&pod, Some(6));
    let q = Quota::default();
    let held = a.grant(0, &pod, &q, 5, PATIENT).await.expect("5 of its 6");
    assert_eq!(a.capture_debt(0, &pod, &q, CAPACITY, 4), 1, "what the cap leaves");
    assert_eq!(a.spread(&pod), (6, Some(6)));
    drop(held);
}

//! Issue 5: the budget policy end to end: whole grants, deadlines, reservations, weighted
//! fairness, no starvation, persisted quotas, the warm pool, and managed vs passthrough.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::contention::{Scenario, run};
use npud_tests::{Client, Daemon, StreamOptions, eventually, eventually_async, failure, proto, proto::ErrorReason};
use std::time::Duration;
use tonic::Code;

fn waiting(wait_s: u64) -> StreamOptions {
    StreamOptions { wait: Duration::from_secs(wait_s), ..Default::default() }
}

/// `status` rows per tenant on device 0: (streams, waiting requests).
async fn usage(c: &Client) -> std::collections::HashMap<String, (u32, u32)> {
    c.status().await.expect("status").tenants.into_iter().map(|t| (t.tenant, (t.streams, t.waiting_requests))).collect()
}

/// A small device (capacity 10) so queues form quickly.
fn small_device() -> npud_tests::DaemonBuilder {
    Daemon::builder().tcp().args(&["--sim-profile", "atlas-200i-a2"]).config("[budget]\nsafety_margin = 500")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_granted_whole_never_in_part() {
    let d = Daemon::builder().tcp().args(&["--sim-profile", "atlas-200i-a2"]).start();
    let (a, b) = (d.client().await, d.tcp_client().await);
    let held = a.device(0).create_streams(450, StreamOptions::default()).await.unwrap();
    let bd = b.device(0);
    let wanted = tokio::spawn(async move { bd.create_streams(100, waiting(30)).await.map(|v| v.len()) });
    assert!(
        eventually_async(Duration::from_secs(5), || async {
            usage(&a).await.get("tcp-anonymous").map(|u| u.1) == Some(1)
        })
        .await
    );
    // 60 are free; the request keeps waiting and takes none of them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(d.in_use(), 450);
    assert_eq!(usage(&a).await.get("tcp-anonymous").map(|u| u.0), Some(0));
    drop(held.into_iter().take(50).collect::<Vec<_>>());
    let got = tokio::time::timeout(Duration::from_secs(20), wanted).await.unwrap().unwrap().unwrap();
    assert_eq!(got, 100);
}

#[tokio::test]
async fn an_expired_wait_explains_itself() {
    let d = Daemon::builder().tcp().args(&["--sim-profile", "atlas-200i-a2"]).start();
    let (c, other) = (d.client().await, d.tcp_client().await);
    let _held = c.device(0).create_streams(100, StreamOptions::default()).await.unwrap();
    let _theirs = other.device(0).create_streams(400, StreamOptions::default()).await.unwrap();
    let opts = StreamOptions { wait: Duration::from_millis(300), ..Default::default() };
    let (code, reason, e) = failure(c.device(0).create_streams(20, opts).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::GrantWaitExpired));
    let text = e.to_string();
    let needles = [
        "within 300ms",
        "capacity 510",
        "in use 500",
        // root's quota has no maximum: said in words, not as the sentinel 4294967295.
        "tenant root holds 100 of max unlimited",
        "queue position 1",
        // Who has the device, largest first; another tenant's name is not the caller's to see.
        "largest holders: 400 (another tenant), 100 (tenant root)",
    ];
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} missing from {text:?}");
    }
    assert!(!text.contains(other.tenant()), "{text:?} names {}", other.tenant());
    assert_eq!(e.figure("requested"), Some(20));
    assert_eq!(c.status().await.unwrap().devices[0].queued_requests, 0, "the expired request left the queue");
}

/// Streams released with work still queued keep their budget until the work is done; a
/// refusal they cause says so instead of reading "in use 0, pooled 0".
#[tokio::test]
async fn a_refusal_caused_by_draining_streams_names_them() {
    let d = Daemon::builder().args(&["--sim-profile", "atlas-200i-a2"]).start();
    let c = d.client().await;
    let dev = c.device(0);
    let busy = dev.create_streams(510, StreamOptions::default()).await.unwrap();
    for s in busy.iter().take(10) {
        s.delay(Duration::from_secs(60)).await.unwrap();
    }
    drop(busy); // 500 go back at once, 10 drain for a minute
    assert!(
        eventually_async(Duration::from_secs(10), || async { c.status().await.unwrap().devices[0].in_use == 0 }).await
    );
    let opts = StreamOptions { wait: Duration::from_millis(300), ..Default::default() };
    let (code, reason, e) = failure(dev.create_streams(505, opts).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::GrantWaitExpired));
    assert!(e.to_string().contains("draining 10"), "{e}");
    assert_eq!(e.figure("draining"), Some(10));
}

#[tokio::test]
async fn a_reservation_holds_against_a_greedy_tenant() {
    let d = Daemon::builder()
        .tcp()
        .args(&["--sim-profile", "atlas-200i-a2"])
        .config("[[tenants]]\nname = \"tcp-anonymous\"\nreserved_streams = 100\nmax_streams = 200")
        .start();
    let (greedy, small) = (d.client().await, d.tcp_client().await);
    assert_eq!(small.tenant(), "tcp-anonymous");
    let (code, reason, e) = failure(greedy.device(0).create_streams(411, waiting(5)).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::BudgetExhausted), "{e}");
    let _mine = greedy.device(0).create_streams(410, StreamOptions::default()).await.unwrap();
    let opts = StreamOptions { wait: Duration::from_millis(200), ..Default::default() };
    let (code, ..) = failure(greedy.device(0).create_streams(1, opts).await);
    assert_eq!(code, Code::ResourceExhausted, "the unreserved pool is empty");
    let theirs = small.device(0).create_streams(100, StreamOptions::default()).await.expect("the reservation is there");
    assert_eq!(theirs.len(), 100);
    assert_eq!(d.device0()["reserved"], 100);
    // Over max_streams can never be granted.
    let (code, reason, _) = failure(small.device(0).create_streams(201, StreamOptions::default()).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::QuotaExceeded));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_budget_is_shared_by_weight() {
    let d = small_device()
        .config(
            "[[tenants]]\nname = \"light\"\nuids = [0]\nweight = 1\n[[tenants]]\nname = \"tcp-anonymous\"\nweight = 3",
        )
        .start();
    let (light, heavy) = (d.client().await, d.tcp_client().await);
    let filler = light.device(0).create_streams(10, StreamOptions::default()).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..20 {
        for c in [&light, &heavy] {
            let dev = c.device(0);
            // The granted streams live in the task's output until the test ends.
            tasks.push(tokio::spawn(async move { dev.create_streams(1, waiting(30)).await }));
        }
    }
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            light.status().await.unwrap().devices[0].queued_requests == 40
        })
        .await
    );
    drop(filler);
    // The filler is light's own: count only once ten queued requests have been granted.
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            light.status().await.unwrap().devices[0].queued_requests == 30
        })
        .await
    );
    let u = usage(&light).await;
    let (l, h) = (u["light"].0, u["tcp-anonymous"].0);
    assert!(l >= 1 && h >= 2 * l, "weight 3 vs 1 shared 10 streams as heavy {h} / light {l}\n{}", d.log());
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_is_not_starved_by_a_stream_of_small_ones() {
    let d = small_device().start();
    let (small, big) = (d.client().await, d.tcp_client().await);
    let mut mine = small.device(0).create_streams(9, StreamOptions::default()).await.unwrap();
    let bd = big.device(0);
    let big_request = tokio::spawn(async move { bd.create_streams(10, waiting(60)).await.map(|v| v.len()) });
    assert!(
        eventually_async(Duration::from_secs(5), || async {
            small.status().await.unwrap().devices[0].queued_requests == 1
        })
        .await
    );
    // The small tenant keeps giving one back and asking for one again.
    let short = StreamOptions { wait: Duration::from_millis(200), ..Default::default() };
    for _ in 0..60 {
        if big_request.is_finished() {
            break;
        }
        if let Some(s) = mine.pop() {
            s.close().await.unwrap();
        }
        if let Ok(mut more) = small.device(0).create_streams(1, short.clone()).await {
            mine.append(&mut more);
        }
    }
    let got = tokio::time::timeout(Duration::from_secs(20), big_request).await.expect("big request finished").unwrap();
    assert_eq!(got.expect("the large request was granted"), 10);
}

#[tokio::test]
async fn quotas_set_at_run_time_survive_a_sigkill_and_restart() {
    let state = tempfile::tempdir().unwrap();
    let mut d = Daemon::builder().tcp().state_dir(state.path()).start();
    let set = d.npuctl_json(&["quota", "set", "tcp-anonymous", "--max-streams", "5", "--max-events", "9"]);
    assert_eq!(set["quota"]["max_streams"], 5);
    let (code, reason, _) = failure(d.tcp_client().await.device(0).create_streams(6, StreamOptions::default()).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::QuotaExceeded));
    d.kill9();
    let d2 = Daemon::builder().tcp().state_dir(state.path()).start();
    let tenants = d2.npuctl_json(&["tenant", "list"]);
    let row =
        tenants.as_array().unwrap().iter().find(|t| t["name"] == "tcp-anonymous").expect("persisted tenant").clone();
    assert_eq!(row["quota"]["max_streams"], 5);
    assert_eq!(row["quota"]["max_events"], 9);
    assert_eq!(row["source"], "runtime");
    let (code, ..) = failure(d2.tcp_client().await.device(0).create_streams(6, StreamOptions::default()).await);
    assert_eq!(code, Code::ResourceExhausted, "still enforced after the restart");
    // A handle from the old instance is recognised as stale.
    drop(d);
}

#[tokio::test]
async fn only_admins_change_quotas() {
    let d = Daemon::builder().tcp().start();
    let outsider = d.tcp_client().await;
    let r = outsider
        .admin()
        .set_quota(proto::SetQuotaRequest { tenant: "root".into(), max_streams: Some(1), ..Default::default() })
        .await;
    let (code, reason, _) = failure(r.map_err(npud_tests::Error::from));
    assert_eq!((code, reason), (Code::PermissionDenied, ErrorReason::NotAdmin));
    let bad = d.npuctl(&["quota", "set", "someone", "--reserved-streams", "9999"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "over-committing reservations is refused: {}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[tokio::test]
async fn released_streams_are_reused_from_the_warm_pool() {
    let d = Daemon::start();
    let c = d.client().await;
    let opts = StreamOptions { flags: 0x3, ..Default::default() };
    let first = c.device(0).create_stream(opts.clone()).await.unwrap();
    assert!(!first.reused());
    first.close().await.unwrap();
    assert!(
        eventually_async(Duration::from_secs(5), || async { c.status().await.unwrap().devices[0].pooled == 1 }).await
    );
    let created = c.status().await.unwrap().hardware_creations;
    let second = c.device(0).create_stream(opts).await.unwrap();
    assert!(second.reused(), "handed out of the pool");
    let status = c.status().await.unwrap();
    assert_eq!(status.hardware_creations, created, "no new hardware creation");
    assert_eq!(status.pool_hits, 1);
    assert_eq!(status.devices[0].pooled, 0);
    // Another class does not match the pooled one.
    let other = c.device(0).create_stream(StreamOptions { priority: 5, ..Default::default() }).await.unwrap();
    assert!(!other.reused());
}

#[test]
fn managed_jobs_all_succeed_where_passthrough_jobs_fail() {
    let scenario = |policy: &str| Scenario {
        policy: policy.into(),
        profile: "atlas-200i-a2".into(),
        jobs: 12,
        streams_per_job: 60,
        hold: Duration::from_millis(800),
        wait: Duration::from_secs(60),
    };
    let managed = run(&scenario("managed"));
    assert_eq!((managed.succeeded, managed.failed), (12, 0), "{:?}", managed.failure_reasons);
    assert_eq!(managed.leaked_streams, 0);
    let passthrough = run(&scenario("passthrough"));
    assert!(passthrough.failed >= 1, "12 × 60 streams cannot all fit 510 at once");
    assert!(
        passthrough.failure_reasons.iter().all(|r| r.contains("207005") || r.contains("207008")),
        "{:?}",
        passthrough.failure_reasons
    );
}

#[tokio::test]
async fn the_pool_shrinks_first_when_budget_is_needed_and_can_be_prewarmed() {
    let d = Daemon::builder()
        .args(&["--sim-profile", "atlas-200i-a2"])
        .config("[budget]\nprewarm = 16\npool_max = 300")
        .start();
    let c = d.client().await;
    let status = c.status().await.unwrap();
    assert_eq!(status.devices[0].pooled, 16, "pre-warmed at start-up");
    assert_eq!(status.devices[0].available, 510, "pooled streams count as free budget");
    let warm = c.device(0).create_streams(16, StreamOptions { flags: 0x3, ..Default::default() }).await.unwrap();
    assert!(warm.iter().all(|s| s.reused()), "pre-warmed class is fast-launch|fast-sync at priority 0");
    drop(warm);
    // Fill the pool with one class, then ask for the whole device in another class.
    let a = c.device(0).create_streams(300, StreamOptions { priority: 1, ..Default::default() }).await.unwrap();
    drop(a);
    assert!(
        eventually_async(Duration::from_secs(10), || async { c.status().await.unwrap().devices[0].pooled == 300 })
            .await
    );
    let b = c
        .device(0)
        .create_streams(510, StreamOptions { priority: 2, ..Default::default() })
        .await
        .expect("the pool gives way");
    assert_eq!(b.len(), 510);
    assert_eq!(c.status().await.unwrap().devices[0].pooled, 0);
}

/// A tenant's most urgent priority is set with `npuctl quota set`, negative numbers
/// included (CUDA's urgent priorities are -5..=-1), and held to: a more urgent stream is
/// refused with the quota named, one within it is made, and npud's books equal the fake
/// driver's.
#[test]
fn a_tenants_highest_priority_is_set_from_the_cli_and_held_to_on_cuda() {
    let shared = npud_tests::native::Shared::new();
    let d = npud_tests::native::cuda_daemon(&shared.path, &[]);
    let set = d.npuctl(&["quota", "set", "root", "--highest-priority", "-2"]);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let refused = d.npuctl(&["stream", "create", "--priority", "-5"]);
    assert!(!refused.status.success(), "priority -5 is more urgent than the quota's -2");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("-2"), "the refusal names the tenant's highest priority: {said}");
    assert_eq!(d.in_use(), 0, "a refused create books nothing");
    let made = d.npuctl_json(&["stream", "create", "--priority", "-2", "--count", "2"]);
    assert_eq!(made.as_array().map(Vec::len), Some(2), "{made}");
    assert!(made.as_array().unwrap().iter().all(|s| s["priority"] == -2), "{made}");
    assert_eq!(d.in_use(), 2);
    // The driver's count for every process on the device: npud's streams, pool included.
    let books = |d: &Daemon| d.device0()["in_use"].as_u64().unwrap() + d.device0()["pooled"].as_u64().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || u64::from(shared.held_on(0, 0)) == books(&d)),
        "npud's books are the fake driver's: {} vs {}",
        shared.held_on(0, 0),
        d.device0()
    );
}

//! Issue 11: nothing a client or the daemon does wrong leaks budget or loses state.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::{Client, Daemon, EventOptions, StreamOptions, bin, eventually_async, proto};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::Code;

/// What "back to baseline" means: nothing held, nothing waiting, nothing in flight, and
/// the hardware holds exactly the runtime's own streams plus the warm pool.
async fn at_baseline(c: &Client) -> Result<(), String> {
    let s = c.status().await.map_err(|e| e.to_string())?;
    let d = &s.devices[0];
    let me = 1; // the observer's own session
    let state = (s.sessions, s.streams, s.events, s.callbacks_in_flight, d.in_use, d.draining, d.queued_requests);
    if state != (me, 0, 0, 0, 0, 0, 0) {
        return Err(format!("sessions/streams/events/callbacks/in use/draining/queued = {state:?}"));
    }
    if d.hardware_in_use != 2 + d.pooled {
        return Err(format!("hardware holds {} streams, runtime 2 + pooled {}", d.hardware_in_use, d.pooled));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_sigkilled_clients_leaks_nothing() {
    let d = Daemon::builder()
        .args(&["--sim-profile", "atlas-200i-a2", "--lease", "2s"])
        .config("check_invariants = true\n[limits]\ncallback_deadline = \"400ms\"")
        .start();
    let observer = d.client().await;
    at_baseline(&observer).await.unwrap();
    let kills = std::env::var("NPUD_KILLS").ok().and_then(|k| k.parse().ok()).unwrap_or(200);
    let concurrency = 8;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut running: Vec<(Child, Instant)> = Vec::new();
    let mut killed = 0;
    let mut spawned = 0u64;
    let started = Instant::now();
    while killed < kills {
        while running.len() < concurrency {
            spawned += 1;
            let child = Command::new(bin("npud-chaos"))
                .arg(&d.socket)
                .arg(spawned.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let life = Duration::from_millis(20 + next() % 300);
            running.push((child, Instant::now() + life));
        }
        let now = Instant::now();
        let mut i = 0;
        while i < running.len() {
            if running[i].1 <= now {
                let (mut child, _) = running.swap_remove(i);
                child.kill().unwrap();
                child.wait().unwrap();
                killed += 1;
            } else {
                i += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for (mut child, _) in running {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eprintln!("{killed} clients SIGKILLed in {:?}", started.elapsed());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last;
    let recovered = loop {
        last = at_baseline(&observer).await;
        if last.is_ok() {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        recovered,
        "not back to baseline: {last:?}\n{}",
        d.log().lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    let status = observer.status().await.unwrap();
    assert_eq!(status.invariant_violations, 0, "{}", d.log());
    // And it still serves.
    let s = observer.device(0).create_streams(510, StreamOptions::default()).await.expect("the whole budget is back");
    assert_eq!(s.len(), 510);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_daemon_restarts_with_its_state_and_clients_recover_on_their_own() {
    let state = tempfile::tempdir().unwrap();
    let sockdir = tempfile::tempdir().unwrap();
    let socket = sockdir.path().join("npud.sock");
    let mut first = Daemon::builder().socket(&socket).state_dir(state.path()).args(&["--lease", "2s"]).start();
    assert!(first.npuctl(&["quota", "set", "team-x", "--max-streams", "42"]).status.success());
    let client = Client::connect(npud_tests::Target::Socket(socket.clone())).await.unwrap();
    let old = client.device(0).create_stream(StreamOptions::default()).await.unwrap();
    old.delay(Duration::from_secs(5)).await.unwrap();
    let old_epoch = client.epoch();
    // Kill it in the middle of work.
    let busy = {
        let dev = client.device(0);
        tokio::spawn(async move {
            for _ in 0..1000 {
                let _ = dev.create_streams(4, StreamOptions::default()).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.kill9();
    busy.abort();
    let second = Daemon::builder().socket(&socket).state_dir(state.path()).args(&["--lease", "2s"]).start();
    // Persisted admin state is intact.
    let tenants = second.npuctl_json(&["tenant", "list"]);
    assert!(tenants.as_array().unwrap().iter().any(|t| t["name"] == "team-x" && t["quota"]["max_streams"] == 42));
    // The old handle gets a clear answer.
    let e = old.sync().await.unwrap_err();
    assert_eq!((e.code(), e.reason()), (Some(Code::FailedPrecondition), Some(proto::ErrorReason::StaleEpoch)), "{e}");
    assert!(e.to_string().contains("restarted"), "{e}");
    // The library opens a new session by itself; the same Client works again.
    let c = client.clone();
    assert!(
        eventually_async(Duration::from_secs(30), || {
            let c = c.clone();
            async move { c.sessions_reopened() >= 1 }
        })
        .await
    );
    assert_ne!(client.epoch(), old_epoch);
    let fresh = client.device(0).create_stream(StreamOptions::default()).await.expect("works after the restart");
    assert!(fresh.is_done().await.unwrap());
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stream_disturbs_nobody_and_a_hung_device_is_fenced_off() {
    let d = Daemon::builder()
        .tcp()
        .args(&["--sim-devices", "2"])
        .config("health_interval = \"100ms\"\nhealth_timeout = \"300ms\"")
        .start();
    let (a, b) = (d.client().await, d.tcp_client().await);
    let broken = a.device(0).create_stream(StreamOptions::default()).await.unwrap();
    let mine = a.device(0).create_stream(StreamOptions::default()).await.unwrap();
    let theirs = b.device(0).create_stream(StreamOptions::default()).await.unwrap();
    let fault = proto::InjectFaultRequest {
        device: 0,
        fault: Some(proto::inject_fault_request::Fault::FailTask(proto::FailTask {
            stream: broken.handle(),
            task: 1,
            code: 507015,
        })),
    };
    a.admin().inject_fault(fault).await.unwrap();
    for s in [&broken, &mine, &theirs] {
        s.delay(Duration::from_millis(30)).await.unwrap();
    }
    assert!(broken.sync().await.is_err(), "the failed stream reports its failure");
    mine.sync().await.expect("a sibling stream is untouched");
    theirs.sync().await.expect("another tenant's stream is untouched");

    // Device 0 stops answering: it is marked unhealthy and fenced off; device 1 serves on.
    a.admin().inject_fault(npud_tests::stall(0, true)).await.unwrap();
    let healthy = |id: usize| {
        let a = a.clone();
        async move { a.devices().await.unwrap()[id].healthy }
    };
    assert!(
        eventually_async(Duration::from_secs(5), || async { !healthy(0).await }).await,
        "device 0 marked unhealthy"
    );
    let asked = Instant::now();
    let e = a.device(0).create_stream(StreamOptions::default()).await.unwrap_err();
    assert_eq!((e.code(), e.reason()), (Some(Code::Unavailable), Some(proto::ErrorReason::DeviceUnhealthy)), "{e}");
    // Fast means "does not wait on the stalled device"; the bound leaves room for a loaded machine.
    assert!(asked.elapsed() < Duration::from_secs(5), "it fails fast");
    assert_eq!(mine.sync().await.unwrap_err().reason(), Some(proto::ErrorReason::DeviceUnhealthy), "no hanging waits");
    let other = a.device(1).create_stream(StreamOptions::default()).await.expect("device 1 keeps serving");
    other.delay(Duration::from_millis(5)).await.unwrap();
    other.sync().await.unwrap();
    assert!(healthy(1).await);
    a.admin().inject_fault(npud_tests::stall(0, false)).await.unwrap();
    assert!(eventually_async(Duration::from_secs(5), || async { healthy(0).await }).await, "device 0 recovers");
    mine.sync().await.expect("its work ran once the device recovered");
    a.device(0).create_stream(StreamOptions::default()).await.expect("and it serves again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_takes_nothing_else_down() {
    let d = Daemon::builder().args(&["--lease", "2s"]).start();
    let admin = d.client().await;
    let panic = proto::InjectFaultRequest { device: 0, fault: Some(proto::inject_fault_request::Fault::Panic(true)) };
    let r = admin.admin().inject_fault(panic).await;
    assert!(r.is_err(), "the panicking call fails");
    // Requests still work (the registry lock it held is usable again).
    let s = admin.device(0).create_stream(StreamOptions::default()).await.expect("new requests are served");
    // Report delivery still runs.
    let mut reports = admin.report_stream(0).await.unwrap();
    admin.subscribe(1, s.handle()).await.unwrap();
    admin.launch_callback(s.handle(), vec![9], false).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), tokio_stream::StreamExt::next(&mut reports)).await;
    assert!(matches!(got, Ok(Some(Ok(_)))), "reports still delivered: {got:?}");
    // The lease reaper still reclaims.
    let lapsing = Client::connect_with(
        npud_tests::Target::Socket(d.socket.clone()),
        npud_tests::SessionOptions { renew: false, ..Default::default() },
    )
    .await
    .unwrap();
    lapsing.device(0).create_streams(5, StreamOptions::default()).await.unwrap().into_iter().for_each(|s| {
        s.leak();
    });
    let ev = lapsing.device(0).create_event(EventOptions::default()).await.unwrap();
    ev.leak();
    assert!(
        eventually_async(Duration::from_secs(30), || async { admin.status().await.unwrap().devices[0].in_use == 1 })
            .await
    );
    assert!(d.log().contains("panicked"), "the panic was logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_session_vanished_opens_a_new_one_on_its_next_call() {
    let d = Daemon::start();
    let options = npud_tests::SessionOptions { name: Some("heal-me".into()), ..Default::default() };
    let client = Client::connect_with(npud_tests::Target::Socket(d.socket.clone()), options).await.unwrap();
    let lost = client.session_id();
    let kept = client.device(0).create_stream(StreamOptions::default()).await.unwrap();
    // Someone else ends the session (as a lapsed lease would): the daemon forgets it.
    let other = d.client().await;
    other.sessions().close(proto::CloseSessionRequest { session: 0, name: "heal-me".into() }).await.unwrap();
    // The next call finds its session gone, opens a new one and goes through.
    let fresh = client.device(0).create_stream(StreamOptions::default()).await.expect("the call heals the session");
    assert_ne!(client.session_id(), lost);
    assert_eq!(client.sessions_reopened(), 1);
    assert!(fresh.is_done().await.unwrap());
    // What the lost session held went with it, and says so.
    let e = kept.sync().await.unwrap_err();
    assert_eq!(e.code(), Some(Code::NotFound), "{e}");
    // A client that closed its own session does not come back to life.
    client.close().await.unwrap();
    let e = client.device(0).create_stream(StreamOptions::default()).await.unwrap_err();
    assert_eq!(e.reason(), Some(proto::ErrorReason::UnknownSession), "{e}");
    assert_eq!(client.sessions_reopened(), 1);
}

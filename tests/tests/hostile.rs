//! Issue 7: malformed and hostile requests through the real daemon. Each gets its own
//! specific error, and none changes the ledger, the registry or the sessions.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::proto::{self, ErrorReason as R};
use npud_tests::{Client, Daemon, EventOptions, StreamOptions};
use tonic::Code as C;
use tonic::metadata::MetadataValue;

type Outcome = Result<(), npud_tests::Error>;

/// What must not move when a request is refused.
async fn snapshot(c: &Client) -> (u32, u32, u32, usize, usize) {
    let s = c.status().await.unwrap();
    let d = &s.devices[0];
    let sessions = c.sessions().list(proto::ListSessionsRequest {}).await.unwrap().into_inner().sessions;
    let streams: u32 = sessions.iter().map(|s| s.streams).sum();
    (d.in_use, d.events_in_use, d.queued_requests, sessions.len(), streams as usize)
}

fn status<T>(r: Result<tonic::Response<T>, tonic::Status>) -> Outcome {
    r.map(drop).map_err(npud_tests::Error::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_specific_errors_and_change_nothing() {
    let d = Daemon::builder()
        .tcp()
        .args(&["--sim-profile", "atlas-200i-a2"])
        .config("[limits]\nmax_sessions_per_tenant = 12\nmax_pending_requests = 2\n[[tenants]]\nname = \"tcp-anonymous\"\nmax_events = 2")
        .start();
    let c = d.client().await;
    let outsider = d.tcp_client().await;
    let dev = c.device(0);
    let s1 = dev.create_stream(StreamOptions::default()).await.unwrap();
    let s2 = dev.create_stream(StreamOptions::default()).await.unwrap();
    let subscribed = dev.create_stream(StreamOptions::default()).await.unwrap();
    c.subscribe(1, subscribed.handle()).await.unwrap();
    let ev = dev.create_event(EventOptions::default()).await.unwrap();
    let timeline = dev.create_event(EventOptions { flags: 0x8, ..Default::default() }).await.unwrap();
    c.streams().set_failure_mode(proto::SetFailureModeRequest { stream: s2.handle(), mode: 1 }).await.unwrap();
    let (h1, h2, hs, he, ht) = (s1.handle(), s2.handle(), subscribed.handle(), ev.handle(), timeline.handle());
    let stale = h1 ^ (0x00ff << 41);
    let guessed = h1 + 1_000_000;
    let session = c.session_id();
    let stale_session = session ^ (0x00ff << 41);
    let _filler = outsider.device(0).create_event(EventOptions::default()).await.unwrap();
    let _filler2 = outsider.device(0).create_event(EventOptions::default()).await.unwrap();

    let create = |device: u32, count: u32, priority: i32, flags: u32| {
        let mut svc = c.streams();
        async move { status(svc.create(proto::CreateStreamsRequest { device, count, priority, flags, wait_ms: 0 }).await) }
    };
    let no_session = |req: proto::CreateStreamsRequest, session: Option<&'static str>| {
        let channel = npud_client_channel(&d);
        async move {
            let mut r = tonic::Request::new(req);
            if let Some(s) = session {
                r.metadata_mut().insert(npud_tests::SESSION_KEY, MetadataValue::from_static(s));
            }
            status(proto::stream_service_client::StreamServiceClient::new(channel.await).create(r).await)
        }
    };
    let stale_session_call = {
        let channel = npud_client_channel(&d);
        async move {
            let mut r = tonic::Request::new(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() });
            r.metadata_mut()
                .insert(npud_tests::SESSION_KEY, MetadataValue::try_from(stale_session.to_string()).unwrap());
            status(proto::stream_service_client::StreamServiceClient::new(channel.await).create(r).await)
        }
    };

    let mut cases: Vec<(&str, Outcome, C, R)> = Vec::new();
    macro_rules! case {
        ($name:expr, $call:expr, $code:expr, $reason:expr) => {{
            let before = snapshot(&c).await;
            let outcome = $call.await;
            let after = snapshot(&c).await;
            assert_eq!(before, after, "{} changed state", $name);
            cases.push(($name, outcome, $code, $reason));
        }};
    }
    // Streams
    case!("count 0", create(0, 0, 0, 0), C::InvalidArgument, R::InvalidCount);
    case!("count 5000", create(0, 5000, 0, 0), C::InvalidArgument, R::InvalidCount);
    case!("count u32::MAX", create(0, u32::MAX, 0, 0), C::InvalidArgument, R::InvalidCount);
    case!("device 7", create(7, 1, 0, 0), C::InvalidArgument, R::InvalidDevice);
    case!("device u32::MAX", create(u32::MAX, 1, 0, 0), C::InvalidArgument, R::InvalidDevice);
    case!("priority -1", create(0, 1, -1, 0), C::InvalidArgument, R::InvalidPriority);
    case!("priority 8", create(0, 1, 8, 0), C::InvalidArgument, R::InvalidPriority);
    case!("priority i32::MIN", create(0, 1, i32::MIN, 0), C::InvalidArgument, R::InvalidPriority);
    case!("device-use-only OR-ed", create(0, 1, 0, 0x21), C::InvalidArgument, R::InvalidFlags);
    case!("all flag bits", create(0, 1, 0, u32::MAX), C::InvalidArgument, R::InvalidFlags);
    case!("more than capacity", create(0, 600, 0, 0), C::ResourceExhausted, R::BudgetExhausted);
    let destroy = |handles: Vec<u64>| {
        let mut svc = c.streams();
        async move { status(svc.destroy(proto::DestroyStreamsRequest { handles }).await) }
    };
    case!("destroy nothing", destroy(vec![]), C::InvalidArgument, R::InvalidCount);
    case!("destroy 5000", destroy(vec![h1; 5000]), C::InvalidArgument, R::InvalidCount);
    case!("destroy handle 0", destroy(vec![0]), C::NotFound, R::UnknownHandle);
    case!("destroy a handle twice", destroy(vec![h1, h1]), C::InvalidArgument, R::InvalidArgumentOther);
    case!("destroy one good one bad", destroy(vec![h1, guessed]), C::NotFound, R::UnknownHandle);
    case!("destroy stale epoch", destroy(vec![stale]), C::FailedPrecondition, R::StaleEpoch);
    case!("destroy an event as a stream", destroy(vec![he]), C::InvalidArgument, R::InvalidHandleKind);
    let get = |handle: u64| {
        let mut svc = c.streams();
        async move { status(svc.get(proto::GetStreamRequest { handle }).await) }
    };
    case!("get u64::MAX", get(u64::MAX), C::NotFound, R::UnknownHandle);
    case!("get guessed", get(guessed), C::NotFound, R::UnknownHandle);
    let mut svc = c.streams();
    case!(
        "query guessed",
        async { status(svc.query(proto::QueryStreamRequest { handle: guessed }).await) },
        C::NotFound,
        R::UnknownHandle
    );
    case!(
        "sync guessed",
        async { status(svc.synchronize(proto::SynchronizeStreamRequest { handle: guessed, timeout_ms: 5 }).await) },
        C::NotFound,
        R::UnknownHandle
    );
    let delay = |duration_us: u64| {
        let mut svc = c.streams();
        async move { status(svc.enqueue_delay(proto::EnqueueDelayRequest { stream: h1, duration_us }).await) }
    };
    case!("delay 0", delay(0), C::InvalidArgument, R::InvalidTimeout);
    case!("delay 61 s", delay(61_000_000), C::InvalidArgument, R::InvalidTimeout);
    case!("delay u64::MAX", delay(u64::MAX), C::InvalidArgument, R::InvalidTimeout);
    case!(
        "wait on a guessed event",
        async { status(svc.wait_event(proto::StreamWaitEventRequest { stream: h1, event: he + 77 }).await) },
        C::NotFound,
        R::UnknownHandle
    );
    case!(
        "failure mode 7",
        async { status(svc.set_failure_mode(proto::SetFailureModeRequest { stream: h1, mode: 7 }).await) },
        C::InvalidArgument,
        R::InvalidArgumentOther
    );
    case!(
        "failure mode twice",
        async { status(svc.set_failure_mode(proto::SetFailureModeRequest { stream: h2, mode: 0 }).await) },
        C::FailedPrecondition,
        R::FailureModeAlreadySet
    );
    // Events
    let mut events = c.events();
    let ecreate = |device: u32, flags: u32| {
        let mut svc = c.events();
        async move { status(svc.create(proto::CreateEventRequest { device, flags, ..Default::default() }).await) }
    };
    case!("event EXTERNAL OR-ed", ecreate(0, 0x21), C::InvalidArgument, R::InvalidFlags);
    case!("event unknown flag", ecreate(0, 0x80), C::InvalidArgument, R::InvalidFlags);
    case!("event device 9", ecreate(9, 0), C::InvalidArgument, R::InvalidDevice);
    case!(
        "record a guessed event",
        async { status(events.record(proto::RecordEventRequest { event: he + 99, stream: h1 }).await) },
        C::NotFound,
        R::UnknownHandle
    );
    case!(
        "record on a guessed stream",
        async { status(events.record(proto::RecordEventRequest { event: he, stream: guessed }).await) },
        C::NotFound,
        R::UnknownHandle
    );
    case!(
        "reset an event without SYNC",
        async { status(events.reset(proto::ResetEventRequest { event: ht, stream: h1 }).await) },
        C::FailedPrecondition,
        R::EventFlagsForbid
    );
    case!(
        "elapsed of unrecorded events",
        async { status(events.elapsed_time(proto::ElapsedTimeRequest { start: he, end: ht }).await) },
        C::FailedPrecondition,
        R::EventNotRecorded
    );
    case!(
        "elapsed with a stream handle",
        async { status(events.elapsed_time(proto::ElapsedTimeRequest { start: h1, end: he }).await) },
        C::InvalidArgument,
        R::InvalidHandleKind
    );
    case!(
        "events over the tenant's quota",
        async { outsider.device(0).create_event(EventOptions::default()).await.map(drop) },
        C::ResourceExhausted,
        R::EventBudgetExhausted
    );
    // Sessions
    case!(
        "no session",
        no_session(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() }, None),
        C::NotFound,
        R::UnknownSession
    );
    case!(
        "garbage session",
        no_session(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() }, Some("abc")),
        C::NotFound,
        R::UnknownSession
    );
    case!(
        "session id never handed out",
        no_session(proto::CreateStreamsRequest { device: 0, count: 1, ..Default::default() }, Some("999")),
        C::NotFound,
        R::UnknownSession
    );
    case!("session of an earlier daemon", stale_session_call, C::FailedPrecondition, R::StaleEpoch);
    let open = |name: &'static str| {
        let mut svc = c.sessions();
        async move { status(svc.open(proto::OpenSessionRequest { name: name.into(), lease_ms: 0 }).await) }
    };
    case!("session name with a slash", open("../etc"), C::InvalidArgument, R::InvalidName);
    let too_long: &'static str = "x".repeat(65).leak();
    case!("session name too long", open(too_long), C::InvalidArgument, R::InvalidName);
    let mut sessions = c.sessions();
    case!(
        "close nothing",
        async { status(sessions.close(proto::CloseSessionRequest::default()).await) },
        C::InvalidArgument,
        R::InvalidName
    );
    case!(
        "close an unknown name",
        async { status(sessions.close(proto::CloseSessionRequest { session: 0, name: "nope".into() }).await) },
        C::NotFound,
        R::UnknownSession
    );
    // Reports
    let mut reports = c.reports();
    case!(
        "launch unsubscribed",
        async { c.launch_callback(h1, vec![], false).await.map(drop) },
        C::FailedPrecondition,
        R::StreamNotSubscribed
    );
    case!(
        "user data 64 KiB + 1",
        async { c.launch_callback(hs, vec![0; 65537], false).await.map(drop) },
        C::InvalidArgument,
        R::PayloadTooLarge
    );
    case!(
        "block type 5",
        async {
            status(
                reports
                    .launch_callback(proto::LaunchCallbackRequest { stream: hs, user_data: vec![], block_type: 5 })
                    .await,
            )
        },
        C::InvalidArgument,
        R::InvalidArgumentOther
    );
    case!(
        "pull 0 reports",
        async {
            status(reports.process(proto::ProcessReportRequest { thread_id: 1, timeout_ms: 1, max_reports: 0 }).await)
        },
        C::InvalidArgument,
        R::InvalidCount
    );
    case!(
        "pull 5000 reports",
        async {
            status(
                reports.process(proto::ProcessReportRequest { thread_id: 1, timeout_ms: 1, max_reports: 5000 }).await,
            )
        },
        C::InvalidArgument,
        R::InvalidCount
    );
    case!("ack an unknown callback", async { c.ack(guessed).await }, C::InvalidArgument, R::InvalidHandleKind);
    case!("subscribe twice", async { c.subscribe(2, hs).await }, C::FailedPrecondition, R::StreamAlreadySubscribed);
    case!(
        "unsubscribe a stranger",
        async { c.unsubscribe(9, hs).await },
        C::FailedPrecondition,
        R::StreamNotSubscribed
    );
    // Admin
    let set_quota = |who: &Client, tenant: &str, weight: Option<u32>, reserved: Option<u32>| {
        let mut svc = who.admin();
        let req =
            proto::SetQuotaRequest { tenant: tenant.into(), weight, reserved_streams: reserved, ..Default::default() };
        async move { status(svc.set_quota(req).await) }
    };
    case!("quota by a non-admin", set_quota(&outsider, "root", Some(2), None), C::PermissionDenied, R::NotAdmin);
    case!("quota for a bad name", set_quota(&c, "../x", Some(2), None), C::InvalidArgument, R::InvalidName);
    case!("quota weight 0", set_quota(&c, "someone", Some(0), None), C::InvalidArgument, R::InvalidArgumentOther);
    case!(
        "reserve more than a device",
        set_quota(&c, "someone", None, Some(100_000)),
        C::InvalidArgument,
        R::InvalidArgumentOther
    );
    let mut oadmin = outsider.admin();
    case!(
        "evict by a non-admin",
        async { status(oadmin.evict_session(proto::EvictSessionRequest { session }).await) },
        C::PermissionDenied,
        R::NotAdmin
    );
    case!(
        "fault by a non-admin",
        async { status(oadmin.inject_fault(proto::InjectFaultRequest { device: 0, fault: None }).await) },
        C::PermissionDenied,
        R::NotAdmin
    );
    let mut admin = c.admin();
    case!(
        "fault without a fault",
        async { status(admin.inject_fault(proto::InjectFaultRequest { device: 0, fault: None }).await) },
        C::InvalidArgument,
        R::InvalidArgumentOther
    );
    case!(
        "drain by a non-admin",
        async { status(oadmin.drain(proto::DrainRequest { shutdown: true }).await) },
        C::PermissionDenied,
        R::NotAdmin
    );
    // Floods: sessions past the per-tenant limit.
    let mut extra = Vec::new();
    while extra.len() < 11 {
        extra.push(Client::connect(npud_tests::Target::Socket(d.socket.clone())).await.unwrap());
    }
    case!(
        "one session too many",
        async { Client::connect(npud_tests::Target::Socket(d.socket.clone())).await.map(drop) },
        C::ResourceExhausted,
        R::TooManySessions
    );

    // A message larger than the daemon accepts (4 MiB) is refused before it is decoded
    // (by tonic, as OUT_OF_RANGE, so it carries no npud reason).
    case!(
        "a 5 MiB message",
        async {
            status(
                reports
                    .launch_callback(proto::LaunchCallbackRequest {
                        stream: hs,
                        user_data: vec![0; 5 << 20],
                        block_type: 0,
                    })
                    .await,
            )
        },
        C::OutOfRange,
        R::Unspecified
    );
    // Floods: more waiting create requests than a tenant may have.
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let dev = c.device(0);
            tokio::spawn(async move {
                dev.create_streams(
                    508,
                    StreamOptions { wait: std::time::Duration::from_secs(30), ..Default::default() },
                )
                .await
            })
        })
        .collect();
    assert!(
        npud_tests::eventually_async(std::time::Duration::from_secs(5), || async {
            c.status().await.unwrap().devices[0].queued_requests == 2
        })
        .await
    );
    case!("a third waiting request", create(0, 1, 0, 0), C::ResourceExhausted, R::TooManyPendingRequests);
    for w in waiters {
        w.abort();
    }

    assert!(cases.len() >= 50, "only {} cases", cases.len());
    for (name, outcome, code, reason) in &cases {
        let e = outcome.as_ref().err().unwrap_or_else(|| panic!("{name}: was accepted"));
        assert_eq!((e.code(), e.reason()), (Some(*code), Some(*reason)), "{name}: {e}");
    }
    assert_eq!(d.device0()["in_use"], 3, "the ledger still shows exactly our three streams");
}

async fn npud_client_channel(d: &Daemon) -> tonic::transport::Channel {
    npud_tests::npud_channel(&d.socket).await
}

#[tokio::test]
async fn a_flooding_tenant_is_rate_limited_without_slowing_others() {
    let d = Daemon::builder().tcp().config("[limits]\nrequests_per_second = 20\nrequest_burst = 20").start();
    let flooder = d.tcp_client().await;
    let mut refused = None;
    for _ in 0..200 {
        if let Err(e) = flooder.devices().await {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("the flood was cut off");
    assert_eq!((e.code(), e.reason()), (Some(C::ResourceExhausted), Some(R::RateLimited)), "{e}");
    // Another tenant is untouched.
    let other = d.client().await;
    for _ in 0..10 {
        other.devices().await.expect("root is not limited by tcp-anonymous's flood");
    }
}

/// Quota arithmetic cannot wrap: not through SetQuota, not through a state file.
#[test]
fn quota_sums_that_would_overflow_are_refused_and_change_nothing() {
    let state = tempfile::tempdir().unwrap();
    let d = Daemon::builder().state_dir(state.path()).start();
    let ok = d.npuctl(&["quota", "set", "batch", "--reserved-streams", "10", "--max-streams", "100"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let max = u32::MAX.to_string();
    let out = d.npuctl(&["quota", "set", "greedy", "--max-streams", &max, "--reserved-streams", &max]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("over-commit"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // The daemon is alive and nothing changed: greedy has the default quota, batch its own.
    let tenants = d.npuctl_json(&["tenant", "list"]);
    let listed: Vec<&str> = tenants.as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(listed.contains(&"batch") && !listed.contains(&"greedy"), "{tenants}");
    assert_eq!(d.device0()["reserved"], 10);
    drop(d);

    // A state file whose reservations wrap u32, or that holds a quota no SetQuota could set,
    // stops npud at start with a reason, not a panic.
    let cases = [
        r#"{"epoch":5,"quotas":{"a":{"max_streams":4294967295,"reserved_streams":4294967295,"max_events":1,"weight":1,"highest_priority":0},"b":{"max_streams":4294967295,"reserved_streams":4294967295,"max_events":1,"weight":1,"highest_priority":0}}}"#,
        r#"{"epoch":5,"quotas":{"a":{"max_streams":4,"reserved_streams":8,"max_events":1,"weight":1,"highest_priority":0}}}"#,
        r#"{"epoch":5,"quotas":{"a":{"max_streams":4,"reserved_streams":0,"max_events":1,"weight":0,"highest_priority":0}}}"#,
        r#"{"epoch":5,"quotas":{"../x\u0000":{"max_streams":4,"reserved_streams":0,"max_events":1,"weight":1,"highest_priority":0}}}"#,
    ];
    for text in cases {
        std::fs::write(state.path().join("state.json"), text).unwrap();
        let socket = state.path().join("s.sock");
        let out = std::process::Command::new(npud_tests::bin("npud"))
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(state.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{text}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("reserve") || err.contains("persisted quota"), "{text}: {err}");
        assert!(!socket.exists(), "nothing was bound");
    }
}

/// npud will not serve from a directory where another uid could swap its socket, and a
/// start that fails after the socket was bound leaves no socket behind.
#[test]
fn the_socket_is_only_served_from_a_safe_directory_and_never_left_behind() {
    use std::os::unix::fs::PermissionsExt;
    let npud = |socket: &std::path::Path, extra: &[&str]| {
        std::process::Command::new(npud_tests::bin("npud")).arg("--socket").arg(socket).args(extra).output().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = npud(&open.join("npud.sock"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("writable by other users") && err.contains("not sticky"), "{err}");
    assert!(!open.join("npud.sock").exists(), "nothing was bound");
    // Sticky and world-writable, like /tmp: others cannot unlink what npud owns there.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let d = Daemon::builder().socket(&open.join("npud.sock")).start();
    assert_eq!(d.device0()["in_use"], 0, "serving from a sticky directory");
    drop(d);

    // The TCP port is taken: npud fails after binding its socket, and removes it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let socket = dir.path().join("npud.sock");
    let out = npud(&socket, &["--listen", &addr, "--insecure-tcp"]);
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!socket.exists(), "the socket file went with the failed start");
}

/// One session cannot open report streams without bound.
#[tokio::test]
async fn report_streams_are_bounded_per_session() {
    let d = Daemon::builder().config("[limits]\nmax_report_streams_per_session = 3").start();
    let c = d.client().await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(c.report_stream(0).await.unwrap());
    }
    let e = c.report_stream(0).await.unwrap_err();
    assert_eq!(e.code(), Some(C::ResourceExhausted), "{e}");
    assert!(e.to_string().contains("report streams open"), "{e}");
    drop(open.pop());
    let reopened =
        npud_tests::eventually_async(std::time::Duration::from_secs(10), || async { c.report_stream(0).await.is_ok() })
            .await;
    assert!(reopened, "a closed stream frees its place");
}

/// The HTTP/2 server tells every client how many calls one connection may have in flight
/// (SETTINGS_MAX_CONCURRENT_STREAMS), so one connection cannot park thousands of calls.
#[test]
fn a_connection_is_told_its_concurrent_call_limit() {
    use std::io::{Read, Write};
    let d = Daemon::builder().config("[limits]\nmax_concurrent_calls = 7").start();
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).unwrap(); // our (empty) SETTINGS
    let mut header = [0u8; 9];
    s.read_exact(&mut header).unwrap();
    assert_eq!(header[3], 0x4, "the server's first frame is its SETTINGS");
    let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).unwrap();
    let settings: Vec<(u16, u32)> = payload
        .chunks_exact(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
        .collect();
    assert!(settings.contains(&(0x3, 7)), "SETTINGS_MAX_CONCURRENT_STREAMS = 7 in {settings:?}");
}

/// Metadata over the HTTP/2 bound gets INVALID_ARGUMENT that names it even on a connection
/// whose earlier requests went through untouched (a valid `:authority`: tonic's), and the
/// connection stays usable afterwards.
#[tokio::test]
async fn oversized_metadata_midway_through_a_tonic_connection_is_named_and_survived() {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let d = Daemon::start();
    let mut health = HealthClient::new(npud_client_channel(&d).await);
    let check = || HealthCheckRequest { service: String::new() };
    health.check(check()).await.expect("a first, ordinary call");
    let mut huge = tonic::Request::new(check());
    huge.metadata_mut().insert("x-huge", MetadataValue::try_from("v".repeat(20_000)).unwrap());
    let refused = health.check(huge).await.expect_err("20 KB of metadata");
    assert_eq!(refused.code(), C::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("metadata is"), "{}", refused.message());
    for _ in 0..3 {
        health.check(check()).await.expect("the connection is still usable");
    }
}

/// A process names its program in its hello, and an admin reads it in `npuctl status`: a
/// name with an escape sequence for the admin's terminal, or a newline that would forge
/// a row of the table, reaches neither the table nor the JSON.
#[test]
fn a_program_name_cannot_write_to_the_admins_terminal() {
    use npud_proto::v1::{BudgetHello, budget_reply::Reply};
    use npud_tests::wire::Wire;
    let d = Daemon::start();
    let program = "ok\u{1b}]0;owned\u{7}\nroot 0 2046 forged\u{1b}[2J".to_string();
    let mut w = Wire::hello(&d.socket, BudgetHello { program, ..Default::default() });
    let Ok(Reply::Acquired(_)) = w.acquire(0, 3, 0) else { panic!("a fair ask is granted") };
    let json = d.npuctl_json(&["status"]);
    let shown = json["native_holders"][0]["program"].as_str().expect("the holder's program").to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.starts_with("ok") && shown.contains("forged"), "the rest of the name is kept: {shown:?}");
    let table = d.npuctl(&["status"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success() && !text.contains('\u{1b}'), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("root 0 2046")), "no forged row: {text}");
}

//! Issue 31: admission that cannot be gamed. Each test is one thing a hostile local (or
//! anonymous remote) tenant tried, through the real daemon binary and a raw client.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::v1::{self as pb, budget_reply::Reply};
use npud_tests::proto::ErrorReason as R;
use npud_tests::wire::{Wire, garbage_stream, garbage_unary};
use npud_tests::{Daemon, npud_channel};
use tonic::Code as C;

/// Bytes that are not the method's message are the caller's error on every service, on a
/// client stream as on a unary call: INVALID_ARGUMENT with npud's detail, never INTERNAL.
#[tokio::test]
async fn garbage_on_any_service_is_invalid_argument_streaming_included() {
    let d = Daemon::start();
    for status in [
        garbage_stream(npud_channel(&d.socket).await, "/npud.v1.BudgetService/Budget").await,
        garbage_unary(npud_channel(&d.socket).await, "/npud.v1.AdminService/SetQuota").await,
        garbage_unary(npud_channel(&d.socket).await, "/npud.v1.SessionService/Open").await,
    ] {
        assert_eq!(status.code(), C::InvalidArgument, "{status:?}");
        let e = npud_tests::Error::from(status);
        assert_eq!(e.reason(), Some(R::InvalidArgumentOther), "{e}");
    }
    assert_eq!(d.in_use(), 0);
}

/// Under `--policy passthrough` nothing is admitted, but the books still count: two asks
/// of 2^31 streams once wrapped the ledger's counter to 1. Every policy refuses a count no
/// device holds, and the books stay what the holders hold.
#[test]
fn counts_no_device_holds_are_refused_under_every_policy() {
    for policy in ["managed", "passthrough"] {
        let d = Daemon::builder().args(&["--policy", policy]).start();
        let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
        let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
        for huge in [u32::MAX, 1 << 31, capacity + 1] {
            let e = w.acquire(0, huge, 0).expect_err("no device holds that many");
            assert_eq!(e.detail.unwrap().reason, R::InvalidCount as i32, "{policy}: {}", e.message);
        }
        let Ok(Reply::Acquired(a)) = w.acquire(0, 5, 0) else { panic!("{policy}: a fair ask is granted") };
        assert_eq!(a.share.unwrap().holds, 5);
        assert_eq!(d.in_use(), 5, "{policy}: the books hold exactly what was granted");
        drop(w);
        assert!(npud_tests::eventually(std::time::Duration::from_secs(10), || d.in_use() == 0), "{policy}");
    }
}

/// Every unauthenticated TCP peer is one tenant of its own, `tcp-anonymous`: never the
/// local user nobody's (uid 65534), whose streams, quota and limits it used to share.
#[tokio::test]
async fn anonymous_tcp_peers_are_a_tenant_of_their_own() {
    let d = Daemon::builder()
        .tcp()
        .config("socket_mode = \"0666\"\n[[tenants]]\nname = \"tcp-anonymous\"\nmax_streams = 3")
        .start();
    let remote = d.tcp_client().await;
    assert_eq!(remote.tenant(), "tcp-anonymous");
    let e = remote.device(0).create_streams(4, Default::default()).await.expect_err("its own quota of 3");
    assert_eq!(e.reason(), Some(R::QuotaExceeded), "{e}");
    if is_root() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut nobody = npud_tests::Peer::spawn(d.socket.to_str().unwrap(), Some(65534));
        assert_eq!(nobody.ask("tenant")["tenant"], "uid-65534", "the local user nobody is another tenant");
    }
    // Where unknown peers are refused, so are anonymous ones, unless their tenant is configured.
    let strict = Daemon::builder().tcp().config("refuse_unknown = true\nadmin_uids = [0]").start();
    let endpoint = strict.endpoint.clone().unwrap();
    let e = match npud_tests::Client::connect(npud_tests::Target::Endpoint(endpoint)).await {
        Ok(c) => c.devices().await.expect_err("refused"),
        Err(e) => e,
    };
    assert_eq!(e.reason(), Some(R::TenantRefused), "{e}");
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// The budget a tenant's wire connection was refused with.
fn refusal(r: Result<Reply, pb::BudgetError>) -> R {
    let e = r.expect_err("refused");
    R::try_from(e.detail.map_or(0, |d| d.reason)).unwrap_or(R::Unspecified)
}

/// Two processes each holding most of one device, each then asking for the other's: they
/// used to wait each other out until their waits expired. A process holding budget on one
/// device never waits on another: it fits now, or is refused at once as the device would.
#[test]
fn a_process_holding_one_device_never_waits_for_another() {
    let d = Daemon::builder().args(&["--sim-devices", "2"]).start();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let (mut a, mut b) = (Wire::hello(&d.socket, Default::default()), Wire::hello(&d.socket, Default::default()));
    assert!(matches!(a.acquire(0, capacity - 10, 0), Ok(Reply::Acquired(_))));
    assert!(matches!(b.acquire(1, capacity - 10, 0), Ok(Reply::Acquired(_))));
    // Ten minutes of wait each; the wire's own read timeout (60 s) fails the test if either
    // waits. Refused as a grant that may not wait (the interposer's 207008).
    assert_eq!(refusal(a.acquire(1, 20, 600_000)), R::GrantWaitExpired);
    assert_eq!(refusal(b.acquire(0, 20, 600_000)), R::GrantWaitExpired);
    // What fits is still granted at once.
    assert!(matches!(a.acquire(1, 5, 600_000), Ok(Reply::Acquired(_))));
    let devices = d.npuctl_json(&["device", "list"]);
    let in_use: Vec<u64> = devices.as_array().unwrap().iter().map(|d| d["in_use"].as_u64().unwrap()).collect();
    assert_eq!(in_use, [capacity - 10, capacity - 5].map(u64::from), "nothing booked for the refusals");
}

/// Eight connections of one tenant taking turns with grants they never report created
/// made another tenant's `acquire(wait_ms=0)` answer after 15.5 s. A grant that does not
/// wait skips the turn; a waiting one waits for it no longer than its own `wait_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_grants_of_one_tenant_do_not_hold_another_tenants_acquire() {
    use std::time::{Duration, Instant};
    let d = Daemon::builder().tcp().config("[budget]\nnative_pacing = \"1h\"").start();
    let socket = d.socket.clone();
    // Three quarters of the device taken (by a grant that did not wait, so it holds no
    // turn): creation there contends, and grants are paced.
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let taken = (capacity * 3).div_ceil(4);
    let mut crowd = Wire::hello(&socket, Default::default());
    assert!(matches!(crowd.acquire(0, taken, 0), Ok(Reply::Acquired(_))));
    // Tenant root: one silent batch holds the turn for the whole (hour-long) window, seven
    // more connections wait behind it.
    let mut silent = Wire::hello(&socket, Default::default());
    assert!(matches!(silent.acquire(0, 1, 60_000), Ok(Reply::Acquired(_))));
    let behind: Vec<_> = (0..7)
        .map(|_| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut w = Wire::hello(&socket, Default::default());
                // Answered once its turn comes; closing then ends its batch.
                matches!(w.acquire(0, 1, 600_000), Ok(Reply::Acquired(_)))
            })
        })
        .collect();
    // Another tenant (tcp-anonymous) over BudgetService.
    let channel = tonic::transport::Channel::from_shared(d.endpoint.clone().unwrap()).unwrap().connect().await.unwrap();
    let mut client = pb::budget_service_client::BudgetServiceClient::new(channel);
    let (calls, rx) = tokio::sync::mpsc::channel(4);
    let mut replies = client.budget(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut ask = async |count: u32, wait_ms: u32| {
        let call = pb::budget_call::Call::Acquire(pb::AcquireBudgetRequest {
            device: 0,
            count,
            wait_ms,
            ..Default::default()
        });
        calls.send(pb::BudgetCall { call: Some(call) }).await.unwrap();
        let started = Instant::now();
        let reply = tokio::time::timeout(Duration::from_secs(60), replies.message()).await;
        (reply.expect("answered").unwrap().unwrap().reply.unwrap(), started.elapsed())
    };
    let (reply, took) = ask(3, 0).await;
    assert!(matches!(reply, Reply::Acquired(_)), "{reply:?}");
    assert!(took < Duration::from_secs(30), "a grant that does not wait skips the turn: {took:?}");
    let (reply, took) = ask(3, 2_000).await;
    assert!(matches!(reply, Reply::Acquired(_)), "{reply:?}");
    assert!(took < Duration::from_secs(30), "the turn is awaited no longer than wait_ms: {took:?}");
    assert_eq!(
        d.in_use(),
        u64::from(taken) + 1 + 7 + 6,
        "the grants waiting for their turn are booked, the others' too"
    );
    drop(silent);
    for t in behind {
        assert!(t.join().unwrap(), "each waiting connection had its turn as the one before it closed");
    }
}

/// Whether a new budget-wire connection from this process is served: welcomed, or closed
/// by npud without a word.
fn admitted(socket: &std::path::Path) -> Option<Wire> {
    use std::io::{Read, Write};
    let mut conn = std::os::unix::net::UnixStream::connect(socket).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut hello = npud_proto::BUDGET_PREFACE.to_vec();
    hello.extend(npud_tests::wire::frame(pb::budget_call::Call::Hello(Default::default())));
    let _ = conn.write_all(&hello);
    let mut len = [0u8; 4];
    match conn.read_exact(&mut len) {
        Ok(()) => {
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            conn.read_exact(&mut body).unwrap();
            Some(Wire { conn })
        }
        Err(_) => None,
    }
}

/// Containers that all run as root used to share one uid's pool of 512 connections with
/// the host admin: one container's idle connections locked out the others and the admin's
/// `npuctl status`. Connections are counted per tenant (the container's), against a total
/// for all tenants, and the host admin keeps slots of its own. The test process plays each
/// in turn: npud reads its cgroup (through the host double) as each connection comes.
#[test]
fn connections_are_bounded_per_tenant_and_in_all_with_the_admins_slots_kept() {
    use std::io::Read;
    let fake = npud_tests::host::FakeHost::new();
    let be = |cgroup: &str| fake.plant(std::process::id(), cgroup);
    let container = |c: char| format!("0::/system.slice/docker-{}.scope\n", c.to_string().repeat(64));
    let config = format!(
        "{}[limits]\nmax_connections_per_tenant = 3\nmax_connections = 5",
        npud_tests::host::Host::config(&fake)
    );
    let d = Daemon::builder().config(&config).start();
    be(&container('a'));
    let a: Vec<Wire> = (0..2).map(|_| admitted(&d.socket).expect("a's first two")).collect();
    // A connection that never sends its preface holds a slot too, until npud closes it.
    let mut silent = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    assert!(admitted(&d.socket).is_none(), "a's fourth: the tenant's limit");
    be(&container('b'));
    let b: Vec<Wire> = (0..2).map(|_| admitted(&d.socket).expect("another container is another tenant")).collect();
    be(&container('c'));
    assert!(admitted(&d.socket).is_none(), "a third tenant: the total of 5 is reached");
    be("0::/user.slice/user-0.slice/session-1.scope\n");
    let admin = admitted(&d.socket).expect("the host admin's own slot");
    // The silent connection is closed (2 s), and its slot is a's again.
    silent.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    assert_eq!(silent.read(&mut [0u8; 1]).unwrap_or(0), 0, "closed without a word");
    be(&container('a'));
    assert!(
        npud_tests::eventually(std::time::Duration::from_secs(10), || admitted(&d.socket).is_some()),
        "the slot came back: {}",
        d.log()
    );
    assert!(d.log().contains("at the most connections it may open"));
    drop((a, b, admin));
}

/// TCP connections were accepted without any bound: one unauthenticated address could open
/// them until npud ran out of descriptors, and the Unix socket's tenants with it. Each
/// remote address now holds at most a tenant's connections, refused ones are closed at
/// once, and the socket goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connections_are_bounded_per_address_and_the_socket_goes_on() {
    use std::io::Read;
    let d = Daemon::builder().tcp().config("[limits]\nmax_connections_per_tenant = 4").start();
    let address = d.endpoint.clone().expect("tcp").trim_start_matches("http://").to_string();
    let idle: Vec<std::net::TcpStream> = (0..4).map(|_| std::net::TcpStream::connect(&address).unwrap()).collect();
    // The address's fifth is closed by npud without a word (read gives end of file).
    let mut fifth = std::net::TcpStream::connect(&address).unwrap();
    fifth.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let read = fifth.read(&mut [0u8; 1]);
    assert!(matches!(read, Ok(0)), "the fifth was closed, not left waiting: {read:?}");
    // The Unix socket's tenants are not affected.
    assert_eq!(d.device0()["in_use"], 0, "npuctl over the socket still works");
    // The slots come back when the idle connections close.
    drop(idle);
    let endpoint = d.endpoint.clone().expect("tcp");
    let connects = npud_tests::eventually_async(std::time::Duration::from_secs(10), || async {
        npud_tests::Client::connect(npud_tests::Target::Endpoint(endpoint.clone())).await.is_ok()
    });
    assert!(connects.await, "a TCP client connects once the idle ones are gone: {}", d.log());
    assert!(d.log().contains("closing a TCP connection"));
}

/// One tenant's 3,000 concurrent blocking Synchronize calls were all accepted, each with a
/// task, a timer and (on the vendor backends) a thread. Past the tenant's bound the call is
/// refused, another tenant is untouched, and a cancelled call gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_calls_are_bounded_per_tenant() {
    use std::time::Duration;
    let d = Daemon::builder().tcp().config("[limits]\nmax_blocking_calls = 4").start();
    let c = d.client().await;
    let stream = c.device(0).create_stream(Default::default()).await.unwrap();
    stream.delay(Duration::from_secs(60)).await.unwrap();
    let sync = |timeout_ms: u32| {
        let mut streams = c.streams();
        let req = npud_tests::proto::SynchronizeStreamRequest { handle: stream.handle(), timeout_ms };
        async move { streams.synchronize(req).await.map(drop).map_err(npud_tests::Error::from) }
    };
    let mut parked: Vec<_> = (0..4).map(|_| tokio::spawn(sync(0))).collect();
    // Once the four are in flight, a fifth is refused at once. Until then the probe may
    // take a place itself (and time out) or push a parked call out: that one is parked again.
    let mut refused = None;
    for _ in 0..200 {
        for p in &mut parked {
            if p.is_finished() {
                *p = tokio::spawn(sync(0));
            }
        }
        match sync(1).await {
            Err(e) if e.reason() == Some(R::TooManyBlockingCalls) && parked.iter().all(|p| !p.is_finished()) => {
                refused = Some(e);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let e = refused.expect("the fifth blocking call was refused");
    assert_eq!(e.code(), Some(C::ResourceExhausted), "{e}");
    let other = d.tcp_client().await;
    let theirs = other.device(0).create_stream(Default::default()).await.unwrap();
    theirs.sync().await.expect("another tenant's blocking call is not affected");
    for p in parked {
        p.abort();
    }
    let freed = npud_tests::eventually_async(Duration::from_secs(20), || async {
        matches!(sync(1).await, Err(e) if e.reason() == Some(R::SyncTimeout))
    })
    .await;
    assert!(freed, "cancelled calls gave their places back");
}

/// 1,500 unread 64 KiB callback reports were accepted (+67 MiB resident). Past the tenant's
/// bound on undelivered report bytes the *launch* is refused; every report accepted is
/// delivered, and reading them makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelivered_callback_reports_are_bounded_per_tenant_at_launch() {
    use std::time::Duration;
    let d = Daemon::builder().config("[limits]\nmax_callback_report_bytes = 65536").start();
    let c = d.client().await;
    let stream = c.device(0).create_stream(Default::default()).await.unwrap();
    c.subscribe(1, stream.handle()).await.unwrap();
    let payload = vec![7u8; 16 * 1024];
    for _ in 0..3 {
        c.launch_callback(stream.handle(), payload.clone(), false).await.expect("within the bound");
    }
    let e = c.launch_callback(stream.handle(), payload.clone(), false).await.expect_err("past the bound");
    assert_eq!((e.code(), e.reason()), (Some(C::ResourceExhausted), Some(R::TooManyReportBytes)), "{e}");
    let mut got = 0;
    for _ in 0..100 {
        got += c.process_reports(1, Duration::from_secs(1), 16).await.unwrap().len();
        if got >= 3 {
            break;
        }
    }
    assert_eq!(got, 3, "every accepted report is delivered");
    c.launch_callback(stream.handle(), payload, false).await.expect("room again once read");
}

/// The GOAWAY's error code a connection answers `frames` with, after a valid start.
fn goaway_after<S: std::io::Read + std::io::Write>(mut conn: S, frames: &[u8]) -> Option<u32> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // empty SETTINGS
    out.extend_from_slice(frames);
    let _ = conn.write_all(&out);
    loop {
        let mut header = [0u8; 9];
        conn.read_exact(&mut header).ok()?;
        let len = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload).ok()?;
        if header[3] == 0x7 {
            return Some(u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]));
        }
    }
}

/// The socket's HTTP/2 front (the `:authority` rewriter) refuses what h2 refuses on TCP,
/// and ends the connection the same way: a GOAWAY with the error code, not a bare close.
/// A 1 MiB HEADERS frame used to be buffered whole (2 MiB per connection).
#[test]
fn the_sockets_http2_front_ends_protocol_errors_with_a_goaway() {
    let d = Daemon::builder().tcp().start();
    let port: u16 = d.endpoint.as_deref().unwrap().rsplit(':').next().unwrap().parse().unwrap();
    let timeout = Some(std::time::Duration::from_secs(30));
    // Both fronts, the Unix socket's and TCP's (plain h2): their answers must be the same.
    let both = |frames: &[u8]| {
        let unix = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        unix.set_read_timeout(timeout).unwrap();
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(timeout).unwrap();
        (goaway_after(unix, frames), goaway_after(tcp, frames))
    };
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    const FRAME_SIZE_ERROR: u32 = 0x6;
    let huge = frame(0x1, 0, 1, &vec![0x82; 1 << 20]);
    assert_eq!(both(&huge), (Some(FRAME_SIZE_ERROR), Some(FRAME_SIZE_ERROR)));
    let (unix, tcp) = both(&frame(0x1, 0x4, 1, &[0xff, 0xff, 0xff, 0x0f]));
    assert!(unix.is_some() && unix == tcp, "bad HPACK: {unix:?} on the socket, {tcp:?} on TCP");
    let mut flood = frame(0x1, 0, 1, &[0x82]);
    for _ in 0..1000 {
        flood.extend(frame(0x9, 0, 1, &[]));
    }
    let (unix, tcp) = both(&flood);
    assert!(unix.is_some() && unix == tcp, "a CONTINUATION flood: {unix:?} on the socket, {tcp:?} on TCP");
    let mut interrupted = frame(0x1, 0, 1, &[0x82]);
    interrupted.extend(frame(0x6, 0, 0, &[0; 8]));
    let (unix, tcp) = both(&interrupted);
    assert!(unix.is_some() && unix == tcp, "an interrupted block: {unix:?} on the socket, {tcp:?} on TCP");
    // The daemon serves on.
    assert!(d.npuctl(&["device", "list"]).status.success());
}

/// A fresh process whose tenant's quota was 64 declared 2,046 streams within the grace
/// after a restart and got them all; a tenant with max_events 100 declared 65,535 events.
/// npud now keeps each process's books on disk (pid, start time, tenant, holdings) and
/// books a declaration only up to that record (this backend cannot count streams), and
/// events only within the tenant's max_events beyond it.
#[test]
fn declarations_after_a_restart_book_what_was_recorded_and_no_more() {
    use npud_proto::v1::budget_call::Call;
    use std::time::Duration;
    let state = tempfile::tempdir().unwrap();
    let config = "[[tenants]]\nname = \"root\"\nmax_events = 100";
    let mut d = Daemon::builder().state_dir(state.path()).config(config).start();
    let mut w = Wire::hello(&d.socket, Default::default());
    assert!(matches!(w.acquire(0, 70, 0), Ok(Reply::Acquired(_))));
    let events = pb::AcquireEventsRequest { device: 0, count: 8, ..Default::default() };
    assert!(matches!(w.call(Call::AcquireEvents(events)), Ok(Reply::EventsAcquired(_))));
    // The books reach the disk off the reply path, within moments.
    let file = state.path().join("natives.json");
    let recorded = || {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).ok()?).ok()?;
        let me = v["holders"].as_array()?.iter().find(|h| h["pid"] == std::process::id())?.clone();
        (me["streams"]["0"] == 70 && me["events"]["0"] == 8).then_some(me)
    };
    assert!(
        npud_tests::eventually(Duration::from_secs(10), || recorded().is_some()),
        "{:?}",
        std::fs::read_to_string(&file)
    );
    d.kill9();
    drop(w);
    let d = Daemon::builder().state_dir(state.path()).config(config).start();
    let declare = |w: &mut Wire, count: u32, events: u32| match w.call(Call::Declare(pb::DeclareBudgetRequest {
        device: 0,
        count,
        events,
        ..Default::default()
    })) {
        Ok(Reply::Declared(r)) => (r.accepted, r.events_accepted),
        other => panic!("{other:?}"),
    };
    let mut w = Wire::hello(&d.socket, Default::default());
    assert_eq!(declare(&mut w, 2046, 0), (70, 0), "what this process was recorded holding, not what it claims");
    assert_eq!(declare(&mut w, 0, 65_535), (0, 100), "its 8 recorded events, the rest within max_events 100");
    assert_eq!(d.in_use(), 70);
    let mut again = Wire::hello(&d.socket, Default::default());
    assert_eq!(declare(&mut again, 2046, 65_535), (0, 0), "a record is booked once; the quota is spent");
    drop((w, again));
    assert!(npud_tests::eventually(Duration::from_secs(10), || d.in_use() == 0));
}

/// The books as npud shows them: per device, (ledger in use, sum of native holders).
fn books_of(d: &Daemon) -> Vec<(u64, u64)> {
    let devices = d.npuctl_json(&["device", "list"]);
    let status = d.npuctl_json(&["status"]);
    let holders = status["native_holders"].as_array().cloned().unwrap_or_default();
    devices
        .as_array()
        .unwrap()
        .iter()
        .map(|dev| {
            let held =
                holders.iter().filter(|h| h["device"] == dev["id"]).map(|h| h["streams"].as_u64().unwrap()).sum();
            (dev["in_use"].as_u64().unwrap(), held)
        })
        .collect()
}

/// Many connections, random asks, releases, closes, calls cut short by a stray byte, and
/// npud killed and restarted: after every step the ledger equals the sum of its holders
/// (and npud's own invariant checker finds nothing), and after each restart the process
/// declares back exactly what it held. Seeded, so a failure replays.
#[test]
fn the_ledger_equals_its_holders_through_random_calls_cuts_and_restarts() {
    use npud_proto::v1::budget_call::Call;
    use std::io::Write;
    use std::time::Duration;
    let state = tempfile::tempdir().unwrap();
    let config = "check_invariants = true\n[budget]\nnative_pacing = \"0s\"";
    let start = || Daemon::builder().state_dir(state.path()).args(&["--sim-devices", "2"]).config(config).start();
    let mut d = start();
    let mut seed: u64 = 0x5eed_0031;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut conns: Vec<Wire> = Vec::new();
    let total = |b: &[(u64, u64)]| b.iter().map(|x| x.0).sum::<u64>();
    for step in 0..120 {
        match next(10) {
            0 | 1 if conns.len() < 6 => conns.push(Wire::hello(&d.socket, Default::default())),
            0..=4 if !conns.is_empty() => {
                let i = next(conns.len() as u64) as usize;
                let _ = conns[i].acquire(next(2) as u32, 1 + next(40) as u32, 0);
            }
            5 | 6 if !conns.is_empty() => {
                let i = next(conns.len() as u64) as usize;
                let release = pb::ReleaseBudgetRequest {
                    device: next(2) as u32,
                    count: 1 + next(30) as u32,
                    ..Default::default()
                };
                let _ = conns[i].call(Call::Release(release));
            }
            7 if !conns.is_empty() => drop(conns.swap_remove(next(conns.len() as u64) as usize)),
            8 if !conns.is_empty() => {
                let mut w = conns.swap_remove(next(conns.len() as u64) as usize);
                let ask = pb::AcquireBudgetRequest {
                    device: next(2) as u32,
                    count: 1 + next(40) as u32,
                    ..Default::default()
                };
                let mut cut = npud_tests::wire::frame(Call::Acquire(ask));
                cut.push(b'x');
                let _ = w.conn.write_all(&cut);
                w.closed_within(Duration::from_secs(5));
            }
            9 if step > 0 => {
                // A restart: the books on disk must reach what the ledger holds first.
                let held = total(&books_of(&d));
                let file = state.path().join("natives.json");
                let on_disk = || -> u64 {
                    let Some(v) =
                        std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    else {
                        return 0;
                    };
                    let holders = v["holders"].as_array().cloned().unwrap_or_default();
                    holders
                        .iter()
                        .flat_map(|h| h["streams"].as_object().cloned().unwrap_or_default())
                        .map(|(_, n)| n.as_u64().unwrap_or(0))
                        .sum()
                };
                assert!(
                    npud_tests::eventually(Duration::from_secs(10), || on_disk() == held),
                    "step {step}: the books reached the disk"
                );
                d.kill9();
                conns.clear();
                d = start();
                let mut w = Wire::hello(&d.socket, Default::default());
                let mut declared = 0;
                for device in 0..2 {
                    let call = Call::Declare(pb::DeclareBudgetRequest { device, count: 4096, ..Default::default() });
                    if let Ok(Reply::Declared(r)) = w.call(call) {
                        declared += u64::from(r.accepted);
                    }
                }
                assert_eq!(declared, held, "step {step}: the process declared back exactly what it held");
                conns.push(w);
            }
            _ => continue,
        }
        let settled = npud_tests::eventually(Duration::from_secs(10), || books_of(&d).iter().all(|(l, h)| l == h));
        assert!(settled, "step {step}: ledger and holders differ: {:?}\n{}", books_of(&d), d.log());
    }
    assert!(!d.log().contains("invariant violated"), "{}", d.log());
}

/// Issue 33's pipelining, from a hostile client: thousands of calls in one burst are all
/// answered, in order, while the daemon stays responsive to everyone else; what it reads
/// ahead is bounded, and taking frames off it costs each frame's own length.
#[test]
fn a_burst_of_pipelined_calls_is_answered_in_order_and_starves_nobody() {
    use npud_proto::v1::budget_call::Call;
    use npud_tests::wire::frame;
    use std::io::Write;
    use std::time::Duration;
    const CALLS: usize = 20_000;
    let d = Daemon::builder().start();
    let mut w = Wire::hello(&d.socket, Default::default());
    let mut burst = Vec::new();
    for i in 0..CALLS {
        burst.extend(match i % 2 {
            0 => frame(Call::Share(pb::BudgetShareRequest::default())),
            _ => frame(Call::Created(pb::CreatedBudgetRequest::default())),
        });
    }
    let mut writer = w.conn.try_clone().unwrap();
    let sent = std::thread::spawn(move || writer.write_all(&burst).is_ok());
    let mut other = Wire::hello(&d.socket, Default::default());
    assert!(matches!(other.acquire(0, 1, 0), Ok(Reply::Acquired(_))), "another process is served meanwhile");
    for i in 0..CALLS {
        match (i % 2, w.reply()) {
            (0, Ok(Reply::Share(_))) | (1, Ok(Reply::Created(_))) => {}
            (_, other) => panic!("answer {i} out of order: {other:?}"),
        }
    }
    assert!(sent.join().unwrap(), "the whole burst was taken");
    drop(other);
    assert!(npud_tests::eventually(Duration::from_secs(20), || d.device0()["in_use"] == 0));
}

/// A connection that holds `grant` streams and will say it created them all, then none,
/// then all ... ([`toggle_created`]).
fn liar(socket: &std::path::Path, grant: u32) -> (Wire, u32) {
    let mut liar = Wire::hello(socket, pb::BudgetHello { reports_created: true, ..Default::default() });
    assert!(matches!(liar.acquire(0, grant, 30_000), Ok(Reply::Acquired(_))));
    (liar, grant)
}

/// Says the liar created its whole grant, then none, ... until `stop`, a report every
/// `pace` (zero: as fast as it can): it never creates one. Returns how many it sent.
fn toggle_created(
    (mut liar, grant): (Wire, u32),
    pace: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> u64 {
    use npud_proto::v1::budget_call::Call;
    use std::sync::atomic::Ordering;
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for created in [grant, 0] {
            liar.send(Call::Created(pb::CreatedBudgetRequest {
                device: 0,
                created: Some(created),
                ..Default::default()
            }));
        }
        sent += 2;
        if !pace.is_zero() {
            std::thread::sleep(pace);
        }
        // Read the answers in batches, so the socket never fills.
        if sent.is_multiple_of(64) {
            for _ in 0..64 {
                assert!(liar.reply().is_ok());
            }
        }
    }
    sent
}

/// A holder's report of fewer streams created withholds them until the device is measured
/// again (they may still be there). A process that reported 100, 0, 100, 0 ... never
/// creating one withheld 100 more with every fall: thousands a second, enough to make a
/// device of 2,045 look full to everyone else. Its falls now withhold no more than the
/// most it counted as created since the last measurement, and every ask that fits beside
/// its grant and that is granted while it goes on.
#[test]
fn a_holder_reporting_its_count_up_and_down_cannot_make_the_device_look_full() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let shared = npud_tests::native::Shared::new();
    let d = npud_tests::native::acl_builder(&shared.path, &[]).start();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let stop = AtomicBool::new(false);
    let grant = 100;
    std::thread::scope(|s| {
        let liar = liar(&d.socket, grant);
        let liar = s.spawn(|| toggle_created(liar, Duration::ZERO, &stop));
        let mut honest = Wire::hello(&d.socket, Default::default());
        // Beside the liar's grant, and what it may withhold twice over (a measurement in
        // flight, and its falls since).
        let fits = capacity - 3 * grant;
        let started = Instant::now();
        let mut refused = Vec::new();
        let mut asks = 0;
        while started.elapsed() < Duration::from_secs(3) {
            asks += 1;
            match honest.acquire(0, fits, 0) {
                Ok(Reply::Acquired(_)) => {
                    let release = pb::ReleaseBudgetRequest { device: 0, count: fits, ..Default::default() };
                    assert!(honest.call(npud_proto::v1::budget_call::Call::Release(release)).is_ok());
                }
                other => refused.push(format!("{other:?} with {}", d.device0())),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        let sent = liar.join().unwrap();
        assert!(sent > 1000, "the liar churned ({sent} reports)");
        assert!(refused.is_empty(), "{} of {asks} asks refused: {:?}", refused.len(), refused.first());
    });
    // It never created anything: once measured, nothing is outside the books, as the
    // driver says.
    let npud = d.pid();
    assert!(npud_tests::eventually(Duration::from_secs(10), || d.device0()["untracked"] == 0), "{}", d.device0());
    assert_eq!(shared.held_by_others(npud), 0);
}

/// A program waits for the room a second one holds; the second is killed while the driver
/// is slow to answer (its table held busy, as it is while hundreds of processes create and
/// destroy at once) and another holder changes the books every millisecond, so every
/// measurement of the device is raced. npud used to drop a measurement any change raced,
/// and a crowd's second wave waited while the first exited; a measurement is now used
/// whatever races it (the books read on both sides of the device, the lower taken). The
/// waiting program starts, and npud's books equal the driver's.
#[test]
fn a_program_waiting_for_room_gets_it_while_the_books_change_during_every_measurement() {
    use npud_tests::native::{App, Shared, acl_apps, acl_builder, acl_command, native_created};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let shared = Shared::new();
    let d = acl_builder(&shared.path, &[]).start();
    let npud = d.pid();
    let capacity = d.device0()["capacity"].as_u64().unwrap() as u32;
    let (program, _) = acl_apps();
    // Two programs of more than half the device each (their default stream included).
    let streams = capacity / 2 + 100;
    let app = || {
        let mut c = acl_command(program, &shared.path, Some((&d, streams)));
        c.args([(streams - 1).to_string(), "-1".into()]).env("NPUD_WAIT", "5m");
        App::spawn(c)
    };
    let mut first = app();
    assert!(first.started().is_ok());
    // Its streams are on npud's books (the report comes off the program's path).
    assert!(npud_tests::eventually(Duration::from_secs(30), || native_created(&d) == u64::from(streams)));
    let (busy, stop) = (AtomicBool::new(true), AtomicBool::new(false));
    std::thread::scope(|s| {
        // Granted before the second program asks (an ask behind it would wait for it).
        let liar = liar(&d.socket, 10);
        let mut second = app();
        assert!(
            npud_tests::eventually(Duration::from_secs(30), || d.device0()["queued_requests"] == 1),
            "the second waits for the first: {}",
            d.device0()
        );
        // From now the driver takes 300 ms to answer (its table held busy), and another
        // holder's reports change the books every millisecond: during every measurement.
        let table = std::fs::File::open(&shared.path).unwrap();
        table.lock().unwrap();
        let busy = &busy;
        s.spawn(move || {
            while busy.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(300));
                table.unlock().unwrap();
                std::thread::sleep(Duration::from_millis(1));
                table.lock().unwrap();
            }
            table.unlock().unwrap();
        });
        let churn = s.spawn(|| toggle_created(liar, Duration::from_millis(1), &stop));
        // Killed: its streams are the driver's to free, which it does when next asked.
        first.child.kill().unwrap();
        first.child.wait().unwrap();
        let killed = Instant::now();
        let granted = npud_tests::eventually(Duration::from_secs(60), || d.device0()["queued_requests"] == 0);
        let waited = killed.elapsed();
        busy.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        assert!(granted, "still waiting {waited:?} after the first died: {}\n{}", d.device0(), d.log());
        assert!(second.started().is_ok());
        assert!(churn.join().unwrap() > 10, "the books changed meanwhile");
        // The ledger equals the device: what npud counts as created is what the driver holds.
        assert!(
            npud_tests::eventually(Duration::from_secs(10), || native_created(&d)
                == u64::from(shared.held_by_others(npud))),
            "npud {} against the driver's {}",
            native_created(&d),
            shared.held_by_others(npud)
        );
        assert_eq!(shared.held_by_others(npud), streams);
        second.release();
    });
}

/// A budget session is one connection, resolved once: its calls used to escape the
/// tenant's request rate that every gRPC call pays. A process flooding npud with asks is
/// now refused RATE_LIMITED like a flood of gRPC calls, while what it gives back is still
/// taken: the books come back to what the device holds.
#[test]
fn a_budget_session_flooding_npud_is_rate_limited_and_may_still_give_back() {
    use npud_proto::v1::budget_call::Call;
    let d = Daemon::builder().config("[limits]\nrequests_per_second = 20\nrequest_burst = 20").start();
    let mut w = Wire::hello(&d.socket, pb::BudgetHello::default());
    assert!(matches!(w.acquire(0, 5, 0), Ok(Reply::Acquired(_))));
    let share = || Call::Share(pb::BudgetShareRequest { device: 0, ..Default::default() });
    let refused = (0..200).find_map(|_| w.call(share()).err()).expect("the flood was cut off");
    assert_eq!(refused.detail.unwrap().reason, R::RateLimited as i32, "{}", refused.message);
    let release = pb::ReleaseBudgetRequest { device: 0, count: 5, ..Default::default() };
    let Ok(Reply::Released(r)) = w.call(Call::Release(release)) else { panic!("giving back is never refused") };
    assert_eq!(r.share.unwrap().holds, 0, "the five were still held, and are given back");
    // npuctl is the same tenant: once its bucket has refilled (20 a second), the books are
    // back to nothing.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(d.in_use(), 0);
}

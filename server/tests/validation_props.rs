//! Property test over the request validation layer: arbitrary sequences of operations,
//! with arbitrary and hostile arguments and handles (valid, guessed, stale, of the wrong
//! kind), never panic, and a refused operation never changes the ledger, the registry,
//! the queue or the callbacks in flight. PROPTEST_CASES raises the budget.
// Test code may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud::config::Args;
use npud::daemon::streams::CreateRequest;
use npud::types::Caller;
use npud::{Config, Daemon};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Handle {
    Live(usize),
    Raw(u64),
    Stale(usize),
}

#[derive(Debug, Clone)]
enum Op {
    Create { device: u32, count: u32, priority: i32, flags: u32 },
    Destroy(Vec<Handle>),
    Query(Handle),
    Sync(Handle, u32),
    Delay(Handle, u64),
    WaitEvent(Handle, Handle),
    EventCreate { device: u32, flags: u32, untimed: bool },
    Record(Handle, Handle),
    Reset(Handle, Handle),
    Elapsed(Handle, Handle),
    DestroyEvent(Handle),
    Launch(Handle, usize, bool),
    Subscribe(u64, Handle),
    FailureMode(Handle, bool),
    Open(String, u32),
}

fn handle() -> impl Strategy<Value = Handle> {
    prop_oneof![
        (0usize..8).prop_map(Handle::Live),
        any::<u64>().prop_map(Handle::Raw),
        (0usize..8).prop_map(Handle::Stale)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..3, 0u32..2000, -3i32..12, prop_oneof![Just(0u32), Just(3), Just(0x20), Just(0x21), any::<u32>()])
            .prop_map(|(device, count, priority, flags)| Op::Create { device, count, priority, flags }),
        prop::collection::vec(handle(), 0..4).prop_map(Op::Destroy),
        handle().prop_map(Op::Query),
        (handle(), 0u32..4).prop_map(|(h, t)| Op::Sync(h, t)),
        (handle(), prop_oneof![Just(0u64), 1u64..2000, Just(u64::MAX)]).prop_map(|(h, us)| Op::Delay(h, us)),
        (handle(), handle()).prop_map(|(s, e)| Op::WaitEvent(s, e)),
        (0u32..3, prop_oneof![Just(0u32), Just(0x8), Just(0x21), any::<u32>()], any::<bool>())
            .prop_map(|(device, flags, untimed)| Op::EventCreate { device, flags, untimed }),
        (handle(), handle()).prop_map(|(e, s)| Op::Record(e, s)),
        (handle(), handle()).prop_map(|(e, s)| Op::Reset(e, s)),
        (handle(), handle()).prop_map(|(a, b)| Op::Elapsed(a, b)),
        handle().prop_map(Op::DestroyEvent),
        (handle(), prop_oneof![0usize..16, Just(65537)], any::<bool>()).prop_map(|(h, n, b)| Op::Launch(h, n, b)),
        (any::<u64>(), handle()).prop_map(|(t, h)| Op::Subscribe(t, h)),
        (handle(), any::<bool>()).prop_map(|(h, stop)| Op::FailureMode(h, stop)),
        ("[a-z/._-]{0,70}", any::<u32>()).prop_map(|(n, l)| Op::Open(n, l)),
    ]
}

/// Per device (in use, queued); registry (sessions, streams, events); callbacks in flight.
type Snapshot = (Vec<(u32, u32)>, (usize, usize, usize), usize);

struct World {
    daemon: Arc<Daemon>,
    caller: Caller,
    session: u64,
    streams: Vec<u64>,
    events: Vec<u64>,
}

impl World {
    fn resolve(&self, h: &Handle, pool: &[u64]) -> u64 {
        match h {
            Handle::Raw(x) => *x,
            Handle::Live(i) => pool.get(i % pool.len().max(1)).copied().unwrap_or(*i as u64),
            Handle::Stale(i) => pool.get(i % pool.len().max(1)).map_or(0xdead, |h| h ^ (0x0101 << 41)),
        }
    }
    fn stream(&self, h: &Handle) -> u64 {
        self.resolve(h, &self.streams)
    }
    fn event(&self, h: &Handle) -> u64 {
        self.resolve(h, &self.events)
    }

    /// What a refused request must leave exactly as it was.
    fn snapshot(&self) -> Snapshot {
        let devices = (0..2).map(|d| self.daemon.budget(d)).map(|v| (v.in_use, v.queued)).collect();
        (devices, self.daemon.registry().totals(), self.daemon.reports().pending_callbacks())
    }

    /// Applies one operation; Ok(true) when it was accepted.
    async fn apply(&mut self, op: &Op) -> bool {
        let d = Arc::clone(&self.daemon);
        let c = &self.caller;
        match op {
            Op::Create { device, count, priority, flags } => {
                let req = CreateRequest {
                    device: *device,
                    count: *count,
                    priority: *priority,
                    flags: *flags,
                    wait: Duration::ZERO,
                };
                match d.create_streams(c, self.session, req).await {
                    Ok((v, _)) => {
                        self.streams.extend(v.iter().map(|s| s.handle));
                        true
                    }
                    Err(_) => false,
                }
            }
            Op::Destroy(hs) => {
                let handles: Vec<u64> = hs.iter().map(|h| self.stream(h)).collect();
                let ok = d.destroy_streams(c, &handles).is_ok();
                if ok {
                    self.streams.retain(|s| !handles.contains(s));
                }
                ok
            }
            Op::Query(h) => d.query_stream(c, self.stream(h)).is_ok(),
            Op::Sync(h, t) => d.synchronize_stream(c, self.stream(h), (*t).max(1)).await.is_ok(),
            Op::Delay(h, us) => d.enqueue_delay(c, self.stream(h), Duration::from_micros(*us)).is_ok(),
            Op::WaitEvent(s, e) => d.stream_wait_event(c, self.stream(s), self.event(e)).is_ok(),
            Op::EventCreate { device, flags, untimed } => {
                match d.create_event(c, self.session, *device, *flags, *untimed) {
                    Ok((h, _)) => {
                        self.events.push(h);
                        true
                    }
                    Err(_) => false,
                }
            }
            Op::Record(e, s) => d.record_event(c, self.event(e), self.stream(s)).is_ok(),
            Op::Reset(e, s) => d.reset_event(c, self.event(e), self.stream(s)).is_ok(),
            Op::Elapsed(a, b) => d.elapsed_time(c, self.event(a), self.event(b)).is_ok(),
            Op::DestroyEvent(e) => {
                let h = self.event(e);
                let ok = d.destroy_event(c, h).is_ok();
                if ok {
                    self.events.retain(|x| *x != h);
                }
                ok
            }
            Op::Launch(h, n, blocking) => d.launch_callback(c, self.stream(h), vec![0; *n], *blocking).is_ok(),
            Op::Subscribe(t, h) => d.subscribe_report(c, self.session, *t, self.stream(h)).is_ok(),
            Op::FailureMode(h, stop) => d.set_failure_mode(c, self.stream(h), *stop).is_ok(),
            Op::Open(name, lease) => d.open_session(c, name, *lease).is_ok(),
        }
    }
}

fn world(rt: &tokio::runtime::Runtime) -> World {
    let args = Args { sim_profile: Some("atlas-200i-a2".into()), sim_devices: Some(2), ..Default::default() };
    let config = Config::load(&args).expect("config");
    let daemon = rt.block_on(async { Daemon::open(config) }).expect("daemon");
    let caller = Caller { tenant: Arc::from("fuzz"), admin: false, uid: 4242 };
    let (session, _, _) = daemon.open_session(&caller, "", 0).expect("session");
    World { daemon, caller, session, streams: Vec::new(), events: Vec::new() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn refused_requests_never_panic_and_never_change_state(ops in prop::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let mut w = world(&rt);
        for op in &ops {
            let before = w.snapshot();
            let accepted = rt.block_on(w.apply(op));
            if !accepted {
                prop_assert_eq!(&before, &w.snapshot(), "refused {:?} changed state", op);
            }
        }
    }
}

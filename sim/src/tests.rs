//! Engine semantics checked with synthetic time: exact and deterministic.

use crate::engine::{Engine, EventState, FailureMode, SimReport};
use crate::flags::EVENT_DEFAULT;
use crate::{ErrorKind, Profile, SimDevice, SimOptions, codes};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn done_flag(engine: &mut Engine, stream: u64) -> Arc<Mutex<Option<bool>>> {
    let flag = Arc::new(Mutex::new(None));
    let f = Arc::clone(&flag);
    engine.on_stream_drained(stream, Box::new(move |r| *f.lock().unwrap() = Some(r.is_ok()))).unwrap();
    flag
}

fn fire(engine: &mut Engine) {
    for (w, r) in engine.fired.drain(..) {
        w(r);
    }
}

#[test]
fn one_stream_serialises_two_streams_overlap() {
    let t0 = Instant::now();
    let mut e = Engine::new(4);
    let a = e.add_stream(0, 0);
    let b = e.add_stream(0, 0);
    e.enqueue_delay(a, ms(10), t0).unwrap();
    e.enqueue_delay(a, ms(10), t0).unwrap();
    e.enqueue_delay(b, ms(10), t0).unwrap();
    e.advance(t0 + ms(10));
    assert!(e.stream_idle(b).unwrap(), "b ran alongside a");
    assert!(!e.stream_idle(a).unwrap(), "a's second delay waits for its first");
    e.advance(t0 + ms(20));
    assert!(e.stream_idle(a).unwrap());
}

#[test]
fn urgent_stream_takes_the_only_lane_first() {
    let t0 = Instant::now();
    let mut e = Engine::new(1);
    let blocker = e.add_stream(3, 0);
    let low = e.add_stream(7, 0);
    let high = e.add_stream(0, 0);
    e.enqueue_delay(blocker, ms(5), t0).unwrap();
    e.enqueue_delay(low, ms(5), t0).unwrap();
    e.enqueue_delay(high, ms(5), t0).unwrap();
    e.advance(t0 + ms(10));
    assert!(e.stream_idle(high).unwrap(), "high priority ran right after the blocker");
    assert!(!e.stream_idle(low).unwrap());
    e.advance(t0 + ms(15));
    assert!(e.stream_idle(low).unwrap());
}

#[test]
fn wait_binds_to_the_record_current_when_enqueued() {
    let t0 = Instant::now();
    let mut e = Engine::new(4);
    let producer = e.add_stream(0, 0);
    let consumer = e.add_stream(0, 0);
    let ev = e.add_event(EVENT_DEFAULT, true);
    e.enqueue_delay(producer, ms(10), t0).unwrap();
    e.record_event(ev, producer, t0).unwrap();
    e.stream_wait_event(consumer, ev, t0).unwrap();
    // Re-record behind a much longer delay: the consumer must not wait for it.
    e.enqueue_delay(producer, ms(100), t0).unwrap();
    e.record_event(ev, producer, t0).unwrap();
    e.enqueue_delay(consumer, ms(1), t0).unwrap();
    e.advance(t0 + ms(11));
    assert!(e.stream_idle(consumer).unwrap(), "consumer was released by the first record");
    assert_eq!(e.event_state(ev).unwrap(), EventState::Pending);
    e.advance(t0 + ms(110));
    assert_eq!(e.event_state(ev).unwrap(), EventState::Complete);
}

#[test]
fn never_recorded_event_is_not_recorded_and_waiting_on_it_is_a_noop() {
    let t0 = Instant::now();
    let mut e = Engine::new(4);
    let s = e.add_stream(0, 0);
    let ev = e.add_event(EVENT_DEFAULT, true);
    assert_eq!(e.event_state(ev).unwrap(), EventState::NotRecorded);
    e.stream_wait_event(s, ev, t0).unwrap();
    assert!(e.stream_idle(s).unwrap());
    let err = e.elapsed_ms(ev, ev).unwrap_err();
    assert_eq!(err.kind, ErrorKind::EventNotRecorded);
}

#[test]
fn elapsed_time_is_exact_around_a_delay() {
    let t0 = Instant::now();
    let mut e = Engine::new(4);
    let s = e.add_stream(0, 0);
    let (a, b) = (e.add_event(EVENT_DEFAULT, true), e.add_event(EVENT_DEFAULT, true));
    e.record_event(a, s, t0).unwrap();
    e.enqueue_delay(s, ms(20), t0).unwrap();
    e.record_event(b, s, t0).unwrap();
    assert_eq!(e.elapsed_ms(a, b).unwrap_err().kind, ErrorKind::EventNotComplete);
    // The engine runs late; the timestamps still say 20 ms.
    e.advance(t0 + ms(27));
    let elapsed = e.elapsed_ms(a, b).unwrap();
    assert!((elapsed - 20.0).abs() < 0.01, "{elapsed}");
    let untimed = e.add_event(EVENT_DEFAULT, false);
    e.record_event(untimed, s, t0 + ms(27)).unwrap();
    assert_eq!(e.elapsed_ms(a, untimed).unwrap_err().kind, ErrorKind::EventNotTimed);
}

#[test]
fn event_without_sync_flag_cannot_be_waited_or_reset() {
    let t0 = Instant::now();
    let mut e = Engine::new(1);
    let s = e.add_stream(0, 0);
    let ev = e.add_event(crate::flags::EVENT_TIME_LINE, true);
    assert_eq!(e.stream_wait_event(s, ev, t0).unwrap_err().kind, ErrorKind::EventFlagsForbid);
    assert_eq!(e.reset_event(ev, s, t0).unwrap_err().kind, ErrorKind::EventFlagsForbid);
}

#[test]
fn destroyed_stream_finishes_its_work_first() {
    let t0 = Instant::now();
    let mut e = Engine::new(1);
    let s = e.add_stream(0, 0);
    e.enqueue_delay(s, ms(5), t0).unwrap();
    let flag = done_flag(&mut e, s);
    e.destroy_stream(s, t0).unwrap();
    assert_eq!(e.freed_streams, 0, "slot is held while work is pending");
    assert!(e.enqueue_delay(s, ms(1), t0).is_err(), "no new work on a destroyed stream");
    e.advance(t0 + ms(5));
    fire(&mut e);
    assert_eq!(e.freed_streams, 1);
    assert_eq!(*flag.lock().unwrap(), Some(true));
}

#[test]
fn blocking_callback_holds_the_stream_until_acked() {
    let t0 = Instant::now();
    let mut e = Engine::new(2);
    let s = e.add_stream(0, 0);
    e.enqueue_delay(s, ms(1), t0).unwrap();
    e.enqueue_callback(s, 7, true, t0).unwrap();
    e.enqueue_delay(s, ms(1), t0).unwrap();
    e.advance(t0 + ms(5));
    assert_eq!(e.reports, vec![SimReport::Callback { stream: s, callback: 7, blocking: true, status: 0 }]);
    assert!(!e.stream_idle(s).unwrap());
    assert!(e.ack_callback(s, 7, t0 + ms(5)).unwrap());
    e.advance(t0 + ms(6));
    assert!(e.stream_idle(s).unwrap());
}

#[test]
fn failure_mode_stop_discards_the_rest() {
    let t0 = Instant::now();
    let mut e = Engine::new(2);
    let s = e.add_stream(0, 0);
    e.set_failure_mode(s, FailureMode::Stop).unwrap();
    assert!(e.set_failure_mode(s, FailureMode::Continue).is_err(), "only once per stream");
    e.inject_task_failure(s, 2, 507015).unwrap();
    for _ in 0..3 {
        e.enqueue_delay(s, ms(1), t0).unwrap();
    }
    let flag = done_flag(&mut e, s);
    e.advance(t0 + ms(1));
    fire(&mut e);
    assert_eq!(e.reports, vec![SimReport::Exception { stream: s, task: 2, code: 507015 }]);
    assert!(e.stream_idle(s).unwrap(), "task 3 was discarded, not run");
    assert_eq!(*flag.lock().unwrap(), Some(false));
}

#[test]
fn device_budget_counts_internal_and_default_streams() {
    let profile = Profile::by_name("atlas-200i-a2").unwrap();
    let dev = SimDevice::new(0, profile, SimOptions::default());
    dev.create_context().unwrap();
    // 512 - 1 internal sync - 1 default = 510 explicit streams, as the seed says.
    assert_eq!(dev.available_streams(), 510);
    let streams: Vec<_> = (0..510).map(|_| dev.create_stream(0, 0).unwrap()).collect();
    let err = dev.create_stream(0, 0).unwrap_err();
    assert_eq!(err.code, codes::RT_NO_STREAM_RESOURCE);
    dev.destroy_stream(streams[0]).unwrap();
    assert!(dev.create_stream(0, 0).is_ok());
    assert!(dev.create_stream(0, 0x21).is_err(), "DEVICE_USE_ONLY is not OR-able");
    assert!(dev.create_stream(8, 0).is_err(), "priority past the profile's range");
}

#[test]
fn a_contexts_default_stream_runs_work_and_frees_no_slot_of_its_own() {
    let t0 = Instant::now();
    let mut e = Engine::new(1);
    let s = e.add_builtin_stream(0);
    e.enqueue_delay(s, ms(5), t0).unwrap();
    let flag = done_flag(&mut e, s);
    e.destroy_stream(s, t0).unwrap();
    e.advance(t0 + ms(5));
    fire(&mut e);
    assert_eq!(*flag.lock().unwrap(), Some(true), "its work ran to the end");
    assert_eq!(e.freed_streams, 0, "the context's count holds its slot, not the stream");
    let forced = e.add_builtin_stream(0);
    e.destroy_stream_force(forced, t0).unwrap();
    assert_eq!(e.freed_streams, 0);
}

#[test]
fn a_stream_ordered_after_another_waits_for_what_it_had_then() {
    let t0 = Instant::now();
    let mut e = Engine::new(2);
    let (a, b) = (e.add_stream(0, 0), e.add_stream(0, 0));
    e.enqueue_delay(a, ms(5), t0).unwrap();
    e.order_after(b, a, t0).unwrap();
    e.enqueue_delay(a, ms(50), t0).unwrap();
    e.enqueue_delay(b, ms(1), t0).unwrap();
    let flag = done_flag(&mut e, b);
    e.advance(t0 + ms(4));
    fire(&mut e);
    assert_eq!(*flag.lock().unwrap(), None, "b waits for a's first delay");
    e.advance(t0 + ms(6));
    fire(&mut e);
    assert_eq!(*flag.lock().unwrap(), Some(true), "and not for what a had after the order");
    e.order_after(b, a, t0 + ms(6)).unwrap();
    e.destroy_stream_force(a, t0 + ms(6)).unwrap();
    assert!(e.stream_idle(b).unwrap(), "a stream gone leaves nothing to wait for");
}

#[test]
fn device_timer_finishes_delays_and_wakes_waiters() {
    let dev = SimDevice::new(0, Profile::default(), SimOptions::default());
    let s = dev.create_stream(0, 0).unwrap();
    dev.enqueue_delay(s, ms(5)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    dev.on_stream_drained(s, Box::new(move |r| tx.send(r).unwrap())).unwrap();
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap().is_ok());
    assert!(dev.stream_query(s).unwrap());
}

#[test]
fn a_stalled_device_runs_nothing_and_misses_heartbeats_until_resumed() {
    let dev = SimDevice::new(0, Profile::default(), SimOptions::default());
    let s = dev.create_stream(0, 0).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let beat = tx.clone();
    dev.heartbeat(Box::new(move |_| beat.send("beat").unwrap()));
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "beat");
    dev.set_stalled(true);
    dev.enqueue_delay(s, ms(1)).unwrap();
    let beat = tx.clone();
    dev.heartbeat(Box::new(move |_| beat.send("beat").unwrap()));
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "no heartbeat while stalled");
    std::thread::sleep(ms(5));
    assert!(!dev.stream_query(s).unwrap(), "the delay did not run");
    dev.set_stalled(false);
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "beat");
    dev.on_stream_drained(s, Box::new(move |_| tx.send("drained").unwrap())).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "drained");
}

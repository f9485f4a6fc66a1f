//! Issue 3: the seeds' stream, event and synchronisation semantics, end to end over a real
//! socket with real clients (the Rust client and npuctl). No process boundary is under
//! test here, so the daemon serves in this process on the simulator (the fakes and a real
//! driver still run the binary). Timing assertions rely on event timestamps (device time),
//! never on the wall clock of this noisy machine, except where a wait must be seen to block.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::{
    Backend, Client, Daemon, EventOptions, StreamOptions, backend, failure, native, next_report, proto::ErrorReason,
    proto::EventState, skipped_on_real_hardware, timing_tolerance_ms,
};
use std::time::Duration;
use tonic::Code;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Makes task `task` of `stream` fail with 507015 when the device reaches it (admin call).
async fn fail_task(c: &Client, stream: u64, task: u64) {
    let fault = npud_tests::proto::InjectFaultRequest {
        device: 0,
        fault: Some(npud_tests::proto::inject_fault_request::Fault::FailTask(npud_tests::proto::FailTask {
            stream,
            task,
            code: 507015,
        })),
    };
    c.admin().inject_fault(fault).await.unwrap();
}

async fn setup() -> (Daemon, Client) {
    let d = Daemon::builder().in_process().config("[sim]\nlanes = 4").start();
    let c = d.client().await;
    (d, c)
}

#[tokio::test]
async fn a_wait_binds_to_the_record_current_when_it_was_enqueued() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let producer = dev.create_stream(StreamOptions::default()).await.unwrap();
    let consumer = dev.create_stream(StreamOptions::default()).await.unwrap();
    let ev = dev.create_event(EventOptions::default()).await.unwrap();
    let (start, done) = (
        dev.create_event(EventOptions::default()).await.unwrap(),
        dev.create_event(EventOptions::default()).await.unwrap(),
    );
    producer.record(&start).await.unwrap();
    producer.delay(ms(30)).await.unwrap();
    producer.record(&ev).await.unwrap();
    consumer.wait(&ev).await.unwrap();
    // Re-record behind a long delay after the wait was enqueued: the wait must not follow.
    producer.delay(ms(400)).await.unwrap();
    producer.record(&ev).await.unwrap();
    consumer.record(&done).await.unwrap();
    done.sync().await.unwrap();
    let waited = done.elapsed_since(&start).await.unwrap();
    // Bound to the first record: ~30 ms of device time. Following the re-record would
    // take 430 ms or more, so the upper bound only tells the two apart, whatever the load.
    assert!((29.0..400.0).contains(&waited), "consumer was released by the first record after {waited} ms");
    assert_eq!(ev.state().await.unwrap(), EventState::Pending, "the second record is still pending");
}

#[tokio::test]
async fn waiting_on_a_never_recorded_event_is_a_no_op_and_it_queries_as_not_recorded() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let s = dev.create_stream(StreamOptions::default()).await.unwrap();
    let ev = dev.create_event(EventOptions::default()).await.unwrap();
    assert_eq!(ev.state().await.unwrap(), EventState::NotRecorded);
    assert!(ev.is_done().await.unwrap(), "cuda.core: a never-recorded event is done");
    ev.sync().await.expect("synchronising a never-recorded event returns at once");
    s.wait(&ev).await.unwrap();
    s.delay(ms(1)).await.unwrap();
    s.sync_timeout(Some(ms(2000))).await.expect("the wait did not block the stream");
}

#[tokio::test]
async fn elapsed_time_around_a_20ms_delay_and_its_three_refusals() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let s = dev.create_stream(StreamOptions::default()).await.unwrap();
    let a = dev.create_event(EventOptions::default()).await.unwrap();
    let b = dev.create_event(EventOptions::default()).await.unwrap();
    // Unrecorded; the message names the event by the caller's handle, not the backend's id.
    let (code, reason, e) = failure(b.elapsed_since(&a).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::EventNotRecorded));
    assert!(e.to_string().contains(&format!("event {} has not been recorded", a.handle())), "{e}");
    // Enqueue behind a busy head so the three tasks chain back to back on the device
    // (an idle stream would start the delay only when its RPC arrives).
    s.delay(ms(1000)).await.unwrap();
    s.record(&a).await.unwrap();
    s.delay(ms(20)).await.unwrap();
    s.record(&b).await.unwrap();
    // Recorded but not complete yet.
    let (code, reason, e) = failure(b.elapsed_since(&a).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::EventNotComplete));
    assert_eq!(e.native_code(), native(507006, 600), "ACL_ERROR_RT_EVENT_NOT_COMPLETE / CUDA_ERROR_NOT_READY");
    s.sync().await.unwrap();
    let elapsed = b.elapsed_since(&a).await.unwrap();
    assert!((elapsed - 20.0).abs() < timing_tolerance_ms(), "elapsed {elapsed} ms");
    // Untimed.
    let untimed = dev.create_event(EventOptions { disable_timing: true, ..Default::default() }).await.unwrap();
    assert!(!untimed.timing());
    s.record(&untimed).await.unwrap();
    s.sync().await.unwrap();
    let (code, reason, e) = failure(untimed.elapsed_since(&a).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::EventNotTimed));
    assert!(e.to_string().contains(&format!("event {} was created without timing", untimed.handle())), "{e}");
}

#[tokio::test]
async fn two_streams_overlap_while_one_stream_serialises() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let (s1, s2) = (
        dev.create_stream(StreamOptions::default()).await.unwrap(),
        dev.create_stream(StreamOptions::default()).await.unwrap(),
    );
    let ev = || dev.create_event(EventOptions::default());
    let (t0, t1, t2) = (ev().await.unwrap(), ev().await.unwrap(), ev().await.unwrap());
    // Serial: two 40 ms delays on one stream take 80 ms (enqueued behind a busy head).
    s1.delay(ms(1000)).await.unwrap();
    s1.record(&t0).await.unwrap();
    s1.delay(ms(40)).await.unwrap();
    s1.delay(ms(40)).await.unwrap();
    s1.record(&t1).await.unwrap();
    s1.sync().await.unwrap();
    let serial = t1.elapsed_since(&t0).await.unwrap();
    assert!((serial - 80.0).abs() < timing_tolerance_ms(), "serial {serial} ms");
    // Parallel: 40 ms on each of two streams end close together.
    s1.record(&t0).await.unwrap();
    s1.delay(ms(40)).await.unwrap();
    s2.delay(ms(40)).await.unwrap();
    s1.record(&t1).await.unwrap();
    s2.record(&t2).await.unwrap();
    dev.sync(None).await.unwrap();
    let both = t2.elapsed_since(&t0).await.unwrap();
    assert!(both < 70.0, "the second stream's delay overlapped the first ({both} ms, serial would be 80)");
}

#[tokio::test]
async fn a_high_priority_stream_overtakes_when_lanes_are_short() {
    if skipped_on_real_hardware("a device with fewer lanes than streams") {
        return;
    }
    let d = Daemon::builder().in_process().config("[sim]\nlanes = 1").start();
    let c = d.client().await;
    let dev = c.device(0);
    let range = &c.devices().await.unwrap()[0];
    let (most, least) = (range.priority_highest, range.priority_lowest);
    let opts = |priority| StreamOptions { priority, ..Default::default() };
    let blocker = dev.create_stream(opts((most + least) / 2)).await.unwrap();
    let low = dev.create_stream(opts(least)).await.unwrap();
    let high = dev.create_stream(opts(most)).await.unwrap();
    let (low_done, high_done) = (
        dev.create_event(EventOptions::default()).await.unwrap(),
        dev.create_event(EventOptions::default()).await.unwrap(),
    );
    blocker.delay(ms(100)).await.unwrap();
    // The low-priority stream asks for the lane first.
    low.delay(ms(10)).await.unwrap();
    low.record(&low_done).await.unwrap();
    high.delay(ms(10)).await.unwrap();
    high.record(&high_done).await.unwrap();
    dev.sync(None).await.unwrap();
    let gap = low_done.elapsed_since(&high_done).await.unwrap();
    assert!((gap - 10.0).abs() < 0.5, "high ran first, then low: low ended {gap} ms after high");
    assert_eq!(high.info().await.unwrap().priority, most);
}

#[tokio::test]
async fn synchronize_with_timeout_reports_the_vendor_code_and_leaves_work_running() {
    let (_d, c) = setup().await;
    let s = c.device(0).create_stream(StreamOptions::default()).await.unwrap();
    s.delay(ms(300)).await.unwrap();
    let (code, reason, e) = failure(s.sync_timeout(Some(ms(20))).await);
    assert_eq!((code, reason), (Code::DeadlineExceeded, ErrorReason::SyncTimeout));
    assert_eq!(e.native_code(), native(507046, 909), "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT / CUDA_ERROR_TIMEOUT");
    assert!(!s.is_done().await.unwrap(), "the work keeps running");
    s.sync().await.unwrap();
    assert!(s.is_done().await.unwrap());
    let ev = c.device(0).create_event(EventOptions::default()).await.unwrap();
    s.delay(ms(300)).await.unwrap();
    s.record(&ev).await.unwrap();
    let (code, _, e) = failure(ev.sync_timeout(Some(ms(20))).await);
    assert_eq!(
        (code, e.native_code()),
        (Code::DeadlineExceeded, native(507047, 909)),
        "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"
    );
}

#[tokio::test]
async fn device_sync_waits_for_the_callers_work_only() {
    let d = Daemon::builder().in_process().tcp().config("[sim]\nlanes = 4").start();
    let (a, b) = (d.client().await, d.tcp_client().await);
    let long = b.device(0).create_stream(StreamOptions::default()).await.unwrap();
    long.delay(Duration::from_secs(30)).await.unwrap();
    let mine = a.device(0).create_stream(StreamOptions::default()).await.unwrap();
    mine.delay(ms(10)).await.unwrap();
    // Generous bound: B's 30 s of work must not be waited for.
    a.device(0).sync(Some(Duration::from_secs(10))).await.expect("A's device sync ignores B's streams");
    assert!(mine.is_done().await.unwrap());
    let (code, ..) = failure(b.device(0).sync(Some(ms(50))).await);
    assert_eq!(code, Code::DeadlineExceeded, "B's own sync does wait for B's work");
}

/// Device sync is the calling process's: another process of the same tenant is not waited
/// for, the caller's destroyed-but-draining streams are, and a task failure on them is
/// returned (once).
#[tokio::test]
async fn device_sync_is_the_sessions_and_covers_what_it_destroyed() {
    if skipped_on_real_hardware("injected task failures") {
        return;
    }
    let (d, a) = setup().await;
    let b = d.client().await; // the same tenant, another process
    assert_eq!(a.tenant(), b.tenant());
    let theirs = b.device(0).create_stream(StreamOptions::default()).await.unwrap();
    theirs.delay(Duration::from_secs(30)).await.unwrap();
    a.device(0).sync(Some(Duration::from_secs(10))).await.expect("another session's work is not waited for");

    let gone = a.device(0).create_stream(StreamOptions::default()).await.unwrap();
    gone.delay(ms(1500)).await.unwrap();
    gone.close().await.unwrap();
    assert_eq!(a.devices().await.unwrap()[0].draining, 1);
    a.device(0).sync(Some(Duration::from_secs(20))).await.expect("the destroyed stream's work finished");
    assert_eq!(a.devices().await.unwrap()[0].draining, 0, "the sync waited for the stream it destroyed");

    // Another pool class, so a fresh stream whose tasks the fault names directly.
    let failing = a.device(0).create_stream(StreamOptions { flags: 0x2, ..Default::default() }).await.unwrap();
    failing.delay(Duration::from_secs(2)).await.unwrap();
    let id = failing.delay(ms(1)).await.unwrap();
    // CUDA kernels carry no task number: the fake driver counts launches on the stream.
    let task = if backend() == Backend::Cuda { 2 } else { id };
    fail_task(&a, failing.handle(), task).await;
    failing.close().await.unwrap();
    let (code, reason, e) = failure(a.device(0).sync(Some(Duration::from_secs(20))).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::StreamFailed), "{e}");
    a.device(0).sync(Some(Duration::from_secs(10))).await.expect("the failure was reported once");
    drop(theirs);
}

#[tokio::test]
async fn destroying_what_pending_work_still_uses_follows_the_seeds() {
    let (d, c) = setup().await;
    let dev = c.device(0);
    let s = dev.create_stream(StreamOptions::default()).await.unwrap();
    let ev = dev.create_event(EventOptions::default()).await.unwrap();
    s.delay(ms(300)).await.unwrap();
    s.record(&ev).await.unwrap();
    let watcher = dev.create_stream(StreamOptions::default()).await.unwrap();
    watcher.wait(&ev).await.unwrap();
    // cuEventDestroy: returns at once; the pending record still completes for its waiters.
    ev.close().await.expect("destroying an event with a pending record");
    watcher.sync_timeout(Some(Duration::from_secs(10))).await.expect("the waiter is released by the record");
    let other = dev.create_stream(StreamOptions::default()).await.unwrap();
    other.delay(ms(400)).await.unwrap();
    let before = d.device0();
    // cuStreamDestroy: returns at once; the budget comes back when the work has ended.
    other.close().await.expect("destroying a stream with pending work");
    let right_after = d.device0();
    assert_eq!(right_after["in_use"].as_u64(), before["in_use"].as_u64().map(|n| n - 1));
    assert_eq!(right_after["available"], before["available"], "still draining: not yet free");
    assert!(
        npud_tests::eventually_async(Duration::from_secs(10), || async {
            d.device0()["available"].as_u64() == before["available"].as_u64().map(|n| n + 1)
        })
        .await
    );
}

#[tokio::test]
async fn events_without_the_sync_flag_cannot_be_waited_on_or_reset_and_the_event_budget_holds() {
    let d = Daemon::builder().in_process().args(&["--sim-profile", "atlas-inference"]).start();
    let c = d.client().await;
    let dev = c.device(0);
    let s = dev.create_stream(StreamOptions::default()).await.unwrap();
    let timeline_only = dev.create_event(EventOptions { flags: 0x8, ..Default::default() }).await.unwrap();
    if backend() == Backend::Cuda {
        // CUDA events have no ACL_EVENT_SYNC flag, and no fixed event budget: any event
        // can be waited on.
        s.wait(&timeline_only).await.expect("CUDA events can always be waited on");
        return;
    }
    let (code, reason, _) = failure(s.wait(&timeline_only).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::EventFlagsForbid));
    let (_, reason, e) = failure(timeline_only.reset(&s).await);
    assert_eq!(reason, ErrorReason::EventFlagsForbid);
    assert!(e.to_string().contains(&format!("event {} was created without", timeline_only.handle())), "{e}");
    let (code, reason, _) = failure(dev.create_event(EventOptions { flags: 0x21, ..Default::default() }).await);
    assert_eq!((code, reason), (Code::InvalidArgument, ErrorReason::InvalidFlags), "EXTERNAL is not OR-able");
    // atlas-inference holds 1023 events. By default one tenant may take half of them, so
    // another can always have the rest (the quota refuses, not the device)…
    let mut events = vec![timeline_only];
    for _ in 0..510 {
        events.push(dev.create_event(EventOptions::default()).await.unwrap());
    }
    let (code, reason, e) = failure(dev.create_event(EventOptions::default()).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::EventBudgetExhausted));
    assert_eq!(e.figure("max_events"), Some(511), "{e}");
    // …and with a larger quota the device's table is the limit, with the vendor's code.
    assert!(d.npuctl(&["quota", "set", "root", "--max-events", "5000"]).status.success());
    for _ in 511..1023 {
        events.push(dev.create_event(EventOptions::default()).await.unwrap());
    }
    let (code, reason, e) = failure(dev.create_event(EventOptions::default()).await);
    assert_eq!((code, reason), (Code::ResourceExhausted, ErrorReason::EventBudgetExhausted));
    assert_eq!(e.native_code(), 207007, "ACL_ERROR_RT_NO_EVENT_RESOURCE");
}

#[tokio::test]
async fn reset_returns_an_event_to_not_recorded_once_the_stream_reaches_it() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let s = dev.create_stream(StreamOptions::default()).await.unwrap();
    let ev = dev.create_event(EventOptions::default()).await.unwrap();
    if backend() == Backend::Cuda {
        // Reset is an AscendCL call: the CUDA backend says so rather than pretending.
        let (code, reason, _) = failure(ev.reset(&s).await);
        assert_eq!((code, reason), (Code::Unimplemented, ErrorReason::UnsupportedByBackend));
        return;
    }
    s.record(&ev).await.unwrap();
    s.sync().await.unwrap();
    assert_eq!(ev.state().await.unwrap(), EventState::Complete);
    s.delay(ms(50)).await.unwrap();
    ev.reset(&s).await.unwrap();
    assert_eq!(ev.state().await.unwrap(), EventState::Complete, "the reset waits for the stream's earlier work");
    s.sync().await.unwrap();
    assert_eq!(ev.state().await.unwrap(), EventState::NotRecorded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_blocked_clients_do_not_stall_a_fifty_first() {
    let d = Daemon::builder().in_process().config("[sim]\nlanes = 4").start();
    let owner = d.client().await;
    let s = owner.device(0).create_stream(StreamOptions::default()).await.unwrap();
    s.delay(Duration::from_secs(20)).await.unwrap();
    let handle = s.handle();
    let mut blocked = Vec::new();
    for _ in 0..50 {
        let c = d.client().await;
        blocked.push(tokio::spawn(async move {
            let mut svc = c.streams();
            svc.synchronize(npud_tests::proto::SynchronizeStreamRequest { handle, timeout_ms: 0 }).await
        }));
    }
    tokio::time::sleep(ms(200)).await;
    // The 51st client creates, records and queries while fifty syncs are parked.
    let fresh = d.client().await;
    let dev = fresh.device(0);
    let work = async {
        for _ in 0..20 {
            let st = dev.create_stream(StreamOptions::default()).await.unwrap();
            let ev = dev.create_event(EventOptions::default()).await.unwrap();
            st.record(&ev).await.unwrap();
            ev.sync().await.unwrap();
            assert_eq!(ev.state().await.unwrap(), EventState::Complete);
        }
    };
    tokio::time::timeout(Duration::from_secs(15), work).await.expect("the 51st client was not held up");
    assert!(blocked.iter().all(|h| !h.is_finished()), "the fifty are still waiting");
    for h in blocked {
        h.abort();
    }
}

#[tokio::test]
async fn across_devices_record_is_refused_and_a_wait_follows_the_vendor() {
    if skipped_on_real_hardware("two devices") {
        return;
    }
    let d = Daemon::builder().in_process().args(&["--sim-devices", "2"]).start();
    let c = d.client().await;
    let s = c.device(0).create_stream(StreamOptions::default()).await.unwrap();
    let other = c.device(1).create_event(EventOptions::default()).await.unwrap();
    let (code, reason, _) = failure(s.record(&other).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::DeviceMismatch), "record");
    assert_eq!(other.state().await.unwrap(), EventState::NotRecorded);
    // Device 1's event is recorded behind a blocking callback, so it completes exactly
    // when the test acknowledges it.
    let mut reports = c.report_stream(0).await.unwrap();
    let producer = c.device(1).create_stream(StreamOptions::default()).await.unwrap();
    c.subscribe(1, producer.handle()).await.unwrap();
    let hold = c.launch_callback(producer.handle(), vec![], true).await.unwrap();
    next_report(&mut reports).await;
    producer.record(&other).await.unwrap();
    let waited = s.wait(&other).await;
    if backend() == Backend::Cuda {
        // cuStreamWaitEvent: "the event may be from a different context than hStream, in
        // which case this function will perform cross-device synchronization".
        waited.unwrap();
        assert!(!s.is_done().await.unwrap(), "device 0's stream waits for device 1's event");
        c.ack(hold).await.unwrap();
        s.sync_timeout(Some(Duration::from_secs(10))).await.unwrap();
        assert_eq!(other.state().await.unwrap(), EventState::Complete);
    } else {
        // AscendCL documents no cross-device wait and its event ids are per device.
        let (code, reason, _) = failure(waited);
        assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::DeviceMismatch), "stream wait");
        assert!(s.is_done().await.unwrap(), "no wait was enqueued");
        c.ack(hold).await.unwrap();
    }
}

#[test]
fn npuctl_drives_events_and_stream_waits() {
    let d = Daemon::builder().in_process().start();
    let streams = d.npuctl_json(&["stream", "create", "--count", "2"]);
    let (s1, s2) = (streams[0]["handle"].to_string(), streams[1]["handle"].to_string());
    let a = d.npuctl_json(&["event", "create"])["handle"].to_string();
    let b = d.npuctl_json(&["event", "create"])["handle"].to_string();
    assert_eq!(d.npuctl_json(&["event", "query", &a])["state"], "not_recorded");
    d.npuctl_json(&["stream", "delay", &s1, "3s"]);
    d.npuctl_json(&["event", "record", &a, &s1]);
    d.npuctl_json(&["stream", "delay", &s1, "20ms"]);
    d.npuctl_json(&["event", "record", &b, &s1]);
    d.npuctl_json(&["stream", "wait-event", &s2, &b]);
    assert_eq!(d.npuctl_json(&["stream", "query", &s2])["state"], "not_ready", "s2 waits for b");
    let out = d.npuctl(&["event", "elapsed", &a, &b]);
    assert_eq!(out.status.code(), Some(6), "not complete yet: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(d.npuctl_json(&["event", "sync", &b])["state"], "complete");
    let ms = d.npuctl_json(&["event", "elapsed", &a, &b])["milliseconds"].as_f64().unwrap();
    assert!((ms - 20.0).abs() < f64::from(timing_tolerance_ms()), "{ms}");
    assert_eq!(d.npuctl_json(&["stream", "sync", &s2, "--timeout", "5s"])["state"], "complete");
    assert_eq!(d.npuctl_json(&["event", "list"]).as_array().map(Vec::len), Some(2));
    assert_eq!(d.npuctl_json(&["event", "destroy", &a, &b])["destroyed"], 2);
    assert_eq!(d.npuctl(&["event", "query", &a]).status.code(), Some(3));
}

/// aclrtCreateStreamWithConfig: macros that cannot be OR-ed are refused; "a stream created
/// with any other value is the same as one made by aclrtCreateStream" (npud applies the
/// rule on every backend).
#[tokio::test]
async fn a_flag_word_outside_the_macros_makes_an_ordinary_stream() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    for other in [0x4000, 0x4000 | 0x1, 0x8000_0000] {
        let s = dev.create_stream(StreamOptions { flags: other, ..Default::default() }).await.unwrap();
        assert_eq!(s.flags(), 0, "{other:#x} makes an ordinary stream");
        s.delay(ms(1)).await.unwrap();
        s.sync().await.unwrap();
    }
    let s = dev.create_stream(StreamOptions { flags: 0x3, ..Default::default() }).await.unwrap();
    assert_eq!(s.flags(), 0x3, "documented macros OR-ed together are kept");
    for refused in [0x21, u32::MAX] {
        let (code, reason, _) =
            failure(dev.create_stream(StreamOptions { flags: refused, ..Default::default() }).await);
        assert_eq!((code, reason), (Code::InvalidArgument, ErrorReason::InvalidFlags), "{refused:#x}");
    }
}

/// cuStreamCreateWithPriority: an out-of-range priority is clamped into the device's range
/// and the stream reports the clamped value. AscendCL documents no clamping: refused.
#[tokio::test]
async fn an_out_of_range_priority_is_clamped_on_cuda_and_refused_on_acl() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let range = &c.devices().await.unwrap()[0];
    let (most, least) = (range.priority_highest, range.priority_lowest);
    let opts = |priority| StreamOptions { priority, ..Default::default() };
    if backend() == Backend::Cuda {
        let urgent = dev.create_stream(opts(most - 100)).await.unwrap();
        assert_eq!(urgent.priority(), most);
        let lazy = dev.create_stream(opts(least + 100)).await.unwrap();
        assert_eq!(lazy.priority(), least);
        assert_eq!(lazy.info().await.unwrap().priority, least);
        return;
    }
    for out in [most - 1, least + 1] {
        let (code, reason, _) = failure(dev.create_stream(opts(out)).await);
        assert_eq!((code, reason), (Code::InvalidArgument, ErrorReason::InvalidPriority), "priority {out}");
    }
}

/// A stream from the warm pool is indistinguishable from a new one: a stream whose failure
/// mode was set (AscendCL allows it once per stream) is not pooled, so the next owner can
/// set its own.
#[tokio::test]
async fn a_pooled_stream_starts_with_no_failure_mode() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let set = |stream: u64| {
        let mut svc = c.streams();
        async move { svc.set_failure_mode(npud_tests::proto::SetFailureModeRequest { stream, mode: 1 }).await }
    };
    let moded = dev.create_stream(StreamOptions::default()).await.unwrap();
    let plain = dev.create_stream(StreamOptions::default()).await.unwrap();
    if backend() == Backend::Cuda {
        assert_eq!(set(moded.handle()).await.unwrap_err().code(), Code::Unimplemented, "an AscendCL call");
        return;
    }
    set(moded.handle()).await.unwrap();
    // The plain stream has run three tasks before it goes back to the pool.
    for _ in 0..3 {
        plain.delay(ms(1)).await.unwrap();
    }
    plain.sync().await.unwrap();
    let pooled_before = c.devices().await.unwrap()[0].pooled;
    drop((moded, plain));
    assert!(
        npud_tests::eventually_async(Duration::from_secs(10), || async {
            let d = &c.devices().await.unwrap()[0];
            d.draining == 0 && d.in_use == 0
        })
        .await
    );
    assert_eq!(c.devices().await.unwrap()[0].pooled, pooled_before + 1, "only the stream without a mode was pooled");
    let reused = dev.create_stream(StreamOptions::default()).await.unwrap();
    assert!(reused.reused(), "served from the pool");
    if backend() == Backend::Sim {
        // The simulator's task numbers are npud's to show: they start again. (On the
        // vendor backends they are the runtime's own and go on, as a reused stream's do.)
        assert_eq!(reused.delay(ms(1)).await.unwrap(), 1, "a pooled stream numbers its tasks from 1");
    }
    set(reused.handle()).await.expect("a pooled stream takes a failure mode");
    for _ in 0..3 {
        let s = dev.create_stream(StreamOptions::default()).await.unwrap();
        set(s.handle()).await.expect("every stream handed out takes a failure mode");
    }
}

/// A sync whose awaited task fails returns that failure on that very call.
#[tokio::test]
async fn a_sync_returns_the_failure_of_the_task_it_waited_for() {
    if skipped_on_real_hardware("injected task failures") {
        return;
    }
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let s = dev.create_stream(StreamOptions::default()).await.unwrap();
    // Task 1 holds the stream long enough for the fault to be in place before task 2 runs.
    s.delay(Duration::from_secs(2)).await.unwrap();
    s.delay(ms(1)).await.unwrap();
    fail_task(&c, s.handle(), 2).await;
    let (code, reason, e) = failure(s.sync().await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::StreamFailed), "{e}");
}

/// aclrtResetEvent takes effect when the stream reaches it: a wait enqueued before the reset
/// still waits for the record that was pending.
#[tokio::test]
async fn a_wait_enqueued_before_a_reset_still_waits_for_the_record() {
    let (_d, c) = setup().await;
    let dev = c.device(0);
    let producer = dev.create_stream(StreamOptions::default()).await.unwrap();
    let consumer = dev.create_stream(StreamOptions::default()).await.unwrap();
    let ev = dev.create_event(EventOptions::default()).await.unwrap();
    if backend() == Backend::Cuda {
        return; // reset is an AscendCL call (see reset_returns_an_event_to_not_recorded…)
    }
    let mark = dev.create_event(EventOptions::default()).await.unwrap();
    producer.delay(Duration::from_secs(2)).await.unwrap();
    producer.record(&mark).await.unwrap();
    producer.record(&ev).await.unwrap();
    consumer.wait(&ev).await.unwrap();
    ev.reset(&producer).await.unwrap();
    consumer.sync_timeout(Some(Duration::from_secs(20))).await.unwrap();
    assert_eq!(mark.state().await.unwrap(), EventState::Complete, "the consumer waited for the producer's record");
    producer.sync().await.unwrap();

    // The same for the host: until the stream reaches the reset, the record is pending and
    // an event sync waits for it.
    let mark2 = dev.create_event(EventOptions::default()).await.unwrap();
    producer.delay(Duration::from_secs(2)).await.unwrap();
    producer.record(&mark2).await.unwrap();
    producer.record(&ev).await.unwrap();
    ev.reset(&producer).await.unwrap();
    ev.sync().await.unwrap();
    assert_eq!(mark2.state().await.unwrap(), EventState::Complete, "the event sync waited for the pending record");
}

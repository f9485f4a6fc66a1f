//! Issue 4: host callbacks and exception reports, delivered to the owning session only.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::{
    Backend, Client, Daemon, EventOptions, StreamOptions, backend, failure, native, next_report, proto,
    proto::ErrorReason, skipped_on_real_hardware,
};
use std::collections::HashMap;
use std::time::Duration;
use tokio_stream::StreamExt;
use tonic::Code;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn callback(r: &proto::Report) -> &proto::CallbackReport {
    match &r.kind {
        Some(proto::report::Kind::Callback(c)) => c,
        other => panic!("expected a callback report, got {other:?}"),
    }
}

fn exception(r: &proto::Report) -> &proto::ExceptionReport {
    match &r.kind {
        Some(proto::report::Kind::Exception(e)) => e,
        other => panic!("expected an exception report, got {other:?}"),
    }
}

async fn subscribed(c: &Client, thread: u64) -> npud_tests::Stream {
    let s = c.device(0).create_stream(StreamOptions::default()).await.unwrap();
    c.subscribe(thread, s.handle()).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_callback_holds_its_stream_until_acknowledged() {
    let d = Daemon::start();
    let c = d.client().await;
    let mut reports = c.report_stream(0).await.unwrap();
    let s = subscribed(&c, 1).await;
    let id = c.launch_callback(s.handle(), b"hello".to_vec(), true).await.unwrap();
    s.delay(ms(5)).await.unwrap();
    let r = next_report(&mut reports).await;
    let cb = callback(&r);
    assert_eq!((cb.callback_id, cb.stream, cb.thread_id, cb.user_data.as_slice()), (id, s.handle(), 1, &b"hello"[..]));
    assert_eq!(cb.block_type, proto::CallbackBlockType::CallbackBlock as i32);
    let (c2, h) = (c.clone(), s.handle());
    let sync = tokio::spawn(async move {
        c2.streams().synchronize(proto::SynchronizeStreamRequest { handle: h, timeout_ms: 0 }).await.map(drop)
    });
    tokio::time::sleep(ms(300)).await;
    assert!(!sync.is_finished(), "synchronize waits for the acknowledgement");
    assert!(!s.is_done().await.unwrap(), "the delay behind the callback has not run");
    c.ack(id).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), sync).await.expect("sync returns after the ack").unwrap().unwrap();
    assert!(s.is_done().await.unwrap());
    let (code, ..) = failure(c.ack(id).await);
    assert_eq!(code, Code::NotFound, "a callback is acknowledged once");
}

#[tokio::test]
async fn a_non_blocking_callback_does_not_hold_its_stream() {
    let d = Daemon::start();
    let c = d.client().await;
    let s = subscribed(&c, 1).await;
    c.launch_callback(s.handle(), vec![], false).await.unwrap();
    s.delay(ms(5)).await.unwrap();
    s.sync_timeout(Some(Duration::from_secs(10))).await.expect("nobody acknowledged, and nobody had to");
}

#[tokio::test]
async fn callbacks_fire_in_stream_order_after_earlier_work() {
    let d = Daemon::start();
    let c = d.client().await;
    let mut reports = c.report_stream(0).await.unwrap();
    let s = subscribed(&c, 3).await;
    let first_done = c.device(0).create_event(EventOptions::default()).await.unwrap();
    s.delay(ms(60)).await.unwrap();
    s.record(&first_done).await.unwrap();
    let a = c.launch_callback(s.handle(), b"a".to_vec(), false).await.unwrap();
    s.delay(ms(60)).await.unwrap();
    let b = c.launch_callback(s.handle(), b"b".to_vec(), false).await.unwrap();
    let r1 = next_report(&mut reports).await;
    assert_eq!(callback(&r1).callback_id, a);
    assert_eq!(first_done.state().await.unwrap(), proto::EventState::Complete, "the work before it had finished");
    let r2 = next_report(&mut reports).await;
    assert_eq!(callback(&r2).callback_id, b);
    assert!(r2.sequence > r1.sequence);
}

#[tokio::test]
async fn an_unacknowledged_blocking_callback_fails_its_stream_at_the_deadline() {
    let d = Daemon::builder().config("[limits]\ncallback_deadline = \"300ms\"").start();
    let c = d.client().await;
    let mut reports = c.report_stream(0).await.unwrap();
    let s = subscribed(&c, 9).await;
    c.launch_callback(s.handle(), vec![1], true).await.unwrap();
    s.delay(ms(1)).await.unwrap();
    callback(&next_report(&mut reports).await);
    let r = next_report(&mut reports).await;
    let e = exception(&r);
    assert_eq!(
        (e.stream, e.device, e.thread_id, e.error_code),
        (s.handle(), 0, 9, 100036),
        "ACL_ERROR_WAIT_CALLBACK_TIMEOUT"
    );
    // The stream is freed (failed, not stuck): a sync returns with the failure.
    let (code, reason, _) = failure(s.sync_timeout(Some(Duration::from_secs(10))).await);
    assert_eq!((code, reason), (Code::FailedPrecondition, ErrorReason::StreamFailed));
    assert!(s.info().await.unwrap().failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_task_failure_reaches_only_the_owner() {
    if skipped_on_real_hardware("injected task failures") {
        return;
    }
    let d = Daemon::builder().tcp().start();
    let (owner, other) = (d.client().await, d.tcp_client().await);
    let mut mine = owner.report_stream(0).await.unwrap();
    let mut theirs = other.report_stream(0).await.unwrap();
    let _their_stream = subscribed(&other, 5).await;
    let s = subscribed(&owner, 42).await;
    for _ in 0..3 {
        s.delay(ms(20)).await.unwrap();
    }
    let fault = proto::InjectFaultRequest {
        device: 0,
        fault: Some(proto::inject_fault_request::Fault::FailTask(proto::FailTask {
            stream: s.handle(),
            task: 3,
            code: 507015,
        })),
    };
    owner.admin().inject_fault(fault).await.unwrap();
    if backend() == Backend::Cuda {
        // CUDA reports asynchronous errors at the next synchronisation, without a task id.
        assert!(s.sync().await.is_err());
    }
    let r = next_report(&mut mine).await;
    let e = exception(&r);
    let task = if backend() == Backend::Cuda { 0 } else { 3 };
    assert_eq!(
        (e.task_id, e.stream, e.device, e.thread_id, e.error_code),
        (task, s.handle(), 0, 42, native(507015, 719))
    );
    let leaked = tokio::time::timeout(ms(500), theirs.next()).await;
    assert!(leaked.is_err(), "another tenant saw {leaked:?}");
    // Fault injection is an admin call.
    let r = other
        .admin()
        .inject_fault(proto::InjectFaultRequest {
            device: 0,
            fault: Some(proto::inject_fault_request::Fault::FailNextCreations(1)),
        })
        .await;
    assert_eq!(r.unwrap_err().code(), Code::PermissionDenied);
}

#[tokio::test]
async fn failure_modes_continue_and_stop_are_honoured() {
    let d = Daemon::start();
    let c = d.client().await;
    let inject = |stream: u64| proto::InjectFaultRequest {
        device: 0,
        fault: Some(proto::inject_fault_request::Fault::FailTask(proto::FailTask { stream, task: 2, code: 507015 })),
    };
    if backend() == Backend::Cuda {
        // CUDA has no per-stream failure mode: the call says so.
        let s = c.device(0).create_stream(StreamOptions::default()).await.unwrap();
        let r = c.streams().set_failure_mode(proto::SetFailureModeRequest { stream: s.handle(), mode: 1 }).await;
        let (code, reason, _) = failure(r.map_err(npud_tests::Error::from));
        assert_eq!((code, reason), (Code::Unimplemented, ErrorReason::UnsupportedByBackend));
        return;
    }
    for (mode, later_runs) in [(proto::FailureMode::Continue, true), (proto::FailureMode::Stop, false)] {
        let s = c.device(0).create_stream(StreamOptions::default()).await.unwrap();
        c.streams()
            .set_failure_mode(proto::SetFailureModeRequest { stream: s.handle(), mode: mode as i32 })
            .await
            .unwrap();
        let r =
            c.streams().set_failure_mode(proto::SetFailureModeRequest { stream: s.handle(), mode: mode as i32 }).await;
        let e = r.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "once per stream");
        assert!(e.message().contains(&format!("stream {} was already set", s.handle())), "{e}");
        c.admin().inject_fault(inject(s.handle())).await.unwrap();
        let ev = c.device(0).create_event(EventOptions::default()).await.unwrap();
        s.delay(ms(30)).await.unwrap();
        s.delay(ms(1)).await.unwrap();
        s.record(&ev).await.unwrap();
        let _ = s.sync().await;
        let state = ev.state().await.unwrap();
        assert_eq!(
            state == proto::EventState::Complete,
            later_runs,
            "{mode:?}: the record after the failed task is {state:?}"
        );
    }
}

#[tokio::test]
async fn subscription_rules_follow_the_vendor() {
    let d = Daemon::start();
    let c = d.client().await;
    let s = c.device(0).create_stream(StreamOptions::default()).await.unwrap();
    let (code, reason, e) = failure(c.launch_callback(s.handle(), vec![], false).await);
    assert_eq!((code, reason, e.native_code()), (Code::FailedPrecondition, ErrorReason::StreamNotSubscribed, 107015));
    c.subscribe(1, s.handle()).await.unwrap();
    let (_, reason, e) = failure(c.subscribe(2, s.handle()).await);
    assert_eq!((reason, e.native_code()), (ErrorReason::StreamAlreadySubscribed, 107011));
    let (code, reason, _) = failure(c.launch_callback(s.handle(), vec![0; 64 * 1024 + 1], false).await);
    assert_eq!((code, reason), (Code::InvalidArgument, ErrorReason::PayloadTooLarge));
    c.launch_callback(s.handle(), vec![0; 64 * 1024], false).await.expect("64 KiB is allowed");
    let r = c
        .reports()
        .launch_callback(proto::LaunchCallbackRequest { stream: s.handle(), user_data: vec![], block_type: 2 })
        .await;
    assert_eq!(r.unwrap_err().code(), Code::InvalidArgument, "block types other than 0 and 1");
    c.unsubscribe(1, s.handle()).await.unwrap();
    let (_, _, e) = failure(c.launch_callback(s.handle(), vec![], false).await);
    assert_eq!(e.native_code(), 107015, "unsubscribed: no more delivery");
}

#[tokio::test]
async fn process_report_pulls_the_reports_of_one_thread() {
    let d = Daemon::start();
    let c = d.client().await;
    let (code, _, e) = failure(c.process_reports(7, ms(10), 10).await);
    assert_eq!((code, e.native_code()), (Code::FailedPrecondition, 107012), "no subscription for this thread");
    let s7 = subscribed(&c, 7).await;
    let s8 = subscribed(&c, 8).await;
    c.launch_callback(s8.handle(), b"eight".to_vec(), false).await.unwrap();
    c.launch_callback(s7.handle(), b"seven".to_vec(), false).await.unwrap();
    let got = c.process_reports(7, Duration::from_secs(5), 10).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(callback(&got[0]).user_data, b"seven");
    assert!(c.process_reports(7, ms(50), 10).await.unwrap().is_empty(), "taken once; an empty pull means timeout");
    assert_eq!(callback(&c.process_reports(8, Duration::from_secs(5), 10).await.unwrap()[0]).user_data, b"eight");
}

#[tokio::test]
async fn reports_survive_a_reconnect_of_the_report_stream() {
    let d = Daemon::start();
    let c = d.client().await;
    let s = subscribed(&c, 1).await;
    let mut reports = c.report_stream(0).await.unwrap();
    c.launch_callback(s.handle(), b"1".to_vec(), false).await.unwrap();
    let seen = next_report(&mut reports).await.sequence;
    drop(reports);
    c.launch_callback(s.handle(), b"2".to_vec(), false).await.unwrap();
    c.launch_callback(s.handle(), b"3".to_vec(), false).await.unwrap();
    s.sync().await.unwrap();
    let mut again = c.report_stream(seen).await.unwrap();
    assert_eq!(callback(&next_report(&mut again).await).user_data, b"2");
    assert_eq!(callback(&next_report(&mut again).await).user_data, b"3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_callbacks_on_sixteen_streams_arrive_once_in_stream_order() {
    const STREAMS: usize = 16;
    const PER_STREAM: usize = 625;
    let d = Daemon::start();
    let c = d.client().await;
    let mut reports = c.report_stream(0).await.unwrap();
    let mut streams = Vec::new();
    for i in 0..STREAMS {
        streams.push(subscribed(&c, i as u64).await);
    }
    let handles: Vec<u64> = streams.iter().map(|s| s.handle()).collect();
    let launchers: Vec<_> = handles
        .iter()
        .map(|&h| {
            let c = c.clone();
            tokio::spawn(async move {
                for n in 0..PER_STREAM as u32 {
                    c.launch_callback(h, n.to_le_bytes().to_vec(), false).await.unwrap();
                }
            })
        })
        .collect();
    let mut next: HashMap<u64, u32> = handles.iter().map(|&h| (h, 0)).collect();
    let mut total = 0;
    while total < STREAMS * PER_STREAM {
        let r = next_report(&mut reports).await;
        let cb = callback(&r);
        let n = u32::from_le_bytes(cb.user_data.as_slice().try_into().expect("4 bytes"));
        let expected = next.get_mut(&cb.stream).expect("one of our streams");
        assert_eq!(n, *expected, "stream {} out of order", cb.stream);
        *expected += 1;
        total += 1;
    }
    for l in launchers {
        l.await.unwrap();
    }
    assert!(next.values().all(|&n| n as usize == PER_STREAM));
    let extra = tokio::time::timeout(ms(300), reports.next()).await;
    assert!(extra.is_err(), "nothing delivered twice: {extra:?}");
}

/// Destroy does not forget enqueued work: a callback launched before the stream is
/// destroyed is delivered exactly once when the stream reaches it (cuStreamAddCallback:
/// "executed exactly once"; aclrtDestroyStream: the stream goes after its tasks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_enqueued_before_a_destroy_is_still_delivered_once() {
    let d = Daemon::start();
    let c = d.client().await;
    let mut reports = c.report_stream(0).await.unwrap();
    let s = subscribed(&c, 9).await;
    s.delay(ms(1500)).await.unwrap();
    let id = c.launch_callback(s.handle(), b"late".to_vec(), false).await.unwrap();
    drop(s); // destroyed at once, with its work still queued
    let r = next_report(&mut reports).await;
    let cb = callback(&r);
    assert_eq!((cb.callback_id, cb.user_data.as_slice()), (id, &b"late"[..]));
    let again = tokio::time::timeout(Duration::from_secs(2), reports.next()).await;
    assert!(again.is_err(), "delivered once, got {again:?}");
}

/// "For each cuStreamAddCallback call, the callback will be executed exactly once", with
/// the stream's error after a device error; AscendCL's default failure mode carries on
/// past a failed task. Either way a callback behind a failed task is delivered once.
#[tokio::test]
async fn a_callback_behind_a_failed_task_is_delivered_once() {
    if skipped_on_real_hardware("injected task failures") {
        return;
    }
    let d = Daemon::start();
    let c = d.client().await;
    let mut reports = c.report_stream(0).await.unwrap();
    let s = subscribed(&c, 7).await;
    s.delay(ms(20)).await.unwrap();
    s.delay(ms(20)).await.unwrap();
    let fault = proto::FailTask { stream: s.handle(), task: 2, code: 507015 };
    let fault =
        proto::InjectFaultRequest { device: 0, fault: Some(proto::inject_fault_request::Fault::FailTask(fault)) };
    c.admin().inject_fault(fault).await.unwrap();
    let id = c.launch_callback(s.handle(), b"after".to_vec(), false).await.unwrap();
    let mut delivered = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while delivered == 0 && tokio::time::Instant::now() < deadline {
        let r = next_report(&mut reports).await;
        if matches!(&r.kind, Some(proto::report::Kind::Callback(cb)) if cb.callback_id == id) {
            delivered += 1;
        }
    }
    assert_eq!(delivered, 1, "the callback behind the failed task arrived");
    // Anything else arriving now is not this callback again.
    while let Ok(Some(Ok(r))) = tokio::time::timeout(ms(300), reports.next()).await {
        assert!(!matches!(&r.kind, Some(proto::report::Kind::Callback(cb)) if cb.callback_id == id), "delivered twice");
    }
    assert!(s.sync().await.is_err(), "the stream's failure is still reported");
}

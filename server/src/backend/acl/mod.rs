//! The `acl` backend: AscendCL (libascendcl.so) through libloading.
//!
//! Layer 1 (`ffi`) is the raw C ABI; layer 2 (`result`) turns aclError codes into
//! `BackendError`s; layer 3 is `shared` (one context per device, made current on whichever
//! thread calls, the streams' report threads and the exception callback), `open` (loading)
//! and this file's `Backend` implementation.
//! Waits run on the blocking pool in bounded chunks, so an abandoned wait frees its
//! thread within a second. Timed work ("delay") exists only where the library offers it
//! (the test fake); real AscendCL answers UNSUPPORTED.

mod dcmi;
mod ffi;
mod open;
mod result;
mod shared;
mod soc;

pub use open::{candidates, default_library};

use super::{
    Backend, BackendError, BackendResult, DeviceDesc, ErrorKind, EventState, RawEvent, RawStream, ReportSink,
    StreamState, Wait, WaitKind,
};
use ffi::Acl;
use npud_proto::codes::acl;
use result::{check, event_error, forbid, unsupported};
use shared::{EventMeta, Shared};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

const EVENT_SYNC_FLAG: u32 = 0x1;
const EVENT_TIME_LINE: u32 = 0x8;

pub struct AclBackend {
    shared: Arc<Shared>,
    descs: Vec<DeviceDesc>,
    /// The NPUs' own fault codes, where DCMI loads.
    faults: Option<dcmi::Faults>,
}

impl Backend for AclBackend {
    fn name(&self) -> &'static str {
        "acl"
    }

    fn fault_signals(&self) -> Vec<(u32, crate::backend::FaultSignal)> {
        self.faults.as_ref().map(dcmi::Faults::read).unwrap_or_default()
    }

    fn devices(&self) -> &[DeviceDesc] {
        &self.descs
    }

    fn set_report_sink(&self, sink: ReportSink) {
        self.shared.sink.set(sink);
    }

    fn timeout_code(&self, kind: WaitKind) -> i64 {
        match kind {
            WaitKind::Stream | WaitKind::Device => i64::from(acl::RT_STREAM_SYNC_TIMEOUT),
            WaitKind::Event => i64::from(acl::RT_EVENT_SYNC_TIMEOUT),
        }
    }

    fn create_stream(&self, device: u32, priority: i32, flags: u32) -> BackendResult<RawStream> {
        let s = &self.shared;
        s.on(device)?;
        let mut stream = 0usize;
        let priority = u32::try_from(priority).map_err(|_| BackendError {
            kind: ErrorKind::InvalidArgument,
            native_code: i64::from(acl::INVALID_PARAM),
            message: format!("priority {priority} is negative"),
        })?;
        if s.lib.has("aclrtCreateStreamWithConfig") {
            check(s.lib.create_stream_with_config(&mut stream, priority, flags & 0x3f))?;
        } else {
            check(s.lib.create_stream(&mut stream))?;
        }
        let raw = RawStream(stream as u64);
        let mut id = -1i32;
        if s.lib.has("aclrtStreamGetId") && check(s.lib.stream_get_id(stream, &mut id)).is_ok() {
            s.books().stream_ids.insert((device, id), raw);
        }
        s.creations[device as usize].fetch_add(1, Ordering::Relaxed);
        Ok(raw)
    }

    fn destroy_stream(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        self.forget_stream(stream);
        self.shared.on(device)?;
        check(self.shared.lib.destroy_stream(stream.ptr()))
    }

    fn destroy_stream_force(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        self.forget_stream(stream);
        self.shared.on(device)?;
        check(self.shared.lib.destroy_stream_force(stream.ptr()))
    }

    fn stream_state(&self, device: u32, stream: RawStream) -> BackendResult<StreamState> {
        let done = self.stream_query(device, stream)?;
        let b = self.shared.books();
        Ok(StreamState {
            pending_tasks: u64::from(!done),
            failed: b.failed.contains(&stream),
            stop_on_failure: b.stop_on_failure.contains(&stream),
            failure_mode_set: b.failure_mode_set.contains(&stream),
        })
    }

    fn stream_query(&self, device: u32, stream: RawStream) -> BackendResult<bool> {
        self.shared.on(device)?;
        let mut status = 1u32;
        check(self.shared.lib.stream_query(stream.ptr(), &mut status))?;
        Ok(status == 0)
    }

    fn stream_drained(&self, device: u32, stream: RawStream) -> Wait {
        let shared = Arc::clone(&self.shared);
        let wait = self.blocking_wait(
            device,
            move |s| s.lib.synchronize_stream_with_timeout(stream.ptr(), 1000),
            i64::from(acl::RT_STREAM_SYNC_TIMEOUT),
        );
        Box::pin(async move {
            let result = wait.await;
            // The sync itself may be the first to hear of a failed task (the exception report
            // can arrive after it): an execution error (5xxxxx, not the sync's own timeout) is
            // that failure, on this very call.
            if let Err(e) = &result
                && e.native_code >= 500_000
                && e.kind != ErrorKind::Timeout
            {
                shared.books().failed.insert(stream);
            }
            if !shared.books().failed.contains(&stream) {
                return result;
            }
            // A failed task (or a blocking callback failed at its deadline) fails the stream.
            Err(match result {
                Err(mut e) => {
                    e.kind = ErrorKind::TaskFailed;
                    e
                }
                Ok(()) => BackendError {
                    kind: ErrorKind::TaskFailed,
                    native_code: i64::from(acl::RT_AICORE_EXCEPTION),
                    message: "a task on the stream failed".into(),
                },
            })
        })
    }

    fn stream_wait_event(&self, device: u32, stream: RawStream, event: RawEvent) -> BackendResult<()> {
        let meta = self.shared.books().events.get(&event).copied();
        if let Some(m) = meta {
            if m.flags & EVENT_SYNC_FLAG == 0 {
                return Err(forbid("waited on by a stream"));
            }
            if !m.recorded {
                return Ok(());
            }
        }
        self.shared.on(device)?;
        check(self.shared.lib.stream_wait_event(stream.ptr(), event.ptr()))
    }

    fn enqueue_delay(&self, device: u32, stream: RawStream, duration: Duration) -> BackendResult<u64> {
        if !self.shared.lib.has("npudFakeLaunchDelay") {
            return Err(unsupported("timed work (delay)"));
        }
        self.shared.on(device)?;
        let mut task = 0u64;
        check(self.shared.lib.fake_launch_delay(stream.ptr(), duration.as_micros() as u64, &mut task))?;
        Ok(task)
    }

    fn set_stop_on_failure(&self, device: u32, stream: RawStream, stop: bool) -> BackendResult<()> {
        if !self.shared.books().failure_mode_set.insert(stream) {
            return Err(BackendError {
                kind: ErrorKind::FailureModeAlreadySet,
                native_code: i64::from(acl::RT_PARAM_INVALID),
                message: "the failure mode of this stream was already set".into(),
            });
        }
        self.shared.on(device)?;
        check(self.shared.lib.set_stream_failure_mode(stream.ptr(), u64::from(stop)))?;
        if stop {
            self.shared.books().stop_on_failure.insert(stream);
        }
        Ok(())
    }

    fn create_event(&self, device: u32, flags: u32, timing: bool) -> BackendResult<RawEvent> {
        self.shared.on(device)?;
        let flags = if timing { flags | EVENT_TIME_LINE } else { flags & !EVENT_TIME_LINE };
        let mut event = 0usize;
        check(self.shared.lib.create_event_with_flag(&mut event, flags))?;
        self.shared
            .books()
            .events
            .insert(RawEvent(event as u64), EventMeta { flags, timing, recorded: false, reset_on: None });
        Ok(RawEvent(event as u64))
    }

    fn destroy_event(&self, device: u32, event: RawEvent) -> BackendResult<()> {
        self.shared.books().events.remove(&event);
        self.shared.on(device)?;
        check(self.shared.lib.destroy_event(event.ptr()))
    }

    fn record_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()> {
        self.shared.on(device)?;
        check(self.shared.lib.record_event(event.ptr(), stream.ptr()))?;
        if let Some(m) = self.shared.books().events.get_mut(&event) {
            m.recorded = true;
            m.reset_on = None;
        }
        Ok(())
    }

    fn reset_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()> {
        if self.shared.books().events.get(&event).is_some_and(|m| m.flags & EVENT_SYNC_FLAG == 0) {
            return Err(forbid("reset"));
        }
        self.shared.on(device)?;
        check(self.shared.lib.reset_event(event.ptr(), stream.ptr()))?;
        if let Some(m) = self.shared.books().events.get_mut(&event)
            && m.recorded
        {
            m.reset_on = Some(stream);
        }
        Ok(())
    }

    fn event_state(&self, device: u32, event: RawEvent) -> BackendResult<EventState> {
        self.shared.on(device)?;
        let mut status = 0u32;
        check(self.shared.lib.query_event_status(event.ptr(), &mut status))?;
        self.settle_reset(device, event);
        let recorded = self.shared.books().events.get(&event).is_none_or(|m| m.recorded);
        Ok(match (status, recorded) {
            (1, _) => EventState::Complete,
            (_, true) => EventState::Pending,
            (_, false) => EventState::NotRecorded,
        })
    }

    fn event_complete(&self, device: u32, event: RawEvent) -> Wait {
        self.settle_reset(device, event);
        if self.shared.books().events.get(&event).is_some_and(|m| !m.recorded) {
            return Box::pin(async { Ok(()) });
        }
        self.blocking_wait(
            device,
            move |s| s.lib.synchronize_event_with_timeout(event.ptr(), 1000),
            i64::from(acl::RT_EVENT_SYNC_TIMEOUT),
        )
    }

    fn elapsed_ms(&self, device: u32, start: RawEvent, end: RawEvent) -> BackendResult<f32> {
        for e in [start, end] {
            if let Some(m) = self.shared.books().events.get(&e).copied() {
                if !m.timing {
                    return Err(event_error(ErrorKind::EventNotTimed, "an event was created without timing"));
                }
                if !m.recorded {
                    return Err(event_error(ErrorKind::EventNotRecorded, "an event has not been recorded"));
                }
            }
        }
        self.shared.on(device)?;
        let mut ms = 0f32;
        check(self.shared.lib.event_elapsed_time(&mut ms, start.ptr(), end.ptr())).map_err(|mut e| {
            if e.native_code == i64::from(acl::RT_EVENT_NOT_COMPLETE) {
                e.kind = ErrorKind::EventNotComplete;
            }
            e
        })?;
        Ok(ms)
    }

    fn launch_callback(&self, device: u32, stream: RawStream, callback: u64, blocking: bool) -> BackendResult<u64> {
        self.ensure_report_thread(device, stream)?;
        let shared = Arc::downgrade(&self.shared);
        let thunk: ffi::Thunk = Box::new(move || {
            if let Some(s) = shared.upgrade() {
                s.callbacks.fire(&s.sink, device, stream, callback, blocking);
            }
        });
        let user_data = ffi::UserData::new(thunk);
        self.shared.on(device)?;
        check(self.shared.lib.launch_callback(
            ffi::callback_trampoline,
            user_data.raw(),
            u32::from(blocking),
            stream.ptr(),
        ))?;
        user_data.launched();
        Ok(0)
    }

    fn ack_callback(&self, _device: u32, _stream: RawStream, callback: u64) -> BackendResult<bool> {
        Ok(self.shared.callbacks.ack(callback))
    }

    fn fail_callback(&self, device: u32, stream: RawStream, callback: u64, code: i64) -> bool {
        let released = self.shared.callbacks.fail(&self.shared.sink, device, stream, callback, code);
        if released {
            self.shared.books().failed.insert(stream);
        }
        released
    }

    fn available_streams(&self, device: u32) -> BackendResult<u32> {
        self.shared.on(device)?;
        let mut n = 0u32;
        check(self.shared.lib.get_stream_available_num(&mut n))?;
        Ok(n)
    }

    fn reports_device_free(&self) -> bool {
        true
    }

    fn device_free(&self, device: u32) -> Option<BackendResult<u32>> {
        Some(self.available_streams(device))
    }

    fn hardware_creations(&self, device: u32) -> u64 {
        self.shared.creations.get(device as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// `/dev/davinci<N>`, N the device's physical id (the driver's naming); the fake
    /// library names its own nodes (`npudFakeDeviceNode`).
    fn device_node(&self, device: u32) -> Option<std::path::PathBuf> {
        let physical = self.descs.get(device as usize)?.identity.physical_id?;
        self.shared.lib.fake_device_node(physical).or_else(|| Some(format!("/dev/davinci{physical}").into()))
    }

    fn heartbeat(&self, device: u32) -> Wait {
        let shared = Arc::clone(&self.shared);
        super::abandonable_wait(move |_| {
            shared.on(device)?;
            let mut n = 0u32;
            check(shared.lib.get_stream_available_num(&mut n))
        })
    }

    fn hardware_in_use(&self, device: u32) -> u32 {
        let mut n = 0u32;
        if self.shared.lib.has("npudFakeStreamsInUse")
            && check(self.shared.lib.fake_streams_in_use(device as i32, &mut n)).is_ok()
        {
            return n;
        }
        let limit = self.descs.get(device as usize).map_or(0, |d| d.hardware_limit);
        self.available_streams(device).map_or(0, |a| limit.saturating_sub(a))
    }

    fn set_stalled(&self, device: u32, stalled: bool) -> BackendResult<()> {
        self.fake("npudFakeStall", |lib| lib.fake_stall(device as i32, u32::from(stalled)))
    }

    fn fail_next_creations(&self, device: u32, count: u32) -> BackendResult<()> {
        self.fake("npudFakeFailNextCreations", |lib| lib.fake_fail_next_creations(device as i32, count))
    }

    fn fail_task(&self, device: u32, stream: RawStream, task: u64, code: i64) -> BackendResult<()> {
        self.shared.on(device)?;
        let code = i32::try_from(code).map_err(|_| unsupported("an error code beyond 32 bits"))?;
        self.fake("npudFakeFailTask", |lib| lib.fake_fail_task(stream.ptr(), task, code))
    }
}

//! The `cuda` backend: the CUDA driver (libcuda.so.1) through libloading.
//!
//! Layer 1 (`ffi`) is the raw C ABI; layer 2 (`result`) maps CUresults to `BackendError`s;
//! layer 3 is `shared` (the primary context of each device, made current on whichever
//! thread calls), `open` (loading) and this file's `Backend` implementation. CUDA has
//! no fixed stream limit: the budget is a configured number per device. Waits record a
//! private event at call time and poll it on the blocking pool, so a sync waits for
//! exactly the work enqueued before it. Delay work is a PTX kernel that spins on
//! `%globaltimer`. Host callbacks use cuLaunchHostFunc, which holds the stream until the
//! function returns: a BLOCK callback returns when the client acknowledges it.

mod devices;
mod ffi;
mod nvml;
mod open;
mod result;
mod shared;
mod spin;

pub use open::{candidates, default_library};

use super::{
    Backend, BackendError, BackendResult, DeviceDesc, ErrorKind, EventState, RawEvent, RawStream, Report, ReportSink,
    StreamState, Wait, WaitKind,
};
use ffi::{CuResult, Cuda};
use npud_proto::codes::cuda::{INVALID_HANDLE, LAUNCH_FAILED, NOT_READY, TIMEOUT};
use result::{check, unsupported};
use shared::{EventMeta, Shared};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

const NON_BLOCKING: u32 = 1;
const DISABLE_TIMING: u32 = 2;
const NPUD_NON_BLOCKING: u32 = 0x100;

pub struct CudaBackend {
    shared: Arc<Shared>,
    descs: Vec<DeviceDesc>,
    /// The GPUs' critical XID events, where NVML loads.
    xids: Option<nvml::XidWatch>,
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn devices(&self) -> &[DeviceDesc] {
        &self.descs
    }

    fn fault_signals(&self) -> Vec<(u32, super::FaultSignal)> {
        self.xids.as_ref().map(nvml::XidWatch::read).unwrap_or_default()
    }

    fn set_report_sink(&self, sink: ReportSink) {
        self.shared.sink.set(sink);
    }

    fn timeout_code(&self, _: WaitKind) -> i64 {
        i64::from(TIMEOUT)
    }

    fn create_stream(&self, device: u32, priority: i32, flags: u32) -> BackendResult<RawStream> {
        let _ctx = self.shared.on(device)?;
        let cu_flags = if flags & NPUD_NON_BLOCKING != 0 { NON_BLOCKING } else { 0 };
        let mut s = 0usize;
        check(self.shared.lib.stream_create_with_priority(&mut s, cu_flags, priority))?;
        self.shared.streams[device as usize].fetch_add(1, Ordering::Relaxed);
        self.shared.creations[device as usize].fetch_add(1, Ordering::Relaxed);
        Ok(RawStream(s as u64))
    }

    fn destroy_stream(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        let ctx = self.shared.on(device)?;
        check(self.shared.lib.stream_destroy(stream.ptr()))?;
        self.shared.streams[device as usize].fetch_sub(1, Ordering::Relaxed);
        self.shared.books().failed.remove(&stream);
        drop(ctx);
        self.shared.release_if_idle(device);
        Ok(())
    }

    /// CUDA has no forced destroy: cuStreamDestroy already returns at once.
    fn destroy_stream_force(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        self.destroy_stream(device, stream)
    }

    fn stream_state(&self, device: u32, stream: RawStream) -> BackendResult<StreamState> {
        let done = self
            .stream_query(device, stream)
            .or_else(|e| if e.kind == ErrorKind::TaskFailed { Ok(true) } else { Err(e) })?;
        Ok(StreamState {
            pending_tasks: u64::from(!done),
            failed: self.shared.books().failed.contains(&stream),
            stop_on_failure: false,
            failure_mode_set: false,
        })
    }

    fn stream_query(&self, device: u32, stream: RawStream) -> BackendResult<bool> {
        let _ctx = self.shared.on(device)?;
        match self.shared.lib.stream_query(stream.ptr()) {
            Ok(NOT_READY) => Ok(false),
            rc => check(rc).map(|()| true),
        }
    }

    fn stream_drained(&self, device: u32, stream: RawStream) -> Wait {
        let shared = Arc::clone(&self.shared);
        super::abandonable_wait(move |abandoned| {
            let _ctx = shared.on(device)?;
            // A private event marks "everything enqueued so far".
            let mut marker = 0usize;
            check(shared.lib.event_create(&mut marker, DISABLE_TIMING))?;
            let recorded = check(shared.lib.event_record(marker, stream.ptr()));
            let done = recorded.and_then(|()| shared.poll(abandoned, || shared.lib.event_query(marker)));
            let _ = shared.lib.event_destroy(marker);
            // CUDA reports a failed task through the next call on the stream.
            let done = done.and_then(|()| match shared.lib.stream_query(stream.ptr()) {
                Ok(NOT_READY) => Ok(()),
                rc => check(rc),
            });
            match done {
                Err(e) if e.kind == ErrorKind::TaskFailed => {
                    shared.books().failed.insert(stream);
                    shared.emit(Report::Exception { device, stream, task: 0, code: e.native_code });
                    Err(e)
                }
                Ok(()) if shared.books().failed.contains(&stream) => Err(BackendError {
                    kind: ErrorKind::TaskFailed,
                    native_code: i64::from(LAUNCH_FAILED),
                    message: "a task on the stream failed".into(),
                }),
                other => other,
            }
        })
    }

    fn waits_across_devices(&self) -> bool {
        true
    }

    fn stream_wait_event(&self, device: u32, stream: RawStream, event: RawEvent) -> BackendResult<()> {
        // The stream's context is current; the event may be another device's.
        let _ctx = self.shared.on(device)?;
        check(self.shared.lib.stream_wait_event(stream.ptr(), event.ptr()))
    }

    fn enqueue_delay(&self, device: u32, stream: RawStream, duration: Duration) -> BackendResult<u64> {
        let _ctx = self.shared.on(device)?;
        let f = self.spin_kernel(device)?;
        check(self.shared.lib.launch_kernel_u64(f, stream.ptr(), duration.as_nanos() as u64))?;
        Ok(0)
    }

    fn set_stop_on_failure(&self, _: u32, _: RawStream, _: bool) -> BackendResult<()> {
        Err(unsupported("a per-stream failure mode"))
    }

    fn create_event(&self, device: u32, _flags: u32, timing: bool) -> BackendResult<RawEvent> {
        let _ctx = self.shared.on(device)?;
        let mut e = 0usize;
        check(self.shared.lib.event_create(&mut e, if timing { 0 } else { DISABLE_TIMING }))?;
        self.shared.events[device as usize].fetch_add(1, Ordering::Relaxed);
        self.shared.books().events.insert(RawEvent(e as u64), EventMeta { timing, recorded: false });
        Ok(RawEvent(e as u64))
    }

    fn destroy_event(&self, device: u32, event: RawEvent) -> BackendResult<()> {
        self.shared.books().events.remove(&event);
        let ctx = self.shared.on(device)?;
        check(self.shared.lib.event_destroy(event.ptr()))?;
        self.shared.events[device as usize].fetch_sub(1, Ordering::Relaxed);
        drop(ctx);
        self.shared.release_if_idle(device);
        Ok(())
    }

    fn record_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()> {
        let _ctx = self.shared.on(device)?;
        check(self.shared.lib.event_record(event.ptr(), stream.ptr()))?;
        if let Some(m) = self.shared.books().events.get_mut(&event) {
            m.recorded = true;
        }
        Ok(())
    }

    fn reset_event(&self, _: u32, _: RawEvent, _: RawStream) -> BackendResult<()> {
        Err(unsupported("event reset (an AscendCL call)"))
    }

    fn event_state(&self, device: u32, event: RawEvent) -> BackendResult<EventState> {
        let _ctx = self.shared.on(device)?;
        let recorded = self.shared.books().events.get(&event).is_none_or(|m| m.recorded);
        match self.shared.lib.event_query(event.ptr()) {
            Ok(NOT_READY) => Ok(EventState::Pending),
            rc => check(rc).map(|()| if recorded { EventState::Complete } else { EventState::NotRecorded }),
        }
    }

    fn event_complete(&self, device: u32, event: RawEvent) -> Wait {
        let shared = Arc::clone(&self.shared);
        super::abandonable_wait(move |abandoned| {
            let _ctx = shared.on(device)?;
            shared.poll(abandoned, || shared.lib.event_query(event.ptr()))
        })
    }

    fn elapsed_ms(&self, device: u32, start: RawEvent, end: RawEvent) -> BackendResult<f32> {
        let _ctx = self.shared.on(device)?;
        let mut ms = 0f32;
        check(self.shared.lib.event_elapsed_time(&mut ms, start.ptr(), end.ptr())).map_err(|mut e| {
            if e.native_code == i64::from(INVALID_HANDLE) {
                let b = self.shared.books();
                let metas = [b.events.get(&start).copied(), b.events.get(&end).copied()];
                if metas.iter().flatten().any(|m| !m.timing) {
                    e.kind = ErrorKind::EventNotTimed;
                } else if metas.iter().flatten().any(|m| !m.recorded) {
                    e.kind = ErrorKind::EventNotRecorded;
                }
            }
            e
        })?;
        Ok(ms)
    }

    /// cuStreamAddCallback where the driver has it: "the callback will be executed
    /// exactly once", with the stream's error status after a device error, so a callback
    /// is delivered even then and the stream is booked as failed. cuLaunchHostFunc (the
    /// fallback) skips its function after a device error.
    fn launch_callback(&self, device: u32, stream: RawStream, callback: u64, blocking: bool) -> BackendResult<u64> {
        let shared = Arc::downgrade(&self.shared);
        let fire = move |status: CuResult| {
            if let Some(s) = shared.upgrade() {
                if status != 0 {
                    s.books().failed.insert(stream);
                }
                s.callbacks.fire(&s.sink, device, stream, callback, blocking);
            }
        };
        let _ctx = self.shared.on(device)?;
        if self.shared.lib.has("cuStreamAddCallback") {
            let thunk: ffi::StatusThunk = Box::new(fire);
            let user_data = ffi::UserData::new(thunk);
            let s = stream.ptr();
            check(self.shared.lib.stream_add_callback(s, ffi::stream_callback_trampoline, user_data.raw()))?;
            user_data.launched();
        } else {
            let thunk: ffi::Thunk = Box::new(move || fire(0));
            let user_data = ffi::UserData::new(thunk);
            check(self.shared.lib.launch_host_func(stream.ptr(), ffi::callback_trampoline, user_data.raw()))?;
            user_data.launched();
        }
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
        let limit = self.descs.get(device as usize).map_or(0, |d| d.hardware_limit);
        Ok(limit.saturating_sub(self.hardware_in_use(device)))
    }

    fn hardware_creations(&self, device: u32) -> u64 {
        self.shared.creations.get(device as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The driver answers (cuDeviceGetCount needs no context); where npud holds the
    /// device's context, in it. A probe never opens a context.
    fn heartbeat(&self, device: u32) -> Wait {
        let shared = Arc::clone(&self.shared);
        super::abandonable_wait(move |_| {
            let _ctx = match shared.context_open(device) {
                true => Some(shared.on(device)?),
                false => None,
            };
            let mut n = 0i32;
            check(shared.lib.device_get_count(&mut n))
        })
    }

    fn hardware_in_use(&self, device: u32) -> u32 {
        let mut n = 0u32;
        if self.shared.lib.has("npudFakeStreamsInUse")
            && check(self.shared.lib.fake_streams_in_use(device as i32, &mut n)).is_ok()
        {
            return n;
        }
        self.shared.streams.get(device as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn set_stalled(&self, device: u32, stalled: bool) -> BackendResult<()> {
        if !self.shared.lib.has("npudFakeStall") {
            return Err(unsupported("fault injection"));
        }
        check(self.shared.lib.fake_stall(device as i32, u32::from(stalled)))
    }

    fn fail_next_creations(&self, _: u32, _: u32) -> BackendResult<()> {
        Err(unsupported("fault injection of creations"))
    }

    fn fail_task(&self, device: u32, stream: RawStream, task: u64, code: i64) -> BackendResult<()> {
        if !self.shared.lib.has("npudFakeFailTask") {
            return Err(unsupported("fault injection"));
        }
        let _ctx = self.shared.on(device)?;
        let code = i32::try_from(code).map_err(|_| unsupported("an error code beyond 32 bits"))?;
        check(self.shared.lib.fake_fail_task(stream.ptr(), task, code))
    }
}

//! The `acl` backend: AscendCL (libascendcl.so) through libloading.
//!
//! Layer 1 (`ffi`) is the raw C ABI. This file is layers 2 and 3: aclError codes become
//! `BackendError`s, and the backend owns one context per device (made current on
//! whichever thread calls), the streams' report threads and the exception callback.
//! Waits run on the blocking pool in bounded chunks, so an abandoned wait frees its
//! thread within a second. Timed work ("delay") exists only where the library offers it
//! (the test fake); real AscendCL answers UNSUPPORTED.

mod ffi;
mod soc;

use super::{
    Backend, BackendError, BackendResult, DeviceDesc, ErrorKind, EventState, RawEvent, RawStream, Report, ReportSink,
    StreamState, Wait, WaitKind,
};
use ffi::{Acl, Lib, LoadError};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

const SYNC_TIMEOUT: i64 = 507046;
const EVENT_SYNC_TIMEOUT: i64 = 507047;
const REPORT_TIMEOUT: i32 = 507012;
const EVENT_SYNC_FLAG: u32 = 0x1;
const EVENT_TIME_LINE: u32 = 0x8;

/// Where CANN installs the library, then the loader's search path.
pub fn default_library() -> PathBuf {
    std::env::var_os("ASCEND_HOME_PATH")
        .map(|home| PathBuf::from(home).join("lib64/libascendcl.so"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("libascendcl.so"))
}

#[derive(Debug, Clone, Copy)]
struct EventMeta {
    flags: u32,
    timing: bool,
    recorded: bool,
    /// A reset enqueued on this stream that the stream may not have reached yet: until it
    /// does, the record before it still counts (aclrtResetEvent takes effect in stream
    /// order), so waits and syncs go to the runtime instead of returning at once.
    reset_on: Option<RawStream>,
}

struct ReportThread {
    stop: Arc<AtomicBool>,
}

#[derive(Default)]
struct Books {
    /// (device, AscendCL stream id) -> stream, to attribute exceptions.
    stream_ids: HashMap<(u32, i32), RawStream>,
    failed: HashSet<RawStream>,
    stop_on_failure: HashSet<RawStream>,
    failure_mode_set: HashSet<RawStream>,
    events: HashMap<RawEvent, EventMeta>,
    report_threads: HashMap<RawStream, ReportThread>,
}

struct Shared {
    lib: Lib,
    contexts: Vec<usize>,
    books: Mutex<Books>,
    sink: super::SinkSlot,
    callbacks: super::CallbackGate,
    creations: Vec<AtomicU64>,
}

pub struct AclBackend {
    shared: Arc<Shared>,
    descs: Vec<DeviceDesc>,
}

fn load_error(e: LoadError) -> BackendError {
    BackendError { kind: ErrorKind::Unsupported, native_code: 0, message: e.to_string() }
}

/// aclError -> BackendError.
fn check(rc: Result<i32, LoadError>) -> BackendResult<()> {
    let rc = rc.map_err(load_error)?;
    if rc == 0 {
        return Ok(());
    }
    let kind = match rc {
        100000 | 107000 | 107001 | 107002 | 200002 => ErrorKind::InvalidArgument,
        107017 | 200005 => ErrorKind::InvalidHandle,
        207005 | 207008 => ErrorKind::StreamBudget,
        207007 => ErrorKind::EventBudget,
        507006 => ErrorKind::EventNotComplete,
        507046 | 507047 => ErrorKind::Timeout,
        200001 | 200006 | 207000 => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    };
    Err(BackendError { kind, native_code: i64::from(rc), message: format!("AscendCL returned {rc}") })
}

fn unsupported(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::Unsupported,
        native_code: 200001,
        message: format!("{what} is not available with this AscendCL library"),
    }
}

impl Shared {
    fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the device's context current on this thread (AscendCL contexts are per thread).
    fn on(&self, device: u32) -> BackendResult<()> {
        let ctx = *self.contexts.get(device as usize).ok_or_else(|| BackendError {
            kind: ErrorKind::InvalidArgument,
            native_code: 107001,
            message: format!("no device {device}"),
        })?;
        check(self.lib.set_current_context(ctx))
    }

    fn emit(&self, report: Report) {
        self.sink.emit(report);
    }

    /// Exception callback: attribute to the stream by its AscendCL id, tell the daemon.
    fn on_exception(&self, info: usize) {
        let field = |g: &'static str| self.lib.exception_field(g, info).unwrap_or(u32::MAX);
        let device = field("aclrtGetDeviceIdFromExceptionInfo");
        let stream_id = field("aclrtGetStreamIdFromExceptionInfo") as i32;
        let task = field("aclrtGetTaskIdFromExceptionInfo");
        let code = field("aclrtGetErrorCodeFromExceptionInfo");
        let stream = {
            let mut b = self.books();
            let s = b.stream_ids.get(&(device, stream_id)).copied();
            if let Some(s) = s {
                b.failed.insert(s);
            }
            s
        };
        match stream {
            Some(stream) => {
                self.emit(Report::Exception { device, stream, task: u64::from(task), code: i64::from(code) })
            }
            None => tracing::warn!(device, stream_id, task, code, "exception on a stream npud cannot attribute"),
        }
    }
}

impl AclBackend {
    /// Loads the library, initialises AscendCL and opens every device with a context.
    pub fn open(path: &Path) -> Result<AclBackend, String> {
        let lib = Lib::open(path).map_err(|e| e.to_string())?;
        let rc = lib.init().map_err(|e| e.to_string())?;
        if rc != 0 && rc != 100002 {
            return Err(format!("aclInit failed with {rc}"));
        }
        let mut count = 0u32;
        check(lib.get_device_count(&mut count)).map_err(|e| e.message)?;
        if count == 0 {
            return Err("AscendCL reports no devices".into());
        }
        let soc = lib.soc_name();
        let known = soc.as_deref().and_then(soc::limits);
        if known.is_none() {
            tracing::warn!(?soc, "unknown SoC: each device is sized from the streams free at npud's start");
        }
        let mut contexts = Vec::new();
        let mut descs = Vec::new();
        for id in 0..count {
            check(lib.set_device(id as i32)).map_err(|e| format!("aclrtSetDevice({id}): {}", e.message))?;
            let mut ctx = 0usize;
            check(lib.create_context(&mut ctx, id as i32))
                .map_err(|e| format!("aclrtCreateContext({id}): {}", e.message))?;
            check(lib.set_current_context(ctx)).map_err(|e| e.message)?;
            let mut available = 0u32;
            check(lib.get_stream_available_num(&mut available))
                .map_err(|e| format!("aclrtGetStreamAvailableNum: {}", e.message))?;
            let mut held = 2u32;
            if lib.has("npudFakeStreamsInUse") {
                let _ = lib.fake_streams_in_use(id as i32, &mut held);
            }
            // The product's total, when known: what is free now misses other processes'
            // streams, which interposed processes declare once they reconnect.
            let (hardware_limit, event_limit) = known.unwrap_or((available + held, 65535));
            let elsewhere = hardware_limit.saturating_sub(available + held);
            if elsewhere > 0 {
                tracing::warn!(
                    device = id,
                    streams = elsewhere,
                    "other processes hold streams on the device; interposed ones declare theirs when they reconnect"
                );
            }
            contexts.push(ctx);
            descs.push(DeviceDesc {
                id,
                name: format!("ascend{id}"),
                profile: soc.clone().unwrap_or_else(|| "ascendcl".into()),
                hardware_limit,
                runtime_streams: held,
                event_limit,
                priority_highest: 0,
                priority_lowest: 7,
            });
        }
        let shared = Arc::new(Shared {
            lib,
            contexts,
            books: Mutex::new(Books::default()),
            sink: super::SinkSlot::default(),
            callbacks: super::CallbackGate::default(),
            creations: (0..count).map(|_| AtomicU64::new(0)).collect(),
        });
        let weak = Arc::downgrade(&shared);
        if ffi::set_exception_handler(Box::new(move |info| {
            if let Some(s) = weak.upgrade() {
                s.on_exception(info);
            }
        })) {
            check(shared.lib.set_exception_info_callback(ffi::exception_trampoline)).map_err(|e| e.message)?;
        }
        tracing::info!(library = %shared.lib.path().display(), devices = count, "AscendCL opened");
        Ok(AclBackend { shared, descs })
    }

    /// A wait on the blocking pool, in one-second slices so a wait nobody awaits any more
    /// gives its thread back soon.
    fn blocking_wait(
        &self,
        device: u32,
        call: impl Fn(&Shared) -> Result<i32, LoadError> + Send + 'static,
        expired: i64,
    ) -> Wait {
        let shared = Arc::clone(&self.shared);
        super::abandonable_wait(move |abandoned| {
            shared.on(device)?;
            loop {
                match call(&shared) {
                    Ok(rc) if i64::from(rc) == expired && !abandoned.load(Ordering::Relaxed) => continue,
                    rc => return check(rc),
                }
            }
        })
    }

    /// Starts the thread that processes a stream's callbacks (AscendCL runs them in the
    /// thread subscribed to the stream). One per stream, so a blocking callback waiting
    /// for its client holds only its own stream.
    fn ensure_report_thread(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        if self.shared.books().report_threads.contains_key(&stream) {
            return Ok(());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let shared = Arc::clone(&self.shared);
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name(format!("acl-report-{device}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                let tid = ffi::current_thread_id();
                let subscribed =
                    shared.on(device).and_then(|()| check(shared.lib.subscribe_report(tid, stream as usize)));
                let ok = subscribed.is_ok();
                let _ = ready_tx.send(subscribed);
                if !ok {
                    return;
                }
                while !flag.load(Ordering::Relaxed) {
                    match shared.lib.process_report(100) {
                        Ok(0) | Ok(REPORT_TIMEOUT) => {}
                        Ok(rc) => {
                            tracing::warn!(device, rc, "aclrtProcessReport failed");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(_) => return,
                    }
                }
                let _ = shared.lib.unsubscribe_report(tid, stream as usize);
            })
            .map_err(|e| BackendError {
                kind: ErrorKind::Other,
                native_code: 0,
                message: format!("report thread: {e}"),
            })?;
        ready_rx.recv().map_err(|_| BackendError {
            kind: ErrorKind::Other,
            native_code: 0,
            message: "report thread died".into(),
        })??;
        self.shared.books().report_threads.insert(stream, ReportThread { stop });
        Ok(())
    }

    fn fake<T>(&self, symbol: &'static str, call: impl FnOnce(&Lib) -> Result<i32, LoadError>) -> BackendResult<T>
    where
        T: Default,
    {
        if !self.shared.lib.has(symbol) {
            return Err(unsupported("fault injection"));
        }
        check(call(&self.shared.lib)).map(|()| T::default())
    }
}

impl Backend for AclBackend {
    fn name(&self) -> &'static str {
        "acl"
    }

    fn devices(&self) -> &[DeviceDesc] {
        &self.descs
    }

    fn set_report_sink(&self, sink: ReportSink) {
        self.shared.sink.set(sink);
    }

    fn timeout_code(&self, kind: WaitKind) -> i64 {
        match kind {
            WaitKind::Stream | WaitKind::Device => SYNC_TIMEOUT,
            WaitKind::Event => EVENT_SYNC_TIMEOUT,
        }
    }

    fn create_stream(&self, device: u32, priority: i32, flags: u32) -> BackendResult<RawStream> {
        let s = &self.shared;
        s.on(device)?;
        let mut stream = 0usize;
        let priority = u32::try_from(priority).map_err(|_| BackendError {
            kind: ErrorKind::InvalidArgument,
            native_code: 100000,
            message: format!("priority {priority} is negative"),
        })?;
        if s.lib.has("aclrtCreateStreamWithConfig") {
            check(s.lib.create_stream_with_config(&mut stream, priority, flags & 0x3f))?;
        } else {
            check(s.lib.create_stream(&mut stream))?;
        }
        let raw = stream as RawStream;
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
        check(self.shared.lib.destroy_stream(stream as usize))
    }

    fn destroy_stream_force(&self, device: u32, stream: RawStream) -> BackendResult<()> {
        self.forget_stream(stream);
        self.shared.on(device)?;
        check(self.shared.lib.destroy_stream_force(stream as usize))
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
        check(self.shared.lib.stream_query(stream as usize, &mut status))?;
        Ok(status == 0)
    }

    fn stream_drained(&self, device: u32, stream: RawStream) -> Wait {
        let shared = Arc::clone(&self.shared);
        let wait = self.blocking_wait(
            device,
            move |s| s.lib.synchronize_stream_with_timeout(stream as usize, 1000),
            SYNC_TIMEOUT,
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
                    native_code: 507015,
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
        check(self.shared.lib.stream_wait_event(stream as usize, event as usize))
    }

    fn enqueue_delay(&self, device: u32, stream: RawStream, duration: Duration) -> BackendResult<u64> {
        if !self.shared.lib.has("npudFakeLaunchDelay") {
            return Err(unsupported("timed work (delay)"));
        }
        self.shared.on(device)?;
        let mut task = 0u64;
        check(self.shared.lib.fake_launch_delay(stream as usize, duration.as_micros() as u64, &mut task))?;
        Ok(task)
    }

    fn set_stop_on_failure(&self, device: u32, stream: RawStream, stop: bool) -> BackendResult<()> {
        if !self.shared.books().failure_mode_set.insert(stream) {
            return Err(BackendError {
                kind: ErrorKind::FailureModeAlreadySet,
                native_code: 107000,
                message: "the failure mode of this stream was already set".into(),
            });
        }
        self.shared.on(device)?;
        check(self.shared.lib.set_stream_failure_mode(stream as usize, u64::from(stop)))?;
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
            .insert(event as RawEvent, EventMeta { flags, timing, recorded: false, reset_on: None });
        Ok(event as RawEvent)
    }

    fn destroy_event(&self, device: u32, event: RawEvent) -> BackendResult<()> {
        self.shared.books().events.remove(&event);
        self.shared.on(device)?;
        check(self.shared.lib.destroy_event(event as usize))
    }

    fn record_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()> {
        self.shared.on(device)?;
        check(self.shared.lib.record_event(event as usize, stream as usize))?;
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
        check(self.shared.lib.reset_event(event as usize, stream as usize))?;
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
        check(self.shared.lib.query_event_status(event as usize, &mut status))?;
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
            move |s| s.lib.synchronize_event_with_timeout(event as usize, 1000),
            EVENT_SYNC_TIMEOUT,
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
        check(self.shared.lib.event_elapsed_time(&mut ms, start as usize, end as usize)).map_err(|mut e| {
            if e.native_code == 507006 {
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
        let user_data = ffi::thunk_into_user_data(thunk);
        self.shared.on(device)?;
        let launched = check(self.shared.lib.launch_callback(
            ffi::callback_trampoline,
            user_data,
            u32::from(blocking),
            stream as usize,
        ));
        if launched.is_err() {
            ffi::drop_user_data(user_data);
        }
        launched.map(|()| 0)
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

    fn hardware_creations(&self, device: u32) -> u64 {
        self.shared.creations.get(device as usize).map_or(0, |c| c.load(Ordering::Relaxed))
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
        self.fake("npudFakeFailTask", |lib| lib.fake_fail_task(stream as usize, task, code))
    }
}

impl AclBackend {
    /// A pending reset has taken effect once its stream has nothing left to run (the reset
    /// included): the event is then not recorded. Until then the record before it counts.
    fn settle_reset(&self, device: u32, event: RawEvent) {
        let Some(stream) = self.shared.books().events.get(&event).and_then(|m| m.reset_on) else { return };
        if self.stream_query(device, stream).unwrap_or(true)
            && let Some(m) = self.shared.books().events.get_mut(&event)
            && m.reset_on == Some(stream)
        {
            m.recorded = false;
            m.reset_on = None;
        }
    }
}

impl AclBackend {
    /// Stops a destroyed stream's report thread and drops its books.
    fn forget_stream(&self, stream: RawStream) {
        let mut b = self.shared.books();
        if let Some(t) = b.report_threads.remove(&stream) {
            t.stop.store(true, Ordering::Relaxed);
        }
        b.stream_ids.retain(|_, s| *s != stream);
        b.failed.remove(&stream);
        b.stop_on_failure.remove(&stream);
        b.failure_mode_set.remove(&stream);
    }
}

fn forbid(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::EventFlagsForbid,
        native_code: 100000,
        message: format!("an event created without ACL_EVENT_SYNC cannot be {what}"),
    }
}

fn event_error(kind: ErrorKind, message: &str) -> BackendError {
    BackendError { kind, native_code: 107000, message: message.into() }
}

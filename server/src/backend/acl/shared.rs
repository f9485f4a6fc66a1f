//! The state the backend shares with its report threads and the exception callback: the
//! library, one context per device, and the books that attribute exceptions and remember
//! event flags; plus the waits and report threads built on them.

use super::AclBackend;
use super::ffi::{self, Acl, Lib, LoadError};
use super::result::{check, unsupported};
use crate::backend::{Backend, BackendError, BackendResult, ErrorKind, RawEvent, RawStream, Report, Wait};
use npud_proto::codes::acl::{RT_INVALID_DEVICEID, RT_REPORT_TIMEOUT};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub(super) struct EventMeta {
    pub(super) flags: u32,
    pub(super) timing: bool,
    pub(super) recorded: bool,
    /// A reset enqueued on this stream that the stream may not have reached yet: until it
    /// does, the record before it still counts (aclrtResetEvent takes effect in stream
    /// order), so waits and syncs go to the runtime instead of returning at once.
    pub(super) reset_on: Option<RawStream>,
}

pub(super) struct ReportThread {
    pub(super) stop: Arc<AtomicBool>,
}

#[derive(Default)]
pub(super) struct Books {
    /// (device, AscendCL stream id) -> stream, to attribute exceptions.
    pub(super) stream_ids: HashMap<(u32, i32), RawStream>,
    pub(super) failed: HashSet<RawStream>,
    pub(super) stop_on_failure: HashSet<RawStream>,
    pub(super) failure_mode_set: HashSet<RawStream>,
    pub(super) events: HashMap<RawEvent, EventMeta>,
    pub(super) report_threads: HashMap<RawStream, ReportThread>,
}

pub(super) struct Shared {
    pub(super) lib: Lib,
    pub(super) contexts: Vec<usize>,
    pub(super) books: Mutex<Books>,
    pub(super) sink: crate::backend::SinkSlot,
    pub(super) callbacks: crate::backend::CallbackGate,
    pub(super) creations: Vec<AtomicU64>,
}

impl Shared {
    pub(super) fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the device's context current on this thread (AscendCL contexts are per thread).
    pub(super) fn on(&self, device: u32) -> BackendResult<()> {
        let ctx = *self.contexts.get(device as usize).ok_or_else(|| BackendError {
            kind: ErrorKind::InvalidArgument,
            native_code: i64::from(RT_INVALID_DEVICEID),
            message: format!("no device {device}"),
        })?;
        check(self.lib.set_current_context(ctx))
    }

    pub(super) fn emit(&self, report: Report) {
        self.sink.emit(report);
    }

    /// Exception callback: attribute to the stream by its AscendCL id, tell the daemon.
    pub(super) fn on_exception(&self, info: usize) {
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
    /// A wait on the blocking pool, in one-second slices so a wait nobody awaits any more
    /// gives its thread back soon.
    pub(super) fn blocking_wait(
        &self,
        device: u32,
        call: impl Fn(&Shared) -> Result<i32, LoadError> + Send + 'static,
        expired: i64,
    ) -> Wait {
        let shared = Arc::clone(&self.shared);
        crate::backend::abandonable_wait(move |abandoned| {
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
    pub(super) fn ensure_report_thread(&self, device: u32, stream: RawStream) -> BackendResult<()> {
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
                let subscribed = shared.on(device).and_then(|()| check(shared.lib.subscribe_report(tid, stream.ptr())));
                let ok = subscribed.is_ok();
                let _ = ready_tx.send(subscribed);
                if !ok {
                    return;
                }
                while !flag.load(Ordering::Relaxed) {
                    match shared.lib.process_report(100) {
                        Ok(0) | Ok(RT_REPORT_TIMEOUT) => {}
                        Ok(rc) => {
                            tracing::warn!(device, rc, "aclrtProcessReport failed");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(_) => return,
                    }
                }
                let _ = shared.lib.unsubscribe_report(tid, stream.ptr());
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

    pub(super) fn fake<T>(
        &self,
        symbol: &'static str,
        call: impl FnOnce(&Lib) -> Result<i32, LoadError>,
    ) -> BackendResult<T>
    where
        T: Default,
    {
        if !self.shared.lib.has(symbol) {
            return Err(unsupported("fault injection"));
        }
        check(call(&self.shared.lib)).map(|()| T::default())
    }
}

impl AclBackend {
    /// A pending reset has taken effect once its stream has nothing left to run (the reset
    /// included): the event is then not recorded. Until then the record before it counts.
    pub(super) fn settle_reset(&self, device: u32, event: RawEvent) {
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
    pub(super) fn forget_stream(&self, stream: RawStream) {
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

//! Callbacks and the device's reports: streams subscribed to a thread of the program
//! (aclrtSubscribeReport) or to the host-function thread, callbacks and value waits
//! launched, each report the devices send dispatched to its thread's mailbox, and what
//! aclrtProcessReport takes from there; the exception callback.

use super::{INVALID_PARAM, Inner, Pending, Rt, host_func, release_thread, value_ops};
use crate::{AclError, AclrtExceptionInfo, AclrtExceptionInfoCallback, Handle};
use npu_sim::{SimReport, StreamId};
use std::collections::HashMap;
use std::time::{Duration, Instant};

impl Rt {
    pub fn subscribe(&self, thread: u64, stream: Handle, twice: AclError) -> Result<(), AclError> {
        self.stream(stream)?;
        let mut inner = self.lock();
        if inner.subscribed.contains_key(&(stream as usize)) {
            return Err(twice);
        }
        subscribe_to(&mut inner, thread, stream as usize);
        Ok(())
    }

    /// aclrtLaunchHostFunc's stream: subscribed to the host-function thread from its first
    /// host function on; refused (`taken`) when a thread of the program subscribed it.
    pub fn subscribe_host_func(&self, stream: Handle, taken: AclError) -> Result<(), AclError> {
        self.stream(stream)?;
        let mut inner = self.lock();
        match inner.subscribed.get(&(stream as usize)) {
            Some(&host_func::THREAD) => {}
            Some(_) => return Err(taken),
            None => subscribe_to(&mut inner, host_func::THREAD, stream as usize),
        }
        Ok(())
    }

    /// Counts `thread` as subscribed for good, so that its aclrtProcessReport waits for
    /// callbacks instead of failing while it has no stream (the host-function thread).
    pub fn keep_subscribed(&self, thread: u64) {
        *self.lock().per_thread.entry(thread).or_insert(0) += 1;
    }

    pub fn unsubscribe(&self, thread: u64, stream: Handle) -> Result<(), AclError> {
        let mut inner = self.lock();
        match inner.subscribed.get(&(stream as usize)) {
            Some(t) if *t == thread => {
                inner.subscribed.remove(&(stream as usize));
                release_thread(&mut inner, thread);
                Ok(())
            }
            _ => Err(INVALID_PARAM),
        }
    }

    pub fn launch_callback(
        &self,
        func: unsafe extern "C" fn(*mut std::ffi::c_void),
        user_data: usize,
        blocking: bool,
        stream: Handle,
        not_subscribed: AclError,
    ) -> Result<(), AclError> {
        let (dev, id) = self.stream(stream)?;
        if !self.lock().subscribed.contains_key(&(stream as usize)) {
            return Err(not_subscribed);
        }
        // Issued to a capturing stream, it is a task of the capture (it counts toward the
        // capture stream's depth) and runs at each execution of the model, not now.
        let call = crate::state::capture::Task::Call { func: func as usize, data: user_data };
        if self.capture_task(stream, call)? {
            return Ok(());
        }
        let callback = {
            let mut inner = self.lock();
            if !inner.subscribed.contains_key(&(stream as usize)) {
                return Err(not_subscribed);
            }
            inner.next_callback += 1;
            let cb = inner.next_callback;
            inner.callbacks.insert(cb, Pending { func, user_data, blocking, stream: stream as usize });
            cb
        };
        dev.launch_callback(id, callback, blocking).map(drop).map_err(|e| {
            self.lock().callbacks.remove(&callback);
            e.code
        })
    }

    /// An aclrtValueWait: a blocking task on the wait's stream, watched once reached.
    pub fn launch_value_wait(&self, wait: value_ops::Wait) -> Result<(), AclError> {
        let (device, stream) = wait.place();
        let callback = {
            let mut inner = self.lock();
            inner.next_callback += 1;
            let cb = inner.next_callback;
            inner.value_waits.insert(cb, wait);
            cb
        };
        self.devices[device as usize].launch_callback(stream, callback, true).map(drop).map_err(|e| {
            self.lock().value_waits.remove(&callback);
            e.code
        })
    }

    /// Called by the report thread for everything the devices report.
    pub(super) fn dispatch(&'static self, device: u32, report: SimReport) {
        match report {
            SimReport::Callback { callback, .. } => {
                let mut inner = self.lock();
                if let Some(wait) = inner.value_waits.remove(&callback) {
                    drop(inner);
                    value_ops::reached(self, callback, wait);
                    return;
                }
                let thread = inner.callbacks.get(&callback).and_then(|p| inner.subscribed.get(&p.stream).copied());
                if let Some(thread) = thread {
                    inner.due.entry(thread).or_default().push_back(callback);
                    self.due.notify_all();
                }
            }
            SimReport::Exception { stream, task, code } => {
                let (func, thread) = {
                    let inner = self.lock();
                    let thread = inner.by_sim.get(&(device, stream)).and_then(|h| inner.subscribed.get(h)).copied();
                    (inner.on_exception, thread.unwrap_or(0))
                };
                if let Some(func) = func {
                    let mut info = AclrtExceptionInfo {
                        task_id: task as u32,
                        stream_id: stream as u32,
                        thread_id: thread as u32,
                        device_id: self.user_id(device),
                        error_code: code as u32,
                    };
                    // SAFETY: the application registered this callback for exception info;
                    // the pointer is valid for the duration of the call.
                    unsafe { func(&mut info) };
                }
            }
        }
    }

    pub fn process_report(
        &self,
        thread: u64,
        timeout_ms: i32,
        unsubscribed: AclError,
        expired: AclError,
    ) -> Result<(), AclError> {
        let deadline = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        let mut inner = self.lock();
        let due: Vec<(u64, Pending)> = loop {
            if !inner.per_thread.contains_key(&thread) {
                return Err(unsubscribed);
            }
            let ids: Vec<u64> = inner.due.get_mut(&thread).map(|q| q.drain(..).collect()).unwrap_or_default();
            if !ids.is_empty() {
                break ids.into_iter().filter_map(|id| inner.callbacks.remove(&id).map(|p| (id, p))).collect();
            }
            let wait = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if wait.is_zero() {
                return Err(expired);
            }
            inner = self.due.wait_timeout(inner, wait).unwrap_or_else(|e| e.into_inner()).0;
        };
        let streams: HashMap<usize, (u32, StreamId)> =
            due.iter().filter_map(|(_, p)| inner.streams.get(&p.stream).map(|s| (p.stream, *s))).collect();
        drop(inner);
        for (id, p) in due {
            // SAFETY: the function and user data were handed to aclrtLaunchCallback by the
            // application, which promises they stay valid until the callback has run.
            unsafe { (p.func)(p.user_data as *mut std::ffi::c_void) };
            if p.blocking
                && let Some((device, stream)) = streams.get(&p.stream)
            {
                let _ = self.devices[*device as usize].ack_callback(*stream, id);
            }
        }
        Ok(())
    }

    pub fn set_exception_callback(&self, func: AclrtExceptionInfoCallback) {
        self.lock().on_exception = func;
    }
}

fn subscribe_to(inner: &mut Inner, thread: u64, stream: usize) {
    inner.subscribed.insert(stream, thread);
    *inner.per_thread.entry(thread).or_insert(0) += 1;
}

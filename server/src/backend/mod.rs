//! The backend boundary: the seeds' vocabulary, one trait, three drivers.
//!
//! Calls that can block for long (hardware creation, waits) are either run by the caller
//! on the blocking pool or returned as futures; nothing here parks an async worker.

pub mod acl;
pub mod cuda;
mod dl;
pub mod sim;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A stream as its backend knows it: a vendor handle (a pointer) or the simulator's id.
/// A type of its own so a stream cannot be passed where an event is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawStream(pub u64);

/// An event as its backend knows it (see [`RawStream`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawEvent(pub u64);

impl RawStream {
    /// The handle as the vendor's C API takes it (a pointer-sized value).
    pub fn ptr(self) -> usize {
        self.0 as usize
    }
}

impl RawEvent {
    /// The handle as the vendor's C API takes it (a pointer-sized value).
    pub fn ptr(self) -> usize {
        self.0 as usize
    }
}

/// How the vendor names a device whatever number a process gives it: a process's device
/// number depends on `*_VISIBLE_DEVICES` and its container, this does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// Ascend: the physical id (the N of `/dev/davinciN`); the simulator: its index.
    pub physical_id: Option<u32>,
    /// CUDA: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (or `MIG-…` for a MIG instance).
    pub uuid: Option<String>,
    /// CUDA: the PCI bus id, `0000:3b:00.0`.
    pub pci_bus_id: Option<String>,
}

impl Identity {
    /// Whether a process's claim names this device: by the physical id, or by the UUID
    /// (case-insensitive, as CUDA_VISIBLE_DEVICES compares them).
    pub fn matches(&self, physical_id: Option<u32>, uuid: Option<&str>) -> bool {
        match (physical_id, uuid) {
            (Some(p), _) => self.physical_id == Some(p),
            (None, Some(u)) => self.uuid.as_deref().is_some_and(|mine| npud_proto::identity::same_uuid(mine, u)),
            (None, None) => false,
        }
    }
}

/// What the daemon needs to know about one device.
#[derive(Debug, Clone)]
pub struct DeviceDesc {
    pub id: u32,
    /// The vendor's global name for it.
    pub identity: Identity,
    pub name: String,
    pub profile: String,
    /// Streams the hardware holds in all.
    pub hardware_limit: u32,
    /// Streams the runtime itself occupies (default streams of contexts, internal sync).
    pub runtime_streams: u32,
    pub event_limit: u32,
    /// Most urgent priority value (numerically smallest on every supported vendor).
    pub priority_highest: i32,
    pub priority_lowest: i32,
    /// Processes that may hold a context on the device at once, where the device limits
    /// them (a CUDA GPU in EXCLUSIVE_PROCESS mode: one, or under MPS the MPS server's
    /// client limit); None where it does not. npud admits a process's first context
    /// against it (`policy::slots`).
    pub client_slots: Option<u32>,
}

/// A device's own word on its health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultSignal {
    /// The error codes the device holds now (DCMI's `dcmi_get_device_errorcode_v2`): none
    /// means it reports no fault.
    Codes(Vec<u64>),
    /// A critical XID event (NVML's `nvmlEventTypeXidCriticalError`), with its number.
    Xid(u64),
}

/// Why a backend call failed: the runtime vocabulary the simulator defines, shared by
/// every backend so no layer keeps a copy to translate from.
pub use npu_sim::ErrorKind;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub kind: ErrorKind,
    pub native_code: i64,
    pub message: String,
}

pub type BackendResult<T> = Result<T, BackendError>;

/// A wait that resolves when the device reaches the point waited for.
pub type Wait = Pin<Box<dyn Future<Output = BackendResult<()>> + Send>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    NotRecorded,
    Pending,
    Complete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamState {
    pub pending_tasks: u64,
    pub failed: bool,
    pub stop_on_failure: bool,
    /// The failure mode was set on it (AscendCL allows that once per stream), so it cannot
    /// be handed to a new owner as if new.
    pub failure_mode_set: bool,
}

/// Asynchronous news from a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Callback { device: u32, stream: RawStream, callback: u64, blocking: bool, status: i64 },
    Exception { device: u32, stream: RawStream, task: u64, code: i64 },
}

pub type ReportSink = Arc<dyn Fn(Report) + Send + Sync>;

/// Which vendor wait expired, so the right timeout code is reported.
#[derive(Debug, Clone, Copy)]
pub enum WaitKind {
    Stream,
    Event,
    Device,
}

pub trait Backend: Send + Sync + 'static {
    /// "sim", "acl" or "cuda": names the native codes in error details.
    fn name(&self) -> &'static str;
    /// Whether creating or destroying a stream may block the calling thread (a vendor
    /// driver call: milliseconds under contention). Such calls go to the blocking pool,
    /// one batch per device at a time; an in-process simulator's run inline.
    fn calls_block(&self) -> bool {
        true
    }
    fn devices(&self) -> &[DeviceDesc];
    fn set_report_sink(&self, sink: ReportSink);
    /// The vendor's code for an expired wait of this kind.
    fn timeout_code(&self, kind: WaitKind) -> i64;

    /// Creates one stream. May block (pacing and vendor creation cost): call it on the
    /// blocking pool.
    fn create_stream(&self, device: u32, priority: i32, flags: u32) -> BackendResult<RawStream>;
    /// Returns at once; the hardware slot is freed when pending work has ended.
    fn destroy_stream(&self, device: u32, stream: RawStream) -> BackendResult<()>;
    /// Discards pending work and frees the slot now (aclrtDestroyStreamForce): for
    /// streams that did not drain in time.
    fn destroy_stream_force(&self, device: u32, stream: RawStream) -> BackendResult<()>;
    fn stream_state(&self, device: u32, stream: RawStream) -> BackendResult<StreamState>;
    /// Called before an idle stream goes into the warm pool: whatever numbering the
    /// backend exposes starts again, so the next owner sees a new stream. Vendor
    /// backends have nothing to renew (their task ids are the runtime's own).
    fn renew_stream(&self, _device: u32, _stream: RawStream) -> BackendResult<()> {
        Ok(())
    }
    /// True when all work enqueued so far has finished.
    fn stream_query(&self, device: u32, stream: RawStream) -> BackendResult<bool>;
    /// Resolves when all work enqueued before this call has finished.
    fn stream_drained(&self, device: u32, stream: RawStream) -> Wait;
    /// `device` is the stream's; the event may be another device's where
    /// [`Backend::waits_across_devices`] says so.
    fn stream_wait_event(&self, device: u32, stream: RawStream, event: RawEvent) -> BackendResult<()>;
    /// Whether a stream may wait for another device's event. CUDA: yes
    /// (cuStreamWaitEvent: "the event may be from a different context than hStream, in
    /// which case this function will perform cross-device synchronization"). AscendCL
    /// documents no such wait and event ids are per device, so the default is no.
    fn waits_across_devices(&self) -> bool {
        false
    }
    /// Enqueues timed work; returns the task's number on its stream.
    fn enqueue_delay(&self, device: u32, stream: RawStream, duration: Duration) -> BackendResult<u64>;
    fn set_stop_on_failure(&self, device: u32, stream: RawStream, stop: bool) -> BackendResult<()>;

    fn create_event(&self, device: u32, flags: u32, timing: bool) -> BackendResult<RawEvent>;
    fn destroy_event(&self, device: u32, event: RawEvent) -> BackendResult<()>;
    fn record_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()>;
    fn reset_event(&self, device: u32, event: RawEvent, stream: RawStream) -> BackendResult<()>;
    fn event_state(&self, device: u32, event: RawEvent) -> BackendResult<EventState>;
    fn event_complete(&self, device: u32, event: RawEvent) -> Wait;
    fn elapsed_ms(&self, device: u32, start: RawEvent, end: RawEvent) -> BackendResult<f32>;

    /// Enqueues a host callback; its report arrives through the sink.
    fn launch_callback(&self, device: u32, stream: RawStream, callback: u64, blocking: bool) -> BackendResult<u64>;
    /// Releases a blocking callback; false when the stream was not held by it.
    fn ack_callback(&self, device: u32, stream: RawStream, callback: u64) -> BackendResult<bool>;
    /// Fails a blocking callback nobody acknowledged in time, freeing its stream.
    fn fail_callback(&self, device: u32, stream: RawStream, callback: u64, code: i64) -> bool;

    /// Streams the device could still create (aclrtGetStreamAvailableNum).
    fn available_streams(&self, device: u32) -> BackendResult<u32>;
    /// Whether the vendor reports a device-wide count of free streams, all processes
    /// counted (AscendCL does; CUDA has no stream limit; the embedded simulator has no
    /// other process). Without one npud cannot reconcile its books with the device.
    fn reports_device_free(&self) -> bool {
        false
    }
    /// That count, where [`Backend::reports_device_free`]; None elsewhere. May block.
    fn device_free(&self, _device: u32) -> Option<BackendResult<u32>> {
        None
    }
    fn hardware_creations(&self, device: u32) -> u64;

    /// The host's character device for `device`, as its driver names it: a process that
    /// holds it open is using the device (`daemon::holding`). None where the vendor names
    /// none (the simulator).
    fn device_node(&self, _device: u32) -> Option<std::path::PathBuf> {
        None
    }

    /// Resolves when the device has shown it still executes work (a liveness probe).
    fn heartbeat(&self, device: u32) -> Wait;
    /// Streams the hardware holds now, the runtime's own included.
    fn hardware_in_use(&self, device: u32) -> u32;

    /// What the devices say of their own health since the last call (DCMI's error codes on
    /// Ascend, NVML's XID events on NVIDIA): (device, signal). None from a backend without
    /// such a source, or where the vendor's library did not load.
    fn fault_signals(&self) -> Vec<(u32, FaultSignal)> {
        Vec::new()
    }

    /// Fault injection (sim only).
    fn set_stalled(&self, device: u32, stalled: bool) -> BackendResult<()>;
    fn fail_next_creations(&self, device: u32, count: u32) -> BackendResult<()>;
    fn fail_task(&self, device: u32, stream: RawStream, task: u64, code: i64) -> BackendResult<()>;
}

/// Runs a blocking vendor wait on the blocking pool. The job gets a flag that turns true
/// once nobody awaits the result any more, so it can give its thread back early (vendor
/// waits are done in bounded slices that check it).
pub(crate) fn abandonable_wait(
    job: impl FnOnce(&std::sync::atomic::AtomicBool) -> BackendResult<()> + Send + 'static,
) -> Wait {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Abandon(Arc<AtomicBool>);
    impl Drop for Abandon {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let abandoned = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&abandoned);
    let task = tokio::task::spawn_blocking(move || job(&flag));
    Box::pin(async move {
        let _abandon = Abandon(abandoned);
        task.await.unwrap_or_else(|e| {
            Err(BackendError { kind: ErrorKind::Other, native_code: 0, message: format!("wait task: {e}") })
        })
    })
}

/// Where a vendor backend's reports go, once the daemon has set the sink.
#[derive(Default)]
pub(crate) struct SinkSlot(std::sync::Mutex<Option<ReportSink>>);

impl SinkSlot {
    pub(crate) fn set(&self, sink: ReportSink) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    pub(crate) fn emit(&self, report: Report) {
        if let Some(sink) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            sink(report);
        }
    }
}

/// Host callbacks for vendors that hold a stream until the callback *function* returns
/// (AscendCL BLOCK callbacks, every CUDA host function): a BLOCK callback's function
/// waits here until the client acknowledges it, or its deadline fails it.
#[derive(Default)]
pub(crate) struct CallbackGate(std::sync::Mutex<HashMap<u64, std::sync::mpsc::Sender<bool>>>);

impl CallbackGate {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, std::sync::mpsc::Sender<bool>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs in the vendor's callback thread when the callback's turn comes: reports it,
    /// and for BLOCK waits for the client before returning to the runtime.
    pub(crate) fn fire(&self, sink: &SinkSlot, device: u32, stream: RawStream, callback: u64, blocking: bool) {
        let released = blocking.then(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            self.waiting().insert(callback, tx);
            rx
        });
        sink.emit(Report::Callback { device, stream, callback, blocking, status: 0 });
        if let Some(rx) = released {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(24 * 3600));
        }
    }

    /// The client acknowledged: the callback returns and the stream moves on.
    pub(crate) fn ack(&self, callback: u64) -> bool {
        self.waiting().remove(&callback).is_some_and(|tx| tx.send(true).is_ok())
    }

    /// Nobody acknowledged in time: release the stream and report the failure.
    pub(crate) fn fail(&self, sink: &SinkSlot, device: u32, stream: RawStream, callback: u64, code: i64) -> bool {
        let released = self.waiting().remove(&callback).is_some_and(|tx| tx.send(false).is_ok());
        if released {
            sink.emit(Report::Exception { device, stream, task: 0, code });
        }
        released
    }
}

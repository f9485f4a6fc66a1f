//! A fake `libcuda.so.1` built on npu-sim.
//!
//! It exports the CUDA driver calls of shared/reference/cuda.md that npud uses, so that
//! npud's real `cuda` backend, its libloading path and its FFI calls run in CI without a
//! GPU. Streams, events and host functions are npu-sim's; priorities map CUDA's range
//! [-5, 0] (lower is more urgent) onto the sim's 0..=5. The one kernel it knows is
//! npud's spin kernel: launching it enqueues a sim delay of the requested nanoseconds.
//! Host functions run on a thread of this library, as the CUDA driver's do.
//! NPU_SIM_DEVICES and NPU_SIM_LANES configure it; `npudFake*` symbols are test hooks.

/// The runtime for an exported call, or that call's answer when there is none (`rt`).
macro_rules! runtime {
    () => {
        match crate::rt() {
            Ok(r) => r,
            Err(e) => return e,
        }
    };
}

mod attributes;
mod context;
mod ctx_state;
mod defaults;
mod devices;
mod events;
mod gate;
mod green;
mod memory;
mod modules;
mod proc_address;
mod stream_memops;
mod streams;
mod test_hooks;
mod visible;

use npu_sim::{EventId, Profile, SimDevice, SimReport, StreamId};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

pub use attributes::cuDeviceGetAttribute;
pub use context::*;
pub use ctx_state::*;
pub use devices::*;
pub use events::*;
pub use green::*;
pub use modules::*;
pub use npud_proto::codes::cuda::CuResult;
use npud_proto::codes::cuda::{
    CONTEXT_IS_DESTROYED, ILLEGAL_STATE, INVALID_CONTEXT, INVALID_DEVICE, INVALID_HANDLE, INVALID_IMAGE, LAUNCH_FAILED,
    NOT_FOUND, NOT_PERMITTED, NOT_READY, NOT_SUPPORTED,
};
pub(crate) use npud_proto::codes::cuda::{INVALID_VALUE, NOT_INITIALIZED, OUT_OF_MEMORY, SUCCESS};
pub use proc_address::{cuGetProcAddress, cuGetProcAddress_v2};
pub use stream_memops::*;
pub use streams::*;
pub use test_hooks::*;

const LEAST_PRIORITY: i32 = 0;
const GREATEST_PRIORITY: i32 = -5;
const NON_BLOCKING: u32 = 1;
const DISABLE_TIMING: u32 = 2;
const INTERPROCESS: u32 = 4;
/// cuStreamWaitEvent's CU_EVENT_WAIT_EXTERNAL: meaningful only in a stream capture, which
/// this library does not model; outside one the driver answers CUDA_ERROR_ILLEGAL_STATE.
const WAIT_EXTERNAL: u32 = 1;

type HostFn = unsafe extern "C" fn(*mut c_void);
/// CUstreamCallback: (hStream, status, userData).
type StreamCallback = unsafe extern "C" fn(usize, CuResult, *mut c_void);

/// A host function (cuLaunchHostFunc) or a stream callback (cuStreamAddCallback).
enum HostCall {
    Func(HostFn),
    Callback(StreamCallback, usize),
    /// A cross-device wait (gate.rs): released by the other device's event, not here.
    Gate(Arc<gate::Gate>),
    /// A wait for a value in memory (stream_memops.rs): released once the value is there.
    Watch(stream_memops::Watch),
}

struct Pending {
    call: HostCall,
    user_data: usize,
}

#[derive(Default)]
struct Inner {
    next: usize,
    streams: HashMap<usize, (u32, StreamId, u32, i32)>,
    /// Each context's default streams (`defaults`): handles in `streams` never handed out.
    defaults: HashMap<(usize, defaults::Kind), usize>,
    events: HashMap<usize, (u32, EventId, bool)>,
    modules: HashMap<usize, String>,
    functions: HashMap<usize, String>,
    host_fns: HashMap<u64, Pending>,
    next_fn: u64,
    /// Contexts made with cuCtxCreate: handle → device.
    contexts: HashMap<usize, u32>,
    /// The context each stream was created in, so destroying a context destroys them.
    stream_ctx: HashMap<usize, usize>,
    /// Green contexts and the resource descriptors they are made from (`green`).
    green: green::Green,
    /// The flags set for each ordinal's primary context (`ctx_state`); 0 when unset.
    primary_flags: HashMap<usize, u32>,
    /// The flags each context made with cuCtxCreate was made with.
    ctx_flags: HashMap<usize, u32>,
}

impl Inner {
    /// A stream's (physical device, id, flags, priority): INVALID_HANDLE for one that does
    /// not exist, CONTEXT_IS_DESTROYED for one its green context left behind.
    fn stream(&self, h: usize) -> Result<(u32, StreamId, u32, i32), CuResult> {
        if self.green.orphaned(h) {
            return Err(CONTEXT_IS_DESTROYED);
        }
        self.streams.get(&h).copied().ok_or(INVALID_HANDLE)
    }
}

pub(crate) struct Rt {
    /// Every GPU of the host (NPU_SIM_DEVICES), indexed by physical index.
    devices: Vec<Arc<SimDevice>>,
    /// This process's ordinals: ordinal → physical index (CUDA_VISIBLE_DEVICES).
    visible: Vec<u32>,
    /// Each ordinal's primary context.
    primary: Vec<usize>,
    /// Each ordinal's primary context retains: the last release destroys the context's
    /// streams (cuDevicePrimaryCtxRelease: the context is destroyed at a count of 0).
    retains: Mutex<Vec<u32>>,
    inner: Mutex<Inner>,
    /// The device budget shared with other processes (NPU_SIM_SHARED), as a driver's is.
    shared: Option<npu_sim::shared::SharedBudget>,
    /// The thread that runs host functions (None if it could not start).
    reports: Option<npu_sim::fleet::Reports>,
}

/// The locks the driver's own threads take, held across a fork (`npu_sim::fork`).
struct ForkHolds {
    _inner: MutexGuard<'static, Inner>,
    _devices: Vec<npu_sim::ForkHold<'static>>,
    _reports: Option<npu_sim::fleet::ReportsHold<'static>>,
}

static RT: OnceLock<Rt> = OnceLock::new();

/// Set in a child forked after cuInit. CUDA does not follow a process across fork(): on
/// an H100 (driver 580.159.04, docs/hardware.md) every call such a child made, cuInit
/// itself included, answered CUDA_ERROR_NOT_INITIALIZED, and so does every call here.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn forked() {
    FORKED.store(true, std::sync::atomic::Ordering::Relaxed);
}

thread_local! {
    static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Set while this thread runs a program's stream callback or host function.
    static IN_HOST_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The runtime for a program's call: CUDA_ERROR_NOT_INITIALIZED before cuInit, and
/// CUDA_ERROR_NOT_PERMITTED on the thread running a stream callback or host function (the
/// seed's cuStreamAddCallback: "Callbacks must not make any CUDA API calls. Attempting to
/// use a CUDA API will result in CUDA_ERROR_NOT_PERMITTED").
pub(crate) fn rt() -> Result<&'static Rt, CuResult> {
    if IN_HOST_CALL.with(std::cell::Cell::get) {
        return Err(NOT_PERMITTED);
    }
    if FORKED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(NOT_INITIALIZED);
    }
    RT.get().ok_or(NOT_INITIALIZED)
}

/// The runtime for this library's own threads (waiters, the host-call thread).
pub(crate) fn runtime() -> Option<&'static Rt> {
    RT.get()
}

impl Rt {
    /// Every lock a thread of the driver's own may hold at a fork, in the order they nest
    /// them (the host-call thread takes the handle table; a device's timer thread queues
    /// reports under the device's lock).
    fn hold_for_fork(&'static self) -> ForkHolds {
        ForkHolds {
            _inner: self.lock(),
            _devices: self.devices.iter().map(|d| d.hold_for_fork()).collect(),
            _reports: self.reports.as_ref().map(npu_sim::fleet::Reports::hold_for_fork),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The physical device of a context.
    fn device_of_ctx(&self, ctx: usize) -> Option<u32> {
        self.primary
            .iter()
            .position(|c| *c == ctx)
            .and_then(|ordinal| self.visible.get(ordinal).copied())
            .or_else(|| self.lock().contexts.get(&ctx).copied())
    }
    fn retains(&self) -> MutexGuard<'_, Vec<u32>> {
        self.retains.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Destroys every stream made in the primary context of `ordinal`.
    fn destroy_primary_streams(&self, ordinal: usize) -> Result<(), CuResult> {
        let ctx = self.primary[ordinal];
        let streams: Vec<usize> = self.lock().stream_ctx.iter().filter(|(_, c)| **c == ctx).map(|(s, _)| *s).collect();
        for s in streams {
            self.destroy_stream(s)?;
        }
        Ok(())
    }
    /// The physical device a CUdevice (this process's ordinal) names.
    fn physical(&self, ordinal: i32) -> Result<u32, CuResult> {
        usize::try_from(ordinal).ok().and_then(|o| self.visible.get(o)).copied().ok_or(INVALID_DEVICE)
    }
    /// This process's ordinal of a physical device it can see.
    fn ordinal(&self, physical: u32) -> Option<u32> {
        self.visible.iter().position(|&p| p == physical).map(|o| o as u32)
    }
    pub(crate) fn current(&self) -> Result<&Arc<SimDevice>, CuResult> {
        let d = self.device_of_ctx(CURRENT.with(std::cell::Cell::get)).ok_or(INVALID_CONTEXT)?;
        Ok(&self.devices[d as usize])
    }
    pub(crate) fn stream(&self, h: usize) -> Result<(&Arc<SimDevice>, StreamId), CuResult> {
        let (d, id, _, _) = self.lock().stream(h)?;
        Ok((&self.devices[d as usize], id))
    }
    fn event(&self, h: usize) -> Result<(&Arc<SimDevice>, EventId, bool), CuResult> {
        let (d, id, timing) = *self.lock().events.get(&h).ok_or(INVALID_HANDLE)?;
        Ok((&self.devices[d as usize], id, timing))
    }
    fn give_shared(&self, device: u32, n: u32) {
        if let Some(shared) = &self.shared {
            shared.give(device, n);
        }
    }
    fn destroy_stream(&self, s: usize) -> Result<(), CuResult> {
        let (dev, id) = self.stream(s)?;
        {
            let mut inner = self.lock();
            inner.streams.remove(&s);
            inner.stream_ctx.remove(&s);
        }
        self.give_shared(dev.id(), 1);
        dev.destroy_stream(id).map_err(sim)
    }
    /// Makes a stream on physical device `dev` in context `ctx` (a green context's handle
    /// for its streams), taking one from the shared budget; OUT_OF_MEMORY when the device
    /// has none left. Out-of-range priorities are clamped, as the driver does.
    ///
    /// # Safety
    /// `out` is a valid, non-null out-pointer.
    unsafe fn create_stream(&self, out: *mut usize, dev: u32, flags: u32, priority: i32, ctx: usize) -> CuResult {
        let clamped = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
        if let Some(shared) = &self.shared
            && shared.take(dev, 1).is_err()
        {
            return OUT_OF_MEMORY;
        }
        match self.devices[dev as usize].create_stream((clamped - GREATEST_PRIORITY) as u32, 0) {
            Ok(id) => {
                let mut inner = self.lock();
                let h = Rt::mint(&mut inner);
                inner.streams.insert(h, (dev, id, flags, clamped));
                inner.stream_ctx.insert(h, ctx);
                // SAFETY: per this function's contract.
                unsafe { put(out, h) }
            }
            Err(e) => {
                self.give_shared(dev, 1);
                sim(e)
            }
        }
    }
    fn next_host_call(&self) -> u64 {
        let mut inner = self.lock();
        inner.next_fn += 1;
        inner.next_fn
    }
    fn register_host_call(&self, id: u64, call: HostCall, user_data: usize) {
        self.lock().host_fns.insert(id, Pending { call, user_data });
    }
    fn mint(inner: &mut Inner) -> usize {
        inner.next += 0x40;
        inner.next
    }
    /// Runs host functions when their turn comes, on this library's own thread.
    fn dispatch(&self, device: u32, report: SimReport) {
        if let SimReport::Callback { stream, callback, status, .. } = report {
            let pending = self.lock().host_fns.remove(&callback);
            if let Some(Pending { call: HostCall::Gate(g), .. }) = pending {
                g.reached(self);
                return;
            }
            if let Some(Pending { call: HostCall::Watch(w), .. }) = pending {
                if let Some(rt) = runtime() {
                    w.start(&rt.devices[device as usize], stream, callback);
                }
                return;
            }
            // CUDA's errors are sticky: once a task of the stream failed, every later
            // host call sees the error.
            let failed =
                status != 0 || self.devices[device as usize].stream_status(stream).map(|st| st.failed).unwrap_or(false);
            if let Some(p) = pending {
                IN_HOST_CALL.with(|c| c.set(true));
                // SAFETY: the application passed this function and data to
                // cuLaunchHostFunc or cuStreamAddCallback and keeps them valid until the
                // function has run.
                match p.call {
                    // cuLaunchHostFunc: unlike cuStreamAddCallback, the function is not
                    // called after an error in the context (the stream still moves on).
                    HostCall::Func(f) if !failed => unsafe { f(p.user_data as *mut c_void) },
                    HostCall::Func(_) => {}
                    // The driver passes the stream's error state: a failed stream's is
                    // the error it failed with.
                    HostCall::Callback(f, h) => unsafe {
                        f(h, if failed { LAUNCH_FAILED } else { SUCCESS }, p.user_data as *mut c_void)
                    },
                    HostCall::Gate(_) | HostCall::Watch(_) => {}
                }
                IN_HOST_CALL.with(|c| c.set(false));
            }
            let _ = self.devices[device as usize].ack_callback(stream, callback);
        }
    }
}

pub(crate) unsafe fn put<T>(out: *mut T, v: T) -> CuResult {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a valid out-pointer (checked non-null).
    unsafe { out.write(v) };
    SUCCESS
}

pub(crate) fn with(f: impl FnOnce(&Rt) -> Result<(), CuResult>) -> CuResult {
    match rt() {
        Ok(r) => f(r).err().unwrap_or(SUCCESS),
        Err(e) => e,
    }
}

fn sim(e: npu_sim::SimError) -> CuResult {
    use npu_sim::ErrorKind as K;
    match e.kind {
        K::InvalidArgument | K::EventFlagsForbid | K::FailureModeAlreadySet => INVALID_VALUE,
        K::InvalidHandle | K::EventNotRecorded | K::EventNotTimed => INVALID_HANDLE,
        K::EventNotComplete => NOT_READY,
        K::StreamBudget | K::EventBudget => OUT_OF_MEMORY,
        K::TaskFailed => LAUNCH_FAILED,
        K::Timeout => npud_proto::codes::cuda::TIMEOUT,
        K::Unsupported => NOT_SUPPORTED,
        K::Other => npud_proto::codes::cuda::UNKNOWN,
    }
}

fn block_on(register: impl FnOnce(npu_sim::Waiter) -> Result<(), npu_sim::SimError>) -> Result<(), CuResult> {
    let (tx, rx) = std::sync::mpsc::channel();
    register(Box::new(move |r| drop(tx.send(r)))).map_err(sim)?;
    rx.recv().map_err(|_| LAUNCH_FAILED)?.map_err(sim)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: u32) -> CuResult {
    if IN_HOST_CALL.with(std::cell::Cell::get) {
        return NOT_PERMITTED;
    }
    if flags != 0 {
        return INVALID_VALUE;
    }
    if FORKED.load(std::sync::atomic::Ordering::Relaxed) {
        return NOT_INITIALIZED;
    }
    RT.get_or_init(|| {
        let devices = npu_sim::fleet::devices_from_env(&Profile::default());
        let reports = npu_sim::fleet::deliver_reports_on_thread(&devices, "fake-cuda-hostfn", |device, report| {
            if let Some(rt) = RT.get() {
                rt.dispatch(device, report);
            }
        })
        .ok();
        npu_sim::fork::register(|| RT.get().map(|r| Box::new(r.hold_for_fork()) as Box<dyn std::any::Any>));
        // SAFETY: a plain function that lives as long as the library and only stores to an
        // atomic (async-signal-safe); pthread_atfork only records it.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
        let visible = visible::visible(devices.len() as u32, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref());
        let primary = (0..visible.len()).map(|i| 0x5000_0000 + i * 0x100).collect();
        let retains = Mutex::new(vec![0; visible.len()]);
        let shared = npu_sim::shared::SharedBudget::from_env(Profile::default().stream_limit);
        Rt {
            devices,
            visible,
            primary,
            retains,
            inner: Mutex::new(Inner { next: 0x7e00_0000_1000, ..Inner::default() }),
            shared,
            reports,
        }
    });
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(code: CuResult, out: *mut *const c_char) -> CuResult {
    let text: &'static [u8] = match code {
        0 => b"no error\0",
        1 => b"invalid argument\0",
        2 => b"out of memory\0",
        3 => b"initialization error\0",
        400 => b"invalid resource handle\0",
        600 => b"device not ready\0",
        800 => b"operation not permitted\0",
        719 => b"unspecified launch failure\0",
        _ => return INVALID_VALUE,
    };
    // SAFETY: out-pointer from the caller; the string is static.
    unsafe { put(out, text.as_ptr().cast::<c_char>()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(code: CuResult, out: *mut *const c_char) -> CuResult {
    let name: &'static [u8] = match code {
        0 => b"CUDA_SUCCESS\0",
        1 => b"CUDA_ERROR_INVALID_VALUE\0",
        400 => b"CUDA_ERROR_INVALID_HANDLE\0",
        600 => b"CUDA_ERROR_NOT_READY\0",
        800 => b"CUDA_ERROR_NOT_PERMITTED\0",
        _ => b"CUDA_ERROR_UNKNOWN\0",
    };
    // SAFETY: out-pointer from the caller; the string is static.
    unsafe { put(out, name.as_ptr().cast::<c_char>()) }
}

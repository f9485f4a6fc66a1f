//! The fake runtime's state: npu-sim devices behind AscendCL-style handles, and, in the
//! modules below, the parts of the runtime that live in that state and extend it: graph
//! capture, models built by hand, host functions, memory and its tasks, stream attributes
//! and the value operations (each with its entry points and its `impl Rt`; the state
//! holds their tables), contexts, and the callbacks and reports the devices send.

pub(crate) mod build;
pub(crate) mod capture;
mod contexts;
pub(crate) mod host_func;
pub(crate) mod memory;
mod reports;
pub(crate) mod stream_attrs;
pub(crate) mod value_ops;

use crate::numbering::Numbering;
use crate::{AclError, AclrtExceptionInfo, Handle};
use npu_sim::{EventId, Profile, SimDevice, StreamId};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use npud_proto::codes::acl::{
    INVALID_PARAM, RT_CONTEXT_NULL as CONTEXT_NULL, RT_INVALID_DEVICEID as INVALID_DEVICE,
    RT_INVALID_HANDLE as INVALID_HANDLE, RT_STREAM_CONTEXT as STREAM_CONTEXT,
};
/// NO_STREAM_RESOURCE and NO_EVENT_RESOURCE: the device (all processes together) has no
/// stream, or no event, left.
pub use npud_proto::codes::acl::{
    RT_INTERNAL_ERROR as INTERNAL, RT_NO_EVENT_RESOURCE as NO_EVENT_RESOURCE,
    RT_NO_STREAM_RESOURCE as NO_STREAM_RESOURCE,
};

struct Pending {
    func: unsafe extern "C" fn(*mut std::ffi::c_void),
    user_data: usize,
    blocking: bool,
    stream: usize,
}

#[derive(Default)]
struct Inner {
    next: usize,
    contexts: HashMap<usize, u32>,
    /// Each device's default context (made by aclrtSetDevice) and its reference count.
    defaults: HashMap<u32, (usize, u32)>,
    /// Live contexts per device, the default one included: the runtime's device retains.
    /// The device's own default stream exists while there is one (see `Rt::new_context`).
    retains: HashMap<u32, u32>,
    streams: HashMap<usize, (u32, StreamId)>,
    /// The context each stream was created in (a reset frees the default context's).
    stream_ctx: HashMap<usize, usize>,
    by_sim: HashMap<(u32, StreamId), usize>,
    events: HashMap<usize, (u32, EventId)>,
    /// The default stream of each device (what its default context issues to) and of each
    /// context made with aclrtCreateContext: handles of their own in `streams`, never
    /// handed out; a call that names the NULL stream reaches them (`Rt::resolve`).
    device_default: HashMap<u32, usize>,
    context_default: HashMap<usize, usize>,
    subscribed: HashMap<usize, u64>,
    per_thread: HashMap<u64, u32>,
    due: HashMap<u64, VecDeque<u64>>,
    callbacks: HashMap<u64, Pending>,
    /// aclrtValueWait's tasks not yet reached, by their callback (`value_ops`).
    value_waits: HashMap<u64, value_ops::Wait>,
    next_callback: u64,
    on_exception: Option<unsafe extern "C" fn(*mut AclrtExceptionInfo)>,
}

pub struct Rt {
    /// Every physical device of the host (NPU_SIM_DEVICES), indexed by physical id.
    pub devices: Vec<Arc<SimDevice>>,
    /// This process's view of them: user and logical ids (see `numbering`).
    pub numbering: Numbering,
    /// The budget shared with other processes (`NPU_SIM_SHARED`), when set.
    shared: Option<npu_sim::shared::SharedBudget>,
    /// Streams for internal synchronisation each context holds (`npud_proto::soc`).
    context_sync: u32,
    /// The device event table shared the same way.
    shared_events: Option<npu_sim::shared::SharedBudget>,
    /// The thread that runs host callbacks' reports (None if it could not start).
    reports: Option<npu_sim::fleet::Reports>,
    inner: Mutex<Inner>,
    /// Held across every context's creation and destruction (aclrtSetDevice and
    /// aclrtResetDevice included), so threads that set one device at once share one
    /// default context (the runtime's `rtSetDevice` makes one per device and counts
    /// references per process: the reference notes' interposition.md, 1.1, from the CANN
    /// docs) and the device's own default stream is made and freed once. Taken before
    /// `inner` and `captures`, never after.
    sets: Mutex<()>,
    /// Graph captures and their models (`capture`). Taken before `inner`, never after.
    captures: Mutex<capture::Captures>,
    /// Models built by hand and the work persistent streams keep (`build`). Taken alone,
    /// with no other of these locks held.
    builds: Mutex<build::Builds>,
    due: Condvar,
    /// When aclInit made the runtime: what aclrtEventGetTimestamp counts from, in place of
    /// the device's start.
    pub started: std::time::Instant,
}

static RT: OnceLock<Rt> = OnceLock::new();

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The SoC of the simulated product (NPU_SIM_PROFILE), as real parts name theirs.
pub fn soc_name() -> &'static std::ffi::CStr {
    match std::env::var("NPU_SIM_PROFILE").unwrap_or_default().as_str() {
        "atlas-a2" => c"Ascend910B3",
        "atlas-a3" => c"Ascend910_9391",
        "atlas-inference" => c"Ascend310P3",
        "atlas-200i-a2" => c"Ascend310B1",
        _ => c"Ascend910A",
    }
}

/// Whether the part is an Atlas A2 or A3 or an Ascend 950: the parts several pages (and
/// the open runtime's feature tables) set apart from the training, inference and 200I/500
/// A2 parts.
pub fn a2_a3_or_950() -> bool {
    let soc = soc_name().to_bytes();
    soc.starts_with(b"Ascend910B") || soc.starts_with(b"Ascend910_93") || soc.starts_with(b"Ascend950")
}

/// Whether aclrtSetStreamFailureMode takes the default stream (NULL): on Ascend 950, A3
/// and A2 parts (its page: "支持指定默认Stream（即stream参数传入NULL）"), not on the
/// training, inference and 200I/500 A2 parts.
pub fn default_failure_mode_allowed() -> bool {
    a2_a3_or_950()
}

/// aclInit: true the first time. The runtime itself may have started before, at a runtime
/// layer call (`rtSetDevice` needs no aclInit).
pub fn init() -> bool {
    static ACL_INIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    runtime();
    !ACL_INIT.swap(true, std::sync::atomic::Ordering::AcqRel)
}

/// The fake's runtime, started on first use.
pub fn runtime() -> &'static Rt {
    RT.get_or_init(|| {
        let mut profile =
            Profile::by_name(&std::env::var("NPU_SIM_PROFILE").unwrap_or_else(|_| "atlas-training".into()))
                .unwrap_or_default();
        // Where contexts hold no internal-sync stream of their own (the training parts), the
        // device's exist once, whoever runs on it (the aclrtCreateStream page: N = limit -
        // default streams - internal-sync streams): the budget shared across processes
        // never has them to give. On the inference parts every context holds one instead
        // (see `Rt::new_context`), taken from the shared budget like any stream, and the
        // device has none of its own.
        let context_sync = npud_proto::soc::context_sync_streams(&soc_name().to_string_lossy());
        if context_sync > 0 {
            profile.internal_sync_streams = 0;
        }
        let devices = npu_sim::fleet::devices_from_env(&profile);
        let reports = npu_sim::fleet::deliver_reports_on_thread(&devices, "fake-acl-reports", |device, report| {
            if let Some(rt) = RT.get() {
                rt.dispatch(device, report);
            }
        })
        .ok();
        npu_sim::fork::register(|| rt().map(|r| Box::new(r.hold_for_fork()) as Box<dyn std::any::Any>));
        let numbering = Numbering::from_env(devices.len() as u32);
        crate::device_nodes::open_visible(numbering.physical_ids());
        let shared =
            npu_sim::shared::SharedBudget::from_env(profile.stream_limit.saturating_sub(profile.internal_sync_streams));
        let shared_events = npu_sim::shared::SharedBudget::events_from_env(profile.event_limit);
        Rt {
            devices,
            numbering,
            shared,
            shared_events,
            context_sync,
            reports,
            inner: Mutex::new(Inner { next: 0x7f00_0000_1000, ..Inner::default() }),
            sets: Mutex::new(()),
            captures: Mutex::new(capture::Captures::default()),
            builds: Mutex::new(build::Builds::default()),
            due: Condvar::new(),
            started: std::time::Instant::now(),
        }
    })
}

pub fn rt() -> Option<&'static Rt> {
    RT.get()
}

pub fn current_context() -> Option<Handle> {
    let c = CURRENT.with(Cell::get);
    (c != 0).then_some(c as Handle)
}

/// A stream, default or not, is about to be freed: its state callbacks hear of it while it
/// still exists (DESTROY_PRE), then its kept attributes go.
fn stream_going(h: usize) {
    crate::stream_state::notify(h, crate::stream_state::DESTROY_PRE);
    stream_attrs::forget(h);
}

/// The calling OS thread, as aclrtSubscribeReport identifies threads.
pub fn thread_id() -> u64 {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as u64 }
}

/// The locks the runtime's own threads take, held by a thread about to fork (`npu_sim::fork`).
pub struct ForkHolds {
    _inner: MutexGuard<'static, Inner>,
    _devices: Vec<npu_sim::ForkHold<'static>>,
    _reports: Option<npu_sim::fleet::ReportsHold<'static>>,
}

impl Rt {
    /// Takes, in the order the runtime's threads nest them (the report thread takes the
    /// handle table; a device's timer thread queues reports under the device's lock), every
    /// lock a thread of the runtime's own may hold at the moment of a fork.
    pub fn hold_for_fork(&'static self) -> ForkHolds {
        ForkHolds {
            _inner: self.lock(),
            _devices: self.devices.iter().map(|d| d.hold_for_fork()).collect(),
            _reports: self.reports.as_ref().map(npu_sim::fleet::Reports::hold_for_fork),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mint(inner: &mut Inner) -> usize {
        inner.next += 0x40;
        inner.next
    }

    /// A fresh handle value, unique in this process.
    pub fn mint_handle(&self) -> usize {
        Self::mint(&mut self.lock())
    }

    pub fn captures(&self) -> MutexGuard<'_, capture::Captures> {
        self.captures.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn builds(&self) -> MutexGuard<'_, build::Builds> {
        self.builds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device a program names by its user id (the id aclrtSetDevice takes).
    pub fn device(&self, id: i32) -> Result<&Arc<SimDevice>, AclError> {
        self.numbering.physical_of_user(id).and_then(|p| self.devices.get(p as usize)).ok_or(INVALID_DEVICE)
    }

    /// The user id of a physical device this process can reach (what aclrtGetDevice and
    /// exception reports name).
    pub fn user_id(&self, physical: u32) -> u32 {
        self.numbering.user_of_physical(physical).unwrap_or(physical)
    }

    /// Takes `n` streams from the budget shared with other processes, if there is one.
    pub(crate) fn take_shared(&self, device: u32, n: u32) -> Result<(), AclError> {
        self.shared.as_ref().map_or(Ok(()), |s| {
            s.take(device, n).map_err(|e| match e {
                npu_sim::shared::SharedError::Exhausted => NO_STREAM_RESOURCE,
                npu_sim::shared::SharedError::Io => INTERNAL,
            })
        })
    }

    pub(crate) fn give_shared(&self, device: u32, n: u32) {
        if let Some(s) = &self.shared {
            s.give(device, n);
        }
    }

    /// Events from the table shared with other processes, if there is one.
    fn take_shared_event(&self, device: u32) -> Result<(), AclError> {
        self.shared_events.as_ref().map_or(Ok(()), |s| {
            s.take(device, 1).map_err(|e| match e {
                npu_sim::shared::SharedError::Exhausted => NO_EVENT_RESOURCE,
                npu_sim::shared::SharedError::Io => INTERNAL,
            })
        })
    }

    fn give_shared_events(&self, device: u32, n: u32) {
        if let Some(s) = &self.shared_events {
            s.give(device, n);
        }
    }

    fn lock_sets(&self) -> MutexGuard<'_, ()> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream a call that names `stream` issues to: the stream itself, or for NULL the
    /// current context's default stream. In the open runtime, synchronize, query, event
    /// record and reset, stream waits, callbacks and report subscriptions all take a NULL
    /// stream as `CurrentContext()->DefaultStream_()` (hicann/runtime
    /// `src/runtime/api/impl/api_impl.cc`), as the seeds' record_event and
    /// stream_wait_event say ("If the default stream is used, set this parameter to 0"),
    /// and the vendor's own samples synchronize it with `aclrtSynchronizeStream(nullptr)`.
    /// No current context: ACL_ERROR_RT_CONTEXT_NULL.
    pub fn resolve(&self, stream: Handle) -> Result<Handle, AclError> {
        if !stream.is_null() {
            return Ok(stream);
        }
        let ctx = CURRENT.with(Cell::get);
        let inner = self.lock();
        let device = inner.contexts.get(&ctx).ok_or(CONTEXT_NULL)?;
        let own = inner.context_default.get(&ctx).or_else(|| inner.device_default.get(device));
        own.map(|h| *h as Handle).ok_or(CONTEXT_NULL)
    }

    /// The stream a call names, NULL naming the current context's default stream.
    pub fn named_stream(&self, h: Handle) -> Result<(&Arc<SimDevice>, StreamId), AclError> {
        self.stream(self.resolve(h)?)
    }

    /// The context a stream made with aclrtCreateStream(WithConfig) belongs to.
    pub fn stream_context(&self, h: Handle) -> Option<usize> {
        self.lock().stream_ctx.get(&(h as usize)).copied()
    }

    /// Whether `h` is a context's default stream (aclrtCtxGetCurrentDefaultStream's handle).
    pub fn is_default_stream(&self, h: Handle) -> bool {
        let inner = self.lock();
        inner.device_default.values().chain(inner.context_default.values()).any(|s| *s == h as usize)
    }

    pub fn current_device(&self) -> Result<&Arc<SimDevice>, AclError> {
        let ctx = CURRENT.with(Cell::get);
        let device = *self.lock().contexts.get(&ctx).ok_or(CONTEXT_NULL)?;
        Ok(&self.devices[device as usize])
    }

    pub fn create_stream(&self, priority: u32, flags: u32) -> Result<Handle, AclError> {
        let dev = self.current_device()?;
        self.take_shared(dev.id(), 1)?;
        let id = match dev.create_stream(priority, flags) {
            Ok(id) => id,
            Err(e) => {
                self.give_shared(dev.id(), 1);
                return Err(e.code);
            }
        };
        let mut inner = self.lock();
        let h = Self::mint(&mut inner);
        let ctx = CURRENT.with(Cell::get);
        inner.stream_ctx.insert(h, ctx);
        inner.streams.insert(h, (dev.id(), id));
        inner.by_sim.insert((dev.id(), id), h);
        drop(inner);
        self.stream_made(h, flags);
        crate::stream_state::notify(h, crate::stream_state::CREATE_POST);
        Ok(h as Handle)
    }

    pub fn stream(&self, h: Handle) -> Result<(&Arc<SimDevice>, StreamId), AclError> {
        if h.is_null() {
            return Err(INVALID_PARAM);
        }
        let (device, id) = *self.lock().streams.get(&(h as usize)).ok_or(INVALID_HANDLE)?;
        Ok((&self.devices[device as usize], id))
    }

    /// aclrtDestroyStream(+Force), as the runtime checks it: not a stream in capture, not
    /// a default stream (it goes with its context), and only from the context the stream
    /// was made in (`ApiImpl::StreamDestroy`: no current context is
    /// ACL_ERROR_RT_CONTEXT_NULL, another context ACL_ERROR_RT_STREAM_CONTEXT).
    pub fn destroy_stream(&self, h: Handle, force: bool) -> Result<(), AclError> {
        self.stream(self.not_capturing(h)?)?;
        if self.is_default_stream(h) {
            return Err(INVALID_PARAM);
        }
        let current = CURRENT.with(Cell::get);
        if current == 0 {
            return Err(CONTEXT_NULL);
        }
        if self.lock().stream_ctx.get(&(h as usize)).is_some_and(|made_in| *made_in != current) {
            return Err(STREAM_CONTEXT);
        }
        if !force {
            // aclrtDestroyStream waits for the stream's pending tasks (the runtime's
            // Stream::TearDown loops while any is pending; shared/reference/interposition.md
            // §1.1); aclrtDestroyStreamForce does not. Waited for before the stream leaves
            // the context's tables, so its callbacks are still delivered meanwhile. A task
            // that failed still ends the wait: the stream is destroyed all the same.
            let (dev, id) = self.stream(h)?;
            if !dev.stream_query(id).unwrap_or(true) {
                let _ = crate::block_until(|w| dev.on_stream_drained(id, w), None, INTERNAL);
            }
        }
        self.drop_stream(h, force)
    }

    /// Frees a stream whatever context is current (a context's teardown frees its own).
    fn drop_stream(&self, h: Handle, force: bool) -> Result<(), AclError> {
        let (dev, id) = self.stream(h)?;
        stream_going(h as usize);
        {
            let h = h as usize;
            let mut inner = self.lock();
            inner.streams.remove(&h);
            inner.stream_ctx.remove(&h);
            inner.by_sim.remove(&(dev.id(), id));
            if let Some(thread) = inner.subscribed.remove(&h) {
                release_thread(&mut inner, thread);
            }
            drop(inner);
            self.stream_gone(h);
            self.capture_attrs_gone(h);
        }
        let result = if force { dev.destroy_stream_force(id) } else { dev.destroy_stream(id) }.map_err(|e| e.code);
        self.give_shared(dev.id(), 1);
        result
    }

    /// Streams still free on the current context's device: all processes sharing the
    /// budget counted when there is one, as the driver counts them.
    pub fn available_streams(&self) -> Result<u32, AclError> {
        let dev = self.current_device()?;
        let own = dev.available_streams();
        Ok(self.shared.as_ref().map_or(own, |s| s.available(dev.id()).min(own)))
    }

    /// aclrtGetEventAvailNum: what the device's event table has left, all processes counted.
    pub fn available_events(&self) -> Result<u32, AclError> {
        let dev = self.current_device()?;
        let own = dev.available_events();
        Ok(self.shared_events.as_ref().map_or(own, |s| s.available(dev.id()).min(own)))
    }

    pub fn streams_on(&self, device: u32) -> Vec<StreamId> {
        self.lock().streams.values().filter(|(d, _)| *d == device).map(|(_, id)| *id).collect()
    }

    pub fn create_event(&self, flags: u32) -> Result<Handle, AclError> {
        let dev = self.current_device()?;
        let timing = flags & npu_sim::flags::EVENT_TIME_LINE != 0;
        self.take_shared_event(dev.id())?;
        let id = dev.create_event(flags, timing).map_err(|e| {
            self.give_shared_events(dev.id(), 1);
            e.code
        })?;
        let mut inner = self.lock();
        let h = Self::mint(&mut inner);
        inner.events.insert(h, (dev.id(), id));
        Ok(h as Handle)
    }

    pub fn event(&self, h: Handle) -> Result<(&Arc<SimDevice>, EventId), AclError> {
        if h.is_null() {
            return Err(INVALID_PARAM);
        }
        let (device, id) = *self.lock().events.get(&(h as usize)).ok_or(INVALID_HANDLE)?;
        Ok((&self.devices[device as usize], id))
    }

    pub fn destroy_event(&self, h: Handle) -> Result<(), AclError> {
        let (dev, id) = self.event(h)?;
        self.lock().events.remove(&(h as usize));
        self.give_shared_events(dev.id(), 1);
        dev.destroy_event(id).map_err(|e| e.code)
    }
}

fn release_thread(inner: &mut Inner, thread: u64) {
    if let Some(n) = inner.per_thread.get_mut(&thread) {
        *n -= 1;
        if *n == 0 {
            inner.per_thread.remove(&thread);
        }
    }
}

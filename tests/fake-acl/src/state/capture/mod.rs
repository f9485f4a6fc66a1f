//! Graph capture, from the aclmdlRI pages (shared/reference/acl.md "Graph capture") and
//! the open runtime that implements them (hicann/runtime `src/runtime/feature/aclgraph`):
//! `aclmdlRICaptureBegin(stream, mode)` puts a stream into capture, `aclmdlRICaptureEnd`
//! returns the model (`aclmdlRI`) that holds what was captured, `aclmdlRIGetStreams` lists
//! the model's streams and `aclmdlRIDestroy` frees it. The vendor warns that captured work
//! pulls more streams into capture state (through event dependencies and as the tasks
//! grow) and consumes stream resources until they can run out. The fake makes that
//! countable, as the runtime does it:
//!
//! - Begin takes one stream of the device for the capture (`StreamAddToCaptureModelProc`
//!   makes a capture stream and binds it to the model);
//! - every other stream that joins the capture by waiting (`aclrtStreamWaitEvent`) on an
//!   event recorded in a capturing stream takes one more;
//! - a stream in capture whose capture stream is full takes one more too (`tasks`:
//!   the runtime's cascade capture streams);
//! - the model holds them from End until it is destroyed, its context is (aclrtDestroyContext,
//!   or the device's default context at its last reset), or the process exits (the
//!   cross-process budget frees a dead process's streams);
//! - when the device has none left, the call that needed one fails with 207008.
//!
//! End fails as the runtime's `Context::StreamEndCapture` does, and what a failed End
//! leaves held is part of the books: on the wrong thread (a capture begun in a mode other
//! than RELAXED, ended from another thread: 107038) the stream leaves capture but the model
//! is not destroyed, so its streams stay held, reachable only through the handle
//! `aclmdlRICaptureGetInfo` gave; a capture that a stream could not grow into (507903) or
//! whose side streams never joined back (107025) is destroyed with its streams.
//!
//! The streams a model holds are real streams of the simulated device and of the shared
//! budget, so every count (aclrtGetStreamAvailableNum, other processes' creations) sees
//! them.
//!
//! Captured work runs when the model is executed, not when it is issued (aclmdlRICaptureBegin:
//! tasks issued to a stream in capture are kept in the model instead of running): the fake
//! keeps the memory tasks issued to a capturing stream (`aclrtMemcpyAsync` and
//! `aclrtMemsetAsync`, its tasks that write memory) and makes them, in order, at each
//! `aclmdlRIExecuteAsync` and
//! `aclmdlRIExecute`. So a program that captures once and replays with new inputs sees each
//! replay's result, as on the device. Event records, waits and callbacks still run when
//! issued, but for those that cross the capture's edge (`external`). Modes (GLOBAL 0, THREAD_LOCAL 1, RELAXED 2) decide which thread may end a
//! capture, and which may call the "unsafe" functions meanwhile (`modes`).

mod added;
mod external;
mod modes;
pub mod rules;
mod tasks;

pub use external::{DEFAULT as EVENT_FLAG_DEFAULT, EXTERNAL as EVENT_FLAG_EXTERNAL};
pub use modes::exchange_thread_mode;

use crate::Handle;
use crate::state::{NO_STREAM_RESOURCE, Rt};
use modes::RELAXED;
use npu_sim::StreamId;
use npud_proto::codes::acl::{
    AclError, INVALID_PARAM, RT_CONTEXT_NULL, RT_EVENT_CAPTURED, RT_FEATURE_NOT_SUPPORT, RT_PARAM_INVALID,
    RT_STREAM_CAPTURE_INVALIDATED, RT_STREAM_CAPTURE_UNMATCHED, RT_STREAM_CAPTURE_WRONG_THREAD, RT_STREAM_CAPTURED,
    RT_STREAM_CONTEXT, RT_STREAM_MODEL, RT_STREAM_NOT_CAPTURED,
};
use std::collections::{HashMap, HashSet};
use std::thread::ThreadId;
use tasks::Member;

/// aclmdlRICaptureStatus.
pub const STATUS_NONE: u32 = 0;
pub const STATUS_ACTIVE: u32 = 1;
pub const STATUS_INVALIDATED: u32 = 2;

/// A memory task issued to a stream (its arguments as the call took them, already
/// checked): made at once, or, issued to a stream in capture, each time the model is
/// executed.
#[derive(Debug, Clone, Copy)]
pub enum Task {
    /// aclrtMemcpyAsync: `count` bytes from `src` to `dst`.
    Copy { dst: usize, src: usize, count: usize },
    /// aclrtMemsetAsync: `count` bytes at `dst` set to `value`.
    Set { dst: usize, value: u8, count: usize },
    /// aclrtValueWrite: the 64-bit `value` at `dst` (8-byte aligned).
    Value { dst: usize, value: u64 },
    /// A kernel launch (`launch`): the simulated device counts it.
    Kernel,
    /// A host function or callback issued to a capturing stream: called at each execution.
    Call { func: usize, data: usize },
}

struct Capture {
    device: u32,
    /// The context of the stream it began on, whose capture mode it counts in (`modes`).
    context: usize,
    model: usize,
    /// The mode it began in, and the thread that began it: in a mode other than RELAXED
    /// only that thread may end it (`CheckCaptureStreamThreadIsMatch`).
    mode: u32,
    thread: ThreadId,
    /// The device streams the capture holds so far.
    held: Vec<StreamId>,
    /// The tasks captured so far, in the order they were issued.
    tasks: Vec<Task>,
    /// Each stream in the capture (the one it began on too) → what it issued into it.
    members: HashMap<usize, Member>,
    /// Each event recorded in the capture → the streams that waited on that record.
    waits: HashMap<usize, Vec<usize>>,
    /// A stream could not grow into one more capture stream (`SingleStreamTerminateCapture`):
    /// the capture can only fail to end.
    invalidated: bool,
    /// Events recorded and waited on with the EXTERNAL flags (`external`).
    external_records: Vec<usize>,
    external_waits: Vec<usize>,
}

struct Model {
    device: u32,
    /// The context the capture was made in: the model goes with it.
    context: usize,
    held: Vec<StreamId>,
    /// What aclmdlRIGetStreams hands out for them.
    handles: Vec<usize>,
    tasks: Vec<Task>,
    /// Events its execution records (`external`).
    external_records: Vec<usize>,
}

#[derive(Default)]
pub struct Captures {
    /// The stream a capture began on → the capture.
    active: HashMap<usize, Capture>,
    /// Every stream in capture state → the stream its capture began on.
    member_of: HashMap<usize, usize>,
    /// An event last recorded in a capturing stream → the stream that capture began on.
    recorded_in: HashMap<usize, usize>,
    models: HashMap<usize, Model>,
    /// Per context, its captures under way by mode (`modes`).
    modes: HashMap<usize, [u32; 3]>,
    /// Each event's uses with and without the EXTERNAL flags (`external`).
    event_use: HashMap<usize, external::EventUse>,
    /// Streams whose flags keep them out of captures, events of the new mode, and events
    /// made with ACL_EVENT_EXTERNAL (`rules`).
    uncapturable: HashSet<usize>,
    new_mode: HashSet<usize>,
    external_made: HashSet<usize>,
}

impl Rt {
    /// One stream of `device` for a capture: from the shared budget and the device.
    fn take_capture_stream(&self, device: u32) -> Result<StreamId, AclError> {
        self.take_shared(device, 1)?;
        self.devices[device as usize].create_stream(0, 0).map_err(|_| {
            self.give_shared(device, 1);
            NO_STREAM_RESOURCE
        })
    }

    fn free_capture_streams(&self, device: u32, held: &[StreamId]) {
        for id in held {
            let _ = self.devices[device as usize].destroy_stream_force(*id);
        }
        self.give_shared(device, held.len() as u32);
    }

    /// What Begin and End check of the stream before anything else (`ApiImpl::StreamBeginCapture`
    /// and `StreamEndCapture`): a current context (ACL_ERROR_RT_CONTEXT_NULL), the stream
    /// made in it (ACL_ERROR_RT_STREAM_CONTEXT), not bound to a model
    /// (ACL_ERROR_RT_STREAM_MODEL), not a default stream ("cannot be used in the ACL
    /// Graph": ACL_ERROR_RT_FEATURE_NOT_SUPPORT). So a capture's streams are always on the
    /// current device.
    fn capturable(&self, stream: Handle) -> Result<u32, AclError> {
        let (dev, _) = self.stream(stream)?;
        let current = crate::state::current_context().ok_or(RT_CONTEXT_NULL)? as usize;
        if self.stream_context(stream).is_some_and(|made_in| made_in != current) {
            return Err(RT_STREAM_CONTEXT);
        }
        if self.bound_to_model(stream) {
            return Err(RT_STREAM_MODEL);
        }
        if self.is_default_stream(stream) {
            return Err(RT_FEATURE_NOT_SUPPORT);
        }
        Ok(dev.id())
    }

    pub fn capture_begin(&self, stream: Handle, mode: u32) -> Result<(), AclError> {
        // A mode past RELAXED: RT_ERROR_INVALID_VALUE, 107000 (`ApiErrorDecorator::
        // StreamBeginCapture`, `feature/aclgraph/api_error_aclgraph.cc` 41-44).
        if mode > RELAXED {
            return Err(RT_PARAM_INVALID);
        }
        self.capture_flags_ok(stream as usize)?;
        let device = self.capturable(stream)?;
        if self.in_capture(stream) {
            return Err(RT_STREAM_CAPTURED);
        }
        let first = self.take_capture_stream(device)?;
        let model = self.mint_handle();
        let context = crate::state::current_context().map_or(0, |c| c as usize);
        let mut c = self.captures();
        c.member_of.insert(stream as usize, stream as usize);
        c.mode_entered(context, mode);
        let capture = Capture {
            device,
            context,
            model,
            mode,
            thread: std::thread::current().id(),
            held: vec![first],
            tasks: Vec::new(),
            members: HashMap::from([(stream as usize, Member::default())]),
            waits: HashMap::new(),
            invalidated: false,
            external_records: Vec::new(),
            external_waits: Vec::new(),
        };
        c.active.insert(stream as usize, capture);
        Ok(())
    }

    /// Ends the capture begun on `stream`: the model now holds its streams. The checks
    /// and what each failure leaves are `Context::StreamEndCapture`'s (module docs).
    pub fn capture_end(&self, stream: Handle) -> Result<Handle, AclError> {
        self.capturable(stream)?;
        let mut c = self.captures();
        let Some(capture) = c.active.remove(&(stream as usize)) else {
            // Joined, not begun, here: the capture ends on the stream that began it.
            return Err(if c.member_of.contains_key(&(stream as usize)) {
                RT_STREAM_CAPTURE_UNMATCHED
            } else {
                RT_STREAM_NOT_CAPTURED
            });
        };
        c.member_of.retain(|_, origin| *origin != stream as usize);
        c.recorded_in.retain(|_, origin| *origin != stream as usize);
        c.mode_exited(capture.context, capture.mode, true);
        drop(c);
        let wrong_thread = capture.mode != RELAXED && capture.thread != std::thread::current().id();
        let failed = if capture.invalidated {
            Some(RT_STREAM_CAPTURE_INVALIDATED)
        } else {
            capture.unjoined(stream as usize).err()
        };
        match (wrong_thread, failed) {
            (false, Some(e)) => {
                self.free_capture_streams(capture.device, &capture.held);
                Err(e)
            }
            (wrong_thread, _) => {
                let model = capture.model;
                let handles = capture.held.iter().map(|_| self.mint_handle()).collect();
                let kept = Model {
                    device: capture.device,
                    context: capture.context,
                    held: capture.held,
                    handles,
                    tasks: capture.tasks,
                    external_records: capture.external_records,
                };
                self.captures().models.insert(model, kept);
                if wrong_thread { Err(RT_STREAM_CAPTURE_WRONG_THREAD) } else { Ok(model as Handle) }
            }
        }
    }

    /// End with a NULL out-pointer (`ApiImpl::StreamEndCapture`, hicann/runtime
    /// `feature/aclgraph/v100/api_impl_aclgraph.cc` 41-62): a stream in capture is refused
    /// with RT_ERROR_INVALID_VALUE (107000) before anything else, and its capture goes on;
    /// any other stream fails End's other checks, or as not captured.
    pub fn capture_end_checks(&self, stream: Handle) -> Result<(), AclError> {
        if self.in_capture(stream) {
            return Err(RT_PARAM_INVALID);
        }
        self.capturable(stream)?;
        Err(RT_STREAM_NOT_CAPTURED)
    }

    /// Whether `stream` is in a capture under way (it began one, or joined one).
    pub fn in_capture(&self, stream: Handle) -> bool {
        let c = self.captures();
        c.member_of.get(&(stream as usize)).is_some_and(|o| c.active.contains_key(o))
    }

    /// Refuses what a stream in capture cannot do: be synchronized, queried or destroyed
    /// (ACL_ERROR_RT_STREAM_CAPTURED), as the open runtime checks before each.
    pub fn not_capturing(&self, stream: Handle) -> Result<Handle, AclError> {
        if self.in_capture(stream) { Err(RT_STREAM_CAPTURED) } else { Ok(stream) }
    }

    /// Refuses a host wait on an event whose latest record is in a capture under way
    /// (ACL_ERROR_RT_EVENT_CAPTURED): captured work does not run until the model does.
    pub fn not_captured_event(&self, event: Handle) -> Result<Handle, AclError> {
        let c = self.captures();
        match c.recorded_in.get(&(event as usize)).is_some_and(|o| c.active.contains_key(o)) {
            true => Err(RT_EVENT_CAPTURED),
            false => Ok(event),
        }
    }

    /// The event a host wait names, unless its latest record is in a capture under way.
    pub fn waitable_event(
        &self,
        event: Handle,
    ) -> Result<(&std::sync::Arc<npu_sim::SimDevice>, npu_sim::EventId), AclError> {
        self.event(self.not_captured_event(event)?)
    }

    /// aclmdlRICaptureGetInfo: (status, the model being captured into).
    pub fn capture_info(&self, stream: Handle) -> Result<(u32, Handle), AclError> {
        self.stream(stream)?;
        let c = self.captures();
        Ok(match c.member_of.get(&(stream as usize)).and_then(|o| c.active.get(o)) {
            // A capture a stream could not grow into, or that waited across another's
            // edge, is INVALIDATED until it ends (`Stream::SingleStreamTerminateCapture`
            // and `TerminateCapture` set the status; `Context::StreamGetCaptureInfo`,
            // `feature/aclgraph/context_aclgraph.cc` 656-688, reports it with its model).
            Some(capture) if capture.invalidated => (STATUS_INVALIDATED, capture.model as Handle),
            Some(capture) => (STATUS_ACTIVE, capture.model as Handle),
            None => (STATUS_NONE, std::ptr::null_mut()),
        })
    }

    /// What executing `model` does: its captured tasks, in order (or a model built by
    /// hand's, `build`).
    pub fn model_tasks(&self, model: Handle) -> Result<Vec<Task>, AclError> {
        if let Some(tasks) = self.built_tasks(model) {
            return tasks;
        }
        self.captures().models.get(&(model as usize)).map(|m| m.tasks.clone()).ok_or(INVALID_PARAM)
    }

    /// The streams a model holds (a built model's: those bound to it).
    pub fn model_streams(&self, model: Handle) -> Result<Vec<usize>, AclError> {
        if let Some(streams) = self.built_streams(model) {
            return Ok(streams);
        }
        self.captures().models.get(&(model as usize)).map(|m| m.handles.clone()).ok_or(INVALID_PARAM)
    }

    pub fn model_destroy(&self, model: Handle) -> Result<(), AclError> {
        if self.built_destroy(model) {
            return Ok(());
        }
        let m = self.captures().models.remove(&(model as usize)).ok_or(INVALID_PARAM)?;
        self.free_capture_streams(m.device, &m.held);
        Ok(())
    }

    /// A context's teardown (aclrtDestroyContext, or the default context at the device's
    /// last reset) frees its models and abandons its captures before its streams go, as the
    /// runtime's `TearDownModelsOnContextTearDown` does.
    pub fn drop_captures_in(&self, ctx: usize) {
        let freed: Vec<(u32, Vec<StreamId>)> = {
            let mut c = self.captures();
            let origins: Vec<usize> = c.active.iter().filter(|(_, k)| k.context == ctx).map(|(o, _)| *o).collect();
            let ended: Vec<Capture> = origins.iter().filter_map(|o| c.active.remove(o)).collect();
            ended.iter().for_each(|k| c.mode_exited(k.context, k.mode, false));
            c.member_of.retain(|_, o| !origins.contains(o));
            c.recorded_in.retain(|_, o| !origins.contains(o));
            let mut freed: Vec<(u32, Vec<StreamId>)> = ended.into_iter().map(|k| (k.device, k.held)).collect();
            let models: Vec<usize> = c.models.iter().filter(|(_, m)| m.context == ctx).map(|(h, _)| *h).collect();
            freed.extend(models.iter().filter_map(|h| c.models.remove(h)).map(|m| (m.device, m.held)));
            freed
        };
        for (device, held) in freed {
            self.free_capture_streams(device, &held);
        }
    }
}

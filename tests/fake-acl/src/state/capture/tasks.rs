//! What the streams in a capture issue into it: memory tasks, event records and waits. Each
//! is a task on the stream's capture stream, and a capture stream holds only so many: the
//! runtime (`Stream::AllocCaptureTaskWithoutLock`) binds one more stream of the device to
//! the model when the current one is full (a cascade capture stream), and when it cannot
//! have one, the capture is invalidated (`SingleStreamTerminateCapture`) and the task
//! fails. Waits on events recorded in the capture also pull other streams into it.
//!
//! Records and waits are what End checks a capture's side streams by
//! (`Context::CheckCaptureModelValidity`): each stream that joined must end on an event
//! record that some stream of the capture waited on, and one of those waits must be the
//! origin stream's, or the capture has a side stream that never joined back (107025).

use super::{Capture, Captures, Task};
use crate::Handle;
use crate::state::Rt;
use npud_proto::codes::acl::{AclError, RT_STREAM_UNJOINED, STREAM_CAPTURE_CONFLICT};

/// A capture stream's queue, as `Stream::AllocCaptureTaskWithoutLock` fills it (hicann/runtime
/// `feature/aclgraph/stream_capture.cc` 75-103): before each task, a stream whose entries
/// plus the 32 kept for the model's own tasks (`CAPTURE_TASK_RESERVED_NUM`, `stream.hpp` 54)
/// plus the device's reserve (`expandStreamRsvTaskNum`: 0 on Atlas A2/A3 and the inference
/// parts) reach its depth (`rtsqDepth` 2048 in the `910_B_93` and `dc` device tables) gets a
/// new capture stream; then the task's entries are added. So the bound is checked before a
/// task whatever its size.
pub const SQ_DEPTH: u32 = 2048;
pub const MODEL_RESERVED: u32 = 32;
pub const DEVICE_RESERVE: u32 = 0;

/// Entries a task takes (`AllocTask`'s `sqeNum`): one, but a wait on an event recorded in
/// the capture is a memory-wait task of MEM_WAIT_SQE_NUM (4; `event_capture.cc` 21-28,
/// `internal_error_define.hpp` 23), and a wait with the EXTERNAL flags one of
/// MEM_WAIT_V2_SQE_NUM (3; `capture_model_utils.cc` 555-570, `memory_task_v100.cc` 681).
pub const ENTRIES_TASK: u32 = 1;
pub const ENTRIES_CAPTURED_WAIT: u32 = 4;
pub const ENTRIES_EXTERNAL_WAIT: u32 = 3;

/// One stream's part in a capture.
#[derive(Debug, Default)]
pub struct Member {
    /// Tasks on its current capture stream.
    queued: u32,
    /// The event its last task recorded; None when its last task was anything else.
    last_record: Option<usize>,
}

impl Member {
    /// Its last task is not an event record (a join point).
    pub(super) fn clear_record(&mut self) {
        self.last_record = None;
    }
}

impl Capture {
    /// One more task from `stream`: on its capture stream, or, that one full, on another
    /// the capture takes (and the model holds) for it. Without one the capture is
    /// invalidated and the task fails as the stream's creation did (207008).
    pub(super) fn issue(&mut self, rt: &Rt, stream: usize, entries: u32) -> Result<&mut Member, AclError> {
        let member = self.members.entry(stream).or_default();
        if member.queued + MODEL_RESERVED + DEVICE_RESERVE >= SQ_DEPTH {
            match rt.take_capture_stream(self.device) {
                Ok(id) => {
                    self.held.push(id);
                    member.queued = 0;
                }
                Err(e) => {
                    self.invalidated = true;
                    return Err(e);
                }
            }
        }
        member.queued += entries;
        Ok(member)
    }

    /// Whether every stream that joined the capture begun on `origin` joined back
    /// (`CheckCaptureModelValidity`); 107025 if one did not.
    pub(super) fn unjoined(&self, origin: usize) -> Result<(), AclError> {
        let mut back_to_origin = false;
        let mut sides = 0usize;
        for (&stream, member) in &self.members {
            if stream == origin {
                continue;
            }
            sides += 1;
            let waiters = member.last_record.and_then(|e| self.waits.get(&e)).map_or(&[][..], Vec::as_slice);
            if waiters.is_empty() {
                return Err(RT_STREAM_UNJOINED);
            }
            back_to_origin |= waiters.contains(&origin);
        }
        if sides == 0 || back_to_origin { Ok(()) } else { Err(RT_STREAM_UNJOINED) }
    }
}

impl Captures {
    /// The capture under way that `stream` is in, by the stream it began on.
    fn origin_of(&self, stream: usize) -> Option<usize> {
        self.member_of.get(&stream).copied().filter(|o| self.active.contains_key(o))
    }
}

impl Rt {
    /// aclrtRecordEvent(event, stream), before the record: in a capture, a task that the
    /// streams waiting on it can join by.
    pub fn capture_recorded(&self, event: Handle, stream: Handle) -> Result<(), AclError> {
        let (event, stream) = (event as usize, stream as usize);
        if self.in_capture(stream as Handle) {
            self.capture_record_allowed(event, stream)?;
        }
        let mut guard = self.captures();
        let c = &mut *guard;
        let Some(capture) = c.origin_of(stream).and_then(|o| c.active.get_mut(&o)) else {
            c.recorded_in.remove(&event);
            return Ok(());
        };
        capture.issue(self, stream, ENTRIES_TASK)?.last_record = Some(event);
        capture.waits.insert(event, Vec::new());
        let origin = c.member_of[&stream];
        c.recorded_in.insert(event, origin);
        Ok(())
    }

    /// aclrtStreamWaitEvent(stream, event), before the wait: a task of the capture `stream`
    /// is in; and a stream outside any capture that waits on an event recorded in one
    /// joins it, which takes one more stream. A stream of one capture cannot wait on an
    /// event recorded in another (ACL_ERROR_STREAM_CAPTURE_CONFLICT).
    ///
    /// Any failure of a captured wait (no stream for the join, the conflict, a full queue
    /// with no stream to grow into) invalidates the captures on both sides of it: the
    /// event's and the waiting stream's (`ApiImpl::StreamWaitEvent` calls
    /// `TerminateCapture(evt, stm)` on every error of `CaptureEventWait`, hicann/runtime
    /// `api/impl/api_impl.cc` 1640-1641, `feature/aclgraph/capture_model_utils.cc` 125-138),
    /// so they can only fail to end (507903), freeing their streams.
    pub fn capture_waits(&self, stream: Handle, event: Handle) -> Result<(), AclError> {
        let (event, stream) = (event as usize, stream as usize);
        // What the runtime checks before it touches the capture (`rules`).
        let (capturing, captured_event) = {
            let c = self.captures();
            (c.origin_of(stream).is_some(), c.recorded_in.get(&event).is_some_and(|o| c.active.contains_key(o)))
        };
        if captured_event {
            self.captured_wait_allowed(stream)?;
        } else if capturing {
            self.outside_wait_allowed(event)?;
        }
        let mut guard = self.captures();
        let c = &mut *guard;
        let recorded = c.recorded_in.get(&event).copied().filter(|o| c.active.contains_key(o));
        let (origin, joins) = match (c.origin_of(stream), recorded) {
            (None, None) => return Ok(()),
            (Some(origin), Some(r)) if r != origin => {
                for o in [origin, r] {
                    if let Some(capture) = c.active.get_mut(&o) {
                        capture.invalidated = true;
                    }
                }
                return Err(STREAM_CAPTURE_CONFLICT);
            }
            (Some(origin), _) => (origin, false),
            (None, Some(origin)) => (origin, true),
        };
        let Some(capture) = c.active.get_mut(&origin) else { return Ok(()) };
        if joins {
            match self.take_capture_stream(capture.device) {
                Ok(id) => capture.held.push(id),
                Err(e) => {
                    capture.invalidated = true;
                    return Err(e);
                }
            }
            c.member_of.insert(stream, origin);
        }
        let entries = if recorded.is_some() { ENTRIES_CAPTURED_WAIT } else { ENTRIES_TASK };
        capture.issue(self, stream, entries)?.last_record = None;
        if recorded.is_some() {
            capture.waits.entry(event).or_default().push(stream);
        }
        Ok(())
    }

    /// Keeps `task` in the capture `stream` is part of (it began there, or joined it);
    /// false when the stream captures nothing, and the task is to be made now.
    pub fn capture_task(&self, stream: Handle, task: Task) -> Result<bool, AclError> {
        let stream = stream as usize;
        let mut guard = self.captures();
        let c = &mut *guard;
        let Some(capture) = c.origin_of(stream).and_then(|o| c.active.get_mut(&o)) else { return Ok(false) };
        capture.issue(self, stream, ENTRIES_TASK)?.last_record = None;
        capture.tasks.push(task);
        Ok(true)
    }
}

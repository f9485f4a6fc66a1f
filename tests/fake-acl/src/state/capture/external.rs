//! Events that cross a capture's edge: `aclrtRecordEventWithFlag(..., ACL_EVENT_RECORD_EXTERNAL)`
//! and `aclrtStreamWaitEventWithFlag(..., ACL_EVENT_WAIT_EXTERNAL)` (the Event management
//! pages; the open runtime's `ApiImpl::EventRecord`, `ApiImpl::StreamWaitEvent`,
//! `SubmitExternalEventTaskCommon` and `CaptureModel::CheckExternalEventConstraints`).
//!
//! Inside a capture they synchronise the graph with streams outside it, or with another
//! graph, which an ordinary record or wait there cannot (a wait on an event recorded in
//! another capture is ACL_ERROR_STREAM_CAPTURE_CONFLICT). What the fake keeps of them:
//! - the stream must be in a capture (else ACL_ERROR_RT_STREAM_NOT_CAPTURED);
//! - each is one task on the stream's capture stream (the runtime's placeholder task), and
//!   neither joins streams into the capture;
//! - in one graph an event takes at most one external record or one external wait, not
//!   both and not twice (ACL_ERROR_RT_PARAM_INVALID);
//! - an event's records keep the flag of the first `aclrtRecordEventWithFlag`, and its
//!   waits the flag of the first `aclrtStreamWaitEventWithFlag`, whether that call
//!   succeeded or not ("在首次调用此API时，在调用入口确立Event和Record flag关联关系，API返回值不影响关联关系有效性");
//!   and an event recorded the ordinary way before its first external use cannot be used
//!   externally (the runtime's "Event mode cannot switch after record": the first external
//!   use switches it to a software mode for good): both ACL_ERROR_RT_PARAM_INVALID;
//! - an external record is made each time the model is executed, after its memory tasks
//!   (which the fake makes at once), so a stream that waits on the event after an
//!   execution waits for the graph. An external wait has nothing to hold back in the
//!   fake's replay, whose copies are made before the call returns.

use super::Captures;
use crate::Handle;
use crate::state::Rt;
use npud_proto::codes::acl::{AclError, RT_PARAM_INVALID, RT_STREAM_NOT_CAPTURED};

/// ACL_EVENT_RECORD_DEFAULT / ACL_EVENT_WAIT_DEFAULT.
pub const DEFAULT: u32 = 0;
/// ACL_EVENT_RECORD_EXTERNAL / ACL_EVENT_WAIT_EXTERNAL.
pub const EXTERNAL: u32 = 1;

/// What one event has been used for, across captures.
#[derive(Debug, Default, Clone, Copy)]
pub struct EventUse {
    /// The flag of its first aclrtRecordEventWithFlag.
    record_flag: Option<u32>,
    /// The flag of its first aclrtStreamWaitEventWithFlag.
    wait_flag: Option<u32>,
    /// It has been recorded the ordinary way.
    pub(super) recorded: bool,
    /// It has been used with an EXTERNAL flag: the runtime switched it to its software
    /// mode, after which ordinary records no longer stand in the way.
    software: bool,
}

impl Captures {
    /// Ties `event`'s records (or waits) to `flag` at its first use with a flag; false when
    /// an earlier use tied them to the other flag.
    fn keep_flag(&mut self, event: usize, flag: u32, record: bool) -> bool {
        let usage = self.event_use.entry(event).or_default();
        let kept = if record { &mut usage.record_flag } else { &mut usage.wait_flag };
        *kept.get_or_insert(flag) == flag
    }
}

impl Rt {
    /// An ordinary record of `event` (aclrtRecordEvent, or a record with the default flag):
    /// the event can no longer be used externally.
    pub fn event_recorded(&self, event: Handle) {
        self.captures().event_use.entry(event as usize).or_default().recorded = true;
    }

    /// Forgets a destroyed event's uses.
    pub fn event_forgotten(&self, event: Handle) {
        self.captures().event_use.remove(&(event as usize));
    }

    /// aclrtRecordEventWithFlag's (`record`) or aclrtStreamWaitEventWithFlag's flag check,
    /// before the call does anything: false when the event's records (or waits) are tied
    /// to the other flag.
    pub fn flag_kept(&self, event: Handle, flag: u32, record: bool) -> bool {
        self.captures().keep_flag(event as usize, flag, record)
    }

    /// An external record (`record`) or wait of `event` issued to `stream`: a task of the
    /// capture the stream is in, under the constraints in the module docs.
    pub fn capture_external(&self, event: Handle, stream: Handle, record: bool) -> Result<(), AclError> {
        let (event, stream) = (event as usize, stream as usize);
        let mut guard = self.captures();
        let c = &mut *guard;
        let Some(capture) = c.member_of.get(&stream).and_then(|o| c.active.get_mut(o)) else {
            return Err(RT_STREAM_NOT_CAPTURED);
        };
        if capture.external_records.contains(&event) || capture.external_waits.contains(&event) {
            return Err(RT_PARAM_INVALID);
        }
        let usage = c.event_use.entry(event).or_default();
        if usage.recorded && !usage.software {
            return Err(RT_PARAM_INVALID);
        }
        usage.software = true;
        let entries = if record { super::tasks::ENTRIES_TASK } else { super::tasks::ENTRIES_EXTERNAL_WAIT };
        capture.issue(self, stream, entries)?.clear_record();
        match record {
            true => capture.external_records.push(event),
            false => capture.external_waits.push(event),
        }
        Ok(())
    }

    /// Makes the external records of an executed `model` (after its memory tasks), on one
    /// of the streams the model holds. An event destroyed since is skipped.
    pub fn replay_external_records(&self, model: Handle) {
        let (device, stream, events) = {
            let c = self.captures();
            let Some(m) = c.models.get(&(model as usize)) else { return };
            let Some(&stream) = m.held.first() else { return };
            (m.device, stream, m.external_records.clone())
        };
        for event in events {
            if let Ok((dev, e)) = self.event(event as Handle)
                && dev.id() == device
            {
                let _ = dev.record_event(e, stream);
            }
        }
    }
}

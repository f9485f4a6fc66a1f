//! Graph captures a process makes (aclmdlRICaptureBegin/End) and the models that hold their
//! streams until aclmdlRIDestroy, a device reset or exit. Pure bookkeeping, like `books`.
//!
//! Begin is admitted whole or refused: for the process's capture need on the device (the
//! most streams one of its captures there took, else `NPUD_CAPTURE_STREAMS`, else npud's
//! `capture_headroom`), held as the capture's headroom until it ends. While the capture
//! goes on, the streams it makes the runtime's way are counted before each call that
//! makes one (`made`): within the headroom they are covered, past it each is admitted
//! before the device makes it (hicann/runtime `feature/aclgraph`):
//! - a stream outside the capture that waits on an event recorded in it joins it, on a
//!   capture stream of its own (`GetCaptureStream` → `StreamAddToCaptureModelProc`); joins
//!   chain, a joined stream's records being the capture's too;
//! - a member whose capture stream's queue is full gets a cascade stream before its next
//!   task (`Stream::AllocCaptureTaskWithoutLock`): entries counted the runtime's way, one
//!   per task, four for a wait on an event recorded in the capture (MEM_WAIT_SQE_NUM),
//!   the bound reached when entries plus the 32 kept for the model reach the queue's 2048.
//!
//! Tasks are counted where the interposer sees them (copies, memsets, value writes, records,
//! waits, kernel launches, callbacks); a task it cannot see (a runtime's internal launch)
//! may cascade unseen, into the headroom. End settles the difference between what was
//! made and what the model holds (the streams learnt there are booked, npud booking them
//! even over quota, as the tenant's debt) and gives the unused headroom back.

use crate::{Map, Set};

/// A capture stream's queue (`rtsqDepth` 2048 on Atlas A2/A3 and the inference parts), the
/// entries kept for the model (`CAPTURE_TASK_RESERVED_NUM`), and the device's reserve
/// (`expandStreamRsvTaskNum`, 0 on those parts).
const SQ_DEPTH: u32 = 2048;
const MODEL_RESERVED: u32 = 32;
const DEVICE_RESERVE: u32 = 0;
/// Entries of a task, of a wait on an event recorded in the capture (MEM_WAIT_SQE_NUM), and
/// of a wait with the EXTERNAL flags (MEM_WAIT_V2_SQE_NUM).
pub const ENTRIES_TASK: u32 = 1;
pub const ENTRIES_CAPTURED_WAIT: u32 = 4;
pub const ENTRIES_EXTERNAL_WAIT: u32 = 3;

/// What a call on a stream will make in a capture, planned before it and applied after it
/// succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The call touches no capture under way.
    Outside,
    /// A task on a member of the capture begun on `origin`: `entries` on its capture
    /// stream, after a cascade stream where `cascade`.
    Task { origin: usize, entries: u32, cascade: bool },
    /// A stream outside joins the capture begun on `origin` (one stream), its wait the
    /// first task on it.
    Join { origin: usize },
    /// A member waits on an event recorded in another capture: the runtime refuses it and
    /// invalidates both (107032), making nothing.
    Conflict,
}

impl Step {
    /// Streams the step makes, and the capture they are the capture's of.
    pub fn grows(self) -> Option<(usize, u32)> {
        match self {
            Step::Task { origin, cascade: true, .. } | Step::Join { origin } => Some((origin, 1)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Active {
    pub device: u32,
    /// The context current at Begin (0: unknown): the capture's stream is one of its, and
    /// its model goes when it does.
    pub context: usize,
    /// Streams admitted for it at Begin.
    pub admitted: u32,
    /// The vendor's free count at Begin, for libraries without aclmdlRIGetStreams.
    pub free_before: Option<u32>,
    /// Streams it has made so far, the runtime's way (its own at Begin, then joins and
    /// cascades seen): what it may hold, and what must be admitted before the next.
    pub made: u32,
    /// The model it captures into (aclmdlRICaptureGetInfo's; 0: unknown), by which
    /// rtStreamAddToModel names it.
    pub model: usize,
}

/// A model that holds streams: its device, its context, how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Model {
    device: u32,
    context: usize,
    held: u32,
}

#[derive(Debug, Default)]
pub struct Captures {
    /// Captures under way, by the stream they began on.
    active: Map<usize, Active>,
    /// Every stream in a capture under way → the stream it began on.
    member_of: Map<usize, usize>,
    /// Each member's entries on its current capture stream.
    entries: Map<usize, u32>,
    /// An event last recorded in a capture under way → the stream it began on.
    recorded_in: Map<usize, usize>,
    /// Captures npud refused a stream for: invalidated, as the runtime invalidates one it
    /// cannot give a stream; they can only fail to end.
    invalidated: Set<usize>,
    /// Models by handle.
    models: Map<usize, Model>,
    /// Per device, the most streams one capture took there.
    largest: Map<u32, u32>,
}

impl Captures {
    /// What the next capture on `device` is admitted for: `hint` (`NPUD_CAPTURE_STREAMS`,
    /// the operator's word, which stands); else the most streams one capture took there (a
    /// later one the same size or smaller: vLLM captures its largest first); else
    /// `headroom` (npud's `capture_headroom`).
    pub fn need(&self, device: u32, hint: Option<u32>, headroom: u32) -> u32 {
        hint.or_else(|| self.largest.get(&device).copied()).unwrap_or(headroom).max(1)
    }

    pub fn begun(&mut self, stream: usize, capture: Active) {
        self.active.insert(stream, capture);
        self.member_of.insert(stream, stream);
        self.entries.insert(stream, 0);
    }

    /// Whether any capture is under way (the hooks on every task skip the rest otherwise).
    pub fn any(&self) -> bool {
        !self.active.is_empty()
    }

    fn origin_of(&self, stream: usize) -> Option<usize> {
        self.member_of.get(&stream).copied().filter(|o| self.active.contains_key(o))
    }

    fn task_on(&self, origin: usize, stream: usize, entries: u32) -> Step {
        let queued = self.entries.get(&stream).copied().unwrap_or(0);
        Step::Task { origin, entries, cascade: queued + MODEL_RESERVED + DEVICE_RESERVE >= SQ_DEPTH }
    }

    /// A task of `entries` (a copy, a memset, an event record: one) issued to `stream`.
    pub fn plan_task(&self, stream: usize, entries: u32) -> Step {
        match self.origin_of(stream) {
            Some(origin) => self.task_on(origin, stream, entries),
            None => Step::Outside,
        }
    }

    /// `stream` waits on `event`.
    pub fn plan_wait(&self, stream: usize, event: usize) -> Step {
        let recorded = self.recorded_in.get(&event).copied().filter(|o| self.active.contains_key(o));
        match (self.origin_of(stream), recorded) {
            (None, None) => Step::Outside,
            (Some(origin), Some(r)) if r != origin => Step::Conflict,
            (Some(origin), r) => {
                self.task_on(origin, stream, if r.is_some() { ENTRIES_CAPTURED_WAIT } else { ENTRIES_TASK })
            }
            (None, Some(origin)) => Step::Join { origin },
        }
    }

    /// `stream` is added to the capture whose model is `model` (rtStreamAddToModel): a join,
    /// once per stream; nothing where no capture under way has that model or the stream is
    /// in one already (the runtime makes no stream then).
    pub fn plan_add(&self, stream: usize, model: usize) -> Step {
        let origin = self.active.iter().find(|(_, a)| a.model == model && model != 0).map(|(o, _)| *o);
        match (origin, self.origin_of(stream)) {
            (Some(origin), None) => Step::Join { origin },
            _ => Step::Outside,
        }
    }

    /// What `admitted` lacks for `more` streams of the capture begun on `origin` (0: they
    /// are covered); None when that capture is no longer under way.
    pub fn shortfall(&self, origin: usize, more: u32) -> Option<u32> {
        let a = self.active.get(&origin)?;
        Some(a.made.saturating_add(more).saturating_sub(a.admitted))
    }

    /// `extra` more streams admitted for the capture begun on `origin`; false when it is
    /// no longer under way (the caller gives them back).
    pub fn admitted_more(&mut self, origin: usize, extra: u32) -> bool {
        match self.active.get_mut(&origin) {
            Some(a) => {
                a.admitted = a.admitted.saturating_add(extra);
                true
            }
            None => false,
        }
    }

    /// The call planned as `step` on `stream` succeeded (`event`: what it recorded, for a
    /// record).
    pub fn applied(&mut self, stream: usize, step: Step, recorded: Option<usize>) {
        match step {
            Step::Outside | Step::Conflict => {
                if let Some(event) = recorded {
                    self.recorded_in.remove(&event);
                }
                return;
            }
            Step::Join { origin } => {
                self.member_of.insert(stream, origin);
                self.entries.insert(stream, ENTRIES_CAPTURED_WAIT);
            }
            Step::Task { entries, cascade, .. } => {
                let queued = self.entries.entry(stream).or_insert(0);
                *queued = if cascade { entries } else { queued.saturating_add(entries) };
            }
        }
        if let Some((origin, n)) = step.grows()
            && let Some(a) = self.active.get_mut(&origin)
        {
            a.made = a.made.saturating_add(n);
        }
        if let (Some(event), Some(origin)) = (recorded, self.origin_of(stream)) {
            self.recorded_in.insert(event, origin);
        }
    }

    /// npud refused a stream the capture begun on `origin` needed: it is invalidated.
    pub fn invalidate(&mut self, origin: usize) {
        if self.active.contains_key(&origin) {
            self.invalidated.insert(origin);
        }
    }

    /// Whether `stream` is in a capture the interposer invalidated.
    pub fn invalidated(&self, stream: usize) -> bool {
        self.origin_of(stream).is_some_and(|o| self.invalidated.contains(&o))
    }

    /// A capture begun on `origin` is over: its members, entries and records go.
    fn forget(&mut self, origin: usize) {
        self.member_of.retain(|_, o| *o != origin);
        self.recorded_in.retain(|_, o| *o != origin);
        let members = &self.member_of;
        self.entries.retain(|s, _| members.contains_key(s));
        self.invalidated.remove(&origin);
    }

    pub fn active(&self, stream: usize) -> Option<Active> {
        self.active.get(&stream).copied()
    }

    /// The capture on `stream` ended as `model` holding `held` streams.
    pub fn ended(&mut self, stream: usize, model: usize, held: u32) -> Option<Active> {
        let capture = self.active.remove(&stream)?;
        self.forget(stream);
        self.models.insert(model, Model { device: capture.device, context: capture.context, held });
        let largest = self.largest.entry(capture.device).or_insert(0);
        *largest = (*largest).max(held);
        Some(capture)
    }

    /// The capture on `stream` failed to end: what it was admitted for.
    pub fn abandoned(&mut self, stream: usize) -> Option<Active> {
        let capture = self.active.remove(&stream)?;
        self.forget(stream);
        Some(capture)
    }

    /// A destroyed model: (device, streams it held).
    pub fn destroyed(&mut self, model: usize) -> Option<(u32, u32)> {
        self.models.remove(&model).map(|m| (m.device, m.held))
    }

    /// A context's teardown frees its models and abandons its captures (the runtime's
    /// `TearDownModelsOnContextTearDown`): the streams they held and the streams captures
    /// under way made, and the headroom those captures held. The device's default context
    /// goes at its last reset; a capture whose context was not known then is taken to be
    /// the default context's.
    pub fn drop_context(&mut self, device: u32, context: usize, default: bool) -> (u32, u32) {
        let ours = |d: u32, c: usize| d == device && (c == context || (default && c == 0));
        let mut freed = 0u32;
        self.models.retain(|_, m| {
            let keep = !ours(m.device, m.context);
            if !keep {
                freed = freed.saturating_add(m.held);
            }
            keep
        });
        let (mut gone, mut headroom) = (Vec::new(), 0u32);
        self.active.retain(|origin, a| {
            let keep = !ours(a.device, a.context);
            if !keep {
                freed = freed.saturating_add(a.made);
                headroom = headroom.saturating_add(a.admitted.saturating_sub(a.made));
                gone.push(*origin);
            }
            keep
        });
        for origin in gone {
            self.forget(origin);
        }
        (freed, headroom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_needs_the_most_one_took_else_the_hint_else_the_headroom() {
        let mut c = Captures::default();
        assert_eq!(c.need(0, None, 8), 8, "no history, no hint: npud's headroom");
        assert_eq!(c.need(0, Some(3), 8), 3, "the hint");
        c.begun(10, Active { device: 0, context: 5, admitted: 8, free_before: None, made: 1, model: 0 });
        assert_eq!(c.ended(10, 100, 4).map(|a| a.admitted), Some(8));
        assert_eq!(c.need(0, None, 8), 4, "what the capture took");
        assert_eq!(c.need(0, Some(6), 8), 6, "the hint stands");
        assert_eq!(c.need(0, Some(2), 8), 2, "smaller too: the operator's word");
        assert_eq!(c.need(1, None, 8), 8, "per device");
        c.begun(10, Active { device: 0, context: 5, admitted: 4, free_before: None, made: 1, model: 0 });
        assert_eq!(c.ended(10, 101, 2).map(|a| a.admitted), Some(4));
        assert_eq!(c.need(0, None, 8), 4, "the largest, not the last: captures shrink");
        assert_eq!(c.destroyed(100), Some((0, 4)));
        assert_eq!(c.destroyed(100), None, "once");
    }

    #[test]
    fn a_context_takes_its_models_and_captures_with_it() {
        let mut c = Captures::default();
        c.begun(1, Active { device: 0, context: 5, admitted: 2, free_before: None, made: 1, model: 0 });
        c.ended(1, 100, 2);
        c.begun(2, Active { device: 1, context: 6, admitted: 1, free_before: None, made: 1, model: 0 });
        c.ended(2, 200, 3);
        c.begun(3, Active { device: 0, context: 7, admitted: 1, free_before: None, made: 1, model: 0 });
        c.ended(3, 300, 1);
        c.begun(4, Active { device: 0, context: 0, admitted: 1, free_before: None, made: 1, model: 0 });
        c.begun(1, Active { device: 0, context: 5, admitted: 2, free_before: None, made: 1, model: 0 });
        assert_eq!(
            c.drop_context(0, 5, true),
            (4, 1),
            "the default context's model and captures, and the unknown one: made, and headroom"
        );
        assert_eq!((c.active(1), c.active(4)), (None, None));
        assert_eq!(c.destroyed(200), Some((1, 3)), "another device's model stays");
        assert_eq!(c.drop_context(0, 7, false), (1, 0), "a context made with aclrtCreateContext");
        assert_eq!(c.destroyed(300), None);
    }
}

#[cfg(test)]
mod growth {
    use super::*;

    fn begun(c: &mut Captures, stream: usize, admitted: u32) {
        c.begun(stream, Active { device: 0, context: 5, admitted, free_before: None, made: 1, model: 0 });
    }

    #[test]
    fn joins_chain_and_each_is_admitted_before_it_is_made() {
        let mut c = Captures::default();
        begun(&mut c, 1, 2);
        assert_eq!(c.plan_task(1, ENTRIES_TASK), Step::Task { origin: 1, entries: 1, cascade: false });
        c.applied(1, c.plan_task(1, ENTRIES_TASK), Some(100)); // record event 100 in the capture
        let join = c.plan_wait(2, 100);
        assert_eq!(join, Step::Join { origin: 1 });
        assert_eq!(c.shortfall(1, 1), Some(0), "covered by what Begin admitted");
        c.applied(2, join, None);
        c.applied(2, c.plan_task(2, ENTRIES_TASK), Some(101)); // the joined stream records
        let chained = c.plan_wait(3, 101);
        assert_eq!(chained, Step::Join { origin: 1 }, "a join of a join");
        assert_eq!(c.shortfall(1, 1), Some(1), "the third stream needs one more");
        assert!(c.admitted_more(1, 1));
        c.applied(3, chained, None);
        assert_eq!(c.active(1).map(|a| (a.made, a.admitted)), Some((3, 3)));
        assert_eq!(c.plan_wait(3, 101), Step::Task { origin: 1, entries: 4, cascade: false });
        assert_eq!(c.plan_wait(9, 555), Step::Outside, "an event recorded outside");
    }

    #[test]
    fn a_member_waiting_on_another_captures_event_is_a_conflict() {
        let mut c = Captures::default();
        begun(&mut c, 1, 1);
        begun(&mut c, 2, 1);
        c.applied(1, c.plan_task(1, ENTRIES_TASK), Some(100));
        assert_eq!(c.plan_wait(2, 100), Step::Conflict);
        assert_eq!(Step::Conflict.grows(), None);
    }

    #[test]
    fn a_full_queue_takes_a_cascade_stream_before_the_next_task() {
        let mut c = Captures::default();
        begun(&mut c, 1, 1);
        // 2016 single-entry tasks fill a capture stream (2048 less the 32 kept).
        for _ in 0..2016 {
            let step = c.plan_task(1, ENTRIES_TASK);
            assert_eq!(step.grows(), None);
            c.applied(1, step, None);
        }
        let next = c.plan_task(1, ENTRIES_TASK);
        assert_eq!(next, Step::Task { origin: 1, entries: 1, cascade: true });
        assert_eq!(c.shortfall(1, 1), Some(1));
        c.applied(1, next, None);
        assert_eq!(c.active(1).map(|a| a.made), Some(2));
        // Waits count four: 504 of them fill the new stream (1 + 503 * 4 = 2013, +4 = 2017).
        c.applied(1, c.plan_task(1, ENTRIES_TASK), Some(7));
        let mut waits = 0;
        while c.plan_wait(1, 7).grows().is_none() {
            c.applied(1, c.plan_wait(1, 7), None);
            waits += 1;
        }
        assert_eq!(waits, 504, "entries 2 + 504 * 4 = 2018 >= 2016");
    }

    #[test]
    fn an_invalidated_capture_is_forgotten_with_its_end() {
        let mut c = Captures::default();
        begun(&mut c, 1, 1);
        c.applied(1, c.plan_task(1, ENTRIES_TASK), Some(100));
        c.applied(2, c.plan_wait(2, 100), None);
        c.invalidate(1);
        assert!(c.invalidated(2), "a member of it");
        assert!(c.abandoned(1).is_some());
        assert!(!c.invalidated(2));
        assert_eq!(c.plan_wait(2, 100), Step::Outside, "its members and records went with it");
        assert!(!c.any());
    }
}

//! The device's task engine: per-stream FIFOs, execution lanes given to the most urgent
//! ready stream, event records and waits. Pure state: the caller passes the time in and
//! fires the collected notifications after releasing its lock. Streams and their tasks
//! here; events in `events.rs`; time passing (lanes, completions, failures) in
//! `progress.rs`.

mod events;
mod progress;

use crate::error::{ErrorKind, SimError, SimResult, codes};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::time::{Duration, Instant};

pub type StreamId = u64;
pub type EventId = u64;

/// Called once when what it waits for is reached (or can never be).
pub type Waiter = Box<dyn FnOnce(SimResult<()>) + Send>;

/// Something a stream's owner must hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimReport {
    /// A host callback reached the head of its stream.
    Callback { stream: StreamId, callback: u64, blocking: bool, status: i32 },
    /// A task failed.
    Exception { stream: StreamId, task: u64, code: i32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    Continue,
    Stop,
}

#[derive(Debug, Clone, Copy)]
enum TaskKind {
    Delay(Duration),
    Record { event: EventId, generation: u64 },
    Reset { event: EventId },
    Wait { event: EventId, generation: u64 },
    Callback { id: u64, blocking: bool },
}

#[derive(Debug)]
struct Task {
    id: u64,
    kind: TaskKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    Idle,
    WaitingForLane,
    Running,
    OnEvent,
    OnCallback(u64),
}

struct Stream {
    priority: u32,
    flags: u32,
    queue: VecDeque<Task>,
    activity: Activity,
    enqueued: u64,
    completed: u64,
    drain_waiters: Vec<(u64, Waiter)>,
    failure_mode: Option<FailureMode>,
    first_failure: Option<i32>,
    injected_failures: HashMap<u64, i32>,
    destroyed: bool,
    /// When the head delay became ready for a lane.
    ready_at: Option<Instant>,
    /// Whether the stream holds a hardware slot of its own. A context's default stream
    /// does not: the context's count pays for it (`SimDevice::create_context`).
    counted: bool,
}

struct Event {
    flags: u32,
    timing: bool,
    latest: u64,
    recorded: bool,
    pending: BTreeSet<u64>,
    timestamp: Option<Instant>,
    host_waiters: Vec<(u64, Waiter)>,
    stream_waiters: Vec<(u64, StreamId)>,
    destroyed: bool,
}

impl Event {
    fn reached(&self, generation: u64) -> bool {
        !self.pending.contains(&generation)
    }
}

/// Public view of a stream's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatus {
    pub priority: u32,
    pub flags: u32,
    pub pending_tasks: u64,
    pub failed: bool,
    pub failure_mode: FailureMode,
    /// Whether the mode was set (it can be set once per stream).
    pub failure_mode_set: bool,
}

/// State of an event's most recent record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    NotRecorded,
    Pending,
    Complete,
}

pub struct Engine {
    lanes: usize,
    lanes_busy: usize,
    streams: HashMap<StreamId, Stream>,
    events: HashMap<EventId, Event>,
    ready: BinaryHeap<Reverse<(u32, u64, StreamId)>>,
    running: BinaryHeap<Reverse<(Instant, StreamId)>>,
    /// Streams whose head must be looked at, with the time it became current.
    dirty: Vec<(StreamId, Instant)>,
    ready_seq: u64,
    next_id: u64,
    /// Streams whose queue drained after they were destroyed: their hardware slot is free.
    pub(crate) freed_streams: u32,
    pub(crate) freed_events: u32,
    /// Each stream's marker for `order_after`: an event of the engine's own, counted in no
    /// table, gone with its stream.
    markers: HashMap<StreamId, EventId>,
    /// Notifications to deliver once the lock is released.
    pub(crate) fired: Vec<(Waiter, SimResult<()>)>,
    pub(crate) reports: Vec<SimReport>,
    /// Fault: the device stops executing (calls are accepted, nothing runs).
    pub(crate) frozen: bool,
}

impl Engine {
    pub fn new(lanes: usize) -> Self {
        Self {
            lanes: lanes.max(1),
            lanes_busy: 0,
            streams: HashMap::new(),
            events: HashMap::new(),
            ready: BinaryHeap::new(),
            running: BinaryHeap::new(),
            dirty: Vec::new(),
            ready_seq: 0,
            next_id: 1,
            freed_streams: 0,
            freed_events: 0,
            markers: HashMap::new(),
            fired: Vec::new(),
            reports: Vec::new(),
            frozen: false,
        }
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub fn add_stream(&mut self, priority: u32, flags: u32) -> StreamId {
        self.add(priority, flags, true)
    }

    /// A stream whose slot is counted elsewhere (a context's default stream): freeing it
    /// frees no slot.
    pub fn add_builtin_stream(&mut self, priority: u32) -> StreamId {
        self.add(priority, 0, false)
    }

    fn add(&mut self, priority: u32, flags: u32, counted: bool) -> StreamId {
        let id = self.fresh_id();
        self.streams.insert(
            id,
            Stream {
                priority,
                flags,
                queue: VecDeque::new(),
                activity: Activity::Idle,
                enqueued: 0,
                completed: 0,
                drain_waiters: Vec::new(),
                failure_mode: None,
                first_failure: None,
                injected_failures: HashMap::new(),
                destroyed: false,
                ready_at: None,
                counted,
            },
        );
        id
    }

    fn live_stream(&mut self, id: StreamId) -> SimResult<&mut Stream> {
        match self.streams.get_mut(&id) {
            Some(s) if !s.destroyed => Ok(s),
            _ => Err(SimError::handle("stream", id)),
        }
    }

    fn live_event(&mut self, id: EventId) -> SimResult<&mut Event> {
        match self.events.get_mut(&id) {
            Some(e) if !e.destroyed => Ok(e),
            _ => Err(SimError::handle("event", id)),
        }
    }

    /// Marks a stream destroyed. Its slot is freed when its pending work has run out.
    pub fn destroy_stream(&mut self, id: StreamId, now: Instant) -> SimResult<()> {
        self.live_stream(id)?.destroyed = true;
        self.dirty.push((id, now));
        self.advance(now);
        Ok(())
    }

    /// aclrtDestroyStreamForce: discards pending work and frees the slot now. Records in
    /// the discarded work are abandoned (their waiters are released with an error).
    pub fn destroy_stream_force(&mut self, id: StreamId, now: Instant) -> SimResult<()> {
        let s = self.streams.get_mut(&id).ok_or_else(|| SimError::handle("stream", id))?;
        let dropped: Vec<Task> = s.queue.drain(..).collect();
        s.completed += dropped.len() as u64;
        s.destroyed = true;
        s.activity = Activity::Idle;
        let result =
            Err(SimError::new(ErrorKind::TaskFailed, codes::RT_INTERNAL_ERROR, "the stream was destroyed by force"));
        for (_, w) in s.drain_waiters.drain(..) {
            self.fired.push((w, result.clone()));
        }
        for t in dropped {
            if let TaskKind::Record { event, generation } = t.kind {
                self.abandon_record(event, generation, now);
            }
        }
        // A task running on a lane finishes its lane time; the stream itself is gone.
        if self.streams.remove(&id).is_some_and(|s| s.counted) {
            self.freed_streams += 1;
        }
        self.forget_marker(id);
        self.advance(now);
        Ok(())
    }

    pub fn stream_status(&mut self, id: StreamId) -> SimResult<StreamStatus> {
        let s = self.live_stream(id)?;
        Ok(StreamStatus {
            priority: s.priority,
            flags: s.flags,
            pending_tasks: s.enqueued - s.completed,
            failed: s.first_failure.is_some(),
            failure_mode: s.failure_mode.unwrap_or(FailureMode::Continue),
            failure_mode_set: s.failure_mode.is_some(),
        })
    }

    /// A new priority for a stream's work from now on (aclrtSetStreamAttribute's
    /// ACL_STREAM_ATTR_PRIORITY); what is ready already keeps its place.
    pub fn set_priority(&mut self, id: StreamId, priority: u32) -> SimResult<()> {
        self.live_stream(id)?.priority = priority;
        Ok(())
    }

    pub fn set_failure_mode(&mut self, id: StreamId, mode: FailureMode) -> SimResult<()> {
        let s = self.live_stream(id)?;
        if s.failure_mode.is_some() {
            return Err(SimError::new(
                ErrorKind::FailureModeAlreadySet,
                codes::RT_PARAM_INVALID,
                format!("failure mode of stream {id} was already set"),
            ));
        }
        s.failure_mode = Some(mode);
        Ok(())
    }

    pub fn inject_task_failure(&mut self, id: StreamId, task: u64, code: i32) -> SimResult<()> {
        let s = self.live_stream(id)?;
        let started = task <= s.completed || (task == s.completed + 1 && s.activity != Activity::Idle);
        if task == 0 || started {
            return Err(SimError::invalid(format!("task {task} of stream {id} has already started")));
        }
        s.injected_failures.insert(task, code);
        Ok(())
    }

    fn push_task(&mut self, id: StreamId, kind: TaskKind, now: Instant) -> SimResult<u64> {
        let s = self.live_stream(id)?;
        s.enqueued += 1;
        let task = s.enqueued;
        s.queue.push_back(Task { id: task, kind });
        if s.activity == Activity::Idle {
            self.dirty.push((id, now));
            self.advance(now);
        }
        Ok(task)
    }

    /// Makes an idle stream read as new for its next owner (the warm pool): task numbers
    /// start again at 1 and faults injected for tasks that never came are dropped. A
    /// stream with work, a failure or a failure mode is left as it is (the pool destroys
    /// those instead); returns whether it was renewed.
    pub fn renew_stream(&mut self, id: StreamId) -> SimResult<bool> {
        let s = self.live_stream(id)?;
        let fresh = s.queue.is_empty()
            && s.activity == Activity::Idle
            && s.drain_waiters.is_empty()
            && s.first_failure.is_none()
            && s.failure_mode.is_none();
        if fresh {
            s.enqueued = 0;
            s.completed = 0;
            s.injected_failures.clear();
        }
        Ok(fresh)
    }

    pub fn enqueue_delay(&mut self, id: StreamId, duration: Duration, now: Instant) -> SimResult<u64> {
        self.push_task(id, TaskKind::Delay(duration), now)
    }

    pub fn enqueue_callback(&mut self, id: StreamId, callback: u64, blocking: bool, now: Instant) -> SimResult<u64> {
        self.push_task(id, TaskKind::Callback { id: callback, blocking }, now)
    }

    /// Releases a blocking callback: the stream moves on.
    pub fn ack_callback(&mut self, id: StreamId, callback: u64, now: Instant) -> SimResult<bool> {
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(false);
        };
        if s.activity != Activity::OnCallback(callback) {
            return Ok(false);
        }
        s.activity = Activity::Idle;
        complete_head(s, &mut self.fired);
        self.dirty.push((id, now));
        self.advance(now);
        Ok(true)
    }

    /// A blocking callback that was never acknowledged: fail the stream and move on.
    pub fn fail_callback(&mut self, id: StreamId, callback: u64, code: i32, now: Instant) -> bool {
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        if s.activity != Activity::OnCallback(callback) {
            return false;
        }
        s.activity = Activity::Idle;
        let task = s.completed + 1;
        complete_head(s, &mut self.fired);
        self.fail_stream(id, task, code, now);
        self.dirty.push((id, now));
        self.advance(now);
        true
    }

    /// Calls `waiter` when all work enqueued on the stream so far has finished.
    pub fn on_stream_drained(&mut self, id: StreamId, waiter: Waiter) -> SimResult<()> {
        let s = self.live_stream(id)?;
        if s.completed >= s.enqueued {
            let result = stream_result(s);
            self.fired.push((waiter, result));
        } else {
            let target = s.enqueued;
            s.drain_waiters.push((target, waiter));
        }
        Ok(())
    }

    pub fn stream_idle(&mut self, id: StreamId) -> SimResult<bool> {
        let s = self.live_stream(id)?;
        Ok(s.completed >= s.enqueued)
    }

    /// Makes `stream`'s later work wait for everything enqueued on `after` so far, as
    /// CUDA's legacy default stream and the blocking streams of its context order each
    /// other. Nothing is waited for when `after` is idle or gone.
    pub fn order_after(&mut self, stream: StreamId, after: StreamId, now: Instant) -> SimResult<()> {
        self.live_stream(stream)?;
        if stream == after || self.stream_idle(after).unwrap_or(true) {
            return Ok(());
        }
        let marker = match self.markers.get(&after) {
            Some(e) => *e,
            None => {
                let e = self.add_event(crate::flags::EVENT_SYNC, false);
                self.markers.insert(after, e);
                e
            }
        };
        self.record_event(marker, after, now)?;
        self.stream_wait_event(stream, marker, now)
    }

    /// Forgets a removed stream's marker: its records are all reached or abandoned, and a
    /// wait on a marker that is gone is over.
    fn forget_marker(&mut self, stream: StreamId) {
        if let Some(e) = self.markers.remove(&stream) {
            self.events.remove(&e);
        }
    }

    pub fn live_streams(&self) -> usize {
        self.streams.len()
    }
}

/// Pops the finished head task and releases the syncs that were waiting for it.
fn complete_head(s: &mut Stream, fired: &mut Vec<(Waiter, SimResult<()>)>) {
    if s.queue.pop_front().is_some() {
        s.completed += 1;
    }
    let completed = s.completed;
    if s.drain_waiters.iter().any(|(target, _)| *target <= completed) {
        let result = stream_result(s);
        let (due, rest): (Vec<_>, Vec<_>) = s.drain_waiters.drain(..).partition(|(target, _)| *target <= completed);
        s.drain_waiters = rest;
        fired.extend(due.into_iter().map(|(_, w)| (w, result.clone())));
    }
}

fn stream_result(s: &Stream) -> SimResult<()> {
    match s.first_failure {
        None => Ok(()),
        Some(code) => {
            Err(SimError::new(ErrorKind::TaskFailed, code, format!("a task on the stream failed with {code}")))
        }
    }
}

//! One simulated device: the hardware stream and event ledgers, the contention fault
//! model, and a timer thread that finishes running tasks on time.

use crate::engine::{Engine, EventId, EventState, FailureMode, SimReport, StreamId, StreamStatus, Waiter};
use crate::error::{ErrorKind, SimError, SimResult, codes};
use crate::flags;
use crate::profile::Profile;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Receives reports in stream order; called under the device lock, so it must not block
/// or call back into the device (a channel send is the intended use).
pub type ReportSink = Arc<dyn Fn(SimReport) + Send + Sync>;

/// Behaviour knobs of a simulated device.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Tasks of different streams that can run at the same time.
    pub lanes: usize,
    /// Time one hardware stream creation takes; creations overlapping in this window are
    /// "concurrent" for the contention fault model.
    pub create_latency: Duration,
    /// Contention fault model: when no more than this many streams are left and another
    /// creation is in flight, a creation fails with 207005, as the vendor warns happens
    /// when several processes create near the limit. 0 turns the model off.
    pub contention_window: u32,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self { lanes: 8, create_latency: Duration::ZERO, contention_window: 0 }
    }
}

struct State {
    engine: Engine,
    streams_in_use: u32,
    events_in_use: u32,
    creations_in_flight: u32,
    fail_next_creations: u32,
    hardware_creations: u64,
    shutdown: bool,
    sink: Option<ReportSink>,
    /// Liveness probes, answered by the timer thread while the device executes.
    heartbeats: Vec<Waiter>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// A device's lock held across a fork (see [`SimDevice::hold_for_fork`]).
pub struct ForkHold<'a>(#[allow(dead_code)] MutexGuard<'a, State>);

/// Counts a caller can show: what the hardware holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCounts {
    pub streams_in_use: u32,
    pub events_in_use: u32,
    pub live_streams: usize,
    pub hardware_creations: u64,
}

pub struct SimDevice {
    id: u32,
    profile: Profile,
    options: SimOptions,
    shared: Arc<Shared>,
    timer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice").field("id", &self.id).field("profile", &self.profile.name).finish()
    }
}

impl SimDevice {
    pub fn new(id: u32, profile: Profile, options: SimOptions) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                engine: Engine::new(options.lanes),
                streams_in_use: profile.internal_sync_streams,
                events_in_use: 0,
                creations_in_flight: 0,
                fail_next_creations: 0,
                hardware_creations: 0,
                shutdown: false,
                sink: None,
                heartbeats: Vec::new(),
            }),
            wake: Condvar::new(),
        });
        let timer_shared = Arc::clone(&shared);
        let timer =
            std::thread::Builder::new().name(format!("npu-sim-dev{id}")).spawn(move || run_timer(&timer_shared)).ok();
        Self { id, profile, options, shared, timer }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn set_report_sink(&self, sink: ReportSink) {
        self.lock().sink = Some(sink);
    }

    /// Takes the device's lock for a fork(2) the calling thread is about to make, and
    /// keeps it until the hold is dropped (in the parent after the fork, and in the child).
    /// The device's timer thread takes this lock whenever work finishes; a fork while it
    /// held it would leave the child a lock nobody will ever release (fork(2): the child
    /// has only the forking thread), and the child's first device call would block for
    /// ever. A fake runtime takes it from a `pthread_atfork` prepare handler.
    pub fn hold_for_fork(&self) -> ForkHold<'_> {
        ForkHold(self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough counters for a simulator;
        // keep serving rather than poisoning every later call.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `op` on the up-to-date engine, then delivers what it released.
    fn with<T>(&self, op: impl FnOnce(&mut State, Instant) -> T) -> T {
        let now = Instant::now();
        let mut state = self.lock();
        let before = state.engine.next_deadline();
        state.engine.advance(now);
        let out = op(&mut state, now);
        let fired = settle(&mut state);
        if state.engine.next_deadline() != before {
            self.shared.wake.notify_one();
        }
        drop(state);
        for (waiter, result) in fired {
            waiter(result);
        }
        out
    }

    /// Makes a context: it costs one default stream, as aclrtCreateContext does.
    pub fn create_context(&self) -> SimResult<()> {
        let mut state = self.lock();
        if state.streams_in_use >= self.profile.stream_limit {
            return Err(no_streams(self.profile.stream_limit));
        }
        state.streams_in_use += 1;
        Ok(())
    }

    /// The default stream a context issues work to when a call names no stream (AscendCL's
    /// NULL stream, CUDA's NULL stream): a stream tasks run on whose hardware slot the
    /// context's own count already holds, so making it and freeing it (`destroy_stream`)
    /// changes no count. The vendor gives the default stream the highest priority.
    pub fn builtin_stream(&self) -> StreamId {
        self.with(|s, _| s.engine.add_builtin_stream(0))
    }

    pub fn destroy_context(&self) {
        let mut state = self.lock();
        state.streams_in_use = state.streams_in_use.saturating_sub(1);
    }

    /// Creates one hardware stream (aclrtCreateStreamWithConfig).
    pub fn create_stream(&self, priority: u32, stream_flags: u32) -> SimResult<StreamId> {
        let stream_flags = flags::effective_stream_flags(stream_flags).map_err(SimError::invalid)?;
        self.check_priority(priority)?;
        {
            let mut state = self.lock();
            state.engine.advance(Instant::now());
            settle_counts(&mut state);
            if state.fail_next_creations > 0 {
                state.fail_next_creations -= 1;
                return Err(SimError::new(
                    ErrorKind::StreamBudget,
                    codes::RT_NO_STREAM_RESOURCE,
                    "injected fault: no stream resource",
                ));
            }
            if state.streams_in_use >= self.profile.stream_limit {
                return Err(no_streams(self.profile.stream_limit));
            }
            let left = self.profile.stream_limit - state.streams_in_use;
            if self.options.contention_window > 0
                && state.creations_in_flight > 0
                && left <= self.options.contention_window
            {
                return Err(SimError::new(
                    ErrorKind::StreamBudget,
                    codes::RT_RESOURCE_ALLOC_FAIL,
                    format!("Alloc sq cq fail: concurrent stream creation with only {left} streams left"),
                ));
            }
            state.streams_in_use += 1;
            state.creations_in_flight += 1;
        }
        if !self.options.create_latency.is_zero() {
            std::thread::sleep(self.options.create_latency);
        }
        let mut state = self.lock();
        state.creations_in_flight -= 1;
        state.hardware_creations += 1;
        Ok(state.engine.add_stream(priority, stream_flags))
    }

    /// Destroys a stream. Returns at once; the hardware slot is freed when its pending work
    /// ends (the CUDA semantics; ACL asks callers to synchronise first, which npud does).
    pub fn destroy_stream(&self, stream: StreamId) -> SimResult<()> {
        self.with(|s, now| s.engine.destroy_stream(stream, now))
    }

    /// Destroys a stream now, discarding its pending work (aclrtDestroyStreamForce).
    pub fn destroy_stream_force(&self, stream: StreamId) -> SimResult<()> {
        self.with(|s, now| s.engine.destroy_stream_force(stream, now))
    }

    pub fn stream_status(&self, stream: StreamId) -> SimResult<StreamStatus> {
        self.with(|s, _| s.engine.stream_status(stream))
    }

    /// True when everything enqueued on the stream so far has finished.
    pub fn stream_query(&self, stream: StreamId) -> SimResult<bool> {
        self.with(|s, _| s.engine.stream_idle(stream))
    }

    pub fn on_stream_drained(&self, stream: StreamId, waiter: Waiter) -> SimResult<()> {
        self.with(|s, _| s.engine.on_stream_drained(stream, waiter))
    }

    /// See `Engine::renew_stream`.
    pub fn renew_stream(&self, stream: StreamId) -> SimResult<bool> {
        self.with(|s, _| s.engine.renew_stream(stream))
    }

    pub fn enqueue_delay(&self, stream: StreamId, duration: Duration) -> SimResult<u64> {
        self.with(|s, now| s.engine.enqueue_delay(stream, duration, now))
    }

    /// A priority the profile has (0 is the most urgent), for a stream made or changed.
    fn check_priority(&self, priority: u32) -> SimResult<()> {
        if priority > self.profile.priority_lowest {
            return Err(SimError::invalid(format!(
                "priority {priority} is outside 0..={}",
                self.profile.priority_lowest
            )));
        }
        Ok(())
    }

    /// See `Engine::set_priority`; the priority must be one the profile has.
    pub fn set_priority(&self, stream: StreamId, priority: u32) -> SimResult<()> {
        self.check_priority(priority)?;
        self.with(|s, _| s.engine.set_priority(stream, priority))
    }

    pub fn set_failure_mode(&self, stream: StreamId, mode: FailureMode) -> SimResult<()> {
        self.with(|s, _| s.engine.set_failure_mode(stream, mode))
    }

    pub fn launch_callback(&self, stream: StreamId, callback: u64, blocking: bool) -> SimResult<u64> {
        self.with(|s, now| s.engine.enqueue_callback(stream, callback, blocking, now))
    }

    /// Releases a blocking callback; false when the stream was not held by it.
    pub fn ack_callback(&self, stream: StreamId, callback: u64) -> SimResult<bool> {
        self.with(|s, now| s.engine.ack_callback(stream, callback, now))
    }

    /// Fails a blocking callback that was never acknowledged, freeing its stream.
    pub fn fail_callback(&self, stream: StreamId, callback: u64, code: i32) -> bool {
        self.with(|s, now| s.engine.fail_callback(stream, callback, code, now))
    }

    pub fn create_event(&self, event_flags: u32, timing: bool) -> SimResult<EventId> {
        flags::check_event_flags(event_flags).map_err(SimError::invalid)?;
        self.with(|s, _| {
            if s.events_in_use >= self.profile.event_limit {
                return Err(SimError::new(
                    ErrorKind::EventBudget,
                    codes::RT_NO_EVENT_RESOURCE,
                    format!("all {} events of the device are in use", self.profile.event_limit),
                ));
            }
            s.events_in_use += 1;
            Ok(s.engine.add_event(event_flags, timing))
        })
    }

    pub fn destroy_event(&self, event: EventId) -> SimResult<()> {
        self.with(|s, _| s.engine.destroy_event(event))
    }

    pub fn record_event(&self, event: EventId, stream: StreamId) -> SimResult<()> {
        self.with(|s, now| s.engine.record_event(event, stream, now))
    }

    pub fn reset_event(&self, event: EventId, stream: StreamId) -> SimResult<()> {
        self.with(|s, now| s.engine.reset_event(event, stream, now))
    }

    pub fn stream_wait_event(&self, stream: StreamId, event: EventId) -> SimResult<()> {
        self.with(|s, now| s.engine.stream_wait_event(stream, event, now))
    }

    /// See `Engine::order_after`.
    pub fn order_after(&self, stream: StreamId, after: StreamId) -> SimResult<()> {
        self.with(|s, now| s.engine.order_after(stream, after, now))
    }

    pub fn event_state(&self, event: EventId) -> SimResult<EventState> {
        self.with(|s, _| s.engine.event_state(event))
    }

    pub fn event_info(&self, event: EventId) -> SimResult<(u32, bool)> {
        self.with(|s, _| s.engine.event_info(event))
    }

    pub fn on_event_complete(&self, event: EventId, waiter: Waiter) -> SimResult<()> {
        self.with(|s, _| s.engine.on_event_complete(event, waiter))
    }

    pub fn elapsed_ms(&self, start: EventId, end: EventId) -> SimResult<f32> {
        self.with(|s, _| s.engine.elapsed_ms(start, end))
    }

    /// When a timed event's latest record completed; the errors are `elapsed_ms`'s.
    pub fn completed_at(&self, event: EventId) -> SimResult<Instant> {
        self.with(|s, _| s.engine.timestamp_of(event))
    }

    /// Fault: the device stops executing tasks (or resumes). Calls are still accepted,
    /// as a hung device accepts work it never does.
    pub fn set_stalled(&self, stalled: bool) {
        self.lock().engine.frozen = stalled;
        self.shared.wake.notify_all();
    }

    /// Calls `waiter` once the device's execution engine has run again: a liveness probe.
    pub fn heartbeat(&self, waiter: Waiter) {
        self.lock().heartbeats.push(waiter);
        self.shared.wake.notify_all();
    }

    /// The next `count` hardware stream creations fail with 207008.
    pub fn fail_next_creations(&self, count: u32) {
        self.lock().fail_next_creations = count;
    }

    /// Task number `task` of `stream` (1-based) fails with `code` when it is reached.
    pub fn fail_task(&self, stream: StreamId, task: u64, code: i32) -> SimResult<()> {
        self.with(|s, _| s.engine.inject_task_failure(stream, task, code))
    }

    /// Events that can still be created (aclrtGetEventAvailNum).
    pub fn available_events(&self) -> u32 {
        self.with(|s, _| self.profile.event_limit.saturating_sub(s.events_in_use))
    }

    /// Streams that can still be created (aclrtGetStreamAvailableNum).
    pub fn available_streams(&self) -> u32 {
        self.with(|s, _| self.profile.stream_limit.saturating_sub(s.streams_in_use))
    }

    pub fn counts(&self) -> DeviceCounts {
        self.with(|s, _| DeviceCounts {
            streams_in_use: s.streams_in_use,
            events_in_use: s.events_in_use,
            live_streams: s.engine.live_streams(),
            hardware_creations: s.hardware_creations,
        })
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        self.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(timer) = self.timer.take() {
            let _ = timer.join();
        }
    }
}

fn no_streams(limit: u32) -> SimError {
    SimError::new(
        ErrorKind::StreamBudget,
        codes::RT_NO_STREAM_RESOURCE,
        format!("Too many streams are created: all {limit} hardware streams are in use"),
    )
}

/// Moves freed hardware slots back into the counters.
fn settle_counts(state: &mut State) {
    let freed_streams = std::mem::take(&mut state.engine.freed_streams);
    state.streams_in_use = state.streams_in_use.saturating_sub(freed_streams);
    let freed_events = std::mem::take(&mut state.engine.freed_events);
    state.events_in_use = state.events_in_use.saturating_sub(freed_events);
}

/// Updates counters, hands reports to the sink (in order, under the lock) and returns the
/// waiters to fire once the lock is released.
fn settle(state: &mut State) -> Vec<(Waiter, SimResult<()>)> {
    settle_counts(state);
    if !state.engine.reports.is_empty() {
        let reports = std::mem::take(&mut state.engine.reports);
        if let Some(sink) = &state.sink {
            reports.into_iter().for_each(|r| sink(r));
        }
    }
    std::mem::take(&mut state.engine.fired)
}

fn run_timer(shared: &Shared) {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if state.shutdown {
            return;
        }
        let now = Instant::now();
        state.engine.advance(now);
        let mut fired = settle(&mut state);
        if !state.engine.frozen {
            fired.extend(state.heartbeats.drain(..).map(|w| (w, Ok(()))));
        }
        if !fired.is_empty() {
            drop(state);
            for (waiter, result) in fired {
                waiter(result);
            }
            state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        state = match state.engine.next_deadline().filter(|_| !state.engine.frozen) {
            Some(at) => {
                let wait = at.saturating_duration_since(now);
                shared.wake.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()).0
            }
            None => shared.wake.wait(state).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

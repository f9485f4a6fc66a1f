//! Time passing on the engine: tasks run on the lanes in priority order, records are
//! reached, failures stop or skip, drained streams release their waiters and slots.

use super::{
    Activity, Engine, EventId, FailureMode, SimReport, StreamId, Task, TaskKind, complete_head, stream_result,
};
use crate::error::{ErrorKind, SimError, codes};
use std::cmp::Reverse;
use std::collections::VecDeque;
use std::time::Instant;

impl Engine {
    /// When the next running task ends, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.running.peek().map(|Reverse((at, _))| *at)
    }

    /// Runs everything that can run at `now`. Tasks start at the exact time their
    /// predecessor ended (not when this call happens to run), so timestamps do not drift.
    pub fn advance(&mut self, now: Instant) {
        if self.frozen {
            return;
        }
        let mut freed_lanes: VecDeque<Instant> = VecDeque::new();
        loop {
            while let Some(Reverse((at, id))) = self.running.peek().copied() {
                if at > now {
                    break;
                }
                self.running.pop();
                self.lanes_busy -= 1;
                freed_lanes.push_back(at);
                if let Some(s) = self.streams.get_mut(&id) {
                    s.activity = Activity::Idle;
                    complete_head(s, &mut self.fired);
                    self.dirty.push((id, at));
                }
            }
            while let Some((id, at)) = self.dirty.pop() {
                self.step(id, at);
            }
            while self.lanes_busy < self.lanes {
                let Some(Reverse((_, _, id))) = self.ready.pop() else {
                    break;
                };
                let Some(s) = self.streams.get_mut(&id) else {
                    continue;
                };
                let Some(Task { kind: TaskKind::Delay(d), .. }) = s.queue.front() else {
                    continue;
                };
                let ready_at = s.ready_at.unwrap_or(now);
                let start = freed_lanes.pop_front().map_or(ready_at, |lane| lane.max(ready_at));
                s.activity = Activity::Running;
                self.running.push(Reverse((start + *d, id)));
                self.lanes_busy += 1;
            }
            let due = self.running.peek().is_some_and(|Reverse((at, _))| *at <= now);
            if self.dirty.is_empty() && !due {
                break;
            }
        }
    }

    /// Runs a stream's head tasks until one has to wait.
    fn step(&mut self, id: StreamId, now: Instant) {
        loop {
            let Some(s) = self.streams.get_mut(&id) else {
                return;
            };
            if s.activity != Activity::Idle {
                return;
            }
            let Some(head) = s.queue.front() else {
                self.drained(id);
                return;
            };
            let task = head.id;
            if let Some(code) = s.injected_failures.remove(&task) {
                // The failure is on the books before the syncs waiting for this task are
                // released, so they return it on that call.
                s.first_failure.get_or_insert(code);
                complete_head(s, &mut self.fired);
                self.fail_stream(id, task, code, now);
                continue;
            }
            match head.kind {
                TaskKind::Delay(_) => {
                    s.activity = Activity::WaitingForLane;
                    s.ready_at = Some(now);
                    self.ready_seq += 1;
                    self.ready.push(Reverse((s.priority, self.ready_seq, id)));
                    return;
                }
                TaskKind::Record { event, generation } => {
                    complete_head(s, &mut self.fired);
                    self.record_reached(event, generation, now);
                }
                TaskKind::Reset { event } => {
                    complete_head(s, &mut self.fired);
                    if let Some(e) = self.events.get_mut(&event) {
                        e.recorded = false;
                        e.timestamp = None;
                    }
                }
                TaskKind::Wait { event, generation } => match self.events.get_mut(&event) {
                    Some(e) if !e.reached(generation) => {
                        e.stream_waiters.push((generation, id));
                        s.activity = Activity::OnEvent;
                        return;
                    }
                    _ => complete_head(s, &mut self.fired),
                },
                TaskKind::Callback { id: callback, blocking } => {
                    let status = s.first_failure.unwrap_or(0);
                    self.reports.push(SimReport::Callback { stream: id, callback, blocking, status });
                    if blocking {
                        s.activity = Activity::OnCallback(callback);
                        return;
                    }
                    complete_head(s, &mut self.fired);
                }
            }
        }
    }

    fn record_reached(&mut self, event: EventId, generation: u64, now: Instant) {
        let Some(e) = self.events.get_mut(&event) else {
            return;
        };
        e.pending.remove(&generation);
        if generation == e.latest {
            e.timestamp = Some(now);
        }
        let (due, waiting): (Vec<_>, Vec<_>) =
            e.host_waiters.drain(..).partition(|(g, _)| *g <= generation && !e.pending.contains(g));
        e.host_waiters = waiting;
        self.fired.extend(due.into_iter().map(|(_, w)| (w, Ok(()))));
        let pending = &e.pending;
        let mut woken = Vec::new();
        e.stream_waiters.retain(|(g, sid)| {
            let reached = !pending.contains(g);
            if reached {
                woken.push(*sid);
            }
            !reached
        });
        if e.destroyed && e.pending.is_empty() {
            self.events.remove(&event);
            self.freed_events += 1;
        }
        for sid in woken {
            if let Some(s) = self.streams.get_mut(&sid)
                && s.activity == Activity::OnEvent
            {
                s.activity = Activity::Idle;
                complete_head(s, &mut self.fired);
                self.dirty.push((sid, now));
            }
        }
    }

    pub(super) fn fail_stream(&mut self, id: StreamId, task: u64, code: i32, now: Instant) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        s.first_failure.get_or_insert(code);
        self.reports.push(SimReport::Exception { stream: id, task, code });
        if s.failure_mode == Some(FailureMode::Stop) {
            // Discard the rest; records in it will never be reached, so release them.
            let dropped: Vec<Task> = s.queue.drain(..).collect();
            s.completed += dropped.len() as u64;
            for t in dropped {
                if let TaskKind::Record { event, generation } = t.kind {
                    self.abandon_record(event, generation, now);
                }
            }
        }
    }

    pub(super) fn abandon_record(&mut self, event: EventId, generation: u64, now: Instant) {
        let Some(e) = self.events.get_mut(&event) else {
            return;
        };
        e.pending.remove(&generation);
        if generation == e.latest {
            e.recorded = false;
        }
        let fail = || {
            SimError::new(
                ErrorKind::TaskFailed,
                codes::RT_AICORE_EXCEPTION,
                "the record was discarded by a failed stream",
            )
        };
        let (due, waiting): (Vec<_>, Vec<_>) = e.host_waiters.drain(..).partition(|(g, _)| *g == generation);
        e.host_waiters = waiting;
        self.fired.extend(due.into_iter().map(|(_, w)| (w, Err(fail()))));
        let mut woken = Vec::new();
        e.stream_waiters.retain(|(g, sid)| {
            (*g != generation) || {
                woken.push(*sid);
                false
            }
        });
        for sid in woken {
            if let Some(s) = self.streams.get_mut(&sid) {
                s.activity = Activity::Idle;
                complete_head(s, &mut self.fired);
                self.dirty.push((sid, now));
            }
        }
    }

    fn drained(&mut self, id: StreamId) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let result = stream_result(s);
        for (_, w) in s.drain_waiters.drain(..) {
            self.fired.push((w, result.clone()));
        }
        if s.destroyed {
            if self.streams.remove(&id).is_some_and(|s| s.counted) {
                self.freed_streams += 1;
            }
            self.forget_marker(id);
        }
    }
}

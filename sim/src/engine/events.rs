//! The engine's events: made, recorded, reset and waited on by streams and the host,
//! timed, destroyed.

use super::{Engine, Event, EventId, EventState, StreamId, TaskKind, Waiter};
use crate::error::{ErrorKind, SimError, SimResult, codes};
use std::collections::BTreeSet;
use std::time::Instant;

impl Engine {
    pub fn add_event(&mut self, flags: u32, timing: bool) -> EventId {
        let id = self.fresh_id();
        self.events.insert(
            id,
            Event {
                flags,
                timing,
                latest: 0,
                recorded: false,
                pending: BTreeSet::new(),
                timestamp: None,
                host_waiters: Vec::new(),
                stream_waiters: Vec::new(),
                destroyed: false,
            },
        );
        id
    }

    /// Destroys an event; one whose records are still pending goes when they complete.
    pub fn destroy_event(&mut self, id: EventId) -> SimResult<()> {
        let e = self.live_event(id)?;
        e.destroyed = true;
        if e.pending.is_empty() {
            self.events.remove(&id);
            self.freed_events += 1;
        }
        Ok(())
    }

    pub fn event_info(&mut self, id: EventId) -> SimResult<(u32, bool)> {
        let e = self.live_event(id)?;
        Ok((e.flags, e.timing))
    }

    pub fn record_event(&mut self, event: EventId, stream: StreamId, now: Instant) -> SimResult<()> {
        self.live_stream(stream)?;
        let e = self.live_event(event)?;
        e.latest += 1;
        e.recorded = true;
        e.timestamp = None;
        let generation = e.latest;
        e.pending.insert(generation);
        self.push_task(stream, TaskKind::Record { event, generation }, now).map(drop)
    }

    pub fn reset_event(&mut self, event: EventId, stream: StreamId, now: Instant) -> SimResult<()> {
        self.live_stream(stream)?;
        let e = self.live_event(event)?;
        if e.flags & crate::flags::EVENT_SYNC == 0 {
            return Err(forbid(event, "reset"));
        }
        self.push_task(stream, TaskKind::Reset { event }, now).map(drop)
    }

    /// Later work on `stream` waits for the event's most recent record as of now.
    pub fn stream_wait_event(&mut self, stream: StreamId, event: EventId, now: Instant) -> SimResult<()> {
        self.live_stream(stream)?;
        let e = self.live_event(event)?;
        if e.flags & crate::flags::EVENT_SYNC == 0 {
            return Err(forbid(event, "waited on by a stream"));
        }
        if !e.recorded || e.reached(e.latest) {
            // Never recorded, or already reached: a no-op, as with cuStreamWaitEvent.
            return Ok(());
        }
        let generation = e.latest;
        self.push_task(stream, TaskKind::Wait { event, generation }, now).map(drop)
    }

    pub fn event_state(&mut self, id: EventId) -> SimResult<EventState> {
        let e = self.live_event(id)?;
        Ok(if !e.recorded {
            EventState::NotRecorded
        } else if e.reached(e.latest) {
            EventState::Complete
        } else {
            EventState::Pending
        })
    }

    /// Calls `waiter` when the event's most recent record is reached (at once if none).
    pub fn on_event_complete(&mut self, id: EventId, waiter: Waiter) -> SimResult<()> {
        let e = self.live_event(id)?;
        if !e.recorded || e.reached(e.latest) {
            self.fired.push((waiter, Ok(())));
        } else {
            let generation = e.latest;
            e.host_waiters.push((generation, waiter));
        }
        Ok(())
    }

    pub fn elapsed_ms(&mut self, start: EventId, end: EventId) -> SimResult<f32> {
        let a = self.timestamp_of(start)?;
        let b = self.timestamp_of(end)?;
        let ms = if b >= a { (b - a).as_secs_f64() * 1e3 } else { -((a - b).as_secs_f64() * 1e3) };
        Ok(ms as f32)
    }

    /// When a timed event's latest record completed (`elapsed_ms`'s errors otherwise).
    pub(crate) fn timestamp_of(&mut self, id: EventId) -> SimResult<Instant> {
        let e = self.live_event(id)?;
        if !e.timing {
            return Err(SimError::new(
                ErrorKind::EventNotTimed,
                codes::RT_PARAM_INVALID,
                format!("event {id} was created without timing"),
            ));
        }
        if !e.recorded {
            return Err(SimError::new(
                ErrorKind::EventNotRecorded,
                codes::RT_PARAM_INVALID,
                format!("event {id} has not been recorded"),
            ));
        }
        e.timestamp.ok_or_else(|| {
            SimError::new(
                ErrorKind::EventNotComplete,
                codes::RT_EVENT_NOT_COMPLETE,
                format!("event {id} has not completed yet"),
            )
        })
    }
}

fn forbid(event: EventId, what: &str) -> SimError {
    SimError::new(
        ErrorKind::EventFlagsForbid,
        codes::INVALID_PARAM,
        format!("event {event} was created without ACL_EVENT_SYNC and cannot be {what}"),
    )
}

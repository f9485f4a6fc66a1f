//! Events: create, destroy, record, reset, query, synchronise, elapsed time.

use crate::backend::{BackendError, ErrorKind, EventState, WaitKind};
use crate::daemon::Daemon;
use crate::error::backend_error;
use crate::error::{NpudError, NpudResult, Reason};
use crate::registry::{EventEntry, StreamEntry};
use crate::types::Caller;
use npud_proto::flags::{EVENT_DEFAULT, EVENT_TIME_LINE, check_event_flags};
use std::sync::Arc;

/// ACL_ERROR_RT_NO_EVENT_RESOURCE.
const ACL_NO_EVENT_RESOURCE: i64 = 207007;

impl Daemon {
    pub fn create_event(
        &self,
        caller: &Caller,
        session: u64,
        device: u32,
        flags: u32,
        disable_timing: bool,
    ) -> NpudResult<(u64, EventEntry)> {
        self.registry.touch(caller, session)?;
        self.refuse_if_draining()?;
        self.device(device)?;
        self.require_healthy(device)?;
        check_event_flags(flags).map_err(|e| NpudError::invalid(Reason::InvalidFlags, e))?;
        self.event_room(
            &caller.tenant,
            device,
            1,
            self.natives.device_events(device),
            self.natives.tenant_events(&caller.tenant),
        )?;
        let flags = if flags == 0 { EVENT_DEFAULT } else { flags };
        let timing = !disable_timing && flags & EVENT_TIME_LINE != 0;
        let raw =
            self.backend.create_event(device, flags, timing).map_err(|e| backend_error(self.backend.name(), e))?;
        let entry = EventEntry { session, tenant: Arc::clone(&caller.tenant), device, raw, flags, timing };
        match self.registry.add_event(session, entry.clone()) {
            Ok(handle) => Ok((handle, entry)),
            Err(e) => {
                let _ = self.backend.destroy_event(device, raw);
                Err(e)
            }
        }
    }

    /// Events `tenant` holds, through npud and natively (interposed processes).
    pub fn tenant_events(&self, tenant: &str) -> u32 {
        self.registry.events_held(tenant).saturating_add(self.natives.tenant_events(tenant))
    }

    /// Whether `count` more events fit the device's event table (daemon and native events
    /// together: the table is the hardware's) and the tenant's `max_events`.
    pub fn event_room(
        &self,
        tenant: &str,
        device: u32,
        count: u32,
        native_on_device: u32,
        native_of_tenant: u32,
    ) -> NpudResult<()> {
        let (quota, _) = self.quotas.get(tenant);
        let held = u64::from(self.registry.events_held(tenant)) + u64::from(native_of_tenant);
        if held + u64::from(count) > u64::from(quota.max_events) {
            return Err(NpudError::new(
                Reason::EventBudgetExhausted,
                format!("tenant {tenant} holds {held} events, its quota is {}", quota.max_events),
            )
            .with_figures(vec![("tenant_events", held as i64), ("max_events", i64::from(quota.max_events))]));
        }
        let table = self.device(device)?.event_limit;
        let in_use = u64::from(self.registry.device_events(device)) + u64::from(native_on_device);
        if in_use + u64::from(count) > u64::from(table) {
            let e = NpudError::new(
                Reason::EventBudgetExhausted,
                format!("device {device} holds {table} events and {in_use} are in use; {count} more do not fit"),
            )
            .with_figures(vec![("device_events", in_use as i64), ("event_limit", i64::from(table))]);
            // The code the vendor gives for a full event table (AscendCL's; the CUDA
            // driver has no fixed table to fill).
            let backend = self.backend.name();
            return Err(if backend == "cuda" { e } else { e.with_native(backend, ACL_NO_EVENT_RESOURCE) });
        }
        Ok(())
    }

    /// Destroys an event; records still pending complete first (the CUDA semantics).
    pub fn destroy_event(&self, caller: &Caller, handle: u64) -> NpudResult<()> {
        let e = self.registry.remove_event(caller, handle)?;
        self.backend.destroy_event(e.device, e.raw).map_err(|e| backend_error(self.backend.name(), e))
    }

    /// Looks up an event and a stream that one call uses together: both must be the
    /// caller's, and on the same device.
    pub(crate) fn same_device(
        &self,
        caller: &Caller,
        event: u64,
        stream: u64,
    ) -> NpudResult<(EventEntry, StreamEntry)> {
        let e = self.registry.event(caller, event)?;
        let s = self.registry.stream(caller, stream)?;
        if s.device != e.device {
            return Err(NpudError::new(
                Reason::DeviceMismatch,
                format!("event {event} is on device {} but stream {stream} is on device {}", e.device, s.device),
            ));
        }
        Ok((e, s))
    }

    pub fn record_event(&self, caller: &Caller, event: u64, stream: u64) -> NpudResult<()> {
        let (e, s) = self.same_device(caller, event, stream)?;
        self.require_healthy(e.device)?;
        self.backend.record_event(e.device, e.raw, s.raw).map_err(|e| backend_error(self.backend.name(), e))
    }

    pub fn reset_event(&self, caller: &Caller, event: u64, stream: u64) -> NpudResult<()> {
        let (e, s) = self.same_device(caller, event, stream)?;
        self.backend.reset_event(e.device, e.raw, s.raw).map_err(|err| self.event_failure(err, event, "reset"))
    }

    pub fn query_event(&self, caller: &Caller, handle: u64) -> NpudResult<(EventEntry, EventState)> {
        let e = self.registry.event(caller, handle)?;
        let state = self.backend.event_state(e.device, e.raw).map_err(|e| backend_error(self.backend.name(), e))?;
        Ok((e, state))
    }

    pub async fn synchronize_event(&self, caller: &Caller, handle: u64, timeout_ms: u32) -> NpudResult<()> {
        let e = self.registry.event(caller, handle)?;
        self.require_healthy(e.device)?;
        let wait = self.backend.event_complete(e.device, e.raw);
        self.wait(&caller.tenant, wait, timeout_ms, WaitKind::Event, &format!("event {handle}")).await
    }

    pub fn elapsed_time(&self, caller: &Caller, start: u64, end: u64) -> NpudResult<f32> {
        let a = self.registry.event(caller, start)?;
        let b = self.registry.event(caller, end)?;
        if a.device != b.device {
            return Err(NpudError::new(Reason::DeviceMismatch, "the two events are on different devices"));
        }
        self.backend.elapsed_ms(a.device, a.raw, b.raw).map_err(|err| {
            // The backend checks the start event, then the end: the first that fails is named.
            let state = |e: &EventEntry| self.backend.event_state(e.device, e.raw).ok();
            let start_failed = match err.kind {
                ErrorKind::EventNotTimed => !a.timing,
                ErrorKind::EventNotRecorded => state(&a) == Some(EventState::NotRecorded),
                ErrorKind::EventNotComplete => state(&a) != Some(EventState::Complete),
                _ => true,
            };
            self.event_failure(err, if start_failed { start } else { end }, "timed")
        })
    }

    /// A backend's refusal about an event, named by the caller's handle: the backend names
    /// the event by its own id (the simulator) or not at all (the vendors' codes), neither
    /// of which the caller knows. The reason and the vendor's code are kept. `what` is the
    /// operation an event without ACL_EVENT_SYNC cannot undergo.
    pub(crate) fn event_failure(&self, err: BackendError, handle: u64, what: &str) -> NpudError {
        let message = match err.kind {
            ErrorKind::EventNotTimed => format!("event {handle} was created without timing"),
            ErrorKind::EventNotRecorded => format!("event {handle} has not been recorded"),
            ErrorKind::EventNotComplete => format!("event {handle} has not completed yet"),
            ErrorKind::EventFlagsForbid => {
                format!("event {handle} was created without ACL_EVENT_SYNC and cannot be {what}")
            }
            _ => return backend_error(self.backend.name(), err),
        };
        NpudError { message, ..backend_error(self.backend.name(), err) }
    }

    pub fn list_events(&self, caller: &Caller) -> Vec<(u64, EventEntry, EventState)> {
        self.registry
            .events_of(&caller.tenant)
            .into_iter()
            .map(|(h, e)| {
                let state = self.backend.event_state(e.device, e.raw).unwrap_or(EventState::NotRecorded);
                (h, e, state)
            })
            .collect()
    }
}

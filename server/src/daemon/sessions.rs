//! Sessions: open, renew, close, and the reclaim of everything a session held.

use crate::daemon::Daemon;
use crate::error::{NpudError, NpudResult, Reason};
use crate::registry::Reclaim;
use crate::types::Caller;
use std::collections::BTreeMap;
use std::time::Duration;

/// Session names: [A-Za-z0-9._-], at most 64 bytes.
pub fn check_session_name(name: &str) -> NpudResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(NpudError::invalid(
            Reason::InvalidName,
            format!("session name {} must be 1..=64 characters of [A-Za-z0-9._-]", crate::error::quoted(name)),
        ))
    }
}

impl Daemon {
    pub fn open_session(&self, caller: &Caller, name: &str, lease_ms: u32) -> NpudResult<(u64, Duration, bool)> {
        self.refuse_if_draining()?;
        let name = if name.is_empty() {
            None
        } else {
            check_session_name(name)?;
            Some(name.to_string())
        };
        let default = if name.is_some() { self.config.named_lease } else { self.config.lease };
        let lease = match lease_ms {
            0 => default,
            ms => Duration::from_millis(u64::from(ms)).clamp(Duration::from_millis(100), self.config.max_lease),
        };
        let (id, attached) = self.registry.open(caller, name, lease, self.config.limits.max_sessions_per_tenant)?;
        self.reports.open_mailbox(id);
        Ok((id, lease, attached))
    }

    pub async fn close_session(&self, caller: &Caller, id: u64, name: &str) -> NpudResult<(u32, u32)> {
        let id = match (id, name) {
            (0, "") => {
                return Err(NpudError::invalid(Reason::InvalidName, "name a session by id or by name"));
            }
            (0, name) => self.registry.find_named(caller, name).ok_or_else(NpudError::unknown_session)?,
            (id, _) => id,
        };
        self.registry.owned_session(caller, id)?;
        Ok(self.reclaim(id, "closed").await)
    }

    /// Takes everything a session held back: streams drain and return to the budget,
    /// events are destroyed, blocking callbacks are released.
    pub async fn reclaim(&self, session: u64, why: &str) -> (u32, u32) {
        let _mutation = self.health.mutation();
        let Some(Reclaim { tenant, streams, events }) = self.registry.take_session(session) else {
            return (0, 0);
        };
        let Some(tenant) = tenant else { return (0, 0) };
        self.released.forget(session);
        for (id, cb) in self.reports.close_mailbox(session) {
            if cb.blocking && cb.fired {
                let _ = self.backend.ack_callback(cb.device, cb.raw_stream, id);
            }
        }
        let (n_streams, n_events) = (streams.len() as u32, events.len() as u32);
        let mut by_device: BTreeMap<u32, Vec<_>> = BTreeMap::new();
        for s in streams {
            by_device.entry(s.device).or_default().push((s.raw, (s.priority, s.flags)));
        }
        for (device, list) in by_device {
            self.admission.release(device, &tenant, list, true, None);
        }
        for e in events {
            if let Err(err) = self.backend.destroy_event(e.device, e.raw) {
                tracing::warn!(%tenant, error = %err, "destroying a reclaimed event");
            }
        }
        self.metrics.reclaimed(n_streams, n_events);
        tracing::info!(%tenant, session, streams = n_streams, events = n_events, reason = why, "session reclaimed");
        (n_streams, n_events)
    }

    /// Reclaims sessions whose lease lapsed. Run periodically by the reaper task.
    pub async fn reap_expired(&self) -> usize {
        let expired = self.registry.expired(std::time::Instant::now());
        for &id in &expired {
            self.reclaim(id, "lease lapsed").await;
        }
        expired.len()
    }
}

//! What a budget session claims already exists: streams and events a process declares after
//! npud restarted (checked against npud's own books and the device's count), and streams a
//! graph capture took beyond its grant (booked as its tenant's debt).

use super::NativeSession;
use crate::daemon::Daemon;
use crate::error::{NpudError, Reason};
use crate::types::Tenant;
use npud_proto::v1::{self as pb, budget_reply::Reply};

/// The most streams one capture may report past its grant (a device's whole budget).
const MAX_CAPTURED: u32 = 4096;

impl Daemon {
    /// The tenant's max_streams on `device` (its pod's booking there, on Kubernetes).
    fn max_streams_on(&self, tenant: &Tenant, device: u32) -> u32 {
        self.quota_for_streams(tenant, device, 0).map_or(0, |q| q.max_streams)
    }

    /// The most `tenant`'s holders may leave untracked on `device` until a measurement
    /// settles it: `[limits] max_untracked_per_tenant`, and never more than its quota.
    pub(crate) fn untracked_bound(&self, tenant: &Tenant, device: u32) -> u32 {
        self.max_streams_on(tenant, device).min(self.config.limits.max_untracked_per_tenant)
    }

    /// The most `tenant` may hold past its quota on `device` through capture claims:
    /// `[limits] max_capture_debt_per_tenant`, and never more than its quota again.
    pub(crate) fn capture_debt_bound(&self, tenant: &Tenant, device: u32) -> u32 {
        self.max_streams_on(tenant, device).min(self.config.limits.max_capture_debt_per_tenant)
    }
}

impl NativeSession {
    pub(super) async fn declare(&self, d: &pb::DeclareBudgetRequest) -> Result<Reply, NpudError> {
        let daemon = &self.daemon;
        self.check_device(d.device)?;
        // A pod's process declares only where its pod is booked, as it asks there.
        let quota = daemon.quota_for_streams(&self.caller.tenant, d.device, 0)?;
        if !daemon.natives.accepts_declarations() {
            return Err(NpudError::new(
                Reason::InvalidArgumentOther,
                format!(
                    "declarations are accepted only within {} of the daemon's start; acquire instead",
                    humantime::format_duration(daemon.natives.declare_grace())
                ),
            ));
        }
        // Where the device counts its streams, what it shows outside the books now is all a
        // declaration may claim.
        let measured = daemon.backend.reports_device_free();
        if measured && let Some((untracked, lowered)) = daemon.untracked_now(d.device).await {
            daemon.apply_untracked(d.device, untracked, lowered).await;
        }
        let _mutation = daemon.health.mutation();
        // What the last run recorded for this very process (pid and start time).
        let (recorded, recorded_events) = match self.process {
            Some((pid, start)) => {
                daemon.natives.take_recorded(pid, start, &self.caller.tenant, d.device, (d.count > 0, d.events > 0))
            }
            None => (0, 0),
        };
        // The ledger and the holder change together, before anything can cancel this call: a
        // declaration cut short must not leave streams booked to nobody.
        let accepted =
            daemon.admission.declare_native(d.device, &self.caller.tenant, &quota, d.count, recorded, measured);
        daemon.natives.add(self.id, d.device, accepted);
        // Declared streams exist: they are created, not a grant still to be filled.
        let held = daemon.natives.held(self.id, d.device);
        daemon.natives.set_created(self.id, d.device, held);
        daemon.admission.make_room_for(d.device).await;
        if accepted < d.count {
            tracing::warn!(tenant = %self.caller.tenant, declared = d.count, accepted, recorded, max_streams = quota.max_streams, untracked = daemon.admission.view(d.device).untracked, device = d.device, "a declaration exceeded what the device has left or holds outside npud's books");
        }
        // Events: up to what was recorded for the process, beyond that only within what the
        // tenant's max_events leaves (no vendor counts events); never past the device's table.
        let table = daemon.device(d.device)?.event_limit;
        let (quota, _) = daemon.quotas.get(&self.caller.tenant);
        let tenant_events = daemon.tenant_events(&self.caller.tenant);
        // Recorded events exist, so they count even over the quota; unrecorded ones only fill
        // what the quota leaves after them.
        let unrecorded_room = quota.max_events.saturating_sub(tenant_events.saturating_add(recorded_events));
        let allowed = recorded_events.saturating_add(unrecorded_room);
        let events_accepted = daemon.natives.declare_events(self.id, d.device, d.events.min(allowed), |on_device| {
            table.saturating_sub(daemon.registry.device_events(d.device).saturating_add(on_device))
        });
        Ok(Reply::Declared(pb::DeclareBudgetResponse { accepted, share: Some(self.share(d.device)), events_accepted }))
    }

    /// Streams a graph capture took beyond the process's grant: booked as the tenant's
    /// debt (see `CapturedBudgetRequest`).
    pub(super) async fn captured(&self, c: &pb::CapturedBudgetRequest) -> Result<Reply, NpudError> {
        if c.count == 0 || c.count > MAX_CAPTURED {
            return Err(NpudError::new(
                Reason::InvalidCount,
                format!("a capture of {} streams; 1..={MAX_CAPTURED} per call", c.count),
            ));
        }
        self.check_device(c.device)?;
        let quota = self.daemon.quota_for_streams(&self.caller.tenant, c.device, 0)?;
        // Evidence, not a request: only a session that npud granted capture streams on the
        // device claims, and only up to them (`policy::natives::captures`).
        let room = self.daemon.natives.capture_room(self.id, c.device);
        if room == 0 {
            return Err(NpudError::new(
                Reason::InvalidArgumentOther,
                format!(
                    "a claim of {} captured streams on device {}, from a session npud granted no capture streams there: \
                     a capture's streams are asked for (acquire with `capture`) before a claim can match them",
                    c.count, c.device
                ),
            ));
        }
        let _mutation = self.daemon.health.mutation();
        // Booked and recorded together, before anything can cancel this call.
        let debt = self.daemon.capture_debt_bound(&self.caller.tenant, c.device);
        let accepted =
            self.daemon.admission.capture_debt(c.device, &self.caller.tenant, &quota, debt, c.count.min(room));
        self.daemon.natives.add(self.id, c.device, accepted);
        self.daemon.natives.capture_matched(self.id, c.device, accepted);
        self.daemon.admission.make_room_for(c.device).await;
        if accepted > 0 {
            tracing::info!(tenant = %self.caller.tenant, device = c.device, streams = accepted, "a graph capture grew past its grant; booked as the tenant's debt");
        }
        Ok(Reply::Captured(pb::CapturedBudgetResponse { accepted, share: Some(self.share(c.device)) }))
    }
}

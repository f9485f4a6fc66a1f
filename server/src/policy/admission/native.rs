//! Native holdings: budget for streams a process creates in its own context (through the
//! interposer). They are granted by the same ledger, queue, quotas and reservations as
//! daemon streams; the daemon creates nothing, it only counts. Because the hardware is
//! shared, a native grant that would overflow it together with the warm pool evicts pooled
//! streams first, as a daemon grant does.

use super::Admission;
use crate::config::Policy;
use crate::error::NpudResult;
use crate::types::Quota;
use crate::types::Tenant;
use std::sync::Arc;
use std::time::Duration;

/// How long an ask that reported new creations waits, at most, for the measurement it
/// asked for (see [`Admission::remeasure_grace`]), which runs at once and takes one call
/// of the device.
const REMEASURE_GRACE: Duration = Duration::from_secs(2);

/// A caller's share of one device (what aclrtGetStreamAvailableNum should answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NativeShare {
    pub capacity: u32,
    /// Not held, pooled or draining.
    pub device_free: u32,
    /// min(what the tenant's quota leaves, device free).
    pub available: u32,
    pub tenant_holds: u32,
    /// What the device holds outside the books (see `Ledger::untracked`).
    pub untracked: u32,
}

impl Admission {
    /// Waits (bounded, cancellation-safe) for `count` streams of native budget, then makes
    /// room on the hardware by evicting pooled streams if needed. A holder's growth
    /// (`grows`) is granted whenever it fits, newcomers waiting or not.
    pub async fn acquire_native(
        self: &Arc<Self>,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        wait: Duration,
        grows: bool,
    ) -> NpudResult<Duration> {
        if self.policy == Policy::Passthrough {
            self.lock(device).ledger.force_take(tenant, count);
            self.make_room(device).await;
            return Ok(Duration::ZERO);
        }
        let grant = self.grant_as(device, tenant, quota, count, wait, grows).await?;
        // A caller that goes away while room is made drops the grant, which gives it back.
        self.make_room(device).await;
        Ok(grant.hand_over())
    }

    /// Gives back native budget (the process destroyed streams, reset the device or died).
    pub fn release_native(&self, device: u32, tenant: &Tenant, count: u32) {
        if count == 0 {
            return;
        }
        self.give_back(device, tenant, count, Vec::new());
    }

    /// A holder of `tenant` went away holding `count`, of which `left` may outlive it a
    /// moment: released and counted untracked (within `bound`, [`Admission::untracked_grew`])
    /// under one lock, so no one sees the tenant's footprint (held plus left) above what it
    /// was, and no one is granted room its streams may still take.
    pub fn release_native_leaving(&self, device: u32, tenant: &Tenant, count: u32, left: u32, bound: u32) {
        let measured = left > 0 && self.policy == Policy::Managed && self.backend.reports_device_free();
        let mut st = self.lock(device);
        if measured {
            st.ledger.add_untracked_for(tenant, left, bound);
        }
        st.ledger.release(tenant, count, false);
        super::grant_queued(&mut st.ledger);
        drop(st);
        self.wake_others(device, tenant);
        if measured {
            self.measure_soon(device);
        }
    }

    /// Counts streams a process already holds (declared after a daemon restart): up to
    /// `recorded` (what the last run's books said this process held here), and beyond that
    /// only what the device itself shows outside the books where it counts them
    /// (`measured`): a claim of streams that do not exist books nothing, and two processes
    /// cannot claim the same ones (they move from untracked onto the books under one lock).
    /// Never more than the device has left after everyone else's holdings and unused
    /// reservations. What exists but puts the tenant over its quota is booked (its debt:
    /// it is refused more until back under), never taken from another tenant.
    ///
    /// Synchronous, so the caller records the holder before anything can cancel it; then
    /// it calls [`Admission::make_room_for`]. Returns how many were booked.
    ///
    /// Where the device counts its streams, each stream is booked once (issue 58 item 4):
    /// even a recorded declaration books only streams still outside the books, so two
    /// declarations of the same streams cannot both succeed; and what a declarer claims
    /// beyond its record is held to what its quota leaves (`quota`), so a process with no
    /// record cannot take another process's streams past its own share.
    pub fn declare_native(
        &self,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        recorded: u32,
        measured: bool,
    ) -> u32 {
        let mut st = self.lock(device);
        // The record was booked for its process since the start (`book_recorded`): that
        // booking becomes what the process declares of it, in this one step.
        st.ledger.release(tenant, recorded, false);
        let l = &st.ledger;
        let room = l
            .capacity()
            .saturating_sub(l.in_use())
            .saturating_sub(l.draining())
            .saturating_sub(l.reserved_unused_by_others(tenant));
        let untracked = l.untracked();
        let from_record = count.min(recorded).min(room);
        let quota_left = quota.max_streams.saturating_sub(l.used_by(tenant).saturating_add(from_record));
        let from_device = match measured {
            true => (count - from_record).min(untracked).min(room - from_record).min(quota_left),
            false => 0,
        };
        if measured {
            // Streams beyond the record exist and show as untracked until they are booked.
            st.ledger.claim_untracked(from_device.min(untracked));
        }
        st.ledger.force_take(tenant, from_record + from_device);
        self.remeasure_after_booking(device, measured && from_record + from_device > 0);
        from_record + from_device
    }

    /// Books what the last run recorded for a process that still runs, until it declares
    /// (its declaration takes the booking over) or the declarations' time ends: so no
    /// newcomer of its pod is granted what the process holds while it reconnects.
    pub fn book_recorded(&self, device: u32, tenant: &Tenant, count: u32) {
        self.lock(device).ledger.force_take(tenant, count);
    }

    /// Lets go of a record no declaration took (its process never came back): what it still
    /// holds on the device is untracked from the next measurement on.
    pub async fn forget_recorded(&self, device: u32, tenant: &Tenant, count: u32) {
        self.lock(device).ledger.release(tenant, count, false);
        self.make_room_for(device).await;
    }

    /// Books `count` streams a graph capture took beyond a process's grant. They exist, so
    /// they count even over the tenant's quota (its debt, at most `debt` past it), but never
    /// beyond the room the device has after every other tenant's reservation, nor past the
    /// tenant's max_streams twice (the device's capacity standing for an unlimited one, so
    /// the ceiling is finite under every quota): a claim cannot take the device, or a
    /// reservation, from other tenants. Streams the device shows outside the books are never booked to the
    /// claimer: another process may hold them. Where the claimed streams are among them,
    /// they count twice until the next measurement (asked for now), withheld, never lost.
    /// Returns how many were booked. Synchronous like [`Admission::declare_native`], for
    /// the same reason.
    pub fn capture_debt(&self, device: u32, tenant: &Tenant, quota: &Quota, debt: u32, count: u32) -> u32 {
        let mut st = self.lock(device);
        let l = &st.ledger;
        let max = quota.max_streams.min(l.capacity());
        let ceiling = max.saturating_add(debt.min(max)).saturating_sub(l.used_by(tenant));
        let room = l.grantable().saturating_sub(l.reserved_unused_by_others(tenant));
        let accepted = st.ledger.take_within_caps(tenant, count.min(room).min(ceiling));
        self.remeasure_after_booking(device, accepted > 0);
        accepted
    }

    /// How long an ask for `count` more streams may wait for the device to be measured
    /// again, which is asked for now, when it reports the caller's creations (`reported`)
    /// and does not fit as the books stand. Until its holder reported them, a measurement
    /// counted its new streams as untracked as well as granted; an ask that does not wait
    /// (a process growing past its start-up) would be refused for room its own streams
    /// seemed to take twice, and the program fail with 207008 half-way through start-up.
    /// None for an ask that fits: no measurement is then wanted. Bounded, so two holders
    /// asking for more of one device cannot wait for each other for longer.
    pub fn remeasure_grace(&self, device: u32, tenant: &str, quota: &Quota, count: u32, reported: bool) -> Duration {
        let fits = self.native_share(device, tenant, quota).available >= count;
        match reported && !fits && self.measure_soon(device) {
            true => REMEASURE_GRACE,
            false => Duration::ZERO,
        }
    }

    /// Streams that already existed were just booked: a measurement in flight, or one
    /// taken before a holder reported them, may have counted them as untracked, and they
    /// count twice (withheld) until the next. A new one follows at once.
    pub fn remeasure_after_booking(&self, device: u32, booked: bool) {
        if booked {
            self.measure_soon(device);
        }
    }

    /// Destroys pooled streams the device no longer has room for after a booking that did
    /// not wait (a declaration, a capture's debt).
    pub async fn make_room_for(&self, device: u32) {
        self.make_room(device).await;
    }

    /// The tenant's share of `device` under `quota`.
    pub fn native_share(&self, device: u32, tenant: &str, quota: &Quota) -> NativeShare {
        let st = self.lock(device);
        let l = &st.ledger;
        let device_free = l.grantable().saturating_sub(l.pooled());
        let tenant_holds = l.used_by(tenant);
        // Pooled streams are the daemon's to evict, so they count as free for a grant.
        let grantable = l.grantable();
        let available = quota.max_streams.saturating_sub(tenant_holds).min(grantable);
        NativeShare { capacity: l.capacity(), device_free, available, tenant_holds, untracked: l.untracked() }
    }

    /// Sets what reconciliation measured on `device` against the books as they were when
    /// `lowered` was read (see `BudgetView::lowered`): what the books let go of since is
    /// added, for the device may still hold it. Grants waiting for room that is now there
    /// are served, and pooled streams the device no longer has room for are destroyed.
    pub async fn set_untracked(&self, device: u32, measured: i64, lowered: u64) {
        let evicted = {
            let mut st = self.lock(device);
            let since = st.ledger.lowered().wrapping_sub(lowered);
            st.ledger.set_untracked(measured.saturating_add(i64::try_from(since).unwrap_or(i64::MAX)));
            st.ledger.settle_left(lowered);
            super::grant_queued(&mut st.ledger);
            st.evict_overflow()
        };
        self.destroy_all(device, evicted).await;
    }

    /// `n` streams left the books (a holder of `tenant` reported fewer, or went away) that
    /// may still be on the device: they count as untracked until the next measurement, so
    /// what a stale measurement missed is never handed out twice; and against `tenant`,
    /// no more than `bound` of its at once (`Ledger::add_untracked_for`).
    pub fn untracked_grew(&self, device: u32, tenant: &Tenant, n: u32, bound: u32) {
        // Only where a measurement will follow to correct it.
        if n > 0 && self.policy == Policy::Managed && self.backend.reports_device_free() {
            self.lock(device).ledger.add_untracked_for(tenant, n, bound);
            // Withheld only until measured: at once, not at the next tick.
            self.measure_soon(device);
        }
    }

    /// Destroys pooled streams while the hardware would otherwise hold more than the
    /// device's capacity (held + pooled + draining).
    async fn make_room(&self, device: u32) {
        let evicted = self.lock(device).evict_overflow();
        self.destroy_all(device, evicted).await;
    }
}

//! A request for streams: admitted whole, queued in fair order, or refused with the
//! figures that say why.

use super::{Admit, Ledger, Pending, Tag};
use crate::error::{NpudError, Reason};
use crate::types::{Quota, Tenant};
use std::sync::Arc;

impl<W> Ledger<W> {
    /// Admits, queues or refuses a request for `count` streams.
    pub fn request(&mut self, tenant: &Tenant, count: u32, quota: &Quota, waiter: W) -> Result<Admit<W>, NpudError> {
        self.request_as(tenant, count, quota, waiter, false)
    }

    /// [`Ledger::request`]; a holder's growth (`grows`) is granted whenever it fits, not
    /// only when no one waits: it never waits behind a newcomer for room that is free (its
    /// growth is finite, so the head of the queue is delayed, never starved).
    pub fn request_as(
        &mut self,
        tenant: &Tenant,
        count: u32,
        quota: &Quota,
        waiter: W,
        grows: bool,
    ) -> Result<Admit<W>, NpudError> {
        let used = self.used_by(tenant);
        if used > quota.max_streams {
            return Err(NpudError::new(
                Reason::QuotaExceeded,
                format!(
                    "tenant {tenant} holds {used} streams, over its quota of {} (a graph capture grew past it): nothing more until it is back under",
                    quota.max_streams
                ),
            )
            .with_figures(self.figures(tenant, quota)));
        }
        if count > quota.max_streams {
            return Err(NpudError::new(
                Reason::QuotaExceeded,
                format!(
                    "request for {count} streams can never be granted: tenant {tenant} may hold at most {}",
                    quota.max_streams
                ),
            )
            .with_figures(self.figures(tenant, quota)));
        }
        let others_fixed: u32 = self
            .fixed
            .iter()
            .filter(|(t, _)| t.as_ref() != tenant.as_ref())
            .fold(0u32, |n, (_, &r)| n.saturating_add(r));
        if count > self.capacity.saturating_sub(others_fixed) {
            return Err(NpudError::new(
                Reason::BudgetExhausted,
                format!(
                    "request for {count} streams can never be granted: device capacity is {} and other tenants' quotas reserve {others_fixed}",
                    self.capacity
                ),
            )
            .with_figures(self.figures(tenant, quota)));
        }
        if let Some(cap) = self.spread.cap(tenant)
            && count > cap
        {
            return Err(NpudError::new(
                Reason::QuotaExceeded,
                format!(
                    "request for {count} streams can never be granted: tenant {tenant} may hold {cap} over all devices"
                ),
            )
            .with_figures(self.figures(tenant, quota)));
        }
        let within_reservation = self.used_by(tenant) + count <= quota.reserved_streams;
        let tag = if within_reservation {
            Tag(f64::NEG_INFINITY)
        } else {
            let last = self.tenant_tag.get(tenant).copied().unwrap_or(0.0);
            let tag = self.virtual_time.max(last) + f64::from(count) / f64::from(quota.weight.max(1));
            self.tenant_tag.insert(Arc::clone(tenant), tag);
            Tag(tag)
        };
        self.seq += 1;
        let key = (tag, self.seq);
        let ticket = self.seq;
        // A guaranteed request never waits behind others; the rest wait their turn. The
        // total over every device is checked and taken in one step, last.
        if (within_reservation || grows || self.queue.is_empty())
            && self.fits_quota(tenant, count, quota)
            && self.fits_budget(tenant, count)
            && self.spread.try_add(tenant, count)
        {
            self.book(tenant, count, tag);
            return Ok(Admit::Granted(waiter));
        }
        let waiting = self.pending.entry(Arc::clone(tenant)).or_insert(0);
        if *waiting >= self.max_pending {
            return Err(NpudError::new(
                Reason::TooManyPendingRequests,
                format!(
                    "tenant {tenant} already has {waiting} create requests waiting on this device, the most allowed"
                ),
            )
            .with_figures(vec![("pending", i64::from(*waiting)), ("max_pending", i64::from(self.max_pending))]));
        }
        *waiting += 1;
        self.queue.insert(key, Pending { tenant: Arc::clone(tenant), count, quota: *quota, waiter });
        self.tickets.insert(ticket, key);
        Ok(Admit::Queued(ticket))
    }
}

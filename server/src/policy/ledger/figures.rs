//! What a ledger tells about itself: the figures a refusal explains itself with, who holds
//! the most, and each tenant's row for `status`.

use super::Ledger;
use crate::types::{Quota, Tenant};
use std::collections::HashMap;
use std::sync::Arc;

/// Per-tenant figures for `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantFigures {
    pub streams: u32,
    pub waiting_requests: u32,
    pub waiting_streams: u32,
    /// Streams its holders left untracked that no measurement has settled yet.
    pub left_untracked: u32,
}

impl<W> Ledger<W> {
    /// What a new booking of `tenant`'s may count on here: the capacity less what the
    /// device holds outside the books and what every other tenant holds or has reserved
    /// (the larger of the two each). A DRA claim is booked only where it fits this.
    pub fn room_for(&self, tenant: &str) -> u32 {
        let mut others = u64::from(self.untracked());
        let names: std::collections::HashSet<&str> =
            self.used.keys().chain(self.reservations.keys()).map(|t| t.as_ref()).collect();
        for t in names.into_iter().filter(|t| *t != tenant) {
            others += u64::from(self.used_by(t).max(self.reservation_of(t)));
        }
        u64::from(self.capacity).saturating_sub(others) as u32
    }

    /// The numbers a refusal explains itself with.
    pub fn figures(&self, tenant: &str, quota: &Quota) -> Vec<(&'static str, i64)> {
        vec![
            ("capacity", i64::from(self.capacity)),
            ("in_use", i64::from(self.in_use)),
            ("pooled", i64::from(self.pooled)),
            // Released streams still finishing their work: they hold budget until they do.
            ("draining", i64::from(self.draining)),
            // Streams the device holds outside npud's books (reconciliation).
            ("untracked", i64::from(self.untracked())),
            ("tenant_in_use", i64::from(self.used_by(tenant))),
            ("tenant_max_streams", i64::from(quota.max_streams)),
            ("tenant_reserved", i64::from(quota.reserved_streams)),
        ]
    }

    /// The `n` tenants holding the most streams, most first (ties by name), for a
    /// diagnosis that says who has the device.
    pub fn largest_holders(&self, n: usize) -> Vec<(Tenant, u32)> {
        let mut all: Vec<(Tenant, u32)> =
            self.used.iter().filter(|(_, u)| **u > 0).map(|(t, u)| (Arc::clone(t), *u)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    pub fn tenant_figures(&self) -> HashMap<Tenant, TenantFigures> {
        let mut out: HashMap<Tenant, TenantFigures> = HashMap::new();
        for (t, &u) in &self.used {
            out.entry(Arc::clone(t)).or_default().streams = u;
        }
        for (t, n) in self.left.rows() {
            out.entry(Arc::clone(t)).or_default().left_untracked = n;
        }
        for p in self.queue.values() {
            let f = out.entry(Arc::clone(&p.tenant)).or_default();
            f.waiting_requests += 1;
            f.waiting_streams += p.count;
        }
        out
    }
}

//! What each tenant's holders left on the device's untracked count when they went away or
//! reported fewer streams: those streams may outlive their process by a moment, so they
//! are withheld from everyone until a measurement of the device says whether they are
//! still there. What one tenant leaves counts against that tenant (its quota check) until
//! then, and never exceeds its bound: a tenant opening and closing sessions as fast as it
//! can cannot fill the device's untracked count past its own share (issue 58, item 3).
//!
//! Each entry carries the ledger's `lowered` count when it was added: a measurement whose
//! reading of the books came after it has seen those streams (gone, or still there and
//! counted), so it settles them; entries added after the reading stay counted.

use super::Ledger;
use crate::types::Tenant;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

impl<W> Ledger<W> {
    /// `n` streams `tenant`'s holders let go of (they went away, or reported fewer) may
    /// still be on the device: untracked until measured, counted against `tenant`, and
    /// no more than `bound` of its in all until then. Returns how many were counted.
    pub fn add_untracked_for(&mut self, tenant: &Tenant, n: u32, bound: u32) -> u32 {
        let counted = self.left.add(tenant, self.lowered, n, bound);
        self.lowered = self.lowered.wrapping_add(u64::from(counted));
        self.untracked = self.untracked.saturating_add(i64::from(counted));
        counted
    }

    /// A measurement whose reading of the books saw `lowered` was applied: what tenants
    /// left before that reading is in it.
    pub fn settle_left(&mut self, lowered: u64) {
        self.left.settle(lowered);
    }

    /// What `tenant`'s holders left untracked that no measurement has settled yet.
    pub fn left_by(&self, tenant: &str) -> u32 {
        self.left.counted(tenant)
    }
}

#[derive(Debug, Default)]
pub struct Left {
    /// Per tenant: (the ledger's `lowered` before the entry, streams), oldest first.
    by: HashMap<Tenant, VecDeque<(u64, u32)>>,
}

impl Left {
    /// Streams `tenant` left that no measurement has settled yet.
    pub fn counted(&self, tenant: &str) -> u32 {
        self.by.get(tenant).map_or(0, |q| q.iter().map(|(_, n)| *n).fold(0u32, u32::saturating_add))
    }

    /// Counts `n` more streams left by `tenant` (stamped `lowered`), no more than `bound`
    /// in all; returns how many were counted.
    pub fn add(&mut self, tenant: &Tenant, lowered: u64, n: u32, bound: u32) -> u32 {
        let allowed = n.min(bound.saturating_sub(self.counted(tenant)));
        if allowed > 0 {
            self.by.entry(Arc::clone(tenant)).or_default().push_back((lowered, allowed));
        }
        allowed
    }

    /// A measurement whose reading of the books saw `lowered`: what was left before it is
    /// settled.
    pub fn settle(&mut self, lowered: u64) {
        for q in self.by.values_mut() {
            // Entries are stamped in order; compared by wrapping distance.
            while q.front().is_some_and(|(stamp, _)| (lowered.wrapping_sub(*stamp) as i64) > 0) {
                q.pop_front();
            }
        }
        self.by.retain(|_, q| !q.is_empty());
    }

    /// Each tenant with streams left unsettled, and how many.
    pub fn rows(&self) -> impl Iterator<Item = (&Tenant, u32)> {
        self.by.iter().map(|(t, q)| (t, q.iter().map(|(_, n)| *n).fold(0u32, u32::saturating_add)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_leaves_no_more_than_its_bound_until_a_measurement_settles_it() {
        let mut left = Left::default();
        let a: Tenant = Arc::from("a");
        let b: Tenant = Arc::from("b");
        let mut lowered = 0u64;
        for _ in 0..100 {
            lowered += u64::from(left.add(&a, lowered, 32, 64));
        }
        assert_eq!(left.counted(&a), 64, "a thousand closes leave at most the bound");
        assert_eq!(left.add(&b, lowered, 10, 64), 10, "another tenant's bound is its own");
        lowered += 10;
        let reading = lowered; // a measurement reads the books here
        assert_eq!(left.add(&b, lowered, 5, 64), 5);
        left.settle(reading);
        assert_eq!(left.counted(&a), 0, "settled by the measurement");
        assert_eq!(left.counted(&b), 5, "left after the reading: still counted");
        assert_eq!(left.rows().count(), 1);
    }
}

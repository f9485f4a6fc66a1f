//! What each tenant holds over every device, and the most some tenants may hold there in
//! all. Shared by every device's ledger: a Kubernetes pod whose allocation npud could not
//! place on devices is booked per acquisition, on whatever device it asks, up to the
//! allocation's streams in all (docs/kubernetes.md), and one device's ledger alone cannot
//! see what the pod holds on the others.
//!
//! Each ledger changes its own tenants' totals here under its own lock. A cap is checked
//! and taken in one step here ([`Spread::try_add`]), never checked here and taken later:
//! two devices granting at once under their own locks could both take the last of a cap
//! (issue 68: a 64-stream pod got 128 from eight devices at once).

use crate::types::Tenant;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    held: u32,
    cap: Option<u32>,
}

#[derive(Default)]
pub struct Spread {
    inner: Mutex<HashMap<Tenant, Entry>>,
    /// Tests: run between a ledger's own checks and its take here, so that many ledgers'
    /// takes meet at once.
    #[cfg(test)]
    pub(super) before_take: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

impl std::fmt::Debug for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spread").field("inner", &self.inner).finish()
    }
}

impl Spread {
    fn lock(&self) -> MutexGuard<'_, HashMap<Tenant, Entry>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `tenant` may take `count` more without passing its cap (always, uncapped).
    pub fn fits(&self, tenant: &str, count: u32) -> bool {
        self.lock().get(tenant).and_then(|e| e.cap.map(|cap| e.held.saturating_add(count) <= cap)).unwrap_or(true)
    }

    /// The cap `tenant` has, if any.
    pub fn cap(&self, tenant: &str) -> Option<u32> {
        self.lock().get(tenant).and_then(|e| e.cap)
    }

    /// What `tenant` holds over every device.
    pub fn held(&self, tenant: &str) -> u32 {
        self.lock().get(tenant).map_or(0, |e| e.held)
    }

    /// Sets (or, with None, lifts) the most `tenant` may hold over every device. What it
    /// holds already stays held: a lower cap only stops it taking more.
    pub fn set_cap(&self, tenant: &Tenant, cap: Option<u32>) {
        let mut map = self.lock();
        let e = map.entry(Arc::clone(tenant)).or_default();
        e.cap = cap;
        if e.held == 0 && e.cap.is_none() {
            map.remove(tenant);
        }
    }

    /// Takes `count` for `tenant` if its cap leaves room for it, the check and the take in
    /// one step; whether it did.
    pub(super) fn try_add(&self, tenant: &Tenant, count: u32) -> bool {
        #[cfg(test)]
        {
            let hook = self.before_take.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(hook) = hook {
                hook();
            }
        }
        let mut map = self.lock();
        if map.get(tenant).is_some_and(|e| e.cap.is_some_and(|cap| e.held.saturating_add(count) > cap)) {
            return false;
        }
        let e = map.entry(Arc::clone(tenant)).or_default();
        e.held = e.held.saturating_add(count);
        true
    }

    /// Takes as much of `count` as `tenant`'s cap leaves, in one step; how much.
    pub(super) fn add_within(&self, tenant: &Tenant, count: u32) -> u32 {
        let mut map = self.lock();
        let e = map.entry(Arc::clone(tenant)).or_default();
        let n = e.cap.map_or(count, |cap| count.min(cap.saturating_sub(e.held)));
        e.held = e.held.saturating_add(n);
        if e.held == 0 && e.cap.is_none() {
            map.remove(tenant);
        }
        n
    }

    /// Takes `n` whatever the cap: streams that exist already.
    pub(super) fn add(&self, tenant: &Tenant, n: u32) {
        if n == 0 {
            return;
        }
        let mut map = self.lock();
        let e = map.entry(Arc::clone(tenant)).or_default();
        e.held = e.held.saturating_add(n);
    }

    pub(super) fn sub(&self, tenant: &str, n: u32) {
        if n == 0 {
            return;
        }
        let mut map = self.lock();
        if let Some(e) = map.get_mut(tenant) {
            e.held = e.held.saturating_sub(n);
            if e.held == 0 && e.cap.is_none() {
                map.remove(tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_bounds_the_total_and_lifts() {
        let s = Spread::default();
        let t: Tenant = Arc::from("pod-a");
        s.add(&t, 5);
        assert!(s.fits("pod-a", 1000), "uncapped");
        s.set_cap(&t, Some(8));
        assert!(s.fits("pod-a", 3) && !s.fits("pod-a", 4));
        s.sub("pod-a", 5);
        assert!(s.fits("pod-a", 8) && !s.fits("pod-a", 9));
        assert!(s.try_add(&t, 8) && !s.try_add(&t, 1), "the whole cap, then nothing");
        assert_eq!(s.add_within(&t, 5), 0);
        s.sub("pod-a", 3);
        assert_eq!(s.add_within(&t, 5), 3, "what the cap leaves");
        s.sub("pod-a", 8);
        s.set_cap(&t, None);
        assert_eq!((s.held("pod-a"), s.cap("pod-a")), (0, None));
        assert!(s.lock().is_empty(), "nothing is kept for a tenant that holds nothing and has no cap");
    }
}

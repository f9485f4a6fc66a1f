//! Calls one tenant may have in flight at once (blocking synchronize calls): each holds a
//! task, a timer and, on the vendor backends, a thread of the blocking pool, so one tenant
//! starting thousands would take them from everyone. A guard holds each place and gives
//! it back when the call ends or is cancelled.

use crate::types::Tenant;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct InFlight {
    max: u32,
    counts: Mutex<HashMap<Tenant, u32>>,
}

/// One call's place; dropping it (the call ended, or its future was dropped) frees it.
pub struct Place {
    of: Arc<InFlight>,
    tenant: Tenant,
}

impl InFlight {
    pub fn new(max: u32) -> Arc<Self> {
        Arc::new(Self { max, counts: Mutex::new(HashMap::new()) })
    }

    /// A place for one more call of `tenant`, or None when it has `max` in flight.
    pub fn enter(self: &Arc<Self>, tenant: &Tenant) -> Option<Place> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(Tenant::clone(tenant)).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Place { of: Arc::clone(self), tenant: Tenant::clone(tenant) })
    }

    pub fn max(&self) -> u32 {
        self.max
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.of.counts.lock().unwrap_or_else(|e| e.into_inner());
        crate::types::count_down(&mut counts, &self.tenant, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_has_its_own_places_and_a_dropped_call_frees_one() {
        let f = InFlight::new(2);
        let (a, b): (Tenant, Tenant) = (Arc::from("a"), Arc::from("b"));
        let first = f.enter(&a).expect("first");
        let _second = f.enter(&a).expect("second");
        assert!(f.enter(&a).is_none(), "a third for the same tenant");
        assert!(f.enter(&b).is_some(), "another tenant is not affected");
        drop(first);
        assert!(f.enter(&a).is_some());
    }
}

//! What spans devices: a tenant's cap over every device together (a pod booked per
//! acquisition, `Spread`), and the asks it has waiting on other devices that a release on
//! one may let through.

use super::{Admission, grant_queued};
use crate::types::Tenant;

impl Admission {
    /// Sets (None: lifts) the most `tenant` may hold over every device together; asks it
    /// has waiting anywhere are looked at again.
    pub fn set_spread_cap(&self, tenant: &Tenant, cap: Option<u32>) {
        if self.spread.cap(tenant) == cap {
            return;
        }
        self.spread.set_cap(tenant, cap);
        self.wake_others(u32::MAX, tenant);
    }

    /// What `device` reserves for `tenant` now.
    pub fn reserved_for(&self, device: u32, tenant: &str) -> u32 {
        self.lock(device).ledger.reservation_of(tenant)
    }

    /// See `Ledger::room_for`.
    pub fn room_for(&self, device: u32, tenant: &str) -> u32 {
        self.lock(device).ledger.room_for(tenant)
    }

    /// Asks waiting on `device`.
    pub fn queued(&self, device: u32) -> u32 {
        self.lock(device).ledger.queued()
    }

    /// What `tenant` holds on `device`.
    pub fn held_by(&self, device: u32, tenant: &str) -> u32 {
        self.lock(device).ledger.used_by(tenant)
    }

    /// What `tenant` holds over every device, and its cap there.
    pub fn spread(&self, tenant: &str) -> (u32, Option<u32>) {
        (self.spread.held(tenant), self.spread.cap(tenant))
    }

    /// `tenant` gave streams back on `device`: where it has a cap over every device, an
    /// ask of its waiting on another device may fit now (one device at a time, never two
    /// locks at once).
    pub(super) fn wake_others(&self, device: u32, tenant: &str) {
        if self.spread.cap(tenant).is_none() {
            return;
        }
        for d in (0..self.devices.len() as u32).filter(|d| *d != device) {
            let mut st = self.lock(d);
            if st.ledger.tenant_waits(tenant) {
                grant_queued(&mut st.ledger);
            }
        }
    }
}

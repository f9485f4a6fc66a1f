//! Each holder's events: counted per device and tenant, taken and given back like its
//! streams (no vendor counts events, so npud's count is all there is).

use super::{Natives, take_from};
use crate::types::Tenant;

impl Natives {
    /// Adds `n` events for the holder if `fits(native events on the device, the tenant's
    /// native events)` says they fit; the check and the count happen under one lock, so
    /// two processes cannot both take the last event.
    pub fn add_events<E>(
        &self,
        id: u64,
        device: u32,
        n: u32,
        fits: impl FnOnce(u32, u32) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut holders = self.lock();
        let Some(tenant) = holders.get(&id).map(|h| Tenant::clone(&h.tenant)) else { return Ok(()) };
        let on_device: u32 = holders.values().filter_map(|h| h.events.get(&device)).sum();
        let of_tenant: u32 = holders.values().filter(|h| h.tenant == tenant).flat_map(|h| h.events.values()).sum();
        fits(on_device, of_tenant)?;
        if let Some(h) = holders.get_mut(&id) {
            let held = h.events.entry(device).or_insert(0);
            *held = held.saturating_add(n);
        }
        self.touch();
        Ok(())
    }

    /// Counts up to `n` events the holder declares it already has (after a restart), as
    /// many as `room(native events on the device)` says are left; returns how many.
    pub fn declare_events(&self, id: u64, device: u32, n: u32, room: impl FnOnce(u32) -> u32) -> u32 {
        let mut holders = self.lock();
        let on_device: u32 = holders.values().filter_map(|h| h.events.get(&device)).sum();
        let accepted = n.min(room(on_device));
        if let Some(h) = holders.get_mut(&id).filter(|_| accepted > 0) {
            let held = h.events.entry(device).or_insert(0);
            *held = held.saturating_add(accepted);
        }
        self.touch();
        accepted
    }

    /// Takes up to `n` events off the holder's count; returns how many it held of them.
    pub fn remove_events(&self, id: u64, device: u32, n: u32) -> u32 {
        let n = self.lock().get_mut(&id).map_or(0, |h| take_from(&mut h.events, device, n));
        self.touch();
        n
    }

    pub fn events_held(&self, id: u64, device: u32) -> u32 {
        self.lock().get(&id).and_then(|h| h.events.get(&device).copied()).unwrap_or(0)
    }

    /// Native events on `device`, all processes.
    pub fn device_events(&self, device: u32) -> u32 {
        self.lock().values().filter_map(|h| h.events.get(&device)).sum()
    }

    /// Native events of `tenant`, all devices.
    pub fn tenant_events(&self, tenant: &str) -> u32 {
        self.lock().values().filter(|h| h.tenant.as_ref() == tenant).flat_map(|h| h.events.values()).sum()
    }
}

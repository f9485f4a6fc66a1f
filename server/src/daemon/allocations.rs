//! What the daemon does when a container presents its allocation token (it is booked on
//! the devices its pod was given), what a pod may then hold on each device, and what goes
//! when its pod is gone.

use super::Daemon;
use crate::config::device_ids::{Named, name_device};
use crate::error::{NpudError, NpudResult, Reason};
use crate::policy::allocations::{Allocation, Listed, Placement, PodNames};
use crate::types::{Quota, Tenant};
use std::collections::BTreeSet;

impl Daemon {
    /// A caller presents an allocation token from `pod` (its pod uid, if it runs in one):
    /// bind it to the caller's tenant (its pod's) and book it. The first binding places it:
    /// on the devices the vendor's plugin gave its container, as pod-resources lists them,
    /// else per acquisition (see `Placement`).
    pub async fn bind_allocation(&self, tenant: &Tenant, token: &str, pod: Option<&str>) -> NpudResult<()> {
        let Some(allocations) = &self.allocations else {
            return Err(NpudError::new(
                Reason::TenantRefused,
                "an allocation token was presented but this daemon is not the node's device plugin",
            ));
        };
        let current = allocations.presentable(token, tenant, pod)?;
        let (placement, names) = match (&current.placement, &current.names) {
            (Some(_), Some(_)) => (None, None),
            _ => {
                let (placement, names) = self.locate(&current.ids).await;
                (current.placement.is_none().then_some(placement), names)
            }
        };
        if let Some(p) = &placement {
            tracing::info!(%tenant, streams = current.total(), placement = ?p, "a pod's allocation is placed");
        }
        let bound = allocations.bind(token, tenant, pod, placement, names)?;
        if let Some(old) = &bound.moved_from {
            // The config names this container a tenant of its own: the booking is the new
            // presenter's now, and the old one's sessions go, so one token never buys two
            // tenants its streams.
            tracing::info!(from = %old, to = %tenant, "an allocation moved to another container of its pod");
            self.sync_booking(old);
            let sessions: Vec<u64> = self.registry.sessions(Some(old)).into_iter().map(|s| s.id).collect();
            for id in sessions {
                self.reclaim(id, "its pod's allocation moved to another container").await;
            }
        }
        self.sync_booking(tenant);
        Ok(())
    }

    /// Where the allocation with unit ids `ids` belongs: its container in pod-resources,
    /// and the devices the vendor's resources there name. Read from the last listing, and
    /// listed afresh once when the container is not in it (it may have started since).
    async fn locate(&self, ids: &[String]) -> (Placement, Option<PodNames>) {
        // Where the node has one device, that is where the pod is.
        let every = match self.devices().len() {
            1 => Placement::Devices(vec![0]),
            n => Placement::Fallback { spread: n.max(1) as u32 },
        };
        let (Some(k8s), Some(lister)) = (&self.config.kubernetes, self.pod_lister.get()) else { return (every, None) };
        let find = |listing: &[Listed]| listing.iter().find(|c| c.ids_of(&k8s.resource_name) == ids).cloned();
        let cached = find(&self.pod_listing());
        let found = match cached {
            Some(c) => Some(c),
            None => match lister.list().await {
                Ok(listing) => {
                    let found = find(&listing);
                    self.saw_listing(listing);
                    found
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read pod resources to place an allocation; it is booked per acquisition");
                    None
                }
            },
        };
        let Some(container) = found else {
            tracing::warn!(
                ids = ids.len(),
                "pod resources does not list the allocation's container; it is booked per acquisition"
            );
            return (every, None);
        };
        (self.placement_of(&container, every), Some(container.names))
    }

    /// The devices `container`'s vendor resources name, mapped through npud's device
    /// identities (never by index); `otherwise` when it has none, or an id names no device
    /// npud owns, with a spread of its vendor device count.
    fn placement_of(&self, container: &Listed, otherwise: Placement) -> Placement {
        let Some(k8s) = &self.config.kubernetes else { return otherwise };
        let mut devices = BTreeSet::new();
        let mut vendor_ids = 0u32;
        for (resource, ids) in &container.devices {
            if !k8s.device_resources.iter().any(|r| &r.name == resource) {
                continue;
            }
            for id in ids {
                vendor_ids += 1;
                let device = match name_device(&k8s.device_resources, resource, id) {
                    Some(Named::PhysicalId(p)) => self.device_by_identity(Some(p), None).ok(),
                    Some(Named::Uuid(u)) => self.device_by_identity(None, Some(&u)).ok(),
                    Some(Named::Unplaceable) | None => None,
                };
                match device {
                    Some(d) => {
                        devices.insert(d);
                    }
                    None => {
                        tracing::warn!(
                            resource,
                            id,
                            "a vendor device id names no device of npud's; the allocation is booked per acquisition"
                        );
                        return match otherwise {
                            Placement::Devices(one) => Placement::Devices(one),
                            Placement::Fallback { .. } => {
                                Placement::Fallback { spread: vendor_ids.max(ids.len() as u32) }
                            }
                        };
                    }
                }
            }
        }
        match devices.is_empty() {
            true => otherwise,
            false => Placement::Devices(devices.into_iter().collect()),
        }
    }

    /// The bookings of `tenant` changed (bound, moved, gone): its cap over every device
    /// and every device's reservations follow.
    pub(crate) fn sync_booking(&self, tenant: &Tenant) {
        self.sync_cap(tenant);
        self.apply_reservations();
    }

    /// `tenant`'s cap over every device: its pod's allocations in all (none without one).
    pub(crate) fn sync_cap(&self, tenant: &Tenant) {
        let booking = self.allocations.as_ref().and_then(|a| a.booking(tenant));
        self.admission.set_spread_cap(tenant, booking.map(|b| b.total));
    }

    /// Every ledger's reservations: the tenants' quotas, then the pods' bookings in binding
    /// order, oldest first, each within the room the ones before it leave on its device (a
    /// pod whose device is taken waits in its queue, holding nothing, until room returns).
    pub(crate) fn apply_reservations(&self) {
        let base = self.quotas.reservations();
        let booked = self.allocations.as_ref().map(|a| a.in_binding_order()).unwrap_or_default();
        for device in 0..self.devices().len() as u32 {
            let mut map = base.clone();
            let capacity = self.admission.capacity(device);
            for (tenant, _, streams) in booked.iter().filter(|(_, d, _)| *d == device) {
                let taken = map.values().fold(0u32, |n, r| n.saturating_add(*r));
                let slot = map.entry(Tenant::clone(tenant)).or_insert(0);
                *slot = slot.saturating_add((*streams).min(capacity.saturating_sub(taken)));
            }
            self.admission.set_reservations_on(device, map, base.clone());
        }
    }

    /// An allocation's pod is gone: its booking goes, and any session its pod left is
    /// reclaimed now rather than when its lease lapses (the pod's other allocations, if
    /// any, stay).
    pub async fn forget_allocation(&self, a: &Allocation) {
        let Some(tenant) = &a.bound else { return };
        self.sync_booking(tenant);
        if self.allocations.as_ref().is_some_and(|all| all.booking(tenant).is_some()) {
            return;
        }
        let sessions: Vec<u64> = self.registry.sessions(Some(tenant)).into_iter().map(|s| s.id).collect();
        for id in sessions {
            self.reclaim(id, "its pod is gone").await;
        }
        tracing::info!(%tenant, "a pod's allocation is gone: its booking and holdings with it");
    }

    /// The last pod-resources listing read.
    pub fn pod_listing(&self) -> std::sync::Arc<Vec<Listed>> {
        std::sync::Arc::clone(&self.pod_listing.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A pod-resources listing was read: kept for placing allocations, and the names of
    /// bound allocations that have none yet are filled in.
    pub fn saw_listing(&self, listing: Vec<Listed>) {
        if let (Some(all), Some(k8s)) = (&self.allocations, &self.config.kubernetes) {
            all.name_from(&listing, &k8s.resource_name);
        }
        *self.pod_listing.lock().unwrap_or_else(|e| e.into_inner()) = std::sync::Arc::new(listing);
    }
}

impl Daemon {
    /// The quota of `tenant` on `device` for an ask of `count` streams. A pod with an
    /// allocation bound may hold its booking there (and what its unplaced allocations
    /// leave), reserved as booked; a device it is not booked on gives it nothing. A pod's
    /// container without an allocation gets `[kubernetes] unallocated_quota`, refused with
    /// the reason its owner needs.
    pub(crate) fn quota_for_streams(&self, tenant: &Tenant, device: u32, count: u32) -> NpudResult<Quota> {
        let (quota, source) = self.quotas.get(tenant);
        let mut booking = self.allocations.as_ref().and_then(|a| a.booking(tenant));
        if booking.as_ref().is_some_and(|b| b.on(device) == 0) && self.follow_held_devices(tenant) {
            // Its pod's processes hold this device, or others, open: booked where they are.
            booking = self.allocations.as_ref().and_then(|a| a.booking(tenant));
        }
        if let Some(b) = booking {
            let on = b.quota(quota, device);
            if on.max_streams == 0 {
                let list: Vec<String> = b.devices.keys().map(u32::to_string).collect();
                return Err(NpudError::new(
                    Reason::QuotaExceeded,
                    format!(
                        "this pod's allocation of {} streams is booked on device(s) {}; it gets none on device {device}, \
                         which none of its processes holds open",
                        b.total,
                        list.join(", ")
                    ),
                ));
            }
            return Ok(on);
        }
        if source == crate::policy::quota::Source::Unallocated && count > quota.max_streams {
            let resource = self.config.kubernetes.as_ref().map_or("npud.io/streams", |k| k.resource_name.as_str());
            return Err(NpudError::new(
                Reason::QuotaExceeded,
                format!(
                    "this pod has no {resource} allocation: its containers may hold {} streams without one \
                     ([kubernetes] unallocated_quota); request {resource} in the pod's resources",
                    quota.max_streams
                ),
            ));
        }
        Ok(quota)
    }

    /// The quota of `tenant` on `device`: its pod's booking there where it has one (max
    /// and reserved), else its own quota.
    pub fn quota_on(&self, tenant: &str, device: u32) -> Quota {
        let (quota, _) = self.quotas.get(tenant);
        match self.allocations.as_ref().and_then(|a| a.booking(tenant)) {
            Some(b) => b.quota(quota, device),
            None => quota,
        }
    }

    /// How many of an ask for `asked.1` streams on `device` (no fewer than `asked.0`) to
    /// grant `tenant` now. A holder's growth gets what the device and its quota have room
    /// for now (an ask ahead never takes room a measurement promised and others took
    /// since), and only what it needs while others wait there: the room is the queue's. A pod's process gets the most its booking lets it take there now, with its
    /// other processes' grants counted, and at its start-up (`starting`) an even share of
    /// its streams placed on no device over the `visible` devices its container shows it
    /// (a one-NPU container's process takes all of them).
    pub(crate) fn what_fits(
        &self,
        tenant: &Tenant,
        device: u32,
        asked: (u32, u32),
        starting: bool,
        visible: u32,
    ) -> u32 {
        let (least, mut count) = asked;
        if !starting && let Ok(quota) = self.quota_for_streams(tenant, device, least) {
            count = count.min(self.admission.native_share(device, tenant, &quota).available);
            if self.admission.queued(device) > 0 {
                count = least;
            }
        }
        let Some(b) = self.allocations.as_ref().and_then(|a| a.booking(tenant)) else { return count.max(least) };
        let placed = b.devices.get(&device).copied().unwrap_or(0);
        let floating = match (starting, visible) {
            (true, n) if n > 0 => b.floating.div_ceil(n),
            _ => b.floating,
        };
        let (held_all, cap) = self.admission.spread(tenant);
        let pod_left = cap.unwrap_or(b.total).saturating_sub(held_all);
        let device_left = b.on(device).saturating_sub(self.admission.held_by(device, tenant));
        count.min(placed.saturating_add(floating)).min(pod_left).min(device_left).max(least)
    }

    /// What each device's first ask of a process of a pod booked as `b` may be (the
    /// welcome's `bookings`).
    pub fn first_asks(&self, b: &crate::policy::allocations::PodBooking) -> Vec<(u32, u32)> {
        (0..self.devices().len() as u32)
            .filter(|d| b.on(*d) > 0)
            .map(|d| (d, b.first_ask(d).min(b.on(d)).min(self.admission.capacity(d))))
            .collect()
    }
}

impl Daemon {
    /// Every bound allocation's booking per device, oldest binding first, with what its
    /// pod holds and waits for there (only `tenant`'s, when given). An allocation booked
    /// per acquisition has a row on every device, booked with what it may take there.
    pub fn booking_rows(&self, tenant: Option<&str>) -> Vec<npud_proto::v1::AllocationBooking> {
        let Some(all) = &self.allocations else { return Vec::new() };
        let views: Vec<_> = (0..self.devices().len() as u32).map(|d| self.admission.view(d)).collect();
        let mut out = Vec::new();
        for row in all.rows().into_iter().filter(|r| tenant.is_none_or(|t| t == r.tenant.as_ref())) {
            let names = row.names.clone().unwrap_or_default();
            let (held_all, cap) = self.admission.spread(&row.tenant);
            let left = cap.unwrap_or(row.allocated).saturating_sub(held_all);
            let devices: Vec<(u32, u32, bool)> = match row.device {
                Some(d) => vec![(d, row.booked, true)],
                None => (0..views.len() as u32).map(|d| (d, 0, false)).collect(),
            };
            for (device, booked, placed) in devices {
                let Some(view) = views.get(device as usize) else { continue };
                let fig = view.tenants.get(&row.tenant).cloned().unwrap_or_default();
                out.push(npud_proto::v1::AllocationBooking {
                    namespace: names.namespace.clone(),
                    pod: names.pod.clone(),
                    container: names.container.clone(),
                    tenant: row.tenant.to_string(),
                    device,
                    booked: if placed { booked } else { fig.streams.saturating_add(left) },
                    reserved: if placed { self.admission.reserved_for(device, &row.tenant).min(booked) } else { 0 },
                    in_use: fig.streams,
                    waiting: fig.waiting_streams,
                    allocated: row.allocated,
                    mode: match (placed, row.moved) {
                        (true, true) => "moved",
                        (true, false) => "devices",
                        (false, _) => "fallback",
                    }
                    .into(),
                });
            }
        }
        out
    }
}

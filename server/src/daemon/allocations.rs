//! What the daemon does when a container presents its allocation token, and when its pod
//! is gone.

use super::Daemon;
use crate::error::{NpudError, NpudResult, Reason};
use crate::policy::allocations::{Allocation, Booking};
use crate::types::Tenant;

impl Daemon {
    /// A caller presents an allocation token from `pod` (its pod uid, if it runs in one):
    /// bind it and make the allocation its quota. When the binding moved from another
    /// container of the same pod (it restarted), that tenant's quota goes.
    pub fn bind_allocation(&self, tenant: &Tenant, token: &str, pod: Option<&str>) -> NpudResult<()> {
        let Some(allocations) = &self.allocations else {
            return Err(NpudError::new(
                Reason::TenantRefused,
                "an allocation token was presented but this daemon is not the node's device plugin",
            ));
        };
        let bound = allocations.bind(token, tenant, pod)?;
        if let Some(old) = &bound.moved_from {
            tracing::info!(from = %old, to = %tenant, "an allocation moved to a restarted container of its pod");
            if let Err(e) = self.remove_quota(old) {
                tracing::warn!(tenant = %old, error = %e, "removing the quota of a restarted container");
            }
        }
        let streams = bound.allocation.total();
        // The reservation is not the quota's (that would hold room on every device): it is
        // made on the device the allocation is booked on (see `apply_reservations`).
        let change = crate::policy::quota::QuotaChange {
            max_streams: Some(streams),
            reserved_streams: Some(0),
            ..Default::default()
        };
        let (current, _) = self.quotas.get(tenant);
        if current.max_streams != streams || current.reserved_streams != 0 {
            self.set_quota(tenant, change)?;
            tracing::info!(%tenant, streams, "a container presented its allocation: its quota is the allocation");
        }
        self.apply_reservations();
        Ok(())
    }

    /// Every ledger's reservations: the tenants' quotas, and on each device the allocations
    /// booked there, each within the room other reservations leave on that device (so a
    /// whole-device allocation binds; its process waits in the queue if the room is taken).
    pub(crate) fn apply_reservations(&self) {
        let base = self.quotas.reservations();
        let booked = self.allocations.as_ref().map(|a| a.booked()).unwrap_or_default();
        for device in 0..self.devices().len() as u32 {
            let mut map = base.clone();
            let capacity = self.admission.capacity(device);
            for (tenant, _, streams) in booked.iter().filter(|(_, d, _)| *d == device) {
                let others: u32 = map.iter().filter(|(t, _)| *t != tenant).fold(0u32, |n, (_, r)| n.saturating_add(*r));
                map.insert(Tenant::clone(tenant), (*streams).min(capacity.saturating_sub(others)));
            }
            self.admission.set_reservations_on(device, map);
        }
    }
}

impl Daemon {
    /// An allocation's pod is gone: its tenant's quota returns to the default, and any
    /// session it left is reclaimed now rather than when its lease lapses.
    pub async fn forget_allocation(&self, a: &Allocation) {
        let Some(tenant) = &a.bound else { return };
        if let Err(e) = self.remove_quota(tenant) {
            tracing::warn!(%tenant, error = %e, "removing a gone pod's quota");
        }
        let sessions: Vec<u64> = self.registry.sessions(Some(tenant)).into_iter().map(|s| s.id).collect();
        for id in sessions {
            self.reclaim(id, "its pod is gone").await;
        }
        tracing::info!(%tenant, "a pod's allocation is gone: its quota and holdings with it");
    }
}

impl Daemon {
    /// The quota of `tenant`, refusing at once, with the reason a pod's owner needs, an ask
    /// of `count` streams by a pod's container that has no allocation beyond what
    /// `[kubernetes] unallocated_quota` allows.
    /// An allocation not yet booked is booked on `device` now; one booked on another device
    /// gives nothing here.
    pub(crate) fn quota_for_streams(
        &self,
        tenant: &Tenant,
        device: u32,
        count: u32,
    ) -> NpudResult<crate::types::Quota> {
        let (quota, source) = self.quotas.get(tenant);
        if let Some(allocations) = &self.allocations {
            match allocations.book(tenant, device) {
                Booking::Elsewhere(booked, streams) => {
                    return Err(NpudError::new(
                        Reason::QuotaExceeded,
                        format!(
                            "this pod's allocation of {streams} streams is booked on device {booked}, the first it \
                             used; it gets none on device {device}"
                        ),
                    ));
                }
                Booking::Here { new: true } => {
                    tracing::info!(%tenant, device, streams = quota.max_streams, "a pod's allocation is booked on the device it opened");
                    self.apply_reservations();
                }
                Booking::Here { new: false } | Booking::None => {}
            }
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
}

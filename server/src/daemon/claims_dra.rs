//! DRA claims booked (issue 77): a prepared claim's streams on the device the scheduler
//! gave it, reserved for its pod in the same books as the device plugin's pods, and its
//! end when the kubelet unprepares it.

use super::Daemon;
use crate::error::{NpudError, NpudResult, Reason};
use crate::policy::allocations::{Allocation, ClaimBooking, PodNames};
use crate::types::Tenant;

/// What a claim's allocation result asks of one device: its name in npud's ResourceSlice
/// and the streams consumed there (None: the whole device, allocated to it alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAsk {
    pub uid: String,
    /// The one pod it is reserved for.
    pub pod: String,
    pub names: Option<PodNames>,
    pub devices: Vec<(String, Option<u32>)>,
}

impl Daemon {
    /// The name DRA knows device `d` by: `gpu-<d>` on a CUDA node, else `npu-<d>`.
    pub fn dra_device_name(&self, d: u32) -> String {
        let gpu = self.devices().get(d as usize).is_some_and(|x| x.identity.uuid.is_some());
        format!("{}-{d}", if gpu { "gpu" } else { "npu" })
    }

    /// The device a DRA device name names, where it is one of npud's.
    pub fn dra_device(&self, name: &str) -> Option<u32> {
        let d = name.rsplit_once('-')?.1.parse().ok()?;
        (d < self.devices().len() as u32 && self.dra_device_name(d) == name).then_some(d)
    }

    /// What claims may have of device `d` in all: its ledger's capacity less what the
    /// tenants' own quotas reserve there for good (`reserved_streams`). What DRA publishes
    /// as the device's `streams`, which changes only with the configuration.
    pub fn claimable(&self, d: u32) -> u32 {
        let fixed = self.quotas.reservations().values().fold(0u32, |n, r| n.saturating_add(*r));
        self.admission.capacity(d).saturating_sub(fixed)
    }

    /// The tenant pod `uid` is booked as.
    pub fn pod_tenant(&self, uid: &str) -> Tenant {
        self.identities.read().unwrap_or_else(|e| e.into_inner()).pod_tenant(uid)
    }

    /// Books claim `ask` for its pod: exactly its streams on each device it names, or
    /// refused whole, saying why, where one of them is faulted or has too little room
    /// left (held or reserved by others, or taken by streams outside npud's books).
    /// Idempotent: a claim booked already is booked as it was. Returns (device, streams).
    pub fn book_claim(&self, ask: &ClaimAsk, library: Option<String>) -> NpudResult<Vec<(u32, u32)>> {
        let Some(all) = &self.allocations else {
            return Err(NpudError::new(Reason::TenantRefused, "this npud is not the node's kubelet plugin"));
        };
        let booked = all.claim(&ask.uid);
        if !booked.is_empty() {
            return Ok(booked.iter().flat_map(|a| a.streams.clone()).collect());
        }
        let tenant = self.pod_tenant(&ask.pod);
        let pod = all.booking(&tenant);
        let mut streams = Vec::new();
        for (name, consumed) in &ask.devices {
            let Some(d) = self.dra_device(name) else {
                return Err(NpudError::new(
                    Reason::InvalidDevice,
                    format!("the claim's allocation names device {name:?}, which is not one of this npud's"),
                ));
            };
            if !self.health().is_healthy(d) {
                let why = self.health().fault(d).unwrap_or_else(|| "it does not answer its probe".into());
                return Err(NpudError::new(Reason::DeviceUnhealthy, format!("device {name} is faulted: {why}")));
            }
            // A device allocated whole: what the slice offered of it, which leaves out the
            // tenants' own reservations (the whole capacity never fits beside those).
            let want = consumed.unwrap_or_else(|| self.claimable(d));
            let earlier = streams.iter().filter(|(x, _)| *x == d).fold(0u32, |n, (_, s)| n.saturating_add(*s));
            let room = self.admission.room_for(d, &tenant).saturating_sub(earlier);
            let mine = pod.as_ref().map_or(0, |b| b.on(d));
            if want > room.saturating_sub(mine) {
                let view = self.admission.view(d);
                let others = view.capacity.saturating_sub(view.untracked).saturating_sub(room);
                return Err(NpudError::new(
                    Reason::BudgetExhausted,
                    format!(
                        "device {name} has {} streams left for this claim, which consumes {want}: of its {} streams, \
                         {others} are held or reserved by other tenants, {} are held outside npud's books and {mine} \
                         are booked for this pod already",
                        room.saturating_sub(mine),
                        view.capacity,
                        view.untracked,
                    ),
                )
                .with_figures(vec![
                    ("capacity", view.capacity.into()),
                    ("others", others.into()),
                    ("untracked", view.untracked.into()),
                    ("consumes", want.into()),
                ]));
            }
            streams.push((d, want));
        }
        let booking = ClaimBooking {
            uid: ask.uid.clone(),
            pod: ask.pod.clone(),
            tenant: Tenant::clone(&tenant),
            streams: streams.clone(),
            names: ask.names.clone(),
        };
        all.book_claim(&booking, library).map_err(|e| NpudError::new(Reason::BackendError, e))?;
        tracing::info!(claim = %ask.uid, %tenant, ?streams, "a claim is booked for its pod");
        self.sync_booking(&tenant);
        Ok(streams)
    }

    /// The kubelet unprepared claim `uid` (every container using it has stopped): its
    /// booking ends now; what its pod still holds without another booking is reclaimed.
    /// Returns the allocations that booked it (none: it was not booked, or ended before).
    pub async fn end_claim(&self, uid: &str) -> Vec<Allocation> {
        let Some(all) = &self.allocations else { return Vec::new() };
        let ended = all.end_claim(uid);
        for a in &ended {
            self.forget_allocation(a).await;
        }
        if let Some(t) = ended.first().and_then(|a| a.bound.as_ref()) {
            tracing::info!(claim = %uid, tenant = %t, "a claim is unprepared: its booking ends");
        }
        ended
    }
}

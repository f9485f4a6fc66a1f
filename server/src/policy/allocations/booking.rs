//! What a pod may hold where: the bookings of the allocations bound to it. Every container
//! of a pod is one tenant, so a pod holds at most its containers' units, however many
//! containers present one token. A unit id counts once per pod: the kubelet hands a regular
//! init container's unit ids on to the app container (calling Allocate again, its ids a
//! superset or a subset of the init container's), and keeps both allocations for the
//! pod's life, as npud does; the pod is booked the union of their units.

use super::{Allocation, Allocations, Placement, PodNames};
use crate::types::Tenant;
use std::collections::{BTreeMap, HashMap, HashSet};

/// `total` split over `n` devices: evenly, the remainder one each to the lowest.
pub fn split(total: u32, n: usize) -> Vec<u32> {
    if n == 0 {
        return Vec::new();
    }
    let n32 = n as u32;
    (0..n32).map(|i| total / n32 + u32::from(i < total % n32)).collect()
}

/// A pod's bookings, summed over its allocations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodBooking {
    /// Streams booked (and reserved) on each device, by npud's device id.
    pub devices: BTreeMap<u32, u32>,
    /// Streams of allocations whose devices are unknown: usable on any device.
    pub floating: u32,
    /// Everything: the most the pod may hold over all devices.
    pub total: u32,
    /// Over how many devices the floating streams are expected to be used.
    pub spread: u32,
}

impl PodBooking {
    /// The most the pod may hold on `device` (what the other devices hold aside).
    pub fn on(&self, device: u32) -> u32 {
        self.devices.get(&device).copied().unwrap_or(0).saturating_add(self.floating)
    }

    /// `base` (the tenant's own quota) as it stands on `device` for the pod: as many
    /// streams as it may hold there, reserved as booked there.
    pub fn quota(&self, base: crate::types::Quota, device: u32) -> crate::types::Quota {
        crate::types::Quota {
            max_streams: self.on(device),
            reserved_streams: self.devices.get(&device).copied().unwrap_or(0),
            ..base
        }
    }

    /// What one of its processes asks for at once on `device` at most: its booking there,
    /// and an even share of the floating streams.
    pub fn first_ask(&self, device: u32) -> u32 {
        let share = self.floating.div_ceil(self.spread.max(1));
        self.devices.get(&device).copied().unwrap_or(0).saturating_add(share)
    }
}

/// Of `allocations`, the bound ones that count, oldest binding first, each with the
/// streams it counts: per pod, each unit id once, for the latest allocation bound that
/// holds it (the app container's, where it reuses its init container's ids). An allocation
/// whose every unit a later one holds counts nothing and is left out.
fn counted_in<'a>(allocations: impl Iterator<Item = &'a Allocation>) -> Vec<(&'a Allocation, u32)> {
    let mut bound: Vec<&Allocation> = allocations.filter(|a| a.bound.is_some() && !a.ended).collect();
    bound.sort_by_key(|a| std::cmp::Reverse(a.seq));
    let mut seen: HashMap<&Tenant, HashSet<&str>> = HashMap::new();
    let mut out = Vec::new();
    for a in bound {
        let Some(t) = &a.bound else { continue };
        let ids = seen.entry(t).or_default();
        let fresh = a.ids.iter().filter(|id| ids.insert(id.as_str())).count();
        let total = match a.ids.len() {
            0 => a.total(),
            n => (u64::from(a.total()) * fresh as u64 / n as u64) as u32,
        };
        if total > 0 || a.ids.is_empty() {
            out.push((a, total));
        }
    }
    out.sort_by_key(|(a, _)| a.seq);
    out
}

/// One allocation's booking on one device, for `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookingRow {
    pub names: Option<PodNames>,
    pub tenant: Tenant,
    /// The device (npud's id), or None for an allocation booked per acquisition, which
    /// may take its streams on any device.
    pub device: Option<u32>,
    pub booked: u32,
    pub allocated: u32,
    /// Booked where its pod's processes hold devices open, not where its vendor's ids
    /// said.
    pub moved: bool,
}

impl Allocations {
    /// The bound allocations that count, oldest binding first, with the streams each
    /// counts (each unit id of a pod once).
    fn counted(&self) -> Vec<(Allocation, u32)> {
        let inner = self.lock();
        counted_in(inner.map.values()).into_iter().map(|(a, n)| (a.clone(), n)).collect()
    }

    /// What the pod `tenant` may hold where; None when no allocation is bound to it. On
    /// every ask of a pod's process: only its own allocations are looked at, none copied.
    pub fn booking(&self, tenant: &str) -> Option<PodBooking> {
        let inner = self.lock();
        let mine = counted_in(inner.map.values().filter(|a| a.bound.as_deref() == Some(tenant)));
        if mine.is_empty() {
            return None;
        }
        let mut b = PodBooking { spread: 1, ..Default::default() };
        for (a, total) in mine {
            b.total = b.total.saturating_add(total);
            match &a.placement {
                Some(Placement::Devices(devices)) => {
                    for (d, n) in devices.iter().zip(split(total, devices.len())) {
                        let slot = b.devices.entry(*d).or_insert(0);
                        *slot = slot.saturating_add(n);
                    }
                }
                Some(Placement::Fallback { spread }) => {
                    b.floating = b.floating.saturating_add(total);
                    b.spread = b.spread.max(*spread);
                }
                // Bound but not placed yet (only while a presentation is under way).
                None => b.floating = b.floating.saturating_add(total),
            }
        }
        Some(b)
    }

    /// Every pod's booked streams per device, oldest binding first: the order in which
    /// their reservations are made, so a newer pod never takes an older one's room.
    pub fn in_binding_order(&self) -> Vec<(Tenant, u32, u32)> {
        let mut out = Vec::new();
        for (a, total) in self.counted() {
            let (Some(t), Some(Placement::Devices(devices))) = (&a.bound, &a.placement) else { continue };
            for (d, n) in devices.iter().zip(split(total, devices.len())) {
                out.push((Tenant::clone(t), *d, n));
            }
        }
        out
    }

    /// Every counted allocation's rows, oldest binding first.
    pub fn rows(&self) -> Vec<BookingRow> {
        let mut out = Vec::new();
        for (a, allocated) in self.counted() {
            let Some(tenant) = a.bound.clone() else { continue };
            let row = |device, booked| BookingRow {
                names: a.names.clone(),
                tenant: Tenant::clone(&tenant),
                device,
                booked,
                allocated,
                moved: a.moved,
            };
            match &a.placement {
                Some(Placement::Devices(devices)) => {
                    out.extend(devices.iter().zip(split(allocated, devices.len())).map(|(d, n)| row(Some(*d), n)));
                }
                _ => out.push(row(None, allocated)),
            }
        }
        out
    }

    /// Every pod tenant with an allocation bound (the pods npud books).
    pub fn bound_tenants(&self) -> Vec<Tenant> {
        let mut out: Vec<Tenant> = self.counted().into_iter().filter_map(|(a, _)| a.bound).collect();
        out.sort();
        out.dedup();
        out
    }
}

//! Device liveness and the daemon's own consistency checks.
//!
//! A monitor probes every device's liveness (the backend's heartbeat) at an interval; a
//! device that misses its deadline is marked unhealthy and its requests fail fast with
//! UNAVAILABLE/DEVICE_UNHEALTHY while other devices keep serving. The invariant checker
//! compares the ledger with the registry and the hardware whenever no mutation is in
//! flight (a sequence counter detects one that started meanwhile), so it never reports a
//! transient state.

use super::Daemon;
use crate::error::{NpudError, NpudResult, Reason};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

impl Daemon {
    /// Fails fast when the device has stopped answering.
    pub fn require_healthy(&self, device: u32) -> NpudResult<()> {
        self.refuse_if_faulted(device)?;
        if self.health.is_healthy(device) {
            Ok(())
        } else {
            Err(NpudError::new(
                Reason::DeviceUnhealthy,
                format!("device {device} stopped answering its liveness probe; requests to it fail until it recovers"),
            ))
        }
    }

    /// Probes every device once; marks each healthy or not.
    pub async fn probe_devices(&self) {
        let timeout = self.config.health_timeout;
        let probes: Vec<_> = self.devices().iter().map(|d| (d.id, self.backend.heartbeat(d.id))).collect();
        let mut results = Vec::new();
        for (id, wait) in probes {
            results.push((id, matches!(tokio::time::timeout(timeout, wait).await, Ok(Ok(())))));
        }
        for (id, ok) in results {
            let was = self.health.set_healthy(id, ok);
            if was != ok {
                if ok {
                    tracing::warn!(device = id, "device answers again: healthy");
                } else {
                    tracing::error!(device = id, timeout = ?timeout, "device missed its liveness probe: unhealthy");
                }
            }
        }
    }

    /// Checks ledger = registry (per device and tenant) and hardware ≥ accounted streams,
    /// when quiescent. Returns the violations found (also counted and logged).
    pub fn check_invariants(&self) -> Vec<String> {
        let h = &self.health;
        let Some(generation) = h.quiescent() else { return Vec::new() };
        let mut held: HashMap<(u32, Arc<str>), u32> = HashMap::new();
        for (_, e) in self.registry.all_streams() {
            *held.entry((e.device, e.tenant)).or_insert(0) += 1;
        }
        // Streams interposed processes created themselves: in the ledger, not on our hardware.
        let mut natives = self.natives.totals();
        // And what a restart booked for recorded processes that have not declared yet.
        for (tenant, device, n) in self.natives.recorded_holdings() {
            *natives.entry((device, Arc::from(tenant))).or_insert(0) += n;
        }
        for ((device, tenant), n) in &natives {
            *held.entry((*device, Arc::clone(tenant))).or_insert(0) += n;
        }
        let views: Vec<_> = self.devices().iter().map(|d| (d.clone(), self.admission.view(d.id))).collect();
        let hardware: Vec<u32> = self.devices().iter().map(|d| self.backend.hardware_in_use(d.id)).collect();
        if !h.unchanged_since(generation) {
            return Vec::new();
        }
        let mut problems = Vec::new();
        for ((desc, view), hw) in views.iter().zip(hardware) {
            let registry: u32 = held.iter().filter(|((d, _), _)| *d == desc.id).map(|(_, n)| n).sum();
            if registry != view.in_use {
                problems.push(format!(
                    "device {}: ledger in use {} but the registry and native holders hold {registry}",
                    desc.id, view.in_use
                ));
            }
            for (tenant, figures) in &view.tenants {
                let n = held.get(&(desc.id, Arc::clone(tenant))).copied().unwrap_or(0);
                if n != figures.streams {
                    problems
                        .push(format!("device {}: tenant {tenant} ledger {} registry {n}", desc.id, figures.streams));
                }
            }
            let native: u32 = natives.iter().filter(|((d, _), _)| *d == desc.id).map(|(_, n)| n).sum();
            let accounted = desc.runtime_streams + view.in_use.saturating_sub(native) + view.pooled;
            if self.config.policy == crate::config::Policy::Managed && hw < accounted {
                problems
                    .push(format!("device {}: hardware holds {hw} streams but {accounted} are accounted for", desc.id));
            }
        }
        if !problems.is_empty() {
            h.count_violations(problems.len());
            for p in &problems {
                tracing::error!(problem = %p, "invariant violated");
            }
        }
        problems
    }
}

/// Probes devices every `interval` until the daemon stops.
pub async fn monitor(daemon: Arc<Daemon>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        daemon.probe_devices().await;
    }
}

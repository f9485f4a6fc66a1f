//! Reconciliation: npud's books against the device's own count of streams in use.
//!
//! npud's books hold what it knows of: its own streams (runtime, held, pooled, draining)
//! and what interposed processes report having created. A device can hold more: a program
//! started without the interposer, a vendor library's internal streams. Where the vendor
//! reports a device-wide free count (AscendCL's aclrtGetStreamAvailableNum in npud's own
//! context; all processes share one budget), the difference is *untracked*:
//!
//! `untracked = max(0, (hardware limit − vendor free) − (npud's own + holders' created))`
//!
//! and the ledger hands out only `capacity − booked − untracked`. Grants are not streams:
//! a holder's count is what it says it created (capped at its grant), never its grant, so a
//! process that asked for 70 and made 61 does not hide 9 of someone else's.
//!
//! A creation that completes between the device's count and the holder's report would look
//! untracked for a moment, so a sample is applied only as the smaller of it and the one
//! before: drift must be seen twice in a row (one period apart) to count, and goes at once.

use super::Daemon;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the books are compared with the device (the issue asks for at least every
/// second; two samples in a row must agree, so drift counts within two periods).
pub const RECONCILE_PERIOD: Duration = Duration::from_millis(500);

/// Compares books and devices every [`RECONCILE_PERIOD`], and at once after a creation the
/// device refused, until the daemon stops. Returns at once where the backend has no
/// device-wide count.
pub async fn run(daemon: Arc<Daemon>) {
    let devices: Vec<u32> = daemon.devices().iter().map(|d| d.id).collect();
    if devices.iter().all(|&d| daemon.backend.device_free(d).is_none()) {
        return;
    }
    let mut last: HashMap<u32, u32> = HashMap::new();
    let mut tick = tokio::time::interval(RECONCILE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = daemon.admission.device_refused.notified() => {}
        }
        for &device in &devices {
            let Some(sample) = daemon.untracked_now(device).await else { continue };
            let previous = last.insert(device, sample).unwrap_or(0);
            daemon.apply_untracked(device, sample.min(previous)).await;
        }
    }
}

impl Daemon {
    /// What the device holds beyond npud's books right now; None where the vendor gives
    /// no device-wide count or the call failed.
    pub async fn untracked_now(self: &Arc<Self>, device: u32) -> Option<u32> {
        let backend = Arc::clone(&self.backend);
        let free = tokio::task::spawn_blocking(move || backend.device_free(device)).await.ok()??.ok()?;
        let desc = self.device(device).ok()?;
        let view = self.admission.view(device);
        let native_held: u32 = self
            .natives
            .totals()
            .iter()
            .filter(|((d, _), _)| *d == device)
            .map(|(_, n)| *n)
            .fold(0, u32::saturating_add);
        let own = desc
            .runtime_streams
            .saturating_add(view.in_use.saturating_sub(native_held))
            .saturating_add(view.pooled)
            .saturating_add(view.draining);
        let booked = own.saturating_add(self.natives.created_on(device));
        let on_device = desc.hardware_limit.saturating_sub(free);
        Some(on_device.saturating_sub(booked))
    }

    /// Books `untracked` for `device`, logging when drift appears, changes or goes.
    pub async fn apply_untracked(&self, device: u32, untracked: u32) {
        let before = self.admission.view(device).untracked;
        if before == untracked {
            return;
        }
        match (before, untracked) {
            (0, n) => tracing::warn!(
                device,
                untracked = n,
                "the device holds streams npud's books do not: they are not handed out"
            ),
            (_, 0) => tracing::info!(device, "npud's books match the device again"),
            (b, n) => tracing::info!(device, before = b, untracked = n, "streams outside npud's books changed"),
        }
        self.admission.set_untracked(device, untracked).await;
    }
}

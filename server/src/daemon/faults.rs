//! A device's own word on its health (`Backend::fault_signals`: DCMI's error codes on
//! Ascend, NVML's critical XID events on NVIDIA), read every half second, and what npud
//! does with it. `aclrtQueryDeviceStatus` is no such word: in the open runtime it reads a
//! per-process watchdog flag that defaults to NORMAL.
//!
//! A device whose codes reach a level that keeps it out (`config::faults::Level`), or that
//! raised an XID NVIDIA's plugin does not ignore, is faulted: its device-plugin units go
//! Unhealthy at the kubelet (within a second: ListAndWatch looks every 500 ms), asks on it
//! are refused naming the fault, its holders' interposers hear it with their next answer
//! (the budget share's `fault`), and `npuctl device list`, a metric and the log show it.
//! When DCMI reports no such code any more, it is admitted to again. An XID stays until npud
//! restarts: NVML has no event for a GPU that recovered, and NVIDIA's plugin never marks
//! one healthy again either.

use super::Daemon;
use crate::backend::FaultSignal;
use std::sync::Arc;
use std::time::Duration;

/// How often the devices' fault signals are read.
pub const PERIOD: Duration = Duration::from_millis(500);

impl Daemon {
    /// What a device's fault signal says: the fault that keeps it out, or None.
    fn fault_of(&self, signal: &FaultSignal, device: u32) -> Option<Option<String>> {
        let f = &self.config.faults;
        match signal {
            FaultSignal::Codes(codes) => {
                let worst = codes.iter().map(|c| (f.level(*c), *c)).max();
                Some(worst.filter(|(level, _)| level.keeps_out()).map(|(level, code)| {
                    let table = match &f.codes {
                        Some(_) => format!("{}", f.codes_path.display()),
                        None => "no fault-code table: an unclassified code".into(),
                    };
                    format!("fault code 0x{code:X} ({}, by {table}) reported by DCMI", level.name())
                }))
            }
            FaultSignal::Xid(xid) if f.ignored_xids.contains(xid) => {
                tracing::info!(device, xid, "an XID npud ignores (an application's error, not the GPU's)");
                None
            }
            FaultSignal::Xid(xid) => Some(Some(format!("XID {xid} reported by NVML (a critical error of the GPU)"))),
        }
    }

    /// Reads the devices' fault signals once and applies them.
    pub async fn read_faults(self: &Arc<Self>) {
        let backend = Arc::clone(&self.backend);
        let Ok(signals) = tokio::task::spawn_blocking(move || backend.fault_signals()).await else { return };
        for (device, signal) in signals {
            let Some(now) = self.fault_of(&signal, device) else { continue };
            let was = self.health.set_fault(device, now.clone());
            match (&was, &now) {
                (None, Some(why)) => {
                    tracing::error!(device, fault = %why, "the device reports a fault: npud admits nothing there until it clears")
                }
                (Some(_), None) => tracing::warn!(device, "the device's fault cleared: admitted to again"),
                (Some(a), Some(b)) if a != b => tracing::error!(device, fault = %b, "the device's fault changed"),
                _ => {}
            }
        }
    }

    /// Refuses an ask on a device that reports a fault, naming it.
    pub fn refuse_if_faulted(&self, device: u32) -> crate::error::NpudResult<()> {
        match self.health.fault(device) {
            None => Ok(()),
            Some(why) => Err(crate::error::NpudError::new(
                crate::error::Reason::DeviceUnhealthy,
                format!("device {device} is faulted: {why}; npud admits nothing there until it clears"),
            )),
        }
    }
}

/// Reads the devices' fault signals every [`PERIOD`], for the daemon's life.
pub async fn watch(daemon: Arc<Daemon>) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        daemon.read_faults().await;
    }
}

//! Devices for the fake vendor libraries built on the simulator (tests/fake-acl,
//! tests/fake-cuda). A C library can only be configured through its environment, and a
//! vendor runtime runs host callbacks off the device's execution threads, so both fakes
//! need the same two things: devices sized by `NPU_SIM_*`, and a report thread.

use crate::{Profile, SimDevice, SimOptions, SimReport};
use std::sync::Arc;

fn env<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `NPU_SIM_DEVICES` devices (default 1) of `profile`, with `NPU_SIM_LANES` execution
/// lanes each (default 8).
pub fn devices_from_env(profile: &Profile) -> Vec<Arc<SimDevice>> {
    let options = SimOptions { lanes: env("NPU_SIM_LANES", 8), ..SimOptions::default() };
    (0..env("NPU_SIM_DEVICES", 1u32)).map(|id| Arc::new(SimDevice::new(id, profile.clone(), options.clone()))).collect()
}

/// Hands every report of `devices` to `deliver` on one thread named `name`, in the order
/// the devices produced them, so a callback that blocks holds up reports and never the
/// devices' lanes.
pub fn deliver_reports_on_thread(
    devices: &[Arc<SimDevice>],
    name: &str,
    deliver: impl Fn(u32, SimReport) + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = std::sync::mpsc::channel::<(u32, SimReport)>();
    for d in devices {
        let tx = tx.clone();
        let id = d.id();
        d.set_report_sink(Arc::new(move |r| {
            let _ = tx.send((id, r));
        }));
    }
    std::thread::Builder::new().name(name.into()).spawn(move || {
        for (device, report) in rx {
            deliver(device, report);
        }
    })?;
    Ok(())
}

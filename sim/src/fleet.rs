//! Devices for the fake vendor libraries built on the simulator (tests/fake-acl,
//! tests/fake-cuda). A C library can only be configured through its environment, and a
//! vendor runtime runs host callbacks off the device's execution threads, so both fakes
//! need the same two things: devices sized by `NPU_SIM_*`, and a report thread.

use crate::{Profile, SimDevice, SimOptions, SimReport};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

fn env<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `NPU_SIM_DEVICES` devices (default 1) of `profile`, with `NPU_SIM_LANES` execution
/// lanes each (default 8).
pub fn devices_from_env(profile: &Profile) -> Vec<Arc<SimDevice>> {
    let options = SimOptions { lanes: env("NPU_SIM_LANES", 8), ..SimOptions::default() };
    (0..env("NPU_SIM_DEVICES", 1u32)).map(|id| Arc::new(SimDevice::new(id, profile.clone(), options.clone()))).collect()
}

/// Reports handed from the devices to the report thread.
#[derive(Default)]
struct Queue {
    state: Mutex<Pending>,
    ready: Condvar,
}

#[derive(Default)]
struct Pending {
    reports: VecDeque<(u32, SimReport)>,
    /// Devices still able to report; the thread ends when none is.
    senders: usize,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One device's end of the queue.
struct Sender {
    queue: Arc<Queue>,
    device: u32,
}

impl Sender {
    fn send(&self, report: SimReport) {
        self.queue.lock().reports.push_back((self.device, report));
        self.queue.ready.notify_all();
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut pending = self.queue.lock();
        pending.senders = pending.senders.saturating_sub(1);
        drop(pending);
        self.queue.ready.notify_all();
    }
}

/// The report thread's queue, for [`Reports::hold_for_fork`].
pub struct Reports(Arc<Queue>);

/// The report queue's lock held across a fork (see [`Reports::hold_for_fork`]).
pub struct ReportsHold<'a>(#[allow(dead_code)] MutexGuard<'a, Pending>);

impl Reports {
    /// Takes the queue's lock for a fork(2) the calling thread is about to make, as
    /// [`SimDevice::hold_for_fork`] does the devices' (take those first: a device's timer
    /// thread queues reports under the device's lock). The report thread takes it each
    /// time it wakes; a plain mutex is used rather than a channel so that it can be held
    /// here.
    pub fn hold_for_fork(&self) -> ReportsHold<'_> {
        ReportsHold(self.0.lock())
    }
}

/// Hands every report of `devices` to `deliver` on one thread named `name`, in the order
/// the devices produced them, so a callback that blocks holds up reports and never the
/// devices' lanes.
pub fn deliver_reports_on_thread(
    devices: &[Arc<SimDevice>],
    name: &str,
    deliver: impl Fn(u32, SimReport) + Send + 'static,
) -> std::io::Result<Reports> {
    let queue = Arc::new(Queue::default());
    queue.lock().senders = devices.len();
    for d in devices {
        let sender = Sender { queue: Arc::clone(&queue), device: d.id() };
        d.set_report_sink(Arc::new(move |r| sender.send(r)));
    }
    let thread_queue = Arc::clone(&queue);
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let queue = thread_queue;
        let mut pending = queue.lock();
        loop {
            if let Some((device, report)) = pending.reports.pop_front() {
                drop(pending);
                deliver(device, report);
                pending = queue.lock();
            } else if pending.senders == 0 {
                return;
            } else {
                pending = queue.ready.wait(pending).unwrap_or_else(|e| e.into_inner());
            }
        }
    })?;
    Ok(Reports(queue))
}

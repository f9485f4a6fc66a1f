//! Cross-device waits, as the driver does them: cuStreamWaitEvent with another context's
//! event makes the stream wait for it. The simulated devices do not share an engine, so
//! the waiting stream gets a blocking host call (a gate) that opens when the other
//! device's event completes, whichever of the two happens first.

use crate::{CuResult, HostCall, Rt, sim};
use npu_sim::{EventId, EventState, SimDevice, StreamId};
use std::sync::{Arc, Mutex};

pub(crate) struct Gate {
    device: u32,
    stream: StreamId,
    callback: u64,
    /// (the stream reached the gate, the event completed)
    state: Mutex<(bool, bool)>,
}

impl Gate {
    /// The waiting stream reached the gate (its report was dispatched).
    pub(crate) fn reached(&self, rt: &Rt) {
        self.update(rt, |s| s.0 = true);
    }

    fn opened(&self, rt: &Rt) {
        self.update(rt, |s| s.1 = true);
    }

    /// The second of the two events releases the stream.
    fn update(&self, rt: &Rt, mark: impl FnOnce(&mut (bool, bool))) {
        let release = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            mark(&mut s);
            s.0 && s.1
        };
        if release {
            let _ = rt.devices[self.device as usize].ack_callback(self.stream, self.callback);
        }
    }
}

/// `stream` (on `waiting`) waits for `event` (on `other`): a no-op when the event has no
/// pending record, as on one device.
pub(crate) fn wait_across(
    r: &Rt,
    waiting: &Arc<SimDevice>,
    stream: StreamId,
    other: &Arc<SimDevice>,
    event: EventId,
) -> Result<(), CuResult> {
    if other.event_state(event).map_err(sim)? != EventState::Pending {
        return Ok(());
    }
    let callback = r.next_host_call();
    let gate = Arc::new(Gate { device: waiting.id(), stream, callback, state: Mutex::new((false, false)) });
    r.register_host_call(callback, HostCall::Gate(Arc::clone(&gate)), 0);
    waiting.launch_callback(stream, callback, true).map_err(sim)?;
    other
        .on_event_complete(
            event,
            Box::new(move |_| {
                if let Some(rt) = crate::runtime() {
                    gate.opened(rt);
                }
            }),
        )
        .map_err(sim)
}

//! The devices a process uses, by the vendor's global name.
//!
//! A process's device number is its own: AscendCL's user id depends on
//! ASCEND_RT_VISIBLE_DEVICES and the container, a CUDA ordinal on CUDA_VISIBLE_DEVICES.
//! npud books the device the vendor's own calls name (the physical id, the UUID), so each
//! number the process uses is looked up once, with the vendor's call, never by reading the
//! environment, and every message about that device carries the name. A device npud does
//! not own is left alone: its streams are created without admission (one stderr line).

use crate::{Map, Set};
use npud_proto::v1 as pb;
use std::sync::{Mutex, MutexGuard};

#[derive(Default)]
pub struct Devices {
    /// Device number → its name; None where the library cannot say (old CANN): npud is
    /// then told the number, the form requests had before identities.
    names: Mutex<Map<u32, Option<pb::DeviceIdentity>>>,
    /// Device numbers npud said it does not own.
    unowned: Mutex<Set<u32>>,
    /// How many devices the runtime shows the process (0: not known yet, or cannot say).
    visible: std::sync::atomic::AtomicU32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Devices {
    /// Looks `device` up with `lookup` the first time it is used.
    pub fn learn(&self, device: u32, lookup: impl FnOnce() -> Option<pb::DeviceIdentity>) {
        if lock(&self.names).contains_key(&device) {
            return;
        }
        // The vendor call runs without the lock held; two threads may both ask, and agree.
        let name = lookup();
        lock(&self.names).entry(device).or_insert(name);
    }

    /// Looks up how many devices the runtime shows the process, the first time.
    pub fn learn_visible(&self, lookup: impl FnOnce() -> Option<u32>) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.visible.load(Relaxed) == 0
            && let Some(n) = lookup()
        {
            self.visible.store(n, Relaxed);
        }
    }

    /// How many devices the runtime shows the process (0 when unknown).
    pub fn visible(&self) -> u32 {
        self.visible.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The name to send with a message about `device`.
    pub fn identity(&self, device: u32) -> Option<pb::DeviceIdentity> {
        lock(&self.names).get(&device).cloned().flatten()
    }

    /// npud does not own `device`; true the first time it is said.
    pub fn mark_unowned(&self, device: u32) -> bool {
        lock(&self.unowned).insert(device)
    }

    pub fn is_unowned(&self, device: u32) -> bool {
        lock(&self.unowned).contains(&device)
    }

    /// How a refusal names the device, for the one stderr line.
    pub fn describe(&self, device: u32) -> String {
        match self.identity(device).and_then(|i| i.id) {
            Some(pb::device_identity::Id::PhysicalId(p)) => format!("device {device} (physical {p})"),
            Some(pb::device_identity::Id::Uuid(u)) => format!("device {device} ({u})"),
            None => format!("device {device}"),
        }
    }
}

/// An Ascend physical id as a message's identity.
pub fn physical(id: u32) -> pb::DeviceIdentity {
    pb::DeviceIdentity { id: Some(pb::device_identity::Id::PhysicalId(id)) }
}

/// A CUDA UUID as a message's identity.
pub fn uuid(text: String) -> pb::DeviceIdentity {
    pb::DeviceIdentity { id: Some(pb::device_identity::Id::Uuid(text)) }
}

/// Devices npud says are faulted (the budget share's `fault`), by the process's device
/// number: a stream there is refused with the fault, as npud refuses asks there, until an
/// answer says it cleared. `ANY` keeps the common case to one atomic load per creation.
static FAULTS: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());
static ANY_FAULT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What npud's latest answer about `device` said of its fault.
pub fn note_fault(device: u32, fault: &str) {
    use std::sync::atomic::Ordering::Relaxed;
    if fault.is_empty() && !ANY_FAULT.load(Relaxed) {
        return;
    }
    let mut faults = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    faults.retain(|(d, _)| *d != device);
    if !fault.is_empty() {
        faults.push((device, fault.to_string()));
    }
    ANY_FAULT.store(!faults.is_empty(), Relaxed);
}

/// `device`'s fault, while npud says it has one.
pub fn fault(device: u32) -> Option<String> {
    if !ANY_FAULT.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let faults = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    faults.iter().find(|(d, _)| *d == device).map(|(_, f)| f.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_looked_up_once_and_named_in_refusals() {
        let d = Devices::default();
        let mut asked = 0;
        d.learn(0, || {
            asked += 1;
            Some(physical(6))
        });
        d.learn(0, || {
            asked += 1;
            Some(physical(7))
        });
        assert_eq!(asked, 1);
        assert_eq!(d.identity(0), Some(physical(6)));
        assert_eq!(d.describe(0), "device 0 (physical 6)");
        d.learn(1, || None);
        assert_eq!(d.identity(1), None, "an old library names nothing: npud is told the number");
        assert!(d.mark_unowned(1) && !d.mark_unowned(1) && d.is_unowned(1) && !d.is_unowned(0));
    }

    /// A fault npud named stays until an answer about that device says it cleared; other
    /// devices' answers change nothing.
    #[test]
    fn a_fault_lasts_until_npud_says_it_cleared() {
        assert_eq!(fault(2), None);
        note_fault(2, "XID 79");
        note_fault(3, "");
        assert_eq!((fault(2).as_deref(), fault(3)), (Some("XID 79"), None));
        note_fault(2, "");
        assert_eq!(fault(2), None);
    }
}

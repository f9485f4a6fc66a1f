//! Health state: which devices answer their liveness probe, and a sequence counter of the
//! mutations that briefly break ledger = registry, so the invariant checker
//! (`crate::daemon::health`) only looks when nothing is in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub struct Health {
    healthy: Vec<AtomicBool>,
    /// Each device's fault as the device itself reports it (`daemon::faults`), while it
    /// keeps the device from being admitted to.
    faults: Vec<std::sync::RwLock<Option<String>>>,
    /// Mutations of ledger/registry in flight, and how many have started in all.
    in_flight: AtomicU64,
    generation: AtomicU64,
    violations: AtomicU64,
}

/// Held while a mutation that briefly breaks ledger = registry is in progress. Owned,
/// so it can travel with the task that finishes the mutation.
pub struct MutationGuard(Arc<Health>);

impl Drop for MutationGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Health {
    pub fn new(devices: usize) -> Self {
        Self {
            healthy: (0..devices).map(|_| AtomicBool::new(true)).collect(),
            faults: (0..devices).map(|_| std::sync::RwLock::new(None)).collect(),
            in_flight: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            violations: AtomicU64::new(0),
        }
    }

    /// Answers its liveness probe and reports no fault that keeps it from admitting.
    pub fn is_healthy(&self, device: u32) -> bool {
        self.healthy.get(device as usize).is_some_and(|h| h.load(Ordering::Acquire)) && self.fault(device).is_none()
    }

    /// The device's fault, as said to whoever is refused for it.
    pub fn fault(&self, device: u32) -> Option<String> {
        self.faults.get(device as usize).and_then(|f| f.read().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Sets (or clears) the device's fault; returns what it was.
    pub fn set_fault(&self, device: u32, fault: Option<String>) -> Option<String> {
        let slot = self.faults.get(device as usize)?;
        std::mem::replace(&mut *slot.write().unwrap_or_else(|e| e.into_inner()), fault)
    }

    pub fn mutation(self: &Arc<Self>) -> MutationGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.generation.fetch_add(1, Ordering::AcqRel);
        MutationGuard(Arc::clone(self))
    }

    /// Marks a device healthy or not; returns what it was.
    pub fn set_healthy(&self, device: u32, ok: bool) -> bool {
        self.healthy.get(device as usize).is_some_and(|h| h.swap(ok, Ordering::AcqRel))
    }

    /// The mutation generation when none is in flight; `None` while one is.
    pub fn quiescent(&self) -> Option<u64> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| self.generation.load(Ordering::Acquire))
    }

    /// Whether no mutation started or is in flight since [`Health::quiescent`] said `generation`.
    pub fn unchanged_since(&self, generation: u64) -> bool {
        self.quiescent() == Some(generation)
    }

    pub fn count_violations(&self, n: usize) {
        self.violations.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }
}

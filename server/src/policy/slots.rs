//! Client slots: on a device that limits how many processes hold a context there at once
//! (a CUDA GPU in EXCLUSIVE_PROCESS mode: one; under NVIDIA's MPS the server's client
//! limit), a process's first context is admitted against that limit, so a process over it
//! waits in a fair queue instead of failing in `cuDevicePrimaryCtxRetain`/`cuCtxCreate`
//! (CUDA_ERROR_DEVICE_UNAVAILABLE, or CUDA_ERROR_MPS_MAX_CLIENTS_REACHED under MPS).
//!
//! A slot belongs to a budget session (one process) until it gives it back or the session
//! ends. When one frees, the waiter granted it is the one whose tenant holds the fewest
//! slots on the device, the longest waiting among equals: a tenant with many processes
//! does not take every slot before another tenant's first. A wait is cancellation-safe: a
//! waiter that goes away leaves the queue, and nothing it was not granted is booked.

use crate::types::Tenant;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Why a slot was not granted within the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub held: u32,
    pub capacity: u32,
    /// The waiter's place in the queue when its wait ended (1: next).
    pub position: u32,
}

#[derive(Default)]
struct State {
    /// Session → its tenant, for each slot held.
    holders: HashMap<u64, Tenant>,
    /// Waiting sessions: (ticket, session, tenant), oldest first.
    waiting: Vec<(u64, u64, Tenant)>,
    next_ticket: u64,
}

impl State {
    fn held_by(&self, tenant: &Tenant) -> usize {
        self.holders.values().filter(|t| *t == tenant).count()
    }

    /// The waiter a free slot goes to next.
    fn next(&self) -> Option<u64> {
        self.waiting.iter().min_by_key(|(ticket, _, tenant)| (self.held_by(tenant), *ticket)).map(|(t, _, _)| *t)
    }

    fn position(&self, ticket: u64) -> u32 {
        let mut order: Vec<_> = self.waiting.iter().map(|(t, _, tenant)| (self.held_by(tenant), *t)).collect();
        order.sort_unstable();
        order.iter().position(|(_, t)| *t == ticket).map_or(0, |p| p as u32 + 1)
    }
}

struct Device {
    capacity: u32,
    state: Mutex<State>,
    changed: Notify,
}

/// Every device's client slots (None: the device does not limit its processes).
pub struct ClientSlots {
    devices: Vec<Option<Device>>,
}

impl ClientSlots {
    pub fn new(capacities: impl IntoIterator<Item = Option<u32>>) -> ClientSlots {
        let devices = capacities
            .into_iter()
            .map(|c| c.map(|capacity| Device { capacity, state: Mutex::default(), changed: Notify::new() }))
            .collect();
        ClientSlots { devices }
    }

    /// Whether any device limits its processes (the welcome says so to the interposer).
    pub fn any(&self) -> bool {
        self.devices.iter().any(Option::is_some)
    }

    fn device(&self, device: u32) -> Option<&Device> {
        self.devices.get(device as usize).and_then(Option::as_ref)
    }

    /// A slot on `device` for `session` of `tenant`, waiting at most `wait`; Ok(how long it
    /// waited). A device without a limit, or a session holding one already, is granted at
    /// once.
    pub async fn acquire(
        &self,
        device: u32,
        tenant: &Tenant,
        session: u64,
        wait: Duration,
    ) -> Result<Duration, Refusal> {
        let Some(d) = self.device(device) else { return Ok(Duration::ZERO) };
        let started = Instant::now();
        let ticket = {
            let mut s = lock(&d.state);
            if s.holders.contains_key(&session) {
                return Ok(Duration::ZERO);
            }
            s.next_ticket += 1;
            let ticket = s.next_ticket;
            s.waiting.push((ticket, session, tenant.clone()));
            ticket
        };
        let _queued = Queued { d, ticket };
        let deadline = started + wait;
        loop {
            let notified = d.changed.notified();
            {
                let mut s = lock(&d.state);
                if (s.holders.len() as u32) < d.capacity && s.next() == Some(ticket) {
                    s.waiting.retain(|(t, _, _)| *t != ticket);
                    s.holders.insert(session, tenant.clone());
                    drop(s);
                    // The next waiter may fit too.
                    d.changed.notify_waiters();
                    return Ok(started.elapsed());
                }
                if Instant::now() >= deadline {
                    return Err(Refusal {
                        held: s.holders.len() as u32,
                        capacity: d.capacity,
                        position: s.position(ticket),
                    });
                }
            }
            let _ = tokio::time::timeout_at(deadline.into(), notified).await;
        }
    }

    /// `session` gives its slot on `device` back; true when it held one.
    pub fn release(&self, device: u32, session: u64) -> bool {
        let Some(d) = self.device(device) else { return false };
        let held = lock(&d.state).holders.remove(&session).is_some();
        if held {
            d.changed.notify_waiters();
        }
        held
    }

    /// A session ended: every slot it held goes back.
    pub fn release_all(&self, session: u64) {
        for device in 0..self.devices.len() as u32 {
            self.release(device, session);
        }
    }

    /// (held, capacity, waiting) on `device`; None where it has no limit.
    pub fn view(&self, device: u32) -> Option<(u32, u32, u32)> {
        let d = self.device(device)?;
        let s = lock(&d.state);
        Some((s.holders.len() as u32, d.capacity, s.waiting.len() as u32))
    }
}

/// A waiter's place in the queue, left when its wait ends however it ends (granted: it
/// was taken out already; refused or cancelled: here).
struct Queued<'a> {
    d: &'a Device,
    ticket: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        lock(&self.d.state).waiting.retain(|(t, _, _)| *t != self.ticket);
        self.d.changed.notify_waiters();
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tenant(name: &str) -> Tenant {
        Arc::from(name)
    }

    #[tokio::test]
    async fn a_process_over_the_limit_waits_and_gets_the_next_slot() {
        let slots = Arc::new(ClientSlots::new([Some(2), None]));
        let a = tenant("a");
        assert!(slots.acquire(0, &a, 1, Duration::ZERO).await.is_ok());
        assert!(slots.acquire(0, &a, 2, Duration::ZERO).await.is_ok());
        assert!(slots.acquire(0, &a, 2, Duration::ZERO).await.is_ok(), "a session holds one slot");
        let refused = slots.acquire(0, &a, 3, Duration::ZERO).await.unwrap_err();
        assert_eq!((refused.held, refused.capacity, refused.position), (2, 2, 1));
        let waiter = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(0, &tenant("a"), 3, Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        assert!(slots.release(0, 1));
        assert!(waiter.await.unwrap().is_ok(), "the waiter gets the slot freed");
        assert_eq!(slots.view(0), Some((2, 2, 0)));
        assert!(slots.acquire(1, &a, 9, Duration::ZERO).await.is_ok(), "a device without a limit");
        assert_eq!(slots.view(1), None);
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_tenant_holding_fewest_and_a_cancelled_wait_leaves() {
        let slots = Arc::new(ClientSlots::new([Some(2)]));
        let (a, b) = (tenant("a"), tenant("b"));
        assert!(slots.acquire(0, &a, 1, Duration::ZERO).await.is_ok());
        assert!(slots.acquire(0, &a, 2, Duration::ZERO).await.is_ok());
        let third_a = tokio::spawn({
            let s = Arc::clone(&slots);
            async move { s.acquire(0, &tenant("a"), 5, Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        let cancelled =
            tokio::time::timeout(Duration::from_millis(1), slots.acquire(0, &b, 4, Duration::from_secs(30)));
        assert!(cancelled.await.is_err(), "gave up waiting");
        assert_eq!(slots.view(0), Some((2, 2, 1)), "the cancelled waiter left the queue");
        let first_b = tokio::spawn({
            let s = Arc::clone(&slots);
            async move { s.acquire(0, &tenant("b"), 3, Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        // a still holds one: the slot it gives back goes to b's first process, though a's
        // third waited longer.
        slots.release(0, 1);
        assert!(first_b.await.unwrap().is_ok());
        assert_eq!(slots.view(0), Some((2, 2, 1)));
        slots.release(0, 2);
        assert!(third_a.await.unwrap().is_ok());
    }
}

//! Pacing of native creation: at most one process's creation batch in flight per device,
//! as the vendor advises (bursts of concurrent stream creation from several processes are
//! what fail with 207005/207008 half-way through a start-up). Only where creation contends
//! (`Admission::contended`: three quarters of the device taken, or grants waiting): on a
//! device with room a grant asks for no turn, its holder is told so, and start-ups create
//! side by side.
//!
//! A batch starts when a grant is answered and ends when its session reports that the
//! streams exist, asks again, closes — or, for a session that never says, when the window
//! passes. Three rules keep one tenant from holding everyone else's start-up:
//! - turns go round the waiting tenants (one tenant's N connections get one turn each
//!   round, not N turns ahead of another tenant);
//! - a tenant whose batch stayed silent until the window passed holds no turn again for
//!   one window: its waiting and next grants on that device go ahead without the turn;
//! - a waiter's own bound (what is left of its `wait_ms`) ends its wait for the turn, and
//!   it goes ahead without one: pacing smooths start-ups, it never refuses a grant.

use crate::types::Tenant;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// What a waiter is sent instead of a batch id when it is to go ahead without the turn
/// (batch ids start at 1).
const NO_TURN: u64 = 0;

pub struct Pacing {
    inner: Arc<Inner>,
}

struct Inner {
    /// Zero: no pacing.
    window: Duration,
    devices: Mutex<HashMap<u32, Turns>>,
}

/// A place in a device's queue: its id, and where its turn (or [`NO_TURN`]) is sent.
type Waiter = (u64, oneshot::Sender<u64>);

/// One device's turn and who waits for it.
#[derive(Default)]
struct Turns {
    /// The batch holding the turn: its id and tenant.
    holder: Option<(u64, Tenant)>,
    next_id: u64,
    /// Tenants in the order they are served, each with its waiters in arrival order.
    round: VecDeque<(Tenant, VecDeque<Waiter>)>,
    /// Tenants whose last batch went silent, until when they hold no turn.
    benched: HashMap<Tenant, Instant>,
}

/// One session's creation batch on one device; the device is its own until this drops or
/// the window passes.
pub struct Batch {
    inner: Arc<Inner>,
    device: u32,
    id: u64,
    /// The timer that ends the batch when the window passes, cancelled when the batch ends
    /// first (most end within milliseconds): no wake of the daemon a window later for a
    /// batch long gone.
    expiry: tokio::task::AbortHandle,
}

impl Pacing {
    pub fn new(window: Duration) -> Self {
        Self { inner: Arc::new(Inner { window, devices: Mutex::new(HashMap::new()) }) }
    }

    /// Waits at most `bound` for `device`'s turn; None when pacing is off, the tenant is
    /// benched, or the bound passed first (the caller goes ahead without the turn).
    /// Cancellation-safe: a waiter dropped from the queue takes no turn, and a turn handed
    /// to it as it was dropped passes on.
    pub async fn turn(&self, device: u32, tenant: &Tenant, bound: Duration) -> Option<Batch> {
        let inner = &self.inner;
        if inner.window.is_zero() || bound.is_zero() {
            return None;
        }
        let mut waiting = {
            let mut devices = inner.lock();
            let turns = devices.entry(device).or_default();
            let now = Instant::now();
            turns.benched.retain(|_, until| *until > now);
            if turns.benched.contains_key(tenant) {
                return None;
            }
            turns.next_id += 1;
            let id = turns.next_id;
            if turns.holder.is_none() {
                turns.holder = Some((id, Tenant::clone(tenant)));
                drop(devices);
                return Some(self.start(device, id));
            }
            let (tx, rx) = oneshot::channel();
            match turns.round.iter_mut().find(|(t, _)| t == tenant) {
                Some((_, waiters)) => waiters.push_back((id, tx)),
                None => turns.round.push_back((Tenant::clone(tenant), VecDeque::from([(id, tx)]))),
            }
            Waiting { inner: Arc::clone(inner), device, id, rx: Some(rx) }
        };
        let rx = waiting.rx.as_mut()?;
        // Past the bound (or should the sender go, which only a dropped `Pacing` does),
        // `waiting` drops and takes its place out of the queue.
        let Ok(Ok(id)) = tokio::time::timeout(bound, rx).await else { return None };
        waiting.rx = None;
        (id != NO_TURN).then(|| self.start(device, id))
    }

    /// The batch `id` now holds `device`'s turn: it ends when dropped, or silently when
    /// the window passes first.
    fn start(&self, device: u32, id: u64) -> Batch {
        let inner = Arc::downgrade(&self.inner);
        let window = self.inner.window;
        let expiry = tokio::spawn(async move {
            tokio::time::sleep(window).await;
            if let Some(inner) = inner.upgrade() {
                inner.end(device, id, true);
            }
        })
        .abort_handle();
        Batch { inner: Arc::clone(&self.inner), device, id, expiry }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Turns>> {
        self.devices.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends batch `id` on `device` if it still holds the turn (`silent`: the window
    /// passed first, so its tenant is benched for one window), and hands the turn on.
    fn end(&self, device: u32, id: u64, silent: bool) {
        let mut devices = self.lock();
        let Some(turns) = devices.get_mut(&device) else { return };
        match &turns.holder {
            Some((held, tenant)) if *held == id => {
                if silent {
                    tracing::debug!(device, %tenant, "a native creation batch ran past the pacing window; its tenant holds no turn for one window");
                    turns.benched.insert(Tenant::clone(tenant), Instant::now() + self.window);
                }
                turns.holder = None;
            }
            _ => return,
        }
        turns.hand_on();
    }

    /// Takes waiter `id` out of `device`'s queue; if the turn was already handed to it,
    /// ends that turn so it passes on.
    fn leave(&self, device: u32, id: u64, handed: bool) {
        if handed {
            self.end(device, id, false);
            return;
        }
        let mut devices = self.lock();
        let Some(turns) = devices.get_mut(&device) else { return };
        for (_, waiters) in &mut turns.round {
            waiters.retain(|(w, _)| *w != id);
        }
        turns.round.retain(|(_, waiters)| !waiters.is_empty());
    }
}

impl Turns {
    /// Gives the free turn to the first waiter of the tenant whose round it is; that
    /// tenant goes to the back of the round if it has more waiters.
    fn hand_on(&mut self) {
        while let Some((tenant, mut waiters)) = self.round.pop_front() {
            if self.benched.contains_key(&tenant) {
                // Its batch just went silent: its waiters go ahead without the turn.
                for (_, tx) in waiters {
                    let _ = tx.send(NO_TURN);
                }
                continue;
            }
            let Some((id, tx)) = waiters.pop_front() else { continue };
            if !waiters.is_empty() {
                self.round.push_back((Tenant::clone(&tenant), waiters));
            }
            if tx.send(id).is_ok() {
                self.holder = Some((id, tenant));
                return;
            }
        }
    }
}

/// A place in a device's queue; leaving it (the wait was cancelled or timed out) takes
/// the place out, and passes on a turn that reached it too late.
struct Waiting {
    inner: Arc<Inner>,
    device: u32,
    id: u64,
    rx: Option<oneshot::Receiver<u64>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            let handed = rx.try_recv().is_ok_and(|id| id != NO_TURN);
            self.inner.leave(self.device, self.id, handed);
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        tracing::trace!(device = self.device, batch = self.id, "native creation batch ended");
        self.expiry.abort();
        self.inner.end(self.device, self.id, false);
    }
}

#[cfg(test)]
mod tests;

//! Turning budget grants into hardware streams and back.
//!
//! `acquire` waits (bounded) for a whole grant from the device's ledger, then fills it
//! from the warm pool first and creates the rest in paced batches, one batch in flight per
//! device, retrying 207005/207008 with doubling backoff. `release` lets streams drain, then
//! pools the healthy ones and destroys the rest; until then they count against the budget
//! because they still occupy hardware. In passthrough mode none of this applies.

use crate::backend::{Backend, RawStream};
use crate::config::{BudgetConfig, Policy};
use crate::error::{NpudError, NpudResult, Reason};
use crate::observe::metrics::Metrics;
use crate::policy::ledger::{Admit, Ledger, Spread, TenantFigures};
use crate::types::{Quota, Tenant};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How many holders a wait-expired diagnosis names.
const LARGEST_HOLDERS: usize = 3;

/// The share of a device taken (numerator, denominator) from which creation on it
/// contends: below it, every grant fits with a quarter of the device to spare, so a
/// process's creations cannot run the device out whatever others create beside them, and
/// native batches are not paced.
pub const CONTENDED_FROM: (u64, u64) = (3, 4);

mod across;
mod create;
mod native;
mod release;
mod rounds;
#[cfg(test)]
mod tests;

pub use native::NativeShare;

/// What a pooled stream must match to be reused: its priority and flags.
pub type Class = (i32, u32);

struct DeviceState {
    ledger: Ledger<oneshot::Sender<()>>,
    pool: HashMap<Class, Vec<RawStream>>,
}

impl DeviceState {
    /// Takes pooled streams out of the pool while the hardware would otherwise hold more
    /// than the device's capacity (held + pooled + draining), and brings the ledger's
    /// pooled count up to date; the caller destroys what is returned, outside the lock.
    fn evict_overflow(&mut self) -> Vec<RawStream> {
        let mut pooled: u32 = self.pool.values().map(|v| v.len() as u32).sum();
        let l = &self.ledger;
        let mut over = (l.in_use() + pooled + l.draining() + l.untracked()).saturating_sub(l.capacity());
        let mut evicted = Vec::new();
        while over > 0 {
            let Some(s) = self.pool.values_mut().find_map(Vec::pop) else { break };
            evicted.push(s);
            over -= 1;
            pooled -= 1;
        }
        self.ledger.set_pooled(pooled);
        evicted
    }
}

struct DeviceBudget {
    state: Mutex<DeviceState>,
    /// Held while a creation batch is in flight: one batch per device at a time.
    pacer: tokio::sync::Mutex<()>,
}

/// A device's figures for `device list` and `status`.
#[derive(Debug, Clone, Default)]
pub struct BudgetView {
    pub capacity: u32,
    pub reserved: u32,
    pub in_use: u32,
    pub pooled: u32,
    pub draining: u32,
    pub queued: u32,
    /// Streams the device holds outside npud's books (reconciliation).
    pub untracked: u32,
    /// Streams the books have let go of so far (see `Ledger::lowered`).
    pub lowered: u64,
    pub tenants: HashMap<Tenant, TenantFigures>,
}

/// The streams a request got. Under passthrough a failure can come with a partial set.
#[derive(Debug)]
pub struct Outcome {
    pub streams: Vec<(RawStream, bool)>,
    pub failure: Option<NpudError>,
}

pub struct Admission {
    backend: Arc<dyn Backend>,
    policy: Policy,
    config: BudgetConfig,
    devices: Vec<DeviceBudget>,
    pool_hits: AtomicU64,
    /// Longest a released stream may take to drain before it is destroyed regardless.
    drain_bound: Duration,
    metrics: Arc<Metrics>,
    /// Wakes reconciliation to measure at once rather than at its next tick: the device
    /// refused a creation the books allowed, or streams left the books and count as
    /// untracked until a measurement says whether the device still holds them.
    remeasure: tokio::sync::Notify,
    /// Reconciliation's rounds, and the devices asked for (see `rounds.rs`).
    rounds: tokio::sync::watch::Sender<rounds::Rounds>,
    /// Tenants' holdings over every device and their caps there, shared by the ledgers.
    spread: Arc<Spread>,
}

impl Admission {
    pub fn new(
        backend: Arc<dyn Backend>,
        policy: Policy,
        config: BudgetConfig,
        capacities: &[u32],
        drain_bound: Duration,
        max_pending: u32,
        metrics: Arc<Metrics>,
    ) -> Self {
        let spread = Arc::new(Spread::default());
        let devices = capacities
            .iter()
            .map(|&c| DeviceBudget {
                state: Mutex::new(DeviceState {
                    ledger: Ledger::shared(c, max_pending, Arc::clone(&spread)),
                    pool: HashMap::new(),
                }),
                pacer: tokio::sync::Mutex::new(()),
            })
            .collect();
        Self {
            backend,
            policy,
            config,
            devices,
            pool_hits: AtomicU64::new(0),
            drain_bound,
            metrics,
            remeasure: tokio::sync::Notify::new(),
            rounds: tokio::sync::watch::Sender::new(rounds::Rounds::default()),
            spread,
        }
    }

    fn lock(&self, device: u32) -> MutexGuard<'_, DeviceState> {
        self.devices[device as usize].state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pool_hits(&self) -> u64 {
        self.pool_hits.load(Ordering::Relaxed)
    }

    pub fn set_reservations(&self, reservations: &HashMap<Tenant, u32>) {
        for d in 0..self.devices.len() as u32 {
            let mut st = self.lock(d);
            st.ledger.set_reservations(reservations.clone());
            grant_queued(&mut st.ledger);
        }
    }

    /// Sets one device's reservations (they may differ by device: an allocation is
    /// reserved only where it is booked): `all`, of which `fixed` are the tenants' quotas'.
    pub fn set_reservations_on(&self, device: u32, all: HashMap<Tenant, u32>, fixed: HashMap<Tenant, u32>) {
        let mut st = self.lock(device);
        st.ledger.set_reservations_with(all, fixed);
        grant_queued(&mut st.ledger);
    }

    /// The streams `device`'s ledger may hand out in all: for checks on a hot path, where
    /// [`Admission::view`]'s per-tenant figures would be built for nothing.
    pub fn capacity(&self, device: u32) -> u32 {
        self.lock(device).ledger.capacity()
    }

    /// What `device` holds outside the books now (see [`Admission::capacity`]).
    pub fn untracked(&self, device: u32) -> u32 {
        self.lock(device).ledger.untracked()
    }

    /// Whether creation on `device` contends (see `natives::pacing`): grants wait for its
    /// room (an ask kept out by its own tenant's quota does not count: it could flip the
    /// whole device into paced mode with an ask that cannot be granted), or at least
    /// [`CONTENDED_FROM`] of it is taken, by held, pooled, draining or
    /// untracked streams (pooled ones are on the hardware until evicted).
    pub fn contended(&self, device: u32) -> bool {
        let st = self.lock(device);
        let l = &st.ledger;
        let taken =
            [l.in_use(), l.pooled(), l.draining(), l.untracked()].into_iter().fold(0u64, |a, n| a + u64::from(n));
        let (num, den) = CONTENDED_FROM;
        l.contending() > 0 || taken * den >= u64::from(l.capacity()) * num
    }

    pub fn view(&self, device: u32) -> BudgetView {
        let st = self.lock(device);
        let l = &st.ledger;
        BudgetView {
            capacity: l.capacity(),
            reserved: l.reserved(),
            in_use: l.in_use(),
            pooled: l.pooled(),
            draining: l.draining(),
            queued: l.queued(),
            untracked: l.untracked(),
            lowered: l.lowered(),
            tenants: l.tenant_figures(),
        }
    }

    /// Waits (bounded) for a grant of `count` streams.
    ///
    /// Cancellation-safe: a caller that goes away while waiting withdraws its request, and
    /// a [`Grant`] dropped before it is filled gives its budget back. Filling is not
    /// cancellation-safe: run [`Grant::fill`] where nothing can cancel it half-way.
    pub async fn grant(
        self: &Arc<Self>,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        wait: Duration,
    ) -> NpudResult<Grant> {
        self.grant_as(device, tenant, quota, count, wait, false).await
    }

    /// [`Admission::grant`]; a holder's growth (`grows`) is granted whenever it fits
    /// ([`Ledger::request_as`]).
    pub async fn grant_as(
        self: &Arc<Self>,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        wait: Duration,
        grows: bool,
    ) -> NpudResult<Grant> {
        let mut grant = Grant {
            admission: Arc::clone(self),
            device,
            tenant: Arc::clone(tenant),
            count,
            waited: Duration::ZERO,
            held: false,
        };
        if self.policy == Policy::Passthrough {
            return Ok(grant);
        }
        let started = Instant::now();
        self.wait_for_grant(device, tenant, quota, count, wait.min(self.config.max_wait), grows).await?;
        grant.held = true;
        grant.waited = started.elapsed();
        self.metrics.grant_waited(grant.waited.as_secs_f64());
        tracing::debug!(device, %tenant, count, waited_ms = grant.waited.as_millis() as u64, "granted");
        Ok(grant)
    }

    async fn wait_for_grant(
        &self,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        wait: Duration,
        grows: bool,
    ) -> NpudResult<()> {
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut st = self.lock(device);
            match st.ledger.request_as(tenant, count, quota, tx, grows)? {
                Admit::Granted(_) => return Ok(()),
                Admit::Queued(ticket) => {
                    grant_queued(&mut st.ledger);
                    ticket
                }
            }
        };
        // If this future is dropped (the client went away), the guard withdraws the request.
        // It owns the receiver, so a grant can never be sent into the void while queued.
        let mut guard = TicketGuard { admission: self, device, ticket: Some(ticket), tenant, count, rx };
        let granted = tokio::time::timeout(wait, &mut guard.rx).await;
        match granted {
            Ok(Ok(())) => {
                guard.ticket = None;
                Ok(())
            }
            _ => {
                let mut st = self.lock(device);
                match st.ledger.cancel(ticket) {
                    None => {
                        // Granted just as the wait ran out: keep the grant.
                        guard.ticket = None;
                        Ok(())
                    }
                    Some(position) => {
                        guard.ticket = None;
                        let mut figures = st.ledger.figures(tenant, quota);
                        figures.push(("queue_position", i64::from(position)));
                        figures.push(("requested", i64::from(count)));
                        grant_queued(&mut st.ledger);
                        let l = &st.ledger;
                        // Other tenants' names are not the caller's to see (status hides
                        // them from non-admins); their sizes are, and npud's log names them.
                        let holders = l.largest_holders(LARGEST_HOLDERS);
                        let largest: Vec<String> = holders
                            .iter()
                            .map(|(t, n)| {
                                if t == tenant { format!("{n} (tenant {t})") } else { format!("{n} (another tenant)") }
                            })
                            .collect();
                        let named: Vec<String> = holders.iter().map(|(t, n)| format!("{t} {n}")).collect();
                        tracing::info!(device, %tenant, count, largest = %named.join(", "), "a wait for budget expired");
                        Err(NpudError::new(
                            Reason::GrantWaitExpired,
                            format!(
                                "no budget for {count} streams within {}: device capacity {}, in use {}, pooled {}, draining {}, tenant {tenant} holds {} of max {} (reserved {}), queue position {position}; largest holders: {}",
                                humantime::format_duration(wait),
                                l.capacity(),
                                l.in_use(),
                                l.pooled(),
                                l.draining(),
                                l.used_by(tenant),
                                // u32::MAX is the unlimited quota's sentinel, not a number to show.
                                match quota.max_streams {
                                    u32::MAX => "unlimited".to_string(),
                                    n => n.to_string(),
                                },
                                quota.reserved_streams,
                                if largest.is_empty() { "none".to_string() } else { largest.join(", ") }
                            ),
                        )
                        .with_figures(figures))
                    }
                }
            }
        }
    }
}

/// Budget granted to one create request, until it is filled with streams. Dropped unfilled
/// (the request failed or its caller went away between grant and fill), it gives the
/// budget back and lets the queue move on, so no path can forget to.
#[must_use = "a grant holds budget until it is filled or dropped"]
pub struct Grant {
    admission: Arc<Admission>,
    device: u32,
    tenant: Tenant,
    count: u32,
    waited: Duration,
    /// Whether the ledger holds `count` for this grant (not under passthrough, and not
    /// once `fill` has taken over).
    held: bool,
}

impl Grant {
    /// How long the request waited for its grant.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The process that asked creates the streams itself: the budget is its holder's now
    /// (given back through `release_native`). Returns how long it waited.
    pub fn hand_over(mut self) -> Duration {
        self.held = false;
        self.waited
    }

    /// Turns the grant into streams: the warm pool first, then paced creation; a failure
    /// gives the whole grant back. Under passthrough, straight creation, partial results
    /// and all. Not cancellation-safe: run it where nothing can cancel it.
    pub async fn fill(mut self, class: Class) -> Outcome {
        self.held = false;
        let (a, device, count) = (Arc::clone(&self.admission), self.device, self.count);
        if a.policy == Policy::Passthrough {
            let (streams, failure) = a.create_direct(device, &self.tenant, count, class).await;
            return Outcome { streams: streams.into_iter().map(|s| (s, false)).collect(), failure };
        }
        match a.materialize(device, count, class).await {
            Ok(streams) => Outcome { streams, failure: None },
            Err((e, made)) => {
                a.give_back(device, &self.tenant, count, made.into_iter().map(|s| (s, class)).collect());
                Outcome { streams: Vec::new(), failure: Some(e) }
            }
        }
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.held {
            tracing::debug!(device = self.device, tenant = %self.tenant, count = self.count, "an unfilled grant is given back");
            self.admission.give_back(self.device, &self.tenant, self.count, Vec::new());
        }
    }
}

/// Grants what the queue allows and wakes the waiters; a grant whose waiter has gone is
/// given straight back.
fn grant_queued(ledger: &mut Ledger<oneshot::Sender<()>>) {
    loop {
        let granted = ledger.process();
        if granted.is_empty() {
            return;
        }
        let mut returned = false;
        for (tenant, count, tx) in granted {
            if tx.send(()).is_err() {
                ledger.release(&tenant, count, false);
                returned = true;
            }
        }
        if !returned {
            return;
        }
    }
}

struct TicketGuard<'a> {
    admission: &'a Admission,
    device: u32,
    ticket: Option<u64>,
    tenant: &'a Tenant,
    count: u32,
    rx: oneshot::Receiver<()>,
}

impl Drop for TicketGuard<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        let mut st = self.admission.lock(self.device);
        if st.ledger.cancel(ticket).is_none() {
            // Granted (the receiver is still ours, so the send succeeded), but nobody is
            // left to use it.
            st.ledger.release(self.tenant, self.count, false);
        }
        grant_queued(&mut st.ledger);
    }
}

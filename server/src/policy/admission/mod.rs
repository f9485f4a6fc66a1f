//! Turning budget grants into hardware streams and back.
//!
//! `acquire` waits (bounded) for a whole grant from the device's ledger, then fills it
//! from the warm pool first and creates the rest in paced batches, one batch in flight per
//! device, retrying 207005/207008 with doubling backoff. `release` lets streams drain, then
//! pools the healthy ones and destroys the rest; until then they count against the budget
//! because they still occupy hardware. In passthrough mode none of this applies.

use crate::backend::{Backend, BackendError, ErrorKind, RawStream};
use crate::config::{BudgetConfig, Policy};
use crate::error::{NpudError, NpudResult, Reason, backend_error};
use crate::observe::metrics::Metrics;
use crate::policy::ledger::{Admit, Ledger, TenantFigures};
use crate::types::{Quota, Tenant};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How many holders a wait-expired diagnosis names.
const LARGEST_HOLDERS: usize = 3;

mod native;
pub use native::NativeShare;

type Class = (i32, u32);

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
        let mut over = (l.in_use() + pooled + l.draining()).saturating_sub(l.capacity());
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
        let devices = capacities
            .iter()
            .map(|&c| DeviceBudget {
                state: Mutex::new(DeviceState {
                    ledger: Ledger::with_pending_limit(c, max_pending),
                    pool: HashMap::new(),
                }),
                pacer: tokio::sync::Mutex::new(()),
            })
            .collect();
        Self { backend, policy, config, devices, pool_hits: AtomicU64::new(0), drain_bound, metrics }
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
            tenants: l.tenant_figures(),
        }
    }

    /// Waits (bounded) for a grant of `count` streams; returns how long it waited.
    ///
    /// Cancellation-safe: a caller that goes away while waiting withdraws its request.
    /// Once this returns Ok the grant is the caller's and must be completed with
    /// [`Admission::fill`] in a task that cannot be cancelled half-way.
    pub async fn grant(
        &self,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        wait: Duration,
    ) -> NpudResult<Duration> {
        if self.policy == Policy::Passthrough {
            return Ok(Duration::ZERO);
        }
        let started = Instant::now();
        self.wait_for_grant(device, tenant, quota, count, wait.min(self.config.max_wait)).await?;
        let waited = started.elapsed();
        self.metrics.grant_waited(waited.as_secs_f64());
        tracing::debug!(device, %tenant, count, waited_ms = waited.as_millis() as u64, "granted");
        Ok(waited)
    }

    /// Turns a grant into streams: the warm pool first, then paced creation; a failure
    /// gives the whole grant back. Under passthrough, straight creation, partial results
    /// and all. Not cancellation-safe: run it where nothing can cancel it.
    pub async fn fill(&self, device: u32, tenant: &Tenant, count: u32, class: Class) -> Outcome {
        if self.policy == Policy::Passthrough {
            let (streams, failure) = self.create_direct(device, tenant, count, class).await;
            return Outcome { streams: streams.into_iter().map(|s| (s, false)).collect(), failure };
        }
        match self.materialize(device, count, class).await {
            Ok(streams) => Outcome { streams, failure: None },
            Err((e, made)) => {
                self.give_back(device, tenant, count, made.into_iter().map(|s| (s, class)).collect());
                Outcome { streams: Vec::new(), failure: Some(e) }
            }
        }
    }

    async fn wait_for_grant(
        &self,
        device: u32,
        tenant: &Tenant,
        quota: &Quota,
        count: u32,
        wait: Duration,
    ) -> NpudResult<()> {
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut st = self.lock(device);
            match st.ledger.request(tenant, count, quota, tx)? {
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
                                quota.max_streams,
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

    /// Fills a grant: the warm pool first, then paced hardware creation.
    async fn materialize(
        &self,
        device: u32,
        count: u32,
        class: Class,
    ) -> Result<Vec<(RawStream, bool)>, (NpudError, Vec<RawStream>)> {
        let (mut streams, evicted) = {
            let mut st = self.lock(device);
            let pooled = st.pool.get_mut(&class).map(|v| {
                let take = v.len().min(count as usize);
                v.split_off(v.len() - take)
            });
            let reused: Vec<(RawStream, bool)> = pooled.unwrap_or_default().into_iter().map(|s| (s, true)).collect();
            // Evict other classes' pooled streams if hardware would overflow otherwise.
            (reused, st.evict_overflow())
        };
        self.pool_hits.fetch_add(streams.len() as u64, Ordering::Relaxed);
        self.destroy_all(device, evicted).await;
        let missing = count as usize - streams.len();
        if missing > 0 {
            match self.create_paced(device, missing as u32, class).await {
                Ok(made) => streams.extend(made.into_iter().map(|s| (s, false))),
                Err((e, made)) => {
                    let mut all: Vec<RawStream> = streams.into_iter().map(|(s, _)| s).collect();
                    all.extend(made);
                    return Err((e, all));
                }
            }
        }
        Ok(streams)
    }

    async fn create_paced(
        &self,
        device: u32,
        count: u32,
        class: Class,
    ) -> Result<Vec<RawStream>, (NpudError, Vec<RawStream>)> {
        // Pacing protects a vendor driver from concurrent creation batches; calls that
        // cannot block (the simulator) need none.
        let _one_batch_at_a_time = match self.backend.calls_block() {
            true => Some(self.devices[device as usize].pacer.lock().await),
            false => None,
        };
        let mut made = Vec::with_capacity(count as usize);
        let mut retries = 0;
        let mut backoff = self.config.retry_backoff;
        while made.len() < count as usize {
            let batch = (count as usize - made.len()).min(self.config.batch_size as usize) as u32;
            let batch_started = Instant::now();
            let (created, failure) = self.create_batch(device, batch, class).await;
            self.metrics.hardware_batch(batch_started.elapsed().as_secs_f64());
            made.extend(created);
            match failure {
                None => {
                    retries = 0;
                    if made.len() < count as usize && !self.config.batch_pause.is_zero() {
                        tokio::time::sleep(self.config.batch_pause).await;
                    }
                }
                Some(e) if e.kind == ErrorKind::StreamBudget && retries < self.config.create_retries => {
                    retries += 1;
                    tracing::debug!(
                        device,
                        retries,
                        code = e.native_code,
                        "stream creation hit the device limit; backing off"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                }
                Some(e) => {
                    let mut err = backend_error(self.backend.name(), e);
                    if err.reason == Reason::BudgetExhausted {
                        err.reason = Reason::HardwareCreationFailed;
                    }
                    return Err((err, made));
                }
            }
        }
        Ok(made)
    }

    /// Creates up to `count` streams (on the blocking pool where the calls may block);
    /// stops at the first failure.
    async fn create_batch(
        &self,
        device: u32,
        count: u32,
        (priority, flags): Class,
    ) -> (Vec<RawStream>, Option<BackendError>) {
        let create = move |backend: &dyn Backend| {
            let mut made = Vec::with_capacity(count as usize);
            for _ in 0..count {
                match backend.create_stream(device, priority, flags) {
                    Ok(s) => made.push(s),
                    Err(e) => return (made, Some(e)),
                }
            }
            (made, None)
        };
        if !self.backend.calls_block() {
            return create(self.backend.as_ref());
        }
        let backend = Arc::clone(&self.backend);
        let job = tokio::task::spawn_blocking(move || create(backend.as_ref()));
        job.await.unwrap_or_else(|e| {
            (
                Vec::new(),
                Some(BackendError {
                    kind: ErrorKind::Other,
                    native_code: 0,
                    message: format!("creation task failed: {e}"),
                }),
            )
        })
    }

    /// Passthrough: straight to the device, keeping whatever was made before a failure.
    async fn create_direct(
        &self,
        device: u32,
        tenant: &Tenant,
        count: u32,
        class: Class,
    ) -> (Vec<RawStream>, Option<NpudError>) {
        let (made, failure) = self.create_batch(device, count, class).await;
        self.lock(device).ledger.force_take(tenant, made.len() as u32);
        (made, failure.map(|e| backend_error(self.backend.name(), e)))
    }

    /// Gives streams back to the device: drained first, then pooled or destroyed.
    ///
    /// `reaping`: the owner is gone (its session was reclaimed), so a stream that does not
    /// drain within the bound is destroyed by force. A stream its owner destroyed keeps its
    /// work however long it runs, as aclrtDestroyStream and cuStreamDestroy do.
    ///
    /// `drained`, when given, hears whether a task of the batch failed once it has drained.
    pub fn release(
        self: &Arc<Self>,
        device: u32,
        tenant: &Tenant,
        streams: Vec<(RawStream, Class)>,
        reaping: bool,
        drained: Option<tokio::sync::watch::Sender<Option<bool>>>,
    ) {
        if streams.is_empty() {
            if let Some(tx) = drained {
                let _ = tx.send(Some(false));
            }
            return;
        }
        let n = streams.len() as u32;
        let managed = self.policy == Policy::Managed;
        self.lock(device).ledger.release(tenant, n, managed);
        let this = Arc::clone(self);
        let mut job = Box::pin(async move {
            let failed = if managed {
                this.drain_and_pool(device, streams, reaping).await
            } else {
                let waits: Vec<_> = streams.iter().map(|(s, _)| this.backend.stream_drained(device, *s)).collect();
                let mut failed = false;
                for w in waits {
                    failed |= w.await.is_err_and(|e| e.kind == crate::backend::ErrorKind::TaskFailed);
                }
                this.destroy_all(device, streams.into_iter().map(|(s, _)| s).collect()).await;
                failed
            };
            if let Some(tx) = drained {
                let _ = tx.send(Some(failed));
            }
        });
        // Streams that are already idle (and a backend whose calls do not block) finish
        // here, so the caller's next create finds them in the pool; whatever has to wait
        // goes on in a task of its own.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if job.as_mut().poll(&mut cx).is_pending() {
            tokio::spawn(job);
        }
    }

    /// Undoes a grant that could not be completed.
    fn give_back(&self, device: u32, tenant: &Tenant, count: u32, made: Vec<(RawStream, Class)>) {
        let mut st = self.lock(device);
        st.ledger.release(tenant, count, false);
        grant_queued(&mut st.ledger);
        drop(st);
        for (s, _) in made {
            if let Err(e) = self.backend.destroy_stream(device, s) {
                tracing::warn!(device, error = %e, "destroying a stream of a failed grant");
            }
        }
    }

    /// Returns whether a task of the batch failed.
    async fn drain_and_pool(&self, device: u32, streams: Vec<(RawStream, Class)>, reaping: bool) -> bool {
        let waits: Vec<_> = streams.iter().map(|(s, _)| self.backend.stream_drained(device, *s)).collect();
        // One deadline for the whole batch, so several stuck streams cost one bound; none
        // when the owner destroyed them (their work is theirs to finish).
        let deadline = reaping.then(|| tokio::time::Instant::now() + self.drain_bound);
        let mut healthy = Vec::with_capacity(streams.len());
        let mut stuck = Vec::new();
        let mut failed = false;
        for ((s, class), wait) in streams.into_iter().zip(waits) {
            let drained = match deadline {
                Some(d) => tokio::time::timeout_at(d, wait).await,
                None => Ok(wait.await),
            };
            match drained {
                Ok(Ok(())) => {
                    let state = self.backend.stream_state(device, s);
                    failed |= state.as_ref().is_ok_and(|st| st.failed);
                    // A pooled stream must be indistinguishable from a new one: one that
                    // failed, or whose failure mode was set (once per stream), is destroyed.
                    let ok = state.is_ok_and(|st| !st.failed && !st.failure_mode_set)
                        && self.backend.renew_stream(device, s).is_ok();
                    healthy.push((s, class, ok));
                }
                Ok(Err(e)) => {
                    failed |= e.kind == crate::backend::ErrorKind::TaskFailed;
                    healthy.push((s, class, false));
                }
                Err(_) => stuck.push(s),
            }
        }
        if !stuck.is_empty() {
            tracing::warn!(device, streams = stuck.len(), bound = ?self.drain_bound, "released streams did not drain in time; destroying them by force");
            for s in &stuck {
                if let Err(e) = self.backend.destroy_stream_force(device, *s) {
                    tracing::error!(device, error = %e, "force-destroying a stuck stream");
                }
            }
            self.lock(device).ledger.drained(stuck.len() as u32, 0);
        }
        let mut destroy = Vec::new();
        {
            let mut st = self.lock(device);
            let mut pooled_total: u32 = st.pool.values().map(|v| v.len() as u32).sum();
            let n = healthy.len() as u32;
            let mut added = 0;
            for (s, class, ok) in healthy {
                if ok && pooled_total < self.config.pool_max {
                    st.pool.entry(class).or_default().push(s);
                    pooled_total += 1;
                    added += 1;
                } else {
                    destroy.push(s);
                }
            }
            st.ledger.drained(n, added);
            grant_queued(&mut st.ledger);
        }
        self.destroy_all(device, destroy).await;
        failed
    }

    async fn destroy_all(&self, device: u32, streams: Vec<RawStream>) {
        if streams.is_empty() {
            return;
        }
        let destroy = move |backend: &dyn Backend| {
            for s in streams {
                if let Err(e) = backend.destroy_stream(device, s) {
                    tracing::warn!(device, error = %e, "destroying a released stream");
                }
            }
        };
        if !self.backend.calls_block() {
            return destroy(self.backend.as_ref());
        }
        let backend = Arc::clone(&self.backend);
        let job = tokio::task::spawn_blocking(move || destroy(backend.as_ref()));
        if let Err(e) = job.await {
            tracing::error!(device, error = %e, "stream destruction task failed");
        }
    }

    /// Fills the pool at start-up so the first requests need no hardware creation.
    pub async fn prewarm(&self, class: Class) -> NpudResult<()> {
        if self.policy != Policy::Managed || self.config.prewarm == 0 {
            return Ok(());
        }
        for device in 0..self.devices.len() as u32 {
            let n = self.config.prewarm.min(self.lock(device).ledger.capacity());
            let made = self.create_paced(device, n, class).await.map_err(|(e, _)| e)?;
            let mut st = self.lock(device);
            st.ledger.drained(0, made.len() as u32);
            st.pool.entry(class).or_default().extend(made);
        }
        Ok(())
    }

    /// Destroys every pooled stream (shutdown).
    pub async fn drain_pools(&self) {
        for device in 0..self.devices.len() as u32 {
            let streams: Vec<RawStream> = {
                let mut st = self.lock(device);
                st.ledger.set_pooled(0);
                st.pool.drain().flat_map(|(_, v)| v).collect()
            };
            self.destroy_all(device, streams).await;
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

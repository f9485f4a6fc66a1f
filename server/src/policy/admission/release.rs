//! Giving streams back: they drain first (they occupy hardware until then), then the
//! healthy ones go to the warm pool and the rest are destroyed; and the pool's own life
//! (prewarming at start, draining at shutdown).

use super::{Admission, Class, grant_queued};
use crate::backend::{Backend, RawStream};
use crate::config::Policy;
use crate::error::NpudResult;
use crate::types::Tenant;
use std::sync::Arc;

impl Admission {
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
        self.wake_others(device, tenant);
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
    pub(super) fn give_back(&self, device: u32, tenant: &Tenant, count: u32, made: Vec<(RawStream, Class)>) {
        let mut st = self.lock(device);
        st.ledger.release(tenant, count, false);
        grant_queued(&mut st.ledger);
        drop(st);
        self.wake_others(device, tenant);
        for (s, _) in made {
            if let Err(e) = self.backend.destroy_stream(device, s) {
                tracing::warn!(device, error = %e, "destroying a stream of a failed grant");
            }
        }
    }

    /// Returns whether a task of the batch failed.
    pub(super) async fn drain_and_pool(&self, device: u32, streams: Vec<(RawStream, Class)>, reaping: bool) -> bool {
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
            self.lock(device).ledger.destroyed_draining(stuck.len() as u32);
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

    pub(super) async fn destroy_all(&self, device: u32, streams: Vec<RawStream>) {
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

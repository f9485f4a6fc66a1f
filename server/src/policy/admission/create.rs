//! Turning a grant into hardware streams: the warm pool first, then paced batches (one in
//! flight per device) that retry 207005/207008 with doubling backoff; under passthrough,
//! straight creation with partial results.

use super::{Admission, Class};
use crate::backend::{Backend, BackendError, ErrorKind, RawStream};
use crate::error::{NpudError, Reason, backend_error};
use crate::types::Tenant;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Admission {
    /// Fills a grant: the warm pool first, then paced hardware creation.
    pub(super) async fn materialize(
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

    pub(super) async fn create_paced(
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
                    // The device had less room than the books said: reconcile now.
                    self.measure_soon(device);
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
                    if e.kind == ErrorKind::StreamBudget {
                        self.measure_soon(device);
                    }
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
    pub(super) async fn create_batch(
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
    pub(super) async fn create_direct(
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
}

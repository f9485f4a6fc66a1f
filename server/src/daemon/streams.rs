//! Streams: create (budgeted), destroy, inspect, synchronise, wait, put work on.

use crate::backend::WaitKind;
use crate::daemon::Daemon;
use crate::error::{NpudError, NpudResult, Reason, backend_error};
use crate::policy::admission::Grant;
use crate::registry::StreamEntry;
use crate::types::Caller;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A stream as a client sees it.
#[derive(Debug, Clone)]
pub struct StreamView {
    pub handle: u64,
    pub entry: StreamEntry,
    pub pending_tasks: u64,
    pub failed: bool,
    pub stop_on_failure: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct CreateRequest {
    pub device: u32,
    pub count: u32,
    pub priority: i32,
    pub flags: u32,
    pub wait: Duration,
}

pub const MAX_DELAY: Duration = Duration::from_secs(60);

impl Daemon {
    /// Validates a create request once and returns it as the stream will be made, with the
    /// tenant's quota. Flags: aclrtCreateStreamWithConfig's seed (macros that cannot be
    /// OR-ed are refused; any other value makes an ordinary stream). Priority:
    /// cuStreamCreateWithPriority's seed clamps one outside cuCtxGetStreamPriorityRange
    /// "to the lowest or the highest number in the range"; AscendCL has no such rule, so
    /// there an out-of-range priority is refused.
    fn checked_request(&self, caller: &Caller, req: CreateRequest) -> NpudResult<(CreateRequest, crate::types::Quota)> {
        let flags = npud_proto::flags::effective_stream_flags(req.flags)
            .map_err(|e| NpudError::invalid(Reason::InvalidFlags, e))?;
        let dev = self.device(req.device)?;
        let priority = if self.backend.name() == "cuda" {
            req.priority.clamp(dev.priority_highest, dev.priority_lowest)
        } else {
            req.priority
        };
        let max = self.config.limits.max_streams_per_request;
        if req.count == 0 || req.count > max {
            return Err(NpudError::invalid(
                Reason::InvalidCount,
                format!("count must be 1..={max}, got {}", req.count),
            ));
        }
        if priority < dev.priority_highest || priority > dev.priority_lowest {
            return Err(NpudError::invalid(
                Reason::InvalidPriority,
                format!(
                    "priority {} is outside {}..={} of device {} ({} is the most urgent)",
                    priority, dev.priority_highest, dev.priority_lowest, req.device, dev.priority_highest
                ),
            ));
        }
        let quota = self.quota_for_streams(&caller.tenant, req.device, req.count)?;
        if priority < quota.highest_priority {
            return Err(NpudError::invalid(
                Reason::InvalidPriority,
                format!(
                    "tenant {} may not ask for priorities more urgent than {}",
                    caller.tenant, quota.highest_priority
                ),
            ));
        }
        Ok((CreateRequest { flags, priority, ..req }, quota))
    }

    /// Creates `count` streams for the session: all or none (managed policy).
    pub async fn create_streams(
        self: &Arc<Self>,
        caller: &Caller,
        session: u64,
        req: CreateRequest,
    ) -> NpudResult<(Vec<StreamView>, Duration)> {
        // The session first, as every call that names one: then the request, once.
        self.registry.touch(caller, session)?;
        self.refuse_if_draining()?;
        let (req, quota) = self.checked_request(caller, req)?;
        self.require_healthy(req.device)?;
        let mutation = self.health.mutation();
        let grant = self.admission.grant(req.device, &caller.tenant, &quota, req.count, req.wait).await?;
        // The grant is ours now. A caller that goes away (a killed client) must not leave
        // it half done, so filling it is never cancelled: it runs inline for as long as it
        // does not wait (a backend whose calls do not block, no retry backoff: the common
        // case, with no task hand-off), and the first time it would wait it moves to a
        // task of its own. What gets registered goes with the session.
        let this = Arc::clone(self);
        let caller = caller.clone();
        let job = async move {
            let _mutation = mutation;
            this.fill_and_register(&caller, session, req, grant).await
        };
        if self.backend.calls_block() {
            return finish_in_task(Box::pin(job)).await;
        }
        let mut job = Box::pin(job);
        match std::future::poll_fn(|cx| std::task::Poll::Ready(job.as_mut().poll(cx))).await {
            std::task::Poll::Ready(done) => done,
            std::task::Poll::Pending => finish_in_task(job).await,
        }
    }

    async fn fill_and_register(
        &self,
        caller: &Caller,
        session: u64,
        req: CreateRequest,
        grant: Grant,
    ) -> NpudResult<(Vec<StreamView>, Duration)> {
        let class = (req.priority, req.flags);
        let waited = grant.waited();
        let outcome = grant.fill(class).await;
        let entries: Vec<StreamEntry> = outcome
            .streams
            .iter()
            .map(|&(raw, reused)| StreamEntry {
                session,
                tenant: Arc::clone(&caller.tenant),
                device: req.device,
                raw,
                priority: req.priority,
                flags: req.flags,
                reused,
                subscriber: None,
            })
            .collect();
        let handles = match self.registry.add_streams(session, entries.clone()) {
            Ok(h) => h,
            Err(e) => {
                let raws = outcome.streams.iter().map(|(s, _)| (*s, class)).collect();
                self.admission.release(req.device, &caller.tenant, raws, false, None);
                return Err(e);
            }
        };
        if let Some(mut failure) = outcome.failure {
            if !handles.is_empty() {
                tracing::warn!(tenant = %caller.tenant, made = handles.len(), wanted = req.count, "passthrough creation failed part way; the streams made stay with the session");
            }
            failure.figures.push(("created_before_failure", handles.len() as i64));
            return Err(failure);
        }
        let views = handles
            .into_iter()
            .zip(entries)
            .map(|(handle, entry)| StreamView {
                handle,
                entry,
                pending_tasks: 0,
                failed: false,
                stop_on_failure: false,
            })
            .collect();
        Ok((views, waited))
    }

    /// Releases streams, all or none. Pending work keeps running; the budget comes back
    /// once it has drained.
    pub fn destroy_streams(&self, caller: &Caller, handles: &[u64]) -> NpudResult<u32> {
        if handles.is_empty() || handles.len() > 4096 {
            return Err(NpudError::invalid(Reason::InvalidCount, "name 1..=4096 stream handles"));
        }
        let _mutation = self.health.mutation();
        let removed = self.registry.remove_streams(caller, handles)?;
        let n = removed.len() as u32;
        let mut by_device: BTreeMap<u32, (u64, Vec<_>)> = BTreeMap::new();
        for (h, e) in removed {
            // Callbacks enqueued before the destroy are still delivered (exactly once, as
            // the vendors promise); one that fired and holds the stream is released.
            for (id, cb) in self.reports.forget_stream(h) {
                let _ = self.backend.ack_callback(cb.device, cb.raw_stream, id);
            }
            let batch = by_device.entry(e.device).or_insert((e.session, Vec::new()));
            batch.1.push((e.raw, (e.priority, e.flags)));
        }
        for (device, (session, streams)) in by_device {
            // The session that made them waits for them in its device syncs.
            let drained = self.released.track(session, device);
            self.admission.release(device, &caller.tenant, streams, false, Some(drained));
        }
        Ok(n)
    }

    pub fn stream_view(&self, caller: &Caller, handle: u64) -> NpudResult<StreamView> {
        let entry = self.registry.stream(caller, handle)?;
        let st =
            self.backend.stream_state(entry.device, entry.raw).map_err(|e| backend_error(self.backend.name(), e))?;
        Ok(StreamView {
            handle,
            entry,
            pending_tasks: st.pending_tasks,
            failed: st.failed,
            stop_on_failure: st.stop_on_failure,
        })
    }

    pub fn list_streams(&self, caller: &Caller) -> Vec<StreamView> {
        self.registry
            .streams_of(&caller.tenant)
            .into_iter()
            .map(|(handle, entry)| {
                let st = self.backend.stream_state(entry.device, entry.raw).ok();
                StreamView {
                    handle,
                    pending_tasks: st.map_or(0, |s| s.pending_tasks),
                    failed: st.is_some_and(|s| s.failed),
                    stop_on_failure: st.is_some_and(|s| s.stop_on_failure),
                    entry,
                }
            })
            .collect()
    }

    /// True when all work enqueued so far has finished.
    pub fn query_stream(&self, caller: &Caller, handle: u64) -> NpudResult<bool> {
        let e = self.registry.stream(caller, handle)?;
        self.backend.stream_query(e.device, e.raw).map_err(|e| backend_error(self.backend.name(), e))
    }

    pub async fn synchronize_stream(&self, caller: &Caller, handle: u64, timeout_ms: u32) -> NpudResult<()> {
        let e = self.registry.stream(caller, handle)?;
        self.require_healthy(e.device)?;
        let wait = self.backend.stream_drained(e.device, e.raw);
        self.wait(&caller.tenant, wait, timeout_ms, WaitKind::Stream, &format!("stream {handle}")).await
    }

    /// Later work on the stream waits for the event's latest record. Across devices only
    /// where the backend's vendor allows it (CUDA), else DeviceMismatch.
    pub fn stream_wait_event(&self, caller: &Caller, stream: u64, event: u64) -> NpudResult<()> {
        let (e, s) = if self.backend.waits_across_devices() {
            (self.registry.event(caller, event)?, self.registry.stream(caller, stream)?)
        } else {
            self.same_device(caller, event, stream)?
        };
        self.backend
            .stream_wait_event(s.device, s.raw, e.raw)
            .map_err(|err| self.event_failure(err, event, "waited on by a stream"))
    }

    pub fn enqueue_delay(&self, caller: &Caller, stream: u64, duration: Duration) -> NpudResult<u64> {
        if duration.is_zero() || duration > MAX_DELAY {
            return Err(NpudError::invalid(Reason::InvalidTimeout, "a delay lasts 1 µs ..= 60 s"));
        }
        let s = self.registry.stream(caller, stream)?;
        self.require_healthy(s.device)?;
        self.backend.enqueue_delay(s.device, s.raw, duration).map_err(|e| backend_error(self.backend.name(), e))
    }

    pub fn set_failure_mode(&self, caller: &Caller, stream: u64, stop: bool) -> NpudResult<()> {
        let s = self.registry.stream(caller, stream)?;
        self.backend.set_stop_on_failure(s.device, s.raw, stop).map_err(|err| match err.kind {
            // Named by the caller's handle, not the backend's id for the stream.
            crate::backend::ErrorKind::FailureModeAlreadySet => NpudError {
                message: format!("the failure mode of stream {stream} was already set (once per stream)"),
                ..backend_error(self.backend.name(), err)
            },
            _ => backend_error(self.backend.name(), err),
        })
    }

    /// Waits for the caller's own streams on the device, never another tenant's.
    /// Waits for the calling session's work on the device (the process's, never another
    /// process's or tenant's), streams it destroyed that are still draining included.
    pub async fn synchronize_device(
        &self,
        caller: &Caller,
        session: u64,
        device: u32,
        timeout_ms: u32,
    ) -> NpudResult<()> {
        self.device(device)?;
        self.require_healthy(device)?;
        let waits: Vec<_> = self
            .registry
            .session_streams_on(session, device)
            .into_iter()
            .map(|raw| self.backend.stream_drained(device, raw))
            .collect();
        let released = self.released.take(session, device);
        let all = Box::pin(async move {
            // Every stream waited for, then the first task failure among them reported
            // (aclrtSynchronizeDevice returns it).
            let mut failure = None;
            for w in waits {
                match w.await {
                    Ok(()) => {}
                    Err(e) if e.kind == crate::backend::ErrorKind::TaskFailed => {
                        failure.get_or_insert(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            for mut r in released {
                let failed = r.wait_for(Option::is_some).await.map(|v| *v == Some(true)).unwrap_or(false);
                if failed && failure.is_none() {
                    failure = Some(crate::backend::BackendError {
                        kind: crate::backend::ErrorKind::TaskFailed,
                        native_code: 507015,
                        message: "a task failed on a stream this session destroyed".into(),
                    });
                }
            }
            failure.map_or(Ok(()), Err)
        });
        self.wait(&caller.tenant, all, timeout_ms, WaitKind::Device, &format!("device {device}")).await
    }
}

/// Finishes a stream creation in a task of its own: it completes even if the request
/// that started it is dropped.
async fn finish_in_task<T: Send + 'static>(
    job: std::pin::Pin<Box<dyn Future<Output = NpudResult<T>> + Send>>,
) -> NpudResult<T> {
    tokio::spawn(job)
        .await
        .map_err(|e| NpudError::new(Reason::BackendError, format!("the stream creation task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::CreateRequest;
    use crate::types::Caller;
    use std::time::Duration;

    /// A client killed while its create waits out a retry backoff (the device said "no
    /// stream resource" once) must not leave the grant counted and never filled.
    #[tokio::test]
    async fn a_create_whose_caller_goes_away_mid_retry_still_finishes() {
        let args =
            <crate::config::flags::Args as clap::Parser>::parse_from(["npud", "--socket", "/nonexistent/s.sock"]);
        let mut config = crate::Config::load(&args).expect("the default configuration");
        config.budget.pool_max = 0;
        let daemon = crate::Daemon::open(config).expect("a simulated device");
        let caller = Caller { tenant: "t".into(), admin: false, uid: 1000 };
        let (session, ..) = daemon.open_session(&caller, "", 0).expect("session");
        daemon.backend().fail_next_creations(0, 1).expect("fault");
        let request = CreateRequest { device: 0, count: 6, priority: 0, flags: 0, wait: Duration::ZERO };
        // Polled once (it meets the fault and backs off), then dropped: the caller is gone.
        let once = tokio::time::timeout(Duration::ZERO, daemon.create_streams(&caller, session, request)).await;
        assert!(once.is_err(), "the create should have been waiting out its backoff");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let in_use = daemon.budget(0).in_use;
            let registered = daemon.registry().streams_of("t").len() as u32;
            if in_use == 6 && registered == 6 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "ledger {in_use} in use, {registered} registered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

//! A budget session's ask for streams: judged against its tenant's quota (its pod's
//! booking and what the pod has left), queued or answered at once, paced where creation
//! contends, and counted against the session only once nothing can cancel it.

use super::{NativeSession, millis};
use crate::daemon::Daemon;
use crate::error::{NpudError, Reason};
use npud_proto::v1::{self as pb, budget_reply::Reply};
use std::time::{Duration, Instant};

impl NativeSession {
    pub(super) async fn acquire(&self, a: &pb::AcquireBudgetRequest) -> Result<Reply, NpudError> {
        let answer = self.acquire_judged(a).await;
        // A graph capture refused at Begin (or past its headroom) fails a framework's
        // capture: the operator is told why, with the program's tenant and device.
        if a.capture
            && let Err(e) = &answer
        {
            tracing::info!(id = self.id, tenant = %self.caller.tenant, device = a.device, streams = a.count, reason = %e.message, "a graph capture's streams were refused");
        }
        answer
    }

    async fn acquire_judged(&self, a: &pb::AcquireBudgetRequest) -> Result<Reply, NpudError> {
        let daemon = &self.daemon;
        self.check_device(a.device)?;
        daemon.refuse_if_draining()?;
        daemon.refuse_if_faulted(a.device)?;
        if a.client_slot {
            return self.client_slot(a).await;
        }
        let capacity = daemon.admission.capacity(a.device);
        // An ask that names the least that will do asks for "up to count": what no device
        // holds is cut to what this one does (a pod's process asks for its whole floating
        // allocation, which may be many devices' worth).
        let a = &pb::AcquireBudgetRequest {
            count: match a.at_least {
                Some(least) if (1..=capacity).contains(&least) => a.count.min(capacity),
                _ => a.count,
            },
            ..a.clone()
        };
        if a.count == 0 || a.count > capacity {
            // Under every policy: no device holds more, and the books stay in range.
            return Err(NpudError::new(
                Reason::InvalidCount,
                format!("asked for {} streams; device {} holds 1..={capacity}", a.count, a.device),
            ));
        }
        // A holder's growth never waits, and is granted whenever the device has room; an ask
        // that says the least that will do is granted what its tenant (its pod) has left.
        let grows = daemon.natives.held(self.id, a.device) > 0;
        let starting = !daemon.natives.holds_any(self.id);
        let count = match a.at_least.filter(|least| (1..=a.count).contains(least)) {
            Some(least) => {
                daemon.what_fits(&self.caller.tenant, a.device, (least, a.count), starting, a.visible_devices)
            }
            None => a.count,
        };
        let quota = daemon.quota_for_streams(&self.caller.tenant, a.device, count)?;
        // Where the ask reports creations and does not fit, a measurement is asked for now.
        let reported = a.created.is_some_and(|c| c > 0);
        let grace = daemon.admission.remeasure_grace(a.device, &self.caller.tenant, &quota, count, reported);
        // Asking again means the last batch on this device is done; it must not wait for itself.
        self.end_batch(a.device);
        // No hold-and-wait: a process holding streams on another device fits now or is
        // refused, as the device would refuse it; two processes each holding one device
        // and waiting for the other's would otherwise wait each other out. Nor does an ask
        // that said it will not wait (a stream past the grant, a capture's Begin: the
        // vendor answers those at once). Either waits only for the measurement its report
        // asked for, which waits on no other holder, and is then judged on the books it
        // corrected: a refused one answers after one measurement, not after the grace.
        let queues = a.wait_ms > 0 && !grows && !daemon.natives.holds_elsewhere(self.id, a.device);
        let wait = match queues {
            true => Duration::from_millis(u64::from(a.wait_ms)).max(grace),
            false => {
                if !grace.is_zero() {
                    daemon.admission.measured_since_now(a.device, grace).await;
                }
                Duration::ZERO
            }
        };
        // The ledger changes in acquire_native and the holder's count just after: one mutation.
        let _mutation = daemon.health.mutation();
        let waited = daemon.admission.acquire_native(a.device, &self.caller.tenant, &quota, count, wait, grows).await?;
        // Granted: wait for the device's creation turn within what is left of the caller's
        // wait (none for a grant that does not wait), giving the grant back if the session
        // goes away meanwhile.
        let paced = Instant::now();
        let unclaimed = Unclaimed { daemon, tenant: &self.caller.tenant, device: a.device, count };
        // Granted after npud began to stop (it waited meanwhile): given back, and the process
        // asks npud's successor, whose books this grant would not be in.
        daemon.refuse_if_draining()?;
        // Paced only where creation contends (this grant included in the books): on a
        // device with room the batch takes no turn, and its holder need not hurry to say it
        // is over.
        let contended = daemon.admission.contended(a.device);
        let bound = match contended {
            true => wait.saturating_sub(waited),
            false => Duration::ZERO,
        };
        let batch = daemon.natives.pacing.turn(a.device, &self.caller.tenant, bound).await;
        unclaimed.claim();
        daemon.natives.add(self.id, a.device, count);
        if a.capture {
            daemon.natives.capture_granted(self.id, a.device, count);
        }
        // Said only where the device has room: its holder may then leave the `created`
        // report to its watcher. Where creation contends the report is wanted at once,
        // with or without a turn (pacing off, a benched tenant, the bound passed): until it
        // comes the new streams count twice (granted, and untracked on the device), and a
        // device near its limit cannot spare them.
        let unpaced = !contended;
        if let Some(batch) = batch {
            self.batches.lock().unwrap_or_else(|e| e.into_inner()).insert(a.device, batch);
        }
        let turn = paced.elapsed();
        tracing::debug!(
            id = self.id,
            device = a.device,
            count,
            room_ms = waited.as_secs_f64() * 1e3,
            turn_ms = turn.as_secs_f64() * 1e3,
            unpaced,
            "native grant"
        );
        let waited = waited + turn;
        Ok(Reply::Acquired(pb::AcquireBudgetResponse {
            waited_ms: millis(waited),
            share: Some(self.share(a.device)),
            unpaced,
            granted: a.at_least.map(|_| count),
        }))
    }

    /// Ends this session's creation batch on `device`, if it has one open.
    /// A client slot on the device (`policy::slots`): the process's first context there.
    async fn client_slot(&self, a: &pb::AcquireBudgetRequest) -> Result<Reply, NpudError> {
        if a.count != 1 {
            return Err(NpudError::new(
                Reason::InvalidCount,
                format!("a client slot is one process's: count must be 1, got {}", a.count),
            ));
        }
        let wait = Duration::from_millis(u64::from(a.wait_ms));
        let slots = &self.daemon.slots;
        match slots.acquire(a.device, &self.caller.tenant, self.id, wait).await {
            Ok(waited) => Ok(Reply::Acquired(pb::AcquireBudgetResponse {
                waited_ms: millis(waited),
                share: Some(self.share(a.device)),
                unpaced: true,
                granted: None,
            })),
            Err(r) => Err(NpudError::new(
                Reason::GrantWaitExpired,
                format!(
                    "device {}: no client slot within {}ms: {} of {} processes hold a context there (queue position {})",
                    a.device, a.wait_ms, r.held, r.capacity, r.position
                ),
            )),
        }
    }

    pub(super) fn end_batch(&self, device: u32) {
        let batch = self.batches.lock().unwrap_or_else(|e| e.into_inner()).remove(&device);
        drop(batch);
    }
}

/// A grant not yet counted against its session: given back if dropped (the wait for the
/// creation turn was cancelled), forgotten once counted.
struct Unclaimed<'a> {
    daemon: &'a Daemon,
    tenant: &'a crate::types::Tenant,
    device: u32,
    count: u32,
}

impl Unclaimed<'_> {
    /// The grant is about to be counted against its session.
    fn claim(self) {
        // Only references inside: forgetting it skips the give-back and leaks nothing.
        std::mem::forget(self);
    }
}

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        self.daemon.admission.release_native(self.device, self.tenant, self.count);
    }
}

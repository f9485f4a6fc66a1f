//! One budget session: a process that creates streams in its own context, whichever
//! transport carries its calls (the interposer's framed wire, or a `BudgetService.Budget`
//! gRPC stream). The session lives as long as its connection and the process that opened
//! it (`daemon::exits`); dropping it gives back everything it held.

mod acquire;
mod claims;

use crate::daemon::Daemon;
use crate::error::{NpudError, Reason};
use crate::policy::natives::Holder;
use crate::policy::natives::pacing::Batch;
use crate::types::Caller;
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use prost::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most events one call may ask for.
const MAX_EVENT_ASK: u32 = 4096;

/// Who is on the other end, as the transport knows it.
pub struct Origin {
    /// Process id from the socket's peer credentials; 0 when unknown (TCP).
    pub pid: u32,
    /// Container id when the process runs in one.
    pub container: Option<String>,
    /// Its pod's uid when the container is a Kubernetes pod's.
    pub pod: Option<String>,
}

impl Origin {
    /// What a Unix-socket peer's credentials say.
    pub fn of(peer: &crate::tenancy::identity::Peer) -> Origin {
        Origin {
            pid: peer.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
            container: peer.container.as_ref().map(|c| c.id.clone()),
            pod: peer.container.as_ref().and_then(|c| c.pod_uid.clone()),
        }
    }
}

pub struct NativeSession {
    daemon: Arc<Daemon>,
    caller: Caller,
    id: u64,
    /// The pid of the process that opened it (0 when unknown).
    pid: u32,
    /// The process (pid, start time), when known: what its declarations are checked against.
    process: Option<(u32, u64)>,
    /// Its pod's uid, for an allocation token it presents.
    pod: Option<String>,
    /// The creation batch this session has open per device (see `pacing`).
    batches: Mutex<HashMap<u32, Batch>>,
    /// Told when its process has exited and the connection outlives it (`daemon::exits`).
    exited: Arc<tokio::sync::Notify>,
}

impl NativeSession {
    /// Registers a session for `caller`; refused when the tenant has the most open.
    pub fn open(daemon: Arc<Daemon>, caller: Caller, origin: Origin) -> Result<Self, NpudError> {
        // The start time names the process in the books a restarted npud reads back; with no
        // state directory there are no books, and no read of /proc on the way to the welcome.
        let start = match daemon.config().state_dir {
            Some(_) => crate::tenancy::identity::process_start(&daemon.config().proc_root, origin.pid),
            None => None,
        };
        let process = start.map(|s| (origin.pid, s));
        let container = origin.container.map(|c| c.chars().take(12).collect());
        let holder = Holder::new(origin.pid, caller.tenant.clone(), container, start);
        let exited = Arc::clone(&holder.exited);
        let Some(id) = daemon.natives.open(holder) else {
            return Err(NpudError::new(
                Reason::TooManySessions,
                format!("tenant {} has the most interposed processes connected that it may", caller.tenant),
            ));
        };
        tracing::debug!(id, tenant = %caller.tenant, pid = origin.pid, "budget session opened");
        let (pid, pod, batches) = (origin.pid, origin.pod, Mutex::new(HashMap::new()));
        Ok(Self { daemon, caller, id, pid, process, pod, batches, exited })
    }

    /// The pid of the process that opened the session (0 when unknown).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `work`'s output, or None once npud has found that the process that opened the
    /// session has exited while its connection lives on (another process holds the
    /// descriptor); `work` is dropped then, and the transport ends the session, giving
    /// back what it held.
    pub async fn unless_exited<F: std::future::Future>(&self, work: F) -> Option<F::Output> {
        tokio::select! {
            out = work => Some(out),
            () = self.exited.notified() => None,
        }
    }

    /// Answers one call. Cancellation-safe: dropping the future while an acquire waits
    /// withdraws it from the queue and takes nothing.
    pub async fn answer(&self, mut call: pb::BudgetCall) -> pb::BudgetReply {
        // Giving back is never refused; everything else counts against the tenant's rate,
        // as its gRPC requests do: a session cannot flood npud with asks or reports.
        let rated = match call.call {
            Some(Call::Release(_) | Call::ReleaseEvents(_)) => Ok(()),
            _ => self.daemon.within_rate(&self.caller.tenant),
        };
        if let Err(e) = rated.and_then(|()| self.localize(&mut call)) {
            return error_reply(e);
        }
        let kind = match &call.call {
            Some(Call::Hello(_)) => "hello",
            Some(Call::Acquire(_)) => "acquire",
            Some(Call::Release(_)) => "release",
            Some(Call::Declare(_)) => "declare",
            Some(Call::Share(_)) => "share",
            Some(Call::Created(_)) => "created",
            Some(Call::AcquireEvents(_)) => "acquire_events",
            Some(Call::ReleaseEvents(_)) => "release_events",
            Some(Call::Captured(_)) => "captured",
            None => "empty",
        };
        self.daemon.metrics.budget_call(kind);
        let reply = match call.call {
            Some(Call::Hello(h)) => self.hello(h).await,
            Some(Call::Acquire(a)) => self.acquire(&a).await,
            Some(Call::Release(r)) => self.release(&r),
            Some(Call::Declare(d)) => self.declare(&d).await,
            Some(Call::Created(c)) => self.check_device(c.device).map(|()| {
                self.end_batch(c.device);
                Reply::Created(pb::CreatedBudgetResponse {})
            }),
            Some(Call::Share(s)) => self.check_device(s.device).map(|()| Reply::Share(self.share(s.device))),
            Some(Call::AcquireEvents(a)) => self.acquire_events(&a),
            Some(Call::Captured(c)) => self.captured(&c).await,
            Some(Call::ReleaseEvents(r)) => self.check_device(r.device).map(|()| {
                self.daemon.natives.remove_events(self.id, r.device, r.count);
                Reply::EventsReleased(pb::ReleaseEventsResponse { share: Some(self.share(r.device)) })
            }),
            None => Err(NpudError::new(Reason::InvalidArgumentOther, "an empty budget call")),
        };
        match reply {
            Ok(r) => pb::BudgetReply { reply: Some(r) },
            Err(e) => error_reply(e),
        }
    }

    /// Rewrites the call's `device` to npud's own device id: the one its identity names
    /// when it has one, and records the `created` count it carries.
    fn localize(&self, call: &mut pb::BudgetCall) -> Result<(), NpudError> {
        let (device, identity, created) = match &mut call.call {
            Some(Call::Acquire(a)) => (&mut a.device, a.identity.take(), a.created),
            Some(Call::Release(r)) => (&mut r.device, r.identity.take(), r.created),
            Some(Call::Created(c)) => (&mut c.device, c.identity.take(), c.created),
            Some(Call::Declare(d)) => (&mut d.device, d.identity.take(), None),
            Some(Call::Share(s)) => (&mut s.device, s.identity.take(), None),
            Some(Call::AcquireEvents(a)) => (&mut a.device, a.identity.take(), None),
            Some(Call::ReleaseEvents(r)) => (&mut r.device, r.identity.take(), None),
            Some(Call::Captured(c)) => (&mut c.device, c.identity.take(), c.created),
            Some(Call::Hello(_)) | None => return Ok(()),
        };
        if let Some(id) = identity.and_then(|i| i.id) {
            *device = match id {
                pb::device_identity::Id::PhysicalId(p) => self.daemon.device_by_identity(Some(p), None)?,
                pb::device_identity::Id::Uuid(u) => self.daemon.device_by_identity(None, Some(&u))?,
            };
        }
        self.check_device(*device)?;
        if let Some(created) = created {
            // Fewer than before: those may still be on the device until it is measured again.
            let (withheld, twice) = self.daemon.natives.set_created(self.id, *device, created);
            if withheld > 0 {
                let bound = self.daemon.untracked_bound(&self.caller.tenant, *device);
                self.daemon.admission.untracked_grew(*device, &self.caller.tenant, withheld, bound);
            }
            self.daemon.admission.remeasure_after_booking(*device, twice);
        }
        Ok(())
    }

    async fn hello(&self, h: pb::BudgetHello) -> Result<Reply, NpudError> {
        if !h.allocation.is_empty() {
            self.daemon.bind_allocation(&self.caller.tenant, &h.allocation, self.pod.as_deref()).await?;
        }
        // Shown to an admin by `npuctl status`: a control character (an escape sequence
        // for the admin's terminal, a newline that forges a row) is replaced.
        let program: String =
            h.program.chars().take(256).map(|c| if c.is_control() { char::REPLACEMENT_CHARACTER } else { c }).collect();
        self.daemon.natives.set_program(self.id, program);
        if h.reports_created {
            self.daemon.natives.set_reports_created(self.id);
        }
        let mut quota = self.daemon.quotas.get(&self.caller.tenant).0;
        let booking = self.daemon.allocations().and_then(|a| a.booking(&self.caller.tenant));
        if let Some(b) = &booking {
            // A pod's own quota is its allocation, over all its devices.
            quota.max_streams = b.total;
        }
        let shared = booking.is_some();
        let bookings = booking
            .map(|b| {
                self.daemon
                    .first_asks(&b)
                    .into_iter()
                    .map(|(device, streams)| pb::DeviceBooking {
                        device,
                        identity: self.daemon.device(device).ok().and_then(|d| identity_of(&d.identity)),
                        streams,
                        placed: b.devices.get(&device).copied().unwrap_or(0),
                        floating: b.floating,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Reply::Welcome(pb::BudgetWelcome {
            bookings,
            shared,
            capture_headroom: self.daemon.config().budget.capture_headroom,
            client_slots: self.daemon.slots.any(),
            cushion: match shared {
                true => self.daemon.config().kubernetes.as_ref().map_or(0, |k| k.process_cushion),
                false => 0,
            },
            tenant: self.caller.tenant.to_string(),
            epoch: u32::from(self.daemon.epoch),
            declare_grace_ms: millis(self.daemon.natives.declare_grace()),
            process_streams: self.daemon.process_streams(&self.caller.tenant).unwrap_or(0),
            max_streams: quota.max_streams,
            highest_priority: (quota.highest_priority != i32::MIN).then_some(quota.highest_priority),
        }))
    }

    /// Events are granted at once or refused: the vendor refuses at once too, and a
    /// program makes them on its hot path.
    fn acquire_events(&self, a: &pb::AcquireEventsRequest) -> Result<Reply, NpudError> {
        let daemon = &self.daemon;
        self.check_device(a.device)?;
        daemon.refuse_if_draining()?;
        if a.count == 0 || a.count > MAX_EVENT_ASK {
            return Err(NpudError::new(
                Reason::InvalidCount,
                format!("asked for {} events; 1..={MAX_EVENT_ASK} per call", a.count),
            ));
        }
        daemon.natives.add_events(self.id, a.device, a.count, |on_device, of_tenant| {
            daemon.event_room(&self.caller.tenant, a.device, a.count, on_device, of_tenant)
        })?;
        Ok(Reply::EventsAcquired(pb::AcquireEventsResponse { share: Some(self.share(a.device)) }))
    }

    fn release(&self, r: &pb::ReleaseBudgetRequest) -> Result<Reply, NpudError> {
        self.check_device(r.device)?;
        if r.client_slot {
            self.daemon.slots.release(r.device, self.id);
        }
        let _mutation = self.daemon.health.mutation();
        let n = self.daemon.natives.remove(self.id, r.device, r.count);
        self.daemon.admission.release_native(r.device, &self.caller.tenant, n);
        Ok(Reply::Released(pb::ReleaseBudgetResponse { share: Some(self.share(r.device)) }))
    }

    fn share(&self, device: u32) -> pb::BudgetShare {
        let quota = self.daemon.quota_on(&self.caller.tenant, device);
        let s = self.daemon.admission.native_share(device, &self.caller.tenant, &quota);
        let d = &self.daemon;
        let event_capacity = d.device(device).map_or(0, |desc| desc.event_limit);
        let device_events = d.registry.device_events(device).saturating_add(d.natives.device_events(device));
        let tenant_events = d.tenant_events(&self.caller.tenant);
        pb::BudgetShare {
            event_capacity,
            events_available: event_capacity
                .saturating_sub(device_events)
                .min(quota.max_events.saturating_sub(tenant_events)),
            event_holds: d.natives.events_held(self.id, device),
            device,
            capacity: s.capacity,
            device_free: s.device_free,
            available: s.available,
            tenant_holds: s.tenant_holds,
            holds: self.daemon.natives.held(self.id, device),
            max_streams: quota.max_streams,
            untracked: s.untracked,
            fault: d.health.fault(device).unwrap_or_default(),
        }
    }

    fn check_device(&self, device: u32) -> Result<(), NpudError> {
        self.daemon.device(device).map(drop)
    }
}

/// How long a client slot waits, after its session's connection closed, for its process
/// to exit: a process's connection closes a moment before it has exited (its descriptors
/// go first), and a device that limits its processes (MPS, an exclusive GPU) counts it
/// until it has.
const SLOT_EXIT_WAIT: Duration = Duration::from_secs(5);

impl NativeSession {
    /// Gives the session's client slots back once its process has exited (at most
    /// [`SLOT_EXIT_WAIT`] after the connection closed): handed on sooner, the next process
    /// would find the device still full and fail its context (MPS's
    /// CUDA_ERROR_MPS_MAX_CLIENTS_REACHED), as under load it did.
    fn release_slots(&self) {
        use crate::tenancy::liveness::{Liveness, of};
        let running = self.pid != 0 && of(self.pid) == Liveness::Running;
        let runtime = tokio::runtime::Handle::try_current();
        let (Ok(runtime), true) = (runtime, running && self.daemon.slots.any()) else {
            self.daemon.slots.release_all(self.id);
            return;
        };
        let (daemon, id, pid) = (Arc::clone(&self.daemon), self.id, self.pid);
        runtime.spawn(async move {
            let until = tokio::time::Instant::now() + SLOT_EXIT_WAIT;
            while of(pid) == Liveness::Running && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            daemon.slots.release_all(id);
        });
    }
}

/// Gives back everything the session held when it ends, however it ends.
impl Drop for NativeSession {
    fn drop(&mut self) {
        let _mutation = self.daemon.health.mutation();
        self.release_slots();
        if let Some(h) = self.daemon.natives.close(self.id) {
            let total: u32 = h.held.values().sum();
            for (&device, &n) in &h.held {
                // Its streams may outlive the connection by a moment (an exiting process):
                // untracked until the device is measured again, never handed out twice.
                let left = self.daemon.natives.left_behind(&h, device);
                let bound = self.daemon.untracked_bound(&h.tenant, device);
                self.daemon.admission.release_native_leaving(device, &h.tenant, n, left, bound);
            }
            tracing::debug!(id = self.id, pid = h.pid, streams = total, "budget session closed; its streams are free");
        }
    }
}

/// A device's vendor name as the budget wire carries it.
fn identity_of(identity: &crate::backend::Identity) -> Option<pb::DeviceIdentity> {
    let id = match (identity.physical_id, &identity.uuid) {
        (Some(p), _) => pb::device_identity::Id::PhysicalId(p),
        (None, Some(u)) => pb::device_identity::Id::Uuid(u.clone()),
        (None, None) => return None,
    };
    Some(pb::DeviceIdentity { id: Some(id) })
}

fn millis(d: Duration) -> u32 {
    d.as_millis().min(u128::from(u32::MAX)) as u32
}

/// The same code, reason, figures and message a gRPC caller would get.
pub fn error_reply(e: NpudError) -> pb::BudgetReply {
    let status = tonic::Status::from(e);
    let detail = pb::ErrorDetail::decode(status.details()).unwrap_or_default();
    pb::BudgetReply {
        reply: Some(Reply::Error(pb::BudgetError {
            message: status.message().to_string(),
            detail: Some(detail),
            code: status.code() as i32,
        })),
    }
}

//! The budget wire: length-prefixed `BudgetCall`/`BudgetReply` frames on the daemon's
//! Unix socket, after the 8-byte preface (see `budget.proto`). One connection is one
//! process: what it holds goes back the moment the connection closes, whatever ended the
//! process. A wait for budget is abandoned (and its place in the queue withdrawn) when the
//! connection closes during it.

use super::Holder;
use crate::auth::{Caller, Peer};
use crate::daemon::Daemon;
use crate::error::{NpudError, Reason};
use crate::identity::PeerStream;
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use prost::Message;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves one budget-wire connection whose preface has been read.
pub async fn serve(daemon: Arc<Daemon>, mut conn: PeerStream) {
    let info = Arc::clone(conn.info());
    let peer = Peer { uid: info.uid, gid: info.gid, pid: info.pid, container: info.container.clone() };
    let resolved = daemon.identities.read().unwrap_or_else(|e| e.into_inner()).resolve(&peer);
    let caller = match resolved {
        Ok(c) => c,
        Err(e) => {
            let _ = write_frame(&mut conn, &error_reply(e)).await;
            return;
        }
    };
    let holder = Holder {
        pid: info.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        tenant: caller.tenant.clone(),
        program: String::new(),
        container: info.container.as_ref().map(|c| c.id.chars().take(12).collect()),
        held: BTreeMap::new(),
    };
    let Some(id) = daemon.natives.open(holder) else {
        let e = NpudError::new(
            Reason::TooManySessions,
            format!("tenant {} has the most interposed processes connected that it may", caller.tenant),
        );
        let _ = write_frame(&mut conn, &error_reply(e)).await;
        return;
    };
    let _release_on_close = Closing { daemon: Arc::clone(&daemon), id };
    tracing::debug!(id, tenant = %caller.tenant, pid = ?info.pid, "interposed process connected");
    loop {
        let call = match read_frame(&mut conn).await {
            Ok(Some(call)) => call,
            Ok(None) => break,
            Err(e) => {
                let _ = write_frame(&mut conn, &error_reply(e)).await;
                break;
            }
        };
        let reply = match answer(&daemon, &caller, id, call, &mut conn).await {
            Some(reply) => reply,
            None => break, // the connection closed while it waited
        };
        if write_frame(&mut conn, &reply).await.is_err() {
            break;
        }
    }
}

/// Gives back everything a connection held when it ends, however it ends.
struct Closing {
    daemon: Arc<Daemon>,
    id: u64,
}

impl Drop for Closing {
    fn drop(&mut self) {
        let _mutation = self.daemon.health.mutation();
        if let Some(h) = self.daemon.natives.close(self.id) {
            let total: u32 = h.held.values().sum();
            for (&device, &n) in &h.held {
                self.daemon.admission.release_native(device, &h.tenant, n);
            }
            tracing::debug!(
                id = self.id,
                pid = h.pid,
                streams = total,
                "interposed process gone; its streams are free"
            );
        }
    }
}

async fn answer(
    daemon: &Daemon,
    caller: &Caller,
    id: u64,
    call: pb::BudgetCall,
    conn: &mut PeerStream,
) -> Option<pb::BudgetReply> {
    let reply = match call.call {
        Some(Call::Hello(h)) => {
            let program: String = h.program.chars().take(256).collect();
            daemon.natives.set_program(id, program);
            Ok(Reply::Welcome(pb::BudgetWelcome {
                tenant: caller.tenant.to_string(),
                epoch: u32::from(daemon.epoch),
                declare_grace_ms: millis(daemon.natives.declare_grace()),
            }))
        }
        Some(Call::Acquire(a)) => {
            let acquire = acquire(daemon, caller, id, &a);
            // A process that dies while it waits leaves the queue at once.
            let mut probe = [0u8; 1];
            tokio::select! {
                r = acquire => r,
                _ = conn.read(&mut probe) => return None,
            }
        }
        Some(Call::Release(r)) => check_device(daemon, r.device).map(|()| {
            let _mutation = daemon.health.mutation();
            let n = daemon.natives.remove(id, r.device, r.count);
            daemon.admission.release_native(r.device, &caller.tenant, n);
            Reply::Released(pb::ReleaseBudgetResponse { share: Some(share(daemon, caller, id, r.device)) })
        }),
        Some(Call::Declare(d)) => declare(daemon, caller, id, &d).await,
        Some(Call::Share(s)) => {
            check_device(daemon, s.device).map(|()| Reply::Share(share(daemon, caller, id, s.device)))
        }
        None => Err(NpudError::new(Reason::InvalidArgumentOther, "an empty budget call")),
    };
    Some(match reply {
        Ok(r) => pb::BudgetReply { reply: Some(r) },
        Err(e) => error_reply(e),
    })
}

async fn acquire(daemon: &Daemon, caller: &Caller, id: u64, a: &pb::AcquireBudgetRequest) -> Result<Reply, NpudError> {
    check_device(daemon, a.device)?;
    daemon.refuse_if_draining()?;
    if a.count == 0 {
        return Err(NpudError::new(Reason::InvalidCount, "asked for 0 streams"));
    }
    let (quota, _) = daemon.quotas.get(&caller.tenant);
    let wait = Duration::from_millis(u64::from(a.wait_ms));
    // The ledger changes in acquire_native and the holder's count just after: one mutation.
    let _mutation = daemon.health.mutation();
    let waited = daemon.admission.acquire_native(a.device, &caller.tenant, &quota, a.count, wait).await?;
    daemon.natives.add(id, a.device, a.count);
    Ok(Reply::Acquired(pb::AcquireBudgetResponse {
        waited_ms: millis(waited),
        share: Some(share(daemon, caller, id, a.device)),
    }))
}

async fn declare(daemon: &Daemon, caller: &Caller, id: u64, d: &pb::DeclareBudgetRequest) -> Result<Reply, NpudError> {
    check_device(daemon, d.device)?;
    if !daemon.natives.accepts_declarations() {
        return Err(NpudError::new(
            Reason::InvalidArgumentOther,
            format!(
                "declarations are accepted only within {} of the daemon's start; acquire instead",
                humantime::format_duration(daemon.natives.declare_grace())
            ),
        ));
    }
    let _mutation = daemon.health.mutation();
    let accepted = daemon.admission.declare_native(d.device, &caller.tenant, d.count).await;
    daemon.natives.add(id, d.device, accepted);
    if accepted < d.count {
        tracing::warn!(tenant = %caller.tenant, declared = d.count, accepted, device = d.device, "a declaration exceeded what the device has left");
    }
    Ok(Reply::Declared(pb::DeclareBudgetResponse { accepted, share: Some(share(daemon, caller, id, d.device)) }))
}

fn share(daemon: &Daemon, caller: &Caller, id: u64, device: u32) -> pb::BudgetShare {
    let (quota, _) = daemon.quotas.get(&caller.tenant);
    let s = daemon.admission.native_share(device, &caller.tenant, &quota);
    pb::BudgetShare {
        device,
        capacity: s.capacity,
        device_free: s.device_free,
        available: s.available,
        tenant_holds: s.tenant_holds,
        holds: daemon.natives.held(id, device),
        max_streams: quota.max_streams,
    }
}

fn check_device(daemon: &Daemon, device: u32) -> Result<(), NpudError> {
    daemon.device(device).map(drop)
}

fn millis(d: Duration) -> u32 {
    d.as_millis().min(u128::from(u32::MAX)) as u32
}

/// The same code, reason, figures and message a gRPC caller would get.
fn error_reply(e: NpudError) -> pb::BudgetReply {
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

/// Reads one frame; Ok(None) at a clean end of the connection.
async fn read_frame(conn: &mut PeerStream) -> Result<Option<pb::BudgetCall>, NpudError> {
    let mut len = [0u8; 4];
    match conn.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(_) => return Ok(None),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > npud_proto::BUDGET_MAX_FRAME {
        return Err(NpudError::new(
            Reason::PayloadTooLarge,
            format!("a budget frame of {len} bytes; the most is {}", npud_proto::BUDGET_MAX_FRAME),
        ));
    }
    let mut body = vec![0u8; len];
    if conn.read_exact(&mut body).await.is_err() {
        return Ok(None);
    }
    pb::BudgetCall::decode(body.as_slice()).map(Some).map_err(|e| {
        NpudError::new(Reason::InvalidArgumentOther, format!("a budget frame that is not a BudgetCall: {e}"))
    })
}

async fn write_frame(conn: &mut PeerStream, reply: &pb::BudgetReply) -> std::io::Result<()> {
    let body = reply.encode_to_vec();
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    conn.write_all(&frame).await?;
    conn.flush().await
}

//! The Unix socket's connections: each peer identified as it is accepted (credentials, its
//! cgroup and who made it, the runtime's word where one is configured), held to its
//! tenant's connection limit, and routed by its first 8 bytes: budget-wire connections
//! (the interposer) are served here, HTTP/2 ones go on to tonic.

use crate::daemon::Daemon;
use crate::kubernetes::cri::{Confirmer, Verdict};
use crate::tenancy::connections::{ConnectionLimiter, Full};
use crate::tenancy::identity::{PeerInspector, PeerStream};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;

/// How long a connection may take to send its first 8 bytes; it holds a slot meanwhile.
const PREFACE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections waiting for the container runtime's word, not yet admitted to a slot: past
/// this many, accepting waits, and the kernel's backlog queues.
const IDENTIFYING: usize = 256;

/// Accepts Unix connections, attaches each peer's identity, admits it to its tenant's
/// slots in the order connections come, and tells the socket's two protocols apart in a
/// task per connection, so a silent client delays no one. A pod's container whose pod the
/// runtime must confirm is admitted in its task, after the runtime's word.
pub(super) fn route_connections(
    (listener, mut stop): (UnixListener, tokio::sync::watch::Receiver<bool>),
    (inspector, cri, watched): (Arc<dyn PeerInspector>, Option<Arc<Confirmer>>, Arc<super::replies::Watched>),
    daemon: Arc<Daemon>,
    limiter: Arc<ConnectionLimiter>,
) -> impl tokio_stream::Stream<Item = std::io::Result<PeerStream>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let identifying = Arc::new(tokio::sync::Semaphore::new(IDENTIFYING));
    tokio::spawn(async move {
        while !tx.is_closed() {
            // Stopping: what connects from now on waits in the backlog, for a successor
            // that takes the socket over (`handover`), or fails when npud is gone.
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => return,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or memory: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed; backing off");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let peer = match PeerStream::accept(stream, inspector.as_ref()) {
                Ok(peer) => {
                    watched.add(peer.conn());
                    peer
                }
                Err(e) => {
                    tracing::debug!(error = %e, "dropping a connection whose peer cannot be identified");
                    continue;
                }
            };
            // A pod's container waits for the runtime's word off the loop; every other peer
            // takes its slot here, in the order connections come.
            let needs_word = cri.is_some() && peer.info().container.as_ref().is_some_and(|c| c.pod_uid.is_some());
            if !needs_word {
                if let Some(peer) = admit(peer, &daemon, &limiter) {
                    tokio::spawn(route(peer, tx.clone(), Arc::clone(&daemon)));
                }
                continue;
            }
            let Ok(permit) = Arc::clone(&identifying).acquire_owned().await else { return };
            let (tx, daemon, limiter, cri) = (tx.clone(), Arc::clone(&daemon), Arc::clone(&limiter), cri.clone());
            tokio::spawn(async move {
                let peer = confirmed(peer, cri.as_deref()).await;
                let Some(peer) = admit(peer, &daemon, &limiter) else { return };
                drop(permit);
                route(peer, tx, daemon).await;
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The peer as the runtime confirms it, where its cgroup names a pod: refused where the
/// runtime contradicts it.
async fn confirmed(mut peer: PeerStream, cri: Option<&Confirmer>) -> PeerStream {
    let pod = peer.info().container.as_ref().and_then(|c| c.pod_uid.clone().map(|uid| (c.id.clone(), uid)));
    if let (Some(cri), Some((id, uid))) = (cri, pod) {
        match cri.confirm(&id, &uid).await {
            Verdict::Agrees => {}
            Verdict::Disagrees(why) => {
                let pid = peer.info().pid.unwrap_or(0);
                tracing::warn!(pid, container = %id, pod = %uid, %why, "refusing a peer: the runtime contradicts its cgroup");
                let cgroup = peer.info().cgroup.clone().unwrap_or_default();
                peer.refuse(format!(
                    "process {pid}'s cgroup {cgroup} names container {} of pod {uid}, but {why}: it gets no identity",
                    &id[..id.len().min(12)]
                ));
            }
            Verdict::Unknown(why) => {
                tracing::warn!(container = %id, pod = %uid, %why, "the container runtime did not answer; the cgroup's word stands");
            }
        }
    }
    peer
}

/// The peer holding a slot of its tenant's connections; None (the connection closed)
/// when its tenant has none left.
fn admit(mut peer: PeerStream, daemon: &Daemon, limiter: &Arc<ConnectionLimiter>) -> Option<PeerStream> {
    let (tenant, admin) = daemon.connection_owner(peer.info());
    match limiter.admit(&tenant, admin) {
        Ok(slot) => {
            peer.hold(slot);
            Some(peer)
        }
        Err(full) => {
            daemon.metrics().connection_refused(match full {
                Full::Tenant => "tenant",
                Full::Total => "total",
            });
            if let Some(unlogged) = limiter.log_refusal() {
                let limits = &daemon.config().limits;
                tracing::warn!(
                    %tenant,
                    uid = peer.info().uid,
                    per_tenant = limits.max_connections_per_tenant,
                    total = limits.max_connections,
                    ?full,
                    unlogged,
                    "closing a connection: at the most connections it may open"
                );
            }
            None
        }
    }
}

/// Reads the connection's first 8 bytes and serves it as what they say it is.
async fn route(mut peer: PeerStream, tx: tokio::sync::mpsc::Sender<std::io::Result<PeerStream>>, daemon: Arc<Daemon>) {
    match tokio::time::timeout(PREFACE_TIMEOUT, peer.read_preface::<8>()).await {
        Ok(Ok(preface)) if &preface == npud_proto::BUDGET_PREFACE => {
            peer.consume_preface();
            crate::native::wire::serve(daemon, peer).await;
        }
        Ok(Ok(_)) => {
            // An HTTP/2 connection takes its tenant's share of client memory for its life.
            let (tenant, admin) = daemon.connection_owner(peer.info());
            match daemon.replies().enter_conn(&tenant, admin) {
                Ok(memory) => peer.hold_memory(memory),
                Err(full) => {
                    daemon.metrics().connection_refused("memory");
                    tracing::debug!(%tenant, %full, "closing an HTTP/2 connection: its tenant's memory share is held");
                    return;
                }
            }
            match peer.normalise_authority() {
                Ok(()) => {
                    let _ = tx.send(Ok(peer)).await;
                }
                Err(e) => tracing::debug!(error = %e, "dropping a connection with a malformed start"),
            }
        }
        _ => tracing::debug!("dropping a connection that sent no preface"),
    }
}

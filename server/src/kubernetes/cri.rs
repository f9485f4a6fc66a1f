//! A second source for a pod's identity: the container runtime (CRI `ContainerStatus`, on
//! `[kubernetes] cri_socket`). Its `io.kubernetes.pod.uid` label, which the kubelet sets
//! on every container it asks for, must name the pod the container's cgroup names before
//! npud names the process `pod-<uid>`.
//!
//! The cgroup check (`tenancy/cgroup`) already proves root made the container's cgroup;
//! the runtime's word catches a cgroup root made by hand, or a runtime's container that
//! the kubelet never asked for. The answer of a container id never changes, so it is kept
//! (bounded). Where the runtime does not answer, the cgroup's word stands, logged: a
//! runtime that restarts must not strip every pod of its identity.

use npud_proto::cri;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The kubelet's label on each container it creates: its pod's uid.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// Containers whose answer is kept; past this, the oldest half is dropped.
const KEPT: usize = 4096;
/// How long one question may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// After the runtime failed to answer, it is not asked again for this long: each peer of
/// that time is taken on its cgroup's word at once, not after a timeout each.
const QUIET_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// What the runtime says of a container a cgroup names as pod `uid`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The runtime names the same pod.
    Agrees,
    /// The runtime names another pod, no pod, or no such container: why, for the peer.
    Disagrees(String),
    /// The runtime did not answer: the cgroup's word stands.
    Unknown(String),
}

/// Container id → the pod uid the runtime named (None: no such container, or no label),
/// and the ids in the order they were learnt.
#[derive(Default)]
struct Known {
    named: HashMap<String, Option<String>>,
    order: Vec<String>,
}

/// Asks the runtime, and keeps what it said.
pub struct Confirmer {
    socket: PathBuf,
    known: Mutex<Known>,
    /// When the runtime last failed to answer.
    failed_at: Mutex<Option<Instant>>,
}

impl Confirmer {
    pub fn new(socket: PathBuf) -> Confirmer {
        Confirmer { socket, known: Mutex::new(Known::default()), failed_at: Mutex::new(None) }
    }

    /// Whether container `id` belongs to pod `uid`, as the runtime says.
    pub async fn confirm(&self, id: &str, uid: &str) -> Verdict {
        let kept = self.known.lock().unwrap_or_else(|e| e.into_inner()).named.get(id).cloned();
        let named = match kept {
            Some(named) => named,
            None => {
                let quiet = self
                    .failed_at
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some_and(|at| at.elapsed() < QUIET_AFTER_FAILURE);
                if quiet {
                    return Verdict::Unknown("the container runtime failed to answer moments ago".into());
                }
                match self.ask(id).await {
                    Ok(named) => {
                        self.keep(id, named.clone());
                        named
                    }
                    Err(why) => {
                        *self.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                        return Verdict::Unknown(why);
                    }
                }
            }
        };
        match named {
            Some(theirs) if theirs.eq_ignore_ascii_case(uid) => Verdict::Agrees,
            Some(theirs) => Verdict::Disagrees(format!("the container runtime says it belongs to pod {theirs}")),
            None => Verdict::Disagrees("the container runtime knows no such pod container".into()),
        }
    }

    fn keep(&self, id: &str, named: Option<String>) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let Known { named: map, order } = &mut *known;
        if map.len() >= KEPT {
            tracing::info!(
                kept = KEPT,
                "the container runtime's answers kept are at their bound; the oldest half goes"
            );
            for old in order.drain(..KEPT / 2) {
                map.remove(&old);
            }
        }
        if map.insert(id.to_string(), named).is_none() {
            order.push(id.to_string());
        }
    }

    /// The pod uid the runtime's label names (None: no such container, or no label).
    async fn ask(&self, id: &str) -> Result<Option<String>, String> {
        let question = async {
            let channel = super::register::unix_channel(&self.socket).await?;
            let mut client = cri::runtime_service_client::RuntimeServiceClient::new(channel);
            let request = cri::ContainerStatusRequest { container_id: id.to_string(), verbose: false };
            match client.container_status(request).await {
                Ok(answer) => {
                    let labels = answer.into_inner().status.map(|s| s.labels).unwrap_or_default();
                    Ok(labels.get(POD_UID_LABEL).map(|u| u.chars().take(64).collect()))
                }
                // CRI's answer for a container it does not have (containerd and CRI-O).
                Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
                Err(s) => Err(format!("ContainerStatus failed: {}", s.message())),
            }
        };
        match tokio::time::timeout(ASK_TIMEOUT, question).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("the container runtime took longer than {ASK_TIMEOUT:?}")),
        }
    }
}

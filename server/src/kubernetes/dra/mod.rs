//! npud as a DRA kubelet plugin (issue 77): the kubelet registers it through its plugin
//! watcher (`registration`), and calls `NodePrepareResources` before a pod's containers
//! start and `NodeUnprepareResources` after they all stopped. Prepare books: the claim's
//! allocation, read from the API server (`claims`), names npud's devices and the streams
//! consumed on each; npud books exactly that for the claim's pod, in the books the device
//! plugin's pods are in, and answers with a CDI device (`cdi`) that gives the pod's
//! containers npud's socket and the interposer. Unprepare ends the booking at once.
//!
//! Both calls are idempotent per claim, across kubelet and npud restarts: a booked claim
//! is answered as booked, an unknown one unprepared is already done.

pub mod cdi;
pub mod claims;
pub mod health;
pub mod registration;
pub mod slices;

use crate::config::dra::DraConfig;
use crate::daemon::Daemon;
use claims::{ClaimReader, Picked};
use npud_proto::dra;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The most claims one call may name (a pod's claims for one driver are a handful).
const MAX_CLAIMS: usize = 256;

pub struct Dra {
    pub daemon: Arc<Daemon>,
    pub config: DraConfig,
    pub reader: Arc<dyn ClaimReader>,
    pub interposer: Option<super::interposer::Installed>,
    /// One claim's Prepare or Unprepare at a time: a claim's room is checked and taken
    /// in one step, and the kubelet's retries of a claim never interleave.
    pub turn: tokio::sync::Mutex<()>,
}

impl Dra {
    /// Prepares one claim: reads it, writes its CDI spec, books it (the spec goes again
    /// where the booking is refused). Its devices for the kubelet, or why not.
    async fn prepare(&self, c: &dra::Claim) -> Result<Vec<dra::Device>, String> {
        check_claim(c)?;
        let read = self.reader.get(&c.namespace, &c.name).await;
        let turn = self.turn.lock().await;
        let booked = self.daemon.allocations().map(|a| a.claim(&c.uid)).unwrap_or_default();
        let (ask, picked) =
            match read.and_then(|claim| claims::ask_of(&claim, &c.uid, &self.config.driver, &self.config.node_name)) {
                Ok(found) => found,
                // Booked before (the kubelet asks again after a restart): answered from the
                // books where the API server cannot be read now.
                Err(why) if booked.is_empty() => return Err(why),
                Err(why) => {
                    tracing::warn!(claim = %c.uid, %why, "a booked claim is prepared again from npud's books");
                    let devices = booked.iter().flat_map(|a| a.streams.iter().map(|(d, _)| *d));
                    let picked = devices.map(|d| Picked {
                        request: String::new(),
                        pool: self.config.node_name.clone(),
                        device: self.daemon.dra_device_name(d),
                        share: None,
                        streams: None,
                    });
                    return Ok(self.answer(&c.uid, picked.collect()));
                }
            };
        if ask.devices.is_empty() {
            return Ok(Vec::new());
        }
        let edits = super::edits::booked(&self.daemon.config().socket, self.interposer.as_ref());
        cdi::write(&self.config.cdi_dir, &c.uid, &edits)
            .map_err(|e| format!("writing the claim's CDI spec in {}: {e}", self.config.cdi_dir.display()))?;
        let library = self.interposer.as_ref().map(super::interposer::Installed::name);
        let booked = match self.daemon.book_claim(&ask, library) {
            Ok(booked) => booked,
            Err(e) => {
                cdi::remove(&self.config.cdi_dir, &c.uid);
                return Err(e.message);
            }
        };
        // Booked: the next claim's turn need not wait on the API server's answer below.
        drop(turn);
        // What was booked, in the claim's status where the API takes it (KEP-4817); a
        // refusal there (an API server without it) costs the pod nothing.
        let status = self.status(&picked, &booked);
        if let Err(e) = self.reader.report(&c.namespace, &c.name, status).await {
            tracing::info!(claim = %c.uid, error = %e, "the claim's device status was not reported");
        }
        Ok(self.answer(&c.uid, picked))
    }

    /// `status.devices` entries of npud's driver: for each result, the streams booked for
    /// the pod on its device, and a Ready condition.
    fn status(&self, picked: &[Picked], booked: &[(u32, u32)]) -> serde_json::Value {
        let entries: Vec<serde_json::Value> = picked
            .iter()
            .map(|p| {
                let on = self.daemon.dra_device(&p.device);
                let device_total = booked.iter().filter(|(d, _)| Some(*d) == on).map(|(_, n)| *n).sum::<u32>();
                let streams = p.streams.unwrap_or(device_total);
                let mut entry = serde_json::json!({
                    "driver": self.config.driver, "pool": p.pool, "device": p.device,
                    "data": {"bookedStreams": streams, "deviceBookedStreams": device_total},
                    "conditions": [{
                        "type": "Ready", "status": "True", "reason": "Booked",
                        "message": format!("npud booked {streams} streams for the pod on {}", p.device),
                        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    }],
                });
                if let Some(share) = &p.share {
                    entry["shareID"] = share.clone().into();
                }
                entry
            })
            .collect();
        serde_json::Value::Array(entries)
    }

    fn answer(&self, uid: &str, picked: Vec<Picked>) -> Vec<dra::Device> {
        picked
            .into_iter()
            .map(|p| dra::Device {
                request_names: if p.request.is_empty() { Vec::new() } else { vec![p.request] },
                pool_name: p.pool,
                device_name: p.device,
                cdi_device_ids: vec![cdi::device_id(uid)],
            })
            .collect()
    }

    /// Unprepares one claim: its booking ends now. Its spec stays while its pod's cgroup
    /// does (the pod sweep removes it); one never booked goes at once.
    async fn unprepare(&self, c: &dra::Claim) -> Result<(), String> {
        check_claim(c)?;
        let _turn = self.turn.lock().await;
        if self.daemon.end_claim(&c.uid).await.is_empty()
            && self.daemon.allocations().is_none_or(|a| !a.claim_uids().contains(&c.uid))
        {
            cdi::remove(&self.config.cdi_dir, &c.uid);
        }
        Ok(())
    }
}

/// Starts the DRA plugin: the API server's client (a failure to make one is every
/// Prepare's answer, logged once here), the specs of claims npud's books no longer know
/// removed, then the node's ResourceSlice kept and the sockets served until `stop`.
pub fn start(
    daemon: Arc<Daemon>,
    config: DraConfig,
    interposer: Option<super::interposer::Installed>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let reader: Arc<dyn ClaimReader> = match claims::ApiServer::connect(config.api_server.as_deref(), &config.driver) {
        Ok(api) => {
            tokio::spawn(slices::publish(Arc::clone(&daemon), config.clone(), api.client.clone(), stop.clone()));
            Arc::new(api)
        }
        Err(why) => {
            tracing::error!(%why, "npud cannot reach the API server: no claim can be prepared");
            Arc::new(claims::Unreachable(why))
        }
    };
    let known = daemon.allocations().map(|a| a.claim_uids()).unwrap_or_default();
    for uid in cdi::written(&config.cdi_dir).into_iter().filter(|u| !known.contains(u)) {
        cdi::remove(&config.cdi_dir, &uid);
    }
    let dra = Arc::new(Dra { daemon, config, reader, interposer, turn: tokio::sync::Mutex::new(()) });
    tokio::spawn(registration::run(dra, stop))
}

/// A claim the kubelet names must have its three fields, a uid fit for a file name.
fn check_claim(c: &dra::Claim) -> Result<(), String> {
    if !cdi::valid_uid(&c.uid) {
        return Err(format!("the claim's uid {:?} is not a Kubernetes uid", c.uid));
    }
    if c.namespace.is_empty() || c.name.is_empty() || c.namespace.len() > 253 || c.name.len() > 253 {
        return Err("a claim needs its namespace and name (253 characters at most each)".into());
    }
    Ok(())
}

/// The `DRAPlugin` service over a shared [`Dra`].
pub struct Service(pub Arc<Dra>);

#[tonic::async_trait]
impl dra::dra_plugin_server::DraPlugin for Service {
    async fn node_prepare_resources(
        &self,
        req: Request<dra::NodePrepareResourcesRequest>,
    ) -> Result<Response<dra::NodePrepareResourcesResponse>, Status> {
        let claims = each(&self.0, req.into_inner().claims, |me, c| async move {
            match me.prepare(&c).await {
                Ok(devices) => dra::NodePrepareResourceResponse { devices, error: String::new() },
                Err(error) => {
                    tracing::warn!(claim = %c.uid, namespace = %c.namespace, name = %c.name, %error, "a claim is not prepared");
                    dra::NodePrepareResourceResponse { devices: Vec::new(), error }
                }
            }
        })
        .await?;
        Ok(Response::new(dra::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<dra::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<dra::NodeUnprepareResourcesResponse>, Status> {
        let claims = each(&self.0, req.into_inner().claims, |me, c| async move {
            dra::NodeUnprepareResourceResponse { error: me.unprepare(&c).await.err().unwrap_or_default() }
        })
        .await?;
        Ok(Response::new(dra::NodeUnprepareResourcesResponse { claims }))
    }
}

/// `f`'s answer for each claim, by uid, one claim after another in a task of its own: the
/// kubelet giving up on the call cuts no booking half way (its retry finds it booked).
async fn each<T, F, Fut>(dra: &Arc<Dra>, claims: Vec<dra::Claim>, f: F) -> Result<HashMap<String, T>, Status>
where
    T: Send + 'static,
    F: Fn(Arc<Dra>, dra::Claim) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send,
{
    if claims.len() > MAX_CLAIMS {
        return Err(Status::invalid_argument(format!("a call names at most {MAX_CLAIMS} claims")));
    }
    let me = Arc::clone(dra);
    let answers = tokio::spawn(async move {
        let mut out = HashMap::new();
        for c in claims {
            let uid = c.uid.clone();
            out.insert(uid, f(Arc::clone(&me), c).await);
        }
        out
    });
    answers.await.map_err(|e| Status::internal(format!("a claim's task failed: {e}")))
}

//! The DRA resource health service (KEP-4680, `v1alpha1`): a kubelet that has
//! `ResourceHealthStatus` watches npud's devices on the DRA endpoint and shows a pod whose
//! claim's device is unhealthy. npud sends every device's health (a fault of its own
//! signals, or a missed liveness probe, is Unhealthy) at once and again whenever one
//! changes; a kubelet without the feature never calls it.

use crate::config::dra::DraConfig;
use crate::daemon::Daemon;
use npud_proto::dra_health as pb;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// How often health is looked at (in memory); a message follows only a change.
const PERIOD: Duration = Duration::from_millis(500);

#[derive(Clone)]
pub struct Health {
    pub daemon: Arc<Daemon>,
    pub config: DraConfig,
    /// Turns true when the endpoint's server stops: the watches end, so its graceful
    /// shutdown does not wait for them.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

impl Health {
    /// Every device's name and whether it is healthy.
    fn now(&self) -> Vec<(String, bool)> {
        (0..self.daemon.devices().len() as u32)
            .map(|d| (self.daemon.dra_device_name(d), self.daemon.health().is_healthy(d)))
            .collect()
    }

    fn message(&self, devices: &[(String, bool)]) -> pb::NodeWatchResourcesResponse {
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let devices = devices
            .iter()
            .map(|(name, healthy)| pb::DeviceHealth {
                device: Some(pb::DeviceIdentifier {
                    pool_name: self.config.node_name.clone(),
                    device_name: name.clone(),
                }),
                health: if *healthy { pb::HealthStatus::Healthy } else { pb::HealthStatus::Unhealthy } as i32,
                last_updated_time: seconds,
            })
            .collect();
        pb::NodeWatchResourcesResponse { devices }
    }
}

#[tonic::async_trait]
impl pb::dra_resource_health_server::DraResourceHealth for Health {
    type NodeWatchResourcesStream =
        tokio_stream::wrappers::ReceiverStream<Result<pb::NodeWatchResourcesResponse, Status>>;

    async fn node_watch_resources(
        &self,
        _: Request<pb::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut me = self.clone();
        tokio::spawn(async move {
            let mut last = Vec::new();
            loop {
                if *me.stop.borrow() {
                    return;
                }
                let now = me.now();
                if now != last {
                    if tx.send(Ok(me.message(&now))).await.is_err() {
                        return;
                    }
                    last = now;
                } else if tx.is_closed() {
                    return;
                }
                let _ = tokio::time::timeout(PERIOD, me.stop.changed()).await;
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

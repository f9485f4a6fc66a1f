//! Which allocations' pods are gone: the kubelet's pod-resources API lists every active
//! container with the unit ids it was given; an allocation no listed container holds (two
//! reads in a row) has lost its pod, and its quota and holdings go with it.

use crate::daemon::Daemon;
use crate::policy::allocations::Allocations;
use npud_proto::podresources as pr;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often pod-resources is read: once a second at most, far under the kubelet's
/// 100 requests a second.
pub const PERIOD: Duration = Duration::from_secs(2);
/// A big node's answer can pass tonic's 4 MiB default (kubelet.md §8).
const MAX_ANSWER: usize = 16 << 20;

pub async fn watch(
    daemon: Arc<Daemon>,
    allocations: Arc<Allocations>,
    socket: PathBuf,
    resource: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut failing = false;
    loop {
        if tokio::time::timeout(PERIOD, stop.wait_for(|s| *s)).await.is_ok() {
            return;
        }
        match live_units(&socket, &resource).await {
            Ok(live) => {
                failing = false;
                for gone in allocations.sweep(&live) {
                    daemon.forget_allocation(&gone).await;
                }
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(socket = %socket.display(), error = %e, "cannot read pod resources; allocations are kept until it answers");
            }
            Err(_) => {}
        }
    }
}

/// The unit-id sets (sorted) of every listed container for `resource`.
async fn live_units(socket: &Path, resource: &str) -> Result<HashSet<Vec<String>>, String> {
    let channel = super::register::unix_channel(socket).await?;
    let mut client =
        pr::pod_resources_lister_client::PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_ANSWER);
    let answer = tokio::time::timeout(Duration::from_secs(5), client.list(pr::ListPodResourcesRequest {}))
        .await
        .map_err(|_| "List took longer than 5 s".to_string())?
        .map_err(|s| format!("List failed: {}", s.message()))?
        .into_inner();
    Ok(answer
        .pod_resources
        .iter()
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.devices)
        .filter(|d| d.resource_name == resource)
        .map(|d| {
            let mut ids = d.device_ids.clone();
            ids.sort();
            ids
        })
        .collect())
}

//! The kubelet's pod-resources API: it lists every active container with the device ids
//! of each resource it was given. npud reads it to place an allocation on the devices the
//! vendor's plugin gave the same container. Whether an allocation's pod is gone is the
//! kernel's word, not the listing's: a bound allocation lives while its pod's cgroup does
//! (plus `allocation_grace`), and only an allocation never presented ends by the listing,
//! once complete listings have not named it for the grace (`Allocations::sweep`). A
//! kubelet that restarts lists nothing for seconds: that ends nothing.

use crate::daemon::Daemon;
use crate::policy::allocations::listing::clean_name;
use crate::policy::allocations::{Allocations, Listed, PodLister, PodNames, Sweep};
use npud_proto::podresources as pr;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A big node's answer can pass tonic's 4 MiB default (kubelet.md §8).
const MAX_ANSWER: usize = 16 << 20;
/// The most containers, and device ids per container, one answer is read for.
const MAX_CONTAINERS: usize = 16_384;
const MAX_IDS: usize = 4096;

/// Reads `List` on the kubelet's pod-resources socket.
pub struct Lister {
    pub socket: PathBuf,
}

impl PodLister for Lister {
    fn list(&self) -> Pin<Box<dyn Future<Output = Result<Vec<Listed>, String>> + Send + '_>> {
        Box::pin(async move {
            let channel = super::register::unix_channel(&self.socket).await?;
            let mut client = pr::pod_resources_lister_client::PodResourcesListerClient::new(channel)
                .max_decoding_message_size(MAX_ANSWER);
            let answer = tokio::time::timeout(Duration::from_secs(5), client.list(pr::ListPodResourcesRequest {}))
                .await
                .map_err(|_| "List took longer than 5 s".to_string())?
                .map_err(|s| format!("List failed: {}", s.message()))?
                .into_inner();
            Ok(listed(answer))
        })
    }
}

/// The answer as npud keeps it: names cleaned, ids sorted, sizes bounded.
fn listed(answer: pr::ListPodResourcesResponse) -> Vec<Listed> {
    let mut out = Vec::new();
    for p in &answer.pod_resources {
        for c in &p.containers {
            if out.len() >= MAX_CONTAINERS {
                return out;
            }
            let names = PodNames {
                namespace: clean_name(&p.namespace),
                pod: clean_name(&p.name),
                container: clean_name(&c.name),
            };
            let mut devices: Vec<(String, Vec<String>)> = Vec::new();
            for d in &c.devices {
                let mut ids: Vec<String> = d.device_ids.iter().take(MAX_IDS).cloned().collect();
                ids.sort();
                match devices.iter_mut().find(|(r, _)| *r == d.resource_name) {
                    // The kubelet lists one entry per resource; merge should one repeat.
                    Some((_, known)) => {
                        known.extend(ids);
                        known.sort();
                    }
                    None => devices.push((d.resource_name.clone(), ids)),
                }
            }
            out.push(Listed { names, devices });
        }
    }
    out
}

/// Every `period`: lists (where npud may read pod-resources), hands the daemon the
/// listing, and ends the allocations whose end has been in evidence for the grace; then
/// the interposers only they mounted go.
pub async fn watch(
    daemon: Arc<Daemon>,
    allocations: Arc<Allocations>,
    interposer: Option<super::interposer::Installed>,
    lister: Option<Arc<Lister>>,
    (resource, cdi_dir): (String, Option<PathBuf>),
    (period, grace): (Duration, Duration),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let cgroups = crate::tenancy::cgroup::Mounted { root: daemon.config().cgroup_root.clone() };
    let alive = |uid: &str| crate::tenancy::cgroup::pod_alive(&cgroups, uid);
    let mut failing = false;
    loop {
        if tokio::time::timeout(period, stop.wait_for(|s| *s)).await.is_ok() {
            return;
        }
        let answer = match &lister {
            Some(l) => Some((l, l.list().await)),
            None => None,
        };
        let listing = match answer {
            None => None,
            Some((_, Ok(listing))) => {
                failing = false;
                daemon.saw_listing(listing.clone());
                Some(listing)
            }
            Some((lister, Err(e))) => {
                if !failing {
                    tracing::warn!(socket = %lister.socket.display(), error = %e, "cannot read pod resources; allocations never presented are kept until it answers");
                }
                failing = true;
                None
            }
        };
        let sweep = Sweep {
            listing: listing.as_deref(),
            resource: &resource,
            alive: &alive,
            grace,
            now: std::time::Instant::now(),
        };
        let gone = allocations.sweep(&sweep);
        for a in &gone {
            tracing::info!(
                pod = a.pod.as_deref().unwrap_or("-"),
                tenant = a.bound.as_deref().unwrap_or("-"),
                "an allocation ends: {}",
                if a.claim().is_some() {
                    "its claim was unprepared and its pod's cgroup is gone"
                } else if a.bound.is_some() && a.pod.is_some() {
                    "its pod's cgroup is gone"
                } else {
                    "complete listings no longer name it"
                }
            );
            daemon.forget_allocation(a).await;
            // A claim's CDI spec goes with its pod's cgroup, as its other files do, unless
            // the claim was prepared again since (another pod of it uses the spec).
            if let (Some(dir), Some(uid)) = (&cdi_dir, a.claim())
                && allocations.claim(uid).is_empty()
            {
                super::dra::cdi::remove(dir, uid);
            }
        }
        // Bookings follow the devices pods' processes hold open.
        for tenant in allocations.bound_tenants() {
            daemon.follow_held_devices(&tenant);
        }
        // An interposer an earlier npud installed goes with the last allocation that
        // mounted it, and never while one does: every pod that mounted it lives.
        if let Some(i) = interposer.as_ref().filter(|_| !gone.is_empty()) {
            let dir = i.library.parent().unwrap_or(std::path::Path::new("/"));
            super::interposer::remove_unused(dir, &i.name(), &allocations.libraries());
        }
    }
}

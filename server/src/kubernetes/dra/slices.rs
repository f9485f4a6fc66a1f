//! This node's ResourceSlice (issue 78): one device per NPU or GPU npud owns and is not
//! faulted, each with the `streams` claims may consume (a consumable capacity with its
//! request policy, KEP-5075) and `allowMultipleAllocations`, so many claims share it; and
//! the attributes a claim pairs it with the vendor's own DRA driver by (`matchAttribute`).
//! Written when it differs from what was last written (a fault, a recovery, a new
//! capacity), and after a restart only where the API server's copy differs: a steady
//! node writes nothing.

use crate::config::BackendKind;
use crate::config::dra::DraConfig;
use crate::daemon::Daemon;
use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the devices are looked at (in memory; a write follows only a change).
const PERIOD: Duration = Duration::from_secs(1);

/// Huawei's DRA driver's physical-id attribute: `physicId` under its driver name
/// `npu.huawei.com` (mind-cluster 22bb3d9,
/// component/ascend-dynamic-resource-allocation/internal/device/generation_common.go and
/// pkg/consts/consts.go), so a claim can ask for npud's streams on the NPU that driver
/// gave it.
pub const ASCEND_PHYSICAL_ID: &str = "npu.huawei.com/physicId";
/// NVIDIA's DRA driver's UUID attribute: `uuid` under `gpu.nvidia.com`
/// (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go).
pub const NVIDIA_UUID: &str = "gpu.nvidia.com/uuid";
/// The standard per-device PCI bus id attribute.
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";

/// The slice's name: one per node and driver.
pub fn slice_name(config: &DraConfig) -> String {
    format!("{}-{}", config.node_name, config.driver)
}

/// The devices this node offers claims now, by name.
pub fn devices(daemon: &Daemon, config: &DraConfig) -> Vec<api::Device> {
    let backend = daemon.config().backend;
    let vendor = match backend {
        BackendKind::Acl => "huawei",
        BackendKind::Cuda => "nvidia",
        BackendKind::Sim => "simulated",
    };
    let text = |s: &str| api::DeviceAttribute { string: Some(s.to_string()), ..Default::default() };
    let int = |n: u32| api::DeviceAttribute { int: Some(i64::from(n)), ..Default::default() };
    let mut out = Vec::new();
    for (d, desc) in daemon.devices().iter().enumerate() {
        let d = d as u32;
        if !daemon.health().is_healthy(d) {
            continue;
        }
        let Some(offer) = Offer::of(daemon.claimable(d), config.request) else {
            // Nothing claims could have (the tenants' own reservations take it all): the
            // API would refuse the slice over such a device, so it is left out.
            continue;
        };
        let mut attributes = BTreeMap::from([("vendor".to_string(), text(vendor)), ("model".into(), text(&desc.name))]);
        if let Some(p) = desc.identity.physical_id {
            attributes.insert("physicalId".into(), int(p));
            if backend == BackendKind::Acl {
                attributes.insert(ASCEND_PHYSICAL_ID.into(), int(p));
            }
        }
        if let Some(u) = &desc.identity.uuid {
            attributes.insert("uuid".into(), text(u));
            attributes.insert(NVIDIA_UUID.into(), text(u));
        }
        if let Some(bus) = &desc.identity.pci_bus_id {
            attributes.insert(PCI_BUS_ID.into(), text(&bus.to_ascii_lowercase()));
        }
        let q = |n: u32| Quantity(n.to_string());
        let streams = api::DeviceCapacity {
            value: q(offer.max),
            request_policy: Some(api::CapacityRequestPolicy {
                default: Some(q(offer.default)),
                valid_range: Some(api::CapacityRequestPolicyRange {
                    min: q(offer.min),
                    max: Some(q(offer.max)),
                    step: Some(q(offer.step)),
                }),
                valid_values: None,
            }),
        };
        out.push(api::Device {
            name: daemon.dra_device_name(d),
            attributes: Some(attributes),
            capacity: Some(BTreeMap::from([(super::claims::STREAMS.to_string(), streams)])),
            allow_multiple_allocations: Some(true),
            ..Default::default()
        });
    }
    out
}

/// A device's `streams` as published: its capacity (the range's max) and request policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Offer {
    max: u32,
    default: u32,
    min: u32,
    step: u32,
}

impl Offer {
    /// The offer of `most` streams under `policy`, kept within what the API validates
    /// (KEP-5075's `CapacityRequestPolicyRange`: max and default multiples of step, min <=
    /// default <= max, min + step <= capacity); None where `most` leaves no such range.
    fn of(most: u32, policy: crate::config::dra::RequestPolicy) -> Option<Offer> {
        let max = most - most % policy.step;
        let min = policy.min;
        let default = (policy.default.min(max) / policy.step) * policy.step;
        (min.checked_add(policy.step)? <= max && default >= min).then_some(Offer {
            max,
            default,
            min,
            step: policy.step,
        })
    }
}

/// The slice with `devices`, in pool generation `generation`.
fn slice(
    config: &DraConfig,
    devices: Vec<api::Device>,
    generation: i64,
    version: Option<String>,
) -> api::ResourceSlice {
    api::ResourceSlice {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(slice_name(config)),
            resource_version: version,
            ..Default::default()
        },
        spec: api::ResourceSliceSpec {
            driver: config.driver.clone(),
            node_name: Some(config.node_name.clone()),
            pool: api::ResourcePool { name: config.node_name.clone(), generation, resource_slice_count: 1 },
            devices: Some(devices),
            ..Default::default()
        },
    }
}

/// What was written last: the devices, the pool's generation, the object's version.
struct Published {
    devices: Vec<api::Device>,
    generation: i64,
    version: Option<String>,
}

/// Keeps the node's slice equal to [`devices`] until `stop`.
pub async fn publish(
    daemon: Arc<Daemon>,
    config: DraConfig,
    client: kube::Client,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let api: kube::Api<api::ResourceSlice> = kube::Api::all(client);
    let name = slice_name(&config);
    let mut published: Option<Published> = None;
    let mut failing = false;
    loop {
        let want = devices(&daemon, &config);
        if published.as_ref().is_none_or(|p| p.devices != want) {
            match write(&api, &name, &config, want, published.take()).await {
                Ok(p) => {
                    failing = false;
                    published = Some(p);
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(slice = %name, error = %e, "cannot publish the node's ResourceSlice; trying again every second");
                    }
                    failing = true;
                }
            }
        }
        if tokio::time::timeout(PERIOD, stop.wait_for(|s| *s)).await.is_ok() {
            return;
        }
    }
}

/// Writes `want` where the API server's slice differs (read first where nothing was
/// written yet, or the last write's version is stale); returns what is there now.
async fn write(
    api: &kube::Api<api::ResourceSlice>,
    name: &str,
    config: &DraConfig,
    want: Vec<api::Device>,
    last: Option<Published>,
) -> Result<Published, String> {
    let last = match last {
        Some(p) => Some(p),
        None => match api.get_opt(name).await.map_err(|e| format!("reading it: {e}"))? {
            Some(there) => {
                let same = there.spec.devices.as_deref().unwrap_or_default() == want.as_slice()
                    && there.spec.node_name.as_deref() == Some(config.node_name.as_str())
                    && there.spec.driver == config.driver;
                let p = Published {
                    devices: there.spec.devices.unwrap_or_default(),
                    generation: there.spec.pool.generation,
                    version: there.metadata.resource_version,
                };
                if same {
                    tracing::info!(slice = %name, devices = want.len(), "the node's ResourceSlice is as npud would publish it");
                    return Ok(p);
                }
                Some(p)
            }
            None => None,
        },
    };
    let params = kube::api::PostParams::default();
    let written = match &last {
        None => api.create(&params, &slice(config, want.clone(), 1, None)).await,
        Some(p) => {
            let next = slice(config, want.clone(), p.generation.saturating_add(1), p.version.clone());
            api.replace(name, &params, &next).await
        }
    };
    match written {
        Ok(s) => {
            tracing::info!(slice = %name, devices = want.len(), generation = s.spec.pool.generation, "published the node's ResourceSlice");
            Ok(Published { devices: want, generation: s.spec.pool.generation, version: s.metadata.resource_version })
        }
        // Someone else's write came between (or ours raced itself): read again next time.
        Err(e) => Err(format!("writing it: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::dra::RequestPolicy;

    #[test]
    fn an_offer_is_always_one_the_api_takes_or_none() {
        let p = |default, min, step| RequestPolicy { default, min, step };
        let o = Offer::of(2045, p(8, 1, 1)).unwrap();
        assert_eq!((o.max, o.default, o.min, o.step), (2045, 8, 1, 1));
        // Max a multiple of the step, and the default too.
        let o = Offer::of(2045, p(16, 8, 8)).unwrap();
        assert_eq!((o.max, o.default), (2040, 16));
        // A device nearly all reserved: the default comes down to what is there.
        let o = Offer::of(5, p(8, 1, 1)).unwrap();
        assert_eq!((o.max, o.default), (5, 5));
        // Nothing, or too little for min + step: left out.
        assert_eq!(Offer::of(0, p(8, 1, 1)), None);
        assert_eq!(Offer::of(1, p(8, 1, 1)), None);
        assert_eq!(Offer::of(12, p(8, 8, 8)), None);
        for most in 0..300 {
            for (default, min, step) in [(8, 1, 1), (16, 8, 8), (64, 1, 4), (1, 1, 1)] {
                if let Some(o) = Offer::of(most, p(default, min, step)) {
                    assert!(o.max <= most && o.max % step == 0 && o.default % step == 0);
                    assert!(o.min <= o.default && o.default <= o.max && o.min + step <= o.max);
                }
            }
        }
    }
}

//! A ResourceClaim as npud reads it: `NodePrepareResources` names a claim only by
//! namespace, uid and name (k8s.io/kubelet/pkg/apis/dra/v1 `Claim`), so its allocation (the
//! devices, the streams each consumes) and the pod it is reserved for come from the API
//! server (`resource.k8s.io/v1`, `status.allocation.devices.results[].consumedCapacity`
//! from KEP-5075, `status.reservedFor`).

use crate::daemon::claims_dra::ClaimAsk;
use k8s_openapi::api::resource::v1::ResourceClaim;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The capacity npud publishes per device and a claim consumes.
pub const STREAMS: &str = "streams";

/// Reads one ResourceClaim, and reports in its status what npud booked for it; the fake
/// API server answers both in the tests.
pub trait ClaimReader: Send + Sync {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<ResourceClaim, String>> + Send + 'a>>;

    /// Applies `devices` (`status.devices` entries of npud's driver) to the claim's status.
    fn report<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        devices: serde_json::Value,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;
}

/// The API server through kube-rs: in-cluster (the pod's service account), or at the URL
/// `[kubernetes.dra] api_server` gives.
pub struct ApiServer {
    pub client: kube::Client,
    /// The field manager npud's writes are applied as: its driver's name.
    pub manager: String,
}

impl ApiServer {
    pub fn connect(url: Option<&str>, driver: &str) -> Result<ApiServer, String> {
        let mut config = match url {
            Some(url) => kube::Config::new(url.parse().map_err(|e| format!("api_server {url:?}: {e}"))?),
            None => kube::Config::incluster()
                .map_err(|e| format!("not in a pod with a service account ({e}); set [kubernetes.dra] api_server"))?,
        };
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(10));
        let client = kube::Client::try_from(config).map_err(|e| format!("the API server's client: {e}"))?;
        Ok(ApiServer { client, manager: driver.to_string() })
    }
}

impl ClaimReader for ApiServer {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<ResourceClaim, String>> + Send + 'a>> {
        Box::pin(async move {
            let api: kube::Api<ResourceClaim> = kube::Api::namespaced(self.client.clone(), namespace);
            match tokio::time::timeout(Duration::from_secs(15), api.get(name)).await {
                Err(_) => Err("the API server did not answer within 15 s".into()),
                Ok(Err(kube::Error::Api(s))) => Err(format!("the API server refused: {} ({})", s.message, s.code)),
                Ok(Err(e)) => Err(format!("reading the claim: {e}")),
                Ok(Ok(claim)) => Ok(claim),
            }
        })
    }

    /// Server-side apply on the status subresource, as npud's driver (the field manager):
    /// npud owns its own entries of `status.devices` and no others' (KEP-4817).
    fn report<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        devices: serde_json::Value,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            let api: kube::Api<ResourceClaim> = kube::Api::namespaced(self.client.clone(), namespace);
            let patch = serde_json::json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "status": {"devices": devices},
            });
            let manager = kube::api::PatchParams::apply(&self.manager).force();
            let patch = kube::api::Patch::Apply(patch);
            let apply = api.patch_status(name, &manager, &patch);
            match tokio::time::timeout(Duration::from_secs(15), apply).await {
                Err(_) => Err("the API server did not answer within 15 s".into()),
                Ok(Err(e)) => Err(format!("reporting the claim's status: {e}")),
                Ok(Ok(_)) => Ok(()),
            }
        })
    }
}

/// No client could be made: every read fails, saying why.
pub struct Unreachable(pub String);

impl ClaimReader for Unreachable {
    fn get<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<ResourceClaim, String>> + Send + 'a>> {
        Box::pin(async move { Err(format!("npud cannot reach the API server: {}", self.0)) })
    }

    fn report<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: serde_json::Value,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move { Err(format!("npud cannot reach the API server: {}", self.0)) })
    }
}

/// One allocation result of npud's driver, for the kubelet's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    pub request: String,
    pub pool: String,
    pub device: String,
    /// The share of a device many claims share (consumable capacity), which names its
    /// entry in the claim's `status.devices`.
    pub share: Option<String>,
    /// The streams this result consumes (None: the device whole).
    pub streams: Option<u32>,
}

/// What the kubelet named (`uid`) and the API server holds (`claim`), as npud books it:
/// the streams on each of npud's devices (results of other drivers are theirs), and the
/// one pod it is reserved for. An Err says why the claim cannot be prepared.
pub fn ask_of(claim: &ResourceClaim, uid: &str, driver: &str, node: &str) -> Result<(ClaimAsk, Vec<Picked>), String> {
    let meta = &claim.metadata;
    if meta.uid.as_deref() != Some(uid) {
        return Err(format!(
            "the API server's claim {}/{} has uid {}, not the kubelet's {uid}: it was deleted and made again",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or(""),
            meta.uid.as_deref().unwrap_or("(none)")
        ));
    }
    let status = claim.status.as_ref();
    let Some(allocation) = status.and_then(|s| s.allocation.as_ref()) else {
        return Err("the claim is not allocated yet".into());
    };
    let pods: Vec<_> = status
        .and_then(|s| s.reserved_for.as_ref())
        .map(|r| r.iter().filter(|c| c.resource == "pods" && c.api_group.as_deref().unwrap_or("").is_empty()).collect())
        .unwrap_or_default();
    let pod = match pods.as_slice() {
        [one] => one,
        [] => return Err("the claim is reserved for no pod".into()),
        many => {
            return Err(format!(
                "the claim is reserved for {} pods; npud books a claim's streams for one pod (give each pod a claim of its own, from a ResourceClaimTemplate)",
                many.len()
            ));
        }
    };
    let mut devices: Vec<(String, Option<u32>)> = Vec::new();
    let mut results = Vec::new();
    let all = allocation.devices.as_ref().and_then(|d| d.results.as_ref());
    for r in all.into_iter().flatten().filter(|r| r.driver == driver) {
        if r.pool != node {
            return Err(format!("the claim's device {} is in pool {:?}, not this node's ({node:?})", r.device, r.pool));
        }
        let consumed = match r.consumed_capacity.as_ref().and_then(|c| c.get(STREAMS)) {
            Some(q) => Some(quantity(&q.0).ok_or_else(|| {
                format!("the claim consumes {:?} streams on {}: not a whole number of streams", q.0, r.device)
            })?),
            None => None,
        };
        // Two requests on one device consume their sum there.
        match devices.iter_mut().find(|(d, _)| *d == r.device) {
            Some((_, known)) => *known = known.zip(consumed).map(|(a, b)| a.saturating_add(b)),
            None => devices.push((r.device.clone(), consumed)),
        }
        results.push(Picked {
            request: r.request.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            share: r.share_id.clone(),
            streams: consumed,
        });
    }
    if devices.len() > 64 {
        return Err(format!("the claim names {} of npud's devices; at most 64", devices.len()));
    }
    let names = match (&meta.namespace, &pod.name) {
        (Some(ns), name) if !name.is_empty() => Some(crate::policy::allocations::PodNames {
            namespace: crate::policy::allocations::listing::clean_name(ns),
            pod: crate::policy::allocations::listing::clean_name(name),
            container: "-".into(),
        }),
        _ => None,
    };
    let ask = ClaimAsk { uid: uid.to_string(), pod: pod.uid.to_ascii_lowercase(), names, devices };
    Ok((ask, results))
}

/// A Kubernetes quantity that is a whole number of streams at most u32::MAX: digits,
/// with a decimal (`k`, `M`, `G`) or binary (`Ki`, `Mi`, `Gi`) suffix or an exponent
/// (`1e3`), as the API server may canonicalise `1000` to `1k`; None for anything else
/// (fractions, `m`, negative numbers).
pub fn quantity(text: &str) -> Option<u32> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let scale: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        e if e.starts_with(['e', 'E']) => 10u64.checked_pow(e[1..].parse().ok().filter(|x: &u32| *x <= 9)?)?,
        _ => return None,
    };
    u32::try_from(n.checked_mul(scale)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(json: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json).unwrap()
    }

    fn allocated(results: serde_json::Value, reserved: serde_json::Value) -> ResourceClaim {
        claim(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u-1"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}, "reservedFor": reserved}
        }))
    }

    #[test]
    fn quantities_are_whole_streams() {
        assert_eq!(quantity("16"), Some(16));
        assert_eq!(quantity("1k"), Some(1000));
        assert_eq!(quantity("2Ki"), Some(2048));
        assert_eq!(quantity("1e3"), Some(1000));
        for bad in ["", "1.5", "500m", "-1", "16x", "5G", "99999999999", "1e10"] {
            assert_eq!(quantity(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_claim_books_its_streams_per_device_for_its_one_pod() {
        let c = allocated(
            serde_json::json!([
                {"request": "s", "driver": "streams.npud.io", "pool": "node-1", "device": "npu-3", "consumedCapacity": {"streams": "16"}},
                {"request": "t", "driver": "streams.npud.io", "pool": "node-1", "device": "npu-3", "consumedCapacity": {"streams": "8"}},
                {"request": "n", "driver": "npu.huawei.com", "pool": "node-1", "device": "davinci-3"},
                {"request": "w", "driver": "streams.npud.io", "pool": "node-1", "device": "npu-4"}
            ]),
            serde_json::json!([{"resource": "pods", "name": "p", "uid": "POD-1"}]),
        );
        let (ask, picked) = ask_of(&c, "u-1", "streams.npud.io", "node-1").unwrap();
        assert_eq!(ask.pod, "pod-1");
        assert_eq!(ask.devices, vec![("npu-3".to_string(), Some(24)), ("npu-4".to_string(), None)]);
        assert_eq!(picked.len(), 3, "the other driver's result is not npud's");
        assert!(ask_of(&c, "u-2", "streams.npud.io", "node-1").unwrap_err().contains("deleted and made again"));
        assert!(ask_of(&c, "u-1", "streams.npud.io", "node-2").unwrap_err().contains("not this node's"));
    }

    #[test]
    fn a_claim_for_no_pod_or_many_or_with_odd_streams_is_refused_saying_why() {
        let one = serde_json::json!([{"request": "s", "driver": "d.io", "pool": "n", "device": "npu-0", "consumedCapacity": {"streams": "0.5"}}]);
        let pods = serde_json::json!([{"resource": "pods", "name": "a", "uid": "1"}, {"resource": "pods", "name": "b", "uid": "2"}]);
        assert!(ask_of(&allocated(one.clone(), pods), "u-1", "d.io", "n").unwrap_err().contains("2 pods"));
        assert!(
            ask_of(&allocated(one.clone(), serde_json::json!([])), "u-1", "d.io", "n").unwrap_err().contains("no pod")
        );
        let pod = serde_json::json!([{"resource": "pods", "name": "a", "uid": "1"}]);
        assert!(ask_of(&allocated(one, pod), "u-1", "d.io", "n").unwrap_err().contains("whole number"));
        let mut bare = allocated(serde_json::json!([]), serde_json::json!([]));
        bare.status = None;
        assert!(ask_of(&bare, "u-1", "d.io", "n").unwrap_err().contains("not allocated"));
    }
}

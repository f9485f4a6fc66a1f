//! DRA for the Kubernetes suites: a fake API server that serves ResourceClaims as
//! `resource.k8s.io/v1` has them (allocation results with consumed capacity, KEP-5075;
//! `reservedFor`), and the kubelet's side of plugin registration and the DRA v1 service
//! (`k8s.io/kubelet/pkg/apis/dra/v1`).
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::dra::dra_plugin_client::DraPluginClient;
use npud_proto::{dra, pluginregistration as reg};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The driver and node the suites' claims are for.
pub const DRIVER: &str = "streams.npud.io";
pub const NODE: &str = "node-1";

/// What the fake API server holds: claims by (namespace, name), slices by name, and how
/// many reads of claims and writes of slices it answered.
#[derive(Default)]
struct Store {
    claims: HashMap<(String, String), serde_json::Value>,
    slices: HashMap<String, serde_json::Value>,
    claim_gets: u64,
    slice_writes: u64,
    version: u64,
    /// How long a claim's GET is held before it is answered.
    delay: std::time::Duration,
}

/// An API server on loopback: ResourceClaims to read (GET), ResourceSlices to read,
/// create (POST) and replace (PUT, refused unless its resourceVersion is the stored one,
/// as the API server's optimistic concurrency does). HTTP/1.1, one request per connection.
pub struct ApiServer {
    pub url: String,
    store: Arc<Mutex<Store>>,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let store: Arc<Mutex<Store>> = Arc::default();
        let s = Arc::clone(&store);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = Arc::clone(&s);
                std::thread::spawn(move || answer(conn, &s));
            }
        });
        ApiServer { url, store }
    }

    /// Serves `claim` (a ResourceClaim object) from now on, replacing one of its name.
    pub fn put_claim(&self, claim: serde_json::Value) {
        let key = (
            claim["metadata"]["namespace"].as_str().unwrap().to_string(),
            claim["metadata"]["name"].as_str().unwrap().to_string(),
        );
        self.store.lock().unwrap().claims.insert(key, claim);
    }

    /// Claims are answered `delay` after they are asked for, from now on.
    pub fn delay_claims(&self, delay: std::time::Duration) {
        self.store.lock().unwrap().delay = delay;
    }

    /// How many times a claim was read.
    pub fn gets(&self) -> u64 {
        self.store.lock().unwrap().claim_gets
    }

    /// The claim `ns/name` as stored now (its status as reported).
    pub fn claim(&self, ns: &str, name: &str) -> serde_json::Value {
        self.store.lock().unwrap().claims[&(ns.to_string(), name.to_string())].clone()
    }

    /// The slices written, by name.
    pub fn slices(&self) -> HashMap<String, serde_json::Value> {
        self.store.lock().unwrap().slices.clone()
    }

    /// How many slice writes (creates and replaces) were taken.
    pub fn slice_writes(&self) -> u64 {
        self.store.lock().unwrap().slice_writes
    }
}

fn status(code: u16, reason: &str, message: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (code, body)
}

fn answer(conn: std::net::TcpStream, store: &Mutex<Store>) {
    use std::io::Read;
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
        if let Some((k, v)) = header.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length.min(1 << 20)];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let sent: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let mut st = store.lock().unwrap();
    if method == "GET" && segments.get(5) == Some(&"resourceclaims") {
        st.claim_gets += 1;
        let delay = st.delay;
        drop(st);
        std::thread::sleep(delay);
        st = store.lock().unwrap();
    }
    let (code, reply) = match (method, segments.as_slice()) {
        ("GET", ["apis", "resource.k8s.io", "v1", "namespaces", ns, "resourceclaims", name]) => {
            match st.claims.get(&(ns.to_string(), name.to_string())) {
                Some(c) => (200, c.clone()),
                None => status(404, "NotFound", &format!("resourceclaims {name:?} not found")),
            }
        }
        // Server-side apply of a driver's `status.devices` entries: each replaces the one
        // of its (driver, pool, device, shareID), as the entries' list-map keys say.
        ("PATCH", ["apis", "resource.k8s.io", "v1", "namespaces", ns, "resourceclaims", name, "status"]) => {
            let key = (ns.to_string(), name.to_string());
            let sent = sent.unwrap_or_default();
            match st.claims.get_mut(&key) {
                None => status(404, "NotFound", &format!("resourceclaims {name:?} not found")),
                Some(claim) => {
                    let id = |d: &serde_json::Value| {
                        (d["driver"].clone(), d["pool"].clone(), d["device"].clone(), d["shareID"].clone())
                    };
                    let mut devices = claim["status"]["devices"].as_array().cloned().unwrap_or_default();
                    for entry in sent["status"]["devices"].as_array().into_iter().flatten() {
                        devices.retain(|d| id(d) != id(entry));
                        devices.push(entry.clone());
                    }
                    claim["status"]["devices"] = devices.into();
                    (200, claim.clone())
                }
            }
        }
        ("GET", ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => match st.slices.get(*name) {
            Some(s) => (200, s.clone()),
            None => status(404, "NotFound", &format!("resourceslices {name:?} not found")),
        },
        ("POST", ["apis", "resource.k8s.io", "v1", "resourceslices"]) => {
            let mut slice = sent.unwrap();
            let name = slice["metadata"]["name"].as_str().unwrap().to_string();
            if st.slices.contains_key(&name) {
                status(409, "AlreadyExists", &format!("resourceslices {name:?} already exists"))
            } else {
                st.version += 1;
                slice["metadata"]["resourceVersion"] = st.version.to_string().into();
                st.slice_writes += 1;
                st.slices.insert(name, slice.clone());
                (201, slice)
            }
        }
        ("PUT", ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let mut slice = sent.unwrap();
            let stored = st.slices.get(*name).map(|s| s["metadata"]["resourceVersion"].clone());
            match stored {
                None => status(404, "NotFound", &format!("resourceslices {name:?} not found")),
                Some(v) if v != slice["metadata"]["resourceVersion"] => status(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version",
                ),
                Some(_) => {
                    st.version += 1;
                    slice["metadata"]["resourceVersion"] = st.version.to_string().into();
                    st.slice_writes += 1;
                    st.slices.insert(name.to_string(), slice.clone());
                    (200, slice)
                }
            }
        }
        _ => status(404, "NotFound", &format!("{method} {path} is not served here")),
    };
    drop(st);
    let text = reply.to_string();
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        if code < 300 { "OK" } else { "Error" },
        text.len()
    );
}

/// A ResourceClaim allocated on this node by npud's driver: `streams` consumed on each
/// device named (None: the device whole), reserved for pod `pod_uid`.
pub fn claim(ns: &str, name: &str, uid: &str, pod_uid: &str, devices: &[(&str, Option<u32>)]) -> serde_json::Value {
    let results: Vec<serde_json::Value> = devices
        .iter()
        .map(|(device, streams)| {
            let mut r = serde_json::json!({"request": "streams", "driver": DRIVER, "pool": NODE, "device": device});
            if let Some(n) = streams {
                r["consumedCapacity"] = serde_json::json!({"streams": n.to_string()});
                r["shareID"] = serde_json::json!(format!("{uid}-{device}"));
            }
            r
        })
        .collect();
    serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"namespace": ns, "name": name, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "streams", "exactly": {"deviceClassName": "streams.npud.io"}}]}},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": format!("pod-of-{name}"), "uid": pod_uid}]
        }
    })
}

/// The kubelet's plugin watcher: asks the registration socket `GetInfo` and tells it the
/// plugin is registered.
pub async fn register(socket: &Path) -> reg::PluginInfo {
    let mut client = reg::registration_client::RegistrationClient::new(served(socket).await);
    let info = client.get_info(reg::InfoRequest {}).await.unwrap().into_inner();
    client
        .notify_registration_status(reg::RegistrationStatus { plugin_registered: true, error: String::new() })
        .await
        .unwrap();
    info
}

/// The kubelet's client of the DRA plugin at `endpoint`, once npud serves it there (a
/// socket left by an npud that was killed refuses connections until its successor binds
/// a new one), within 30 s.
pub async fn plugin(endpoint: &Path) -> DraPluginClient<tonic::transport::Channel> {
    DraPluginClient::new(served(endpoint).await)
}

/// A channel to one of npud's DRA sockets once it accepts connections, within 30 s.
pub async fn served(socket: &Path) -> tonic::transport::Channel {
    let target = npud_client::Target::Socket(socket.to_path_buf());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match npud_client::channel(&target).await {
            Ok(channel) => return channel,
            Err(e) if std::time::Instant::now() > deadline => panic!("{} is not served: {e}", socket.display()),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
}

/// (namespace, uid, name) as the kubelet names a claim.
pub fn named(ns: &str, uid: &str, name: &str) -> dra::Claim {
    dra::Claim { namespace: ns.into(), uid: uid.into(), name: name.into() }
}

/// NodePrepareResources for `claims`: each claim's answer by uid.
pub async fn prepare(
    client: &mut DraPluginClient<tonic::transport::Channel>,
    claims: Vec<dra::Claim>,
) -> HashMap<String, dra::NodePrepareResourceResponse> {
    client.node_prepare_resources(dra::NodePrepareResourcesRequest { claims }).await.unwrap().into_inner().claims
}

/// NodeUnprepareResources for `claims`: each claim's error (empty: done) by uid.
pub async fn unprepare(
    client: &mut DraPluginClient<tonic::transport::Channel>,
    claims: Vec<dra::Claim>,
) -> HashMap<String, String> {
    let answer = client.node_unprepare_resources(dra::NodeUnprepareResourcesRequest { claims }).await.unwrap();
    answer.into_inner().claims.into_iter().map(|(k, v)| (k, v.error)).collect()
}

/// A scheduler's side of consumable capacity, small: it allocates claims for `streams`
/// against the devices of a published ResourceSlice by KEP-5075's rules, as the
/// `resource.k8s.io/v1` API documents them (`CapacityRequirements`,
/// `CapacityRequestPolicyRange`):
/// - an amount not asked for is the policy's `default` (with no policy, the whole device);
/// - an amount under `min` is rounded up to it, and one off the step up to `min + n·step`;
/// - an amount over `max` after rounding makes the device ineligible;
/// - on a device with `allowMultipleAllocations`, the consumed amounts of every claim
///   together stay within its capacity; on any other, one claim takes it whole.
pub struct Allocator {
    devices: Vec<Offered>,
    consumed: HashMap<String, u64>,
}

struct Offered {
    name: String,
    capacity: u64,
    multiple: bool,
    /// (default, min, max, step)
    policy: Option<(u64, u64, u64, u64)>,
}

impl Allocator {
    /// The devices `slice` offers, none allocated yet.
    pub fn new(slice: &serde_json::Value) -> Allocator {
        let n = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
        let devices = slice["spec"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let streams = &d["capacity"]["streams"];
                let policy = &streams["requestPolicy"];
                let range = &policy["validRange"];
                Offered {
                    name: d["name"].as_str().unwrap().to_string(),
                    capacity: n(&streams["value"]).unwrap(),
                    multiple: d["allowMultipleAllocations"].as_bool() == Some(true),
                    policy: n(&policy["default"]).map(|default| {
                        (
                            default,
                            n(&range["min"]).unwrap_or(0),
                            n(&range["max"]).unwrap_or(u64::MAX),
                            n(&range["step"]).unwrap_or(1),
                        )
                    }),
                }
            })
            .collect();
        Allocator { devices, consumed: HashMap::new() }
    }

    /// What asking `asked` streams (None: nothing named) consumes of `device`, or None
    /// where its policy refuses it.
    fn consumes(device: &Offered, asked: Option<u64>) -> Option<u64> {
        let Some((default, min, max, step)) = device.policy else { return Some(asked.unwrap_or(device.capacity)) };
        let mut amount = asked.unwrap_or(default).max(min);
        if step > 1 && (amount - min) % step != 0 {
            amount = min + (amount - min).div_ceil(step) * step;
        }
        (amount <= max).then_some(amount)
    }

    /// Allocates one claim asking `asked` streams on the first device (in the slice's
    /// order) that passes `select` and has room: (device, consumed), or None.
    pub fn allocate(&mut self, asked: Option<u64>, select: impl Fn(&str) -> bool) -> Option<(String, u64)> {
        for d in self.devices.iter().filter(|d| select(&d.name)) {
            let Some(amount) = Self::consumes(d, asked) else { continue };
            let used = self.consumed.get(&d.name).copied();
            let fits = match (d.multiple, used) {
                (false, Some(_)) => false,
                (_, used) => used.unwrap_or(0) + amount <= d.capacity,
            };
            if fits {
                *self.consumed.entry(d.name.clone()).or_insert(0) += amount;
                return Some((d.name.clone(), amount));
            }
        }
        None
    }
}

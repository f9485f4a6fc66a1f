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

/// An API server on loopback holding ResourceClaims by namespace and name; every GET is
/// counted. HTTP/1.1, one request per connection.
pub struct ApiServer {
    pub url: String,
    claims: Arc<Mutex<HashMap<(String, String), serde_json::Value>>>,
    gets: Arc<Mutex<u64>>,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let claims: Arc<Mutex<HashMap<(String, String), serde_json::Value>>> = Arc::default();
        let gets: Arc<Mutex<u64>> = Arc::default();
        let (c, g) = (Arc::clone(&claims), Arc::clone(&gets));
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (c, g) = (Arc::clone(&c), Arc::clone(&g));
                std::thread::spawn(move || answer(conn, &c, &g));
            }
        });
        ApiServer { url, claims, gets }
    }

    /// Serves `claim` (a ResourceClaim object) from now on, replacing one of its name.
    pub fn put_claim(&self, claim: serde_json::Value) {
        let key = (
            claim["metadata"]["namespace"].as_str().unwrap().to_string(),
            claim["metadata"]["name"].as_str().unwrap().to_string(),
        );
        self.claims.lock().unwrap().insert(key, claim);
    }

    pub fn gets(&self) -> u64 {
        *self.gets.lock().unwrap()
    }
}

fn answer(conn: std::net::TcpStream, claims: &Mutex<HashMap<(String, String), serde_json::Value>>, gets: &Mutex<u64>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let found = match (method, segments.as_slice()) {
        ("GET", ["apis", "resource.k8s.io", "v1", "namespaces", ns, "resourceclaims", name]) => {
            *gets.lock().unwrap() += 1;
            claims.lock().unwrap().get(&(ns.to_string(), name.to_string())).cloned()
        }
        _ => None,
    };
    let (status, body) = match found {
        Some(claim) => ("200 OK", claim.to_string()),
        None => (
            "404 Not Found",
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("{path} not found"), "reason": "NotFound", "code": 404})
            .to_string(),
        ),
    };
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
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
    let mut client = reg::registration_client::RegistrationClient::new(crate::npud_channel(socket).await);
    let info = client.get_info(reg::InfoRequest {}).await.unwrap().into_inner();
    client
        .notify_registration_status(reg::RegistrationStatus { plugin_registered: true, error: String::new() })
        .await
        .unwrap();
    info
}

/// The kubelet's client of the DRA plugin at `endpoint`.
pub async fn plugin(endpoint: &Path) -> DraPluginClient<tonic::transport::Channel> {
    DraPluginClient::new(crate::npud_channel(endpoint).await)
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

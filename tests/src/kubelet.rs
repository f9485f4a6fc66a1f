//! A fake kubelet written from the published APIs (shared/reference/kubelet.md): its
//! Registration service on a temporary `kubelet.sock`, its pod-resources `List` on a
//! socket of its own listing whatever the test says runs (npud's units and a vendor's
//! devices per container), and the device plugin client the kubelet uses to call npud.
//! Plus [`plant`], a process's cgroup in the host double (`crate::host`).
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_proto::deviceplugin as dp;
use npud_proto::podresources as pr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The kubelet's Registration service: records what registers.
pub struct Kubelet {
    pub registered: tokio::sync::mpsc::UnboundedReceiver<dp::RegisterRequest>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    socket: PathBuf,
    /// What the kubelet's own ListAndWatch of each registered plugin saw (`start_watching`).
    pub watch: Arc<Mutex<PluginWatch>>,
}

/// The kubelet's view of a plugin's units, as its device manager keeps it: on Register it
/// dials the plugin and holds a ListAndWatch stream; when that stream ends it marks every
/// unit of the resource unhealthy at once (`ManagerImpl.PluginDisconnected`, kubernetes
/// pkg/kubelet/cm/devicemanager/manager.go, kubernetes#121994), until a plugin's
/// ListAndWatch sends the units again.
#[derive(Debug, Default)]
pub struct PluginWatch {
    /// Units the kubelet counts as healthy now.
    pub healthy: usize,
    /// Each time every unit was unhealthy because the plugin's stream ended: how long,
    /// from the stream's end to the next plugin's first list.
    pub windows: Vec<Duration>,
    /// Since when the units are unhealthy, while they are.
    down_since: Option<std::time::Instant>,
}

impl PluginWatch {
    fn listed(&mut self, units: &[dp::Device]) {
        if let Some(since) = self.down_since.take() {
            self.windows.push(since.elapsed());
        }
        self.healthy = units.iter().filter(|u| u.health == "Healthy").count();
    }

    fn disconnected(&mut self) {
        self.healthy = 0;
        self.down_since.get_or_insert_with(std::time::Instant::now);
    }
}

/// Records registrations; refuses the first `refuse` of them (a kubelet not ready yet);
/// where it watches (the directory set), lists the plugin's units as the kubelet does.
#[derive(Clone)]
struct Registration(
    tokio::sync::mpsc::UnboundedSender<dp::RegisterRequest>,
    Arc<std::sync::atomic::AtomicU32>,
    Option<(PathBuf, Arc<Mutex<PluginWatch>>)>,
);

/// The kubelet's ListAndWatch of the plugin at `socket`, for as long as its stream lasts.
async fn watch_plugin(socket: PathBuf, watch: Arc<Mutex<PluginWatch>>) {
    let channel = crate::npud_channel(&socket).await;
    let mut client = dp::device_plugin_client::DevicePluginClient::new(channel);
    if let Ok(stream) = client.list_and_watch(dp::Empty {}).await {
        let mut stream = stream.into_inner();
        while let Ok(Some(list)) = stream.message().await {
            watch.lock().unwrap().listed(&list.devices);
        }
    }
    watch.lock().unwrap().disconnected();
}

#[tonic::async_trait]
impl dp::registration_server::Registration for Registration {
    async fn register(
        &self,
        r: tonic::Request<dp::RegisterRequest>,
    ) -> Result<tonic::Response<dp::Empty>, tonic::Status> {
        let refusals_left =
            self.1.fetch_update(std::sync::atomic::Ordering::AcqRel, std::sync::atomic::Ordering::Acquire, |n| {
                n.checked_sub(1)
            });
        if refusals_left.is_ok() {
            return Err(tonic::Status::unavailable("the kubelet is not ready"));
        }
        let r = r.into_inner();
        if let Some((dir, watch)) = &self.2 {
            tokio::spawn(watch_plugin(dir.join(&r.endpoint), Arc::clone(watch)));
        }
        let _ = self.0.send(r);
        Ok(tonic::Response::new(dp::Empty {}))
    }
}

impl Kubelet {
    /// Listens on `dir/kubelet.sock`, as a (re)starting kubelet does.
    pub fn start(dir: &Path) -> Kubelet {
        Kubelet::start_refusing(dir, 0)
    }

    /// The same, refusing the first `refuse` registrations.
    pub fn start_refusing(dir: &Path, refuse: u32) -> Kubelet {
        Kubelet::serve(dir, refuse, None)
    }

    /// A kubelet that lists each registered plugin's units (see [`PluginWatch`]).
    pub fn start_watching(dir: &Path) -> Kubelet {
        Kubelet::serve(dir, 0, Some(Arc::default()))
    }

    fn serve(dir: &Path, refuse: u32, watch: Option<Arc<Mutex<PluginWatch>>>) -> Kubelet {
        let socket = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (tx, registered) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(dp::registration_server::RegistrationServer::new(Registration(
                    tx,
                    Arc::new(std::sync::atomic::AtomicU32::new(refuse)),
                    watch.clone().map(|w| (dir.to_path_buf(), w)),
                )))
                .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                }),
        );
        Kubelet { registered, stop: Some(stop), socket, watch: watch.unwrap_or_default() }
    }

    /// Waits (10 s at most) for npud to register.
    pub async fn registration(&mut self) -> Option<dp::RegisterRequest> {
        tokio::time::timeout(Duration::from_secs(10), self.registered.recv()).await.ok().flatten()
    }

    /// Goes down and comes up again on the same directory: a new `kubelet.sock`, which
    /// npud must register with again.
    pub fn restart(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let dir = self.socket.parent().unwrap().to_path_buf();
        *self = Kubelet::start(&dir);
    }

    /// Stops listening and removes the socket (a kubelet going down).
    pub fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// One container as `List` shows it: its name and, per resource, its device ids.
#[derive(Clone, Debug, Default)]
pub struct Container {
    pub name: String,
    pub devices: Vec<(String, Vec<String>)>,
}

impl Container {
    /// A container holding `ids` of npud.io/streams and, when given, `vendor` ids of the
    /// vendor's `resource`.
    pub fn new(name: &str, ids: &[String], vendor: Option<(&str, Vec<String>)>) -> Container {
        let mut devices = vec![("npud.io/streams".to_string(), ids.to_vec())];
        devices.extend(vendor.map(|(r, v)| (r.to_string(), v)));
        Container { name: name.into(), devices }
    }
}

/// The kubelet's pod-resources service: lists whatever the test says is running, except
/// while it restarts (`restart`): a restarted kubelet answers `List` before its pod
/// manager has caught up from the API server, empty at first, then partial.
#[derive(Clone, Default)]
pub struct Pods {
    running: Arc<Mutex<Vec<pr::PodResources>>>,
    /// `List` answers still to give empty, then with every other pod.
    empty: Arc<std::sync::atomic::AtomicU32>,
    partial: Arc<std::sync::atomic::AtomicU32>,
    /// `List` calls answered.
    served: Arc<std::sync::atomic::AtomicU64>,
}

#[tonic::async_trait]
impl pr::pod_resources_lister_server::PodResourcesLister for Pods {
    async fn list(
        &self,
        _: tonic::Request<pr::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<pr::ListPodResourcesResponse>, tonic::Status> {
        use std::sync::atomic::Ordering::AcqRel;
        let take = |n: &std::sync::atomic::AtomicU32| {
            n.fetch_update(AcqRel, std::sync::atomic::Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
        };
        let mut pod_resources = self.running.lock().unwrap().clone();
        if take(&self.empty) {
            pod_resources.clear();
        } else if take(&self.partial) {
            pod_resources = pod_resources.into_iter().step_by(2).collect();
        }
        self.served.fetch_add(1, AcqRel);
        Ok(tonic::Response::new(pr::ListPodResourcesResponse { pod_resources }))
    }
}

impl Pods {
    pub fn serve(socket: &Path) -> Pods {
        let pods = Pods::default();
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pr::pod_resources_lister_server::PodResourcesListerServer::new(pods.clone()))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        pods
    }

    /// One pod with one container holding `ids` of npud.io/streams (or none).
    pub fn set(&self, ids: Option<&[String]>) {
        let list = ids.map(|ids| vec![("default", "server", vec![Container::new("main", ids, None)])]);
        self.set_pods(&list.unwrap_or_default());
    }

    /// The pods now running: (namespace, name, containers).
    pub fn set_pods(&self, pods: &[(&str, &str, Vec<Container>)]) {
        *self.running.lock().unwrap() = pods.iter().map(|(ns, name, containers)| pod(ns, name, containers)).collect();
    }

    /// Adds a pod to those running.
    pub fn add_pod(&self, namespace: &str, name: &str, containers: Vec<Container>) {
        self.running.lock().unwrap().push(pod(namespace, name, &containers));
    }

    /// The kubelet restarts: its next `empty` answers list nothing, the `partial` after
    /// them every other pod, then all again.
    pub fn restart(&self, empty: u32, partial: u32) {
        use std::sync::atomic::Ordering::Release;
        self.partial.store(partial, Release);
        self.empty.store(empty, Release);
    }

    /// Whether the restart's empty and partial answers have all been given.
    pub fn caught_up(&self) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        self.empty.load(Acquire) == 0 && self.partial.load(Acquire) == 0
    }

    /// `List` calls answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Acquire)
    }
}

fn pod(namespace: &str, name: &str, containers: &[Container]) -> pr::PodResources {
    pr::PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: containers
            .iter()
            .map(|c| pr::ContainerResources {
                name: c.name.clone(),
                devices: c
                    .devices
                    .iter()
                    .map(|(r, ids)| pr::ContainerDevices {
                        resource_name: r.clone(),
                        device_ids: ids.clone(),
                        topology: None,
                    })
                    .collect(),
                cpu_ids: vec![],
            })
            .collect(),
    }
}

/// What npud reads (through the host double) as process `pid`'s cgroup, its directories
/// made by root as the runtime and the kubelet make them.
pub fn plant(host: &crate::host::FakeHost, pid: u32, cgroup: &str) {
    host.plant(pid, cgroup);
}

/// A host session's cgroup.
pub const HOST_CGROUP: &str = "0::/user.slice/user-0.slice/session-1.scope\n";

/// The cgroup of container `container` (a hex digit, repeated) of pod `pod` (the uid with
/// `_` for `-`, as the systemd driver writes it), under containerd.
pub fn pod_cgroup(pod: &str, container: char) -> String {
    format!("0::/kubepods.slice/kubepods-pod{pod}.slice/cri-containerd-{}.scope\n", container.to_string().repeat(64))
}

/// The tenant npud names pod `pod` (as [`pod_cgroup`] takes it).
pub fn pod_tenant(pod: &str) -> String {
    format!("pod-{}", pod.replace('_', "-"))
}

/// The kubelet's client of npud's device plugin socket in `dir`.
pub async fn plugin(dir: &Path) -> dp::device_plugin_client::DevicePluginClient<tonic::transport::Channel> {
    dp::device_plugin_client::DevicePluginClient::new(crate::npud_channel(&dir.join("npud.sock")).await)
}

/// What Allocate gave one container: its variables and the token file on the host.
#[derive(Clone)]
pub struct Allocated {
    pub envs: std::collections::HashMap<String, String>,
    pub token: PathBuf,
}

/// Allocate for one container with unit ids `ids`.
pub async fn allocate(
    plugin: &mut dp::device_plugin_client::DevicePluginClient<tonic::transport::Channel>,
    ids: &[String],
) -> Allocated {
    let request =
        dp::AllocateRequest { container_requests: vec![dp::ContainerAllocateRequest { devices_ids: ids.to_vec() }] };
    let answer = plugin.allocate(request).await.unwrap().into_inner();
    let c = answer.container_responses.into_iter().next().unwrap();
    let token = c.mounts.iter().find(|m| m.container_path == c.envs["NPUD_ALLOCATION"]).unwrap().host_path.clone();
    Allocated { envs: c.envs, token: token.into() }
}

/// `n` unit ids taken from npud's devices round-robin, as a kubelet picking from any device
/// might: `npud-<d>-<i>` for `d` in `0..devices`, numbered from `first`.
pub fn spread_ids(n: u32, devices: u32, first: u32) -> Vec<String> {
    (0..n).map(|i| format!("npud-{}-{}", i % devices, first + i / devices)).collect()
}

/// The container runtime's CRI `RuntimeService.ContainerStatus` (containerd's and CRI-O's
/// answers): each container it runs with the kubelet's pod-uid label, NotFound for the
/// rest. What the test says the runtime runs.
#[derive(Clone, Default)]
pub struct Runtime(Arc<Mutex<std::collections::HashMap<String, String>>>);

#[tonic::async_trait]
impl npud_proto::cri::runtime_service_server::RuntimeService for Runtime {
    async fn container_status(
        &self,
        r: tonic::Request<npud_proto::cri::ContainerStatusRequest>,
    ) -> Result<tonic::Response<npud_proto::cri::ContainerStatusResponse>, tonic::Status> {
        let id = r.into_inner().container_id;
        let Some(pod) = self.0.lock().unwrap().get(&id).cloned() else {
            // containerd's words for a container it does not have.
            return Err(tonic::Status::not_found(format!(
                "an error occurred when try to find container {id:?}: not found"
            )));
        };
        let labels =
            [("io.kubernetes.pod.uid".to_string(), pod), ("io.kubernetes.container.name".into(), "main".into())];
        Ok(tonic::Response::new(npud_proto::cri::ContainerStatusResponse {
            status: Some(npud_proto::cri::ContainerStatus {
                id,
                state: npud_proto::cri::ContainerState::ContainerRunning as i32,
                labels: labels.into_iter().collect(),
                ..Default::default()
            }),
            info: Default::default(),
        }))
    }
}

impl Runtime {
    pub fn serve(socket: &Path) -> Runtime {
        let runtime = Runtime::default();
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(npud_proto::cri::runtime_service_server::RuntimeServiceServer::new(runtime.clone()))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        runtime
    }

    /// The runtime runs container `id` for pod `pod_uid`.
    pub fn run(&self, id: &str, pod_uid: &str) {
        self.0.lock().unwrap().insert(id.to_string(), pod_uid.to_string());
    }
}

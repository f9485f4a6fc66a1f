//! An 8-NPU node for the Kubernetes suites: npud as its device plugin, on the fake AscendCL
//! driver (or the embedded simulator), a fake kubelet serving Registration and
//! pod-resources, and the host npud reads its pods' processes from: a tree built as root
//! (`FakeHost`: cgroups made as the kubelet makes them) or the machine's own cgroups
//! (`RealHost`), with the kubelet's layout of either cgroup driver.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::host::{FakeHost, Host, RealHost};
use crate::kubelet::{Allocated, HOST_CGROUP, Kubelet, Pods, allocate, plugin, spread_ids};
use crate::native::{App, Shared, acl_apps, acl_builder, acl_command, acl_steps_app};
use crate::{Client, Daemon, eventually_async};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The node's NPUs.
pub const DEVICES: u32 = 8;

/// Where npud reads its pods' processes and cgroups from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cgroups {
    /// A tree built as root in a temporary directory.
    Fake,
    /// The machine's cgroup v2 (or the hybrid layout's `unified`).
    RealV2,
    /// The machine's v1 `name=systemd` hierarchy.
    RealV1,
}

/// Which driver npud runs on.
#[derive(Clone)]
enum Drivers {
    Sim,
    Acl,
    /// The fake CUDA driver and NVML (their files in the directory), with these GPUs in
    /// MIG mode.
    Cuda(String, PathBuf),
}

/// How a node is started.
#[derive(Clone, Copy)]
pub struct NodeOptions<'a> {
    /// On the fake AscendCL driver, else on the embedded simulator.
    pub acl: bool,
    /// How often npud reads pod-resources and looks at pods' cgroups.
    pub period: &'a str,
    /// `[kubernetes] allocation_grace`.
    pub grace: &'a str,
    pub cgroups: Cgroups,
    /// The kubelet's systemd cgroup driver (`kubepods.slice/…`), else cgroupfs.
    pub systemd_driver: bool,
    /// npud installs the interposer and Allocate mounts it (files a pod keeps).
    pub interposer: bool,
    /// Each NPU has a device node (a pty), named by the fake driver
    /// (`NPU_SIM_DEVICE_NODES`), which processes hold open while they use the runtime.
    pub device_nodes: bool,
    /// An 8-GPU node on the fake CUDA driver and NVML instead, these GPUs in MIG mode
    /// (`NPU_SIM_CUDA_MIG`: `GPU:INSTANCES,…`).
    pub cuda_mig: Option<&'a str>,
    /// The devices' faults can be injected: the fake DCMI's error codes and the fake NVML's
    /// XIDs come from files of the node's (`Node::fault`, `Node::xid`), and npud classes DCMI
    /// codes by a table of the device plugin's format holding RestartNPU code 8C03A000 and
    /// NotHandleFault code 80E21007 (both from mind-cluster's `build/faultCode.json`).
    pub faults: bool,
    /// The fake kubelet lists the plugin's units as the kubelet does and records how long
    /// they were unhealthy between plugins (`Kubelet::start_watching`).
    pub kubelet_watches: bool,
    /// npud is the node's DRA plugin too (`mode = "both"`), its claims read from a fake
    /// API server (`Node::api`), its sockets and CDI specs under the node's directory.
    pub dra: bool,
}

impl Default for NodeOptions<'_> {
    fn default() -> Self {
        NodeOptions {
            acl: true,
            period: "1s",
            grace: "2s",
            cgroups: Cgroups::Fake,
            systemd_driver: true,
            interposer: false,
            device_nodes: false,
            cuda_mig: None,
            faults: false,
            kubelet_watches: false,
            dra: false,
        }
    }
}

/// An 8-NPU node, npud its device plugin.
pub struct Node {
    pub dir: tempfile::TempDir,
    /// The host npud reads identities and pods' lives from.
    pub cgroups: Box<dyn Host + Send + Sync>,
    systemd_driver: bool,
    pub budget: PathBuf,
    pub pods: Pods,
    pub d: Daemon,
    /// npud's `/metrics` port.
    pub metrics: u16,
    pub plugin: npud_proto::deviceplugin::device_plugin_client::DevicePluginClient<tonic::transport::Channel>,
    pub host: Client,
    pub kubelet: Kubelet,
    pub dp_dir: PathBuf,
    /// How npud was started, to start it again on the same socket and state.
    started: (Drivers, String, Vec<String>),
    /// The NPUs' device nodes (`NodeOptions::device_nodes`): their paths, and the pty
    /// masters that keep them there.
    pub nodes: Option<(String, Vec<std::os::fd::OwnedFd>)>,
    /// The API server DRA claims are read from (`NodeOptions::dra`).
    pub api: Option<crate::dra::ApiServer>,
}

impl Node {
    /// On the fake AscendCL driver, pod-resources read every second, a pod's allocation
    /// ending 2 s after its cgroup.
    pub async fn start() -> Node {
        Node::with(NodeOptions::default()).await.unwrap()
    }

    /// On the fake AscendCL driver (`acl`), else on the embedded simulator.
    pub async fn start_on(acl: bool) -> Node {
        Node::with(NodeOptions { acl, ..Default::default() }).await.unwrap()
    }

    /// A node as `o` says; Err (why) where the machine's own cgroups were asked for and
    /// cannot be used here.
    pub async fn with(o: NodeOptions<'_>) -> Result<Node, String> {
        let cgroups: Box<dyn Host + Send + Sync> = match o.cgroups {
            Cgroups::Fake => Box::new(FakeHost::new()),
            Cgroups::RealV2 => Box::new(RealHost::v2()?),
            Cgroups::RealV1 => Box::new(RealHost::v1_systemd()?),
        };
        let dir = tempfile::tempdir().unwrap();
        let (dp_dir, budget) = (dir.path().join("dp"), dir.path().join("budget"));
        std::fs::create_dir_all(&dp_dir).unwrap();
        let mut kubelet = match o.kubelet_watches {
            true => Kubelet::start_watching(&dp_dir),
            false => Kubelet::start(&dp_dir),
        };
        let pods_socket = dir.path().join("pod-resources.sock");
        let pods = Pods::serve(&pods_socket);
        let mut faults = String::new();
        if o.faults {
            let table = dir.path().join("faultCode.json");
            std::fs::write(&table, r#"{"RestartNPUCodes":["8C03A000"],"NotHandleFaultCodes":["80E21007"]}"#).unwrap();
            std::fs::write(dir.path().join("dcmi-faults"), b"").unwrap();
            std::fs::write(dir.path().join("nvml-xids"), b"").unwrap();
            faults = format!("[faults]\ncodes = {:?}\n", table.to_str().unwrap());
        }
        let mut config = format!(
            "{}{faults}[kubernetes]\nenabled = true\npod_resources_socket = {:?}\npod_resources_period = {:?}\n\
             allocation_grace = {:?}\n",
            cgroups.config(),
            pods_socket.to_str().unwrap(),
            o.period,
            o.grace,
        );
        if o.interposer {
            let source = dir.path().join("libnpud_preload.so");
            std::fs::copy(crate::native::preload_library(), &source).unwrap();
            let lib = dir.path().join("lib");
            config += &format!(
                "preload_library = {:?}\npreload_dir = {:?}\ninterposer_glibc = \"99.0\"\n",
                source.to_str().unwrap(),
                lib.to_str().unwrap()
            );
        }
        let api = o.dra.then(crate::dra::ApiServer::start);
        if let Some(api) = &api {
            let at = |p: &str| dir.path().join(p).to_str().unwrap().to_string();
            config += &format!(
                "mode = \"both\"\n[kubernetes.dra]\nplugins_dir = {:?}\nregistry_dir = {:?}\ncdi_dir = {:?}\n\
                 node_name = {:?}\napi_server = {:?}\n",
                at("plugins"),
                at("plugins_registry"),
                at("cdi"),
                crate::dra::NODE,
                api.url
            );
        }
        let metrics = crate::free_port();
        let listen = format!("127.0.0.1:{metrics}");
        let args: Vec<String> =
            ["--device-plugin-dir", dp_dir.to_str().unwrap(), "--metrics", &listen].map(str::to_string).into();
        let nodes = o.device_nodes.then(device_nodes);
        let drivers = match (o.cuda_mig, o.acl) {
            (Some(mig), _) => Drivers::Cuda(mig.to_string(), dir.path().join("nvidia")),
            (None, true) => Drivers::Acl,
            (None, false) => Drivers::Sim,
        };
        let started = (drivers, config, args);
        let d = Node::npud(dir.path(), &budget, &started, nodes.as_ref().map(|n| n.0.as_str()));
        assert!(kubelet.registration().await.is_some(), "registered:\n{}", d.log());
        // This test process is on the host: it reads npud's books. (On the machine's own
        // cgroups it already is.)
        if !cgroups.is_real() {
            cgroups.place(std::process::id(), HOST_CGROUP.trim().trim_start_matches("0::"), None);
        }
        let host = d.client().await;
        let plugin = plugin(&dp_dir).await;
        let systemd_driver = o.systemd_driver;
        Ok(Node {
            dir,
            cgroups,
            systemd_driver,
            budget,
            pods,
            d,
            metrics,
            plugin,
            host,
            kubelet,
            dp_dir,
            started,
            nodes,
            api,
        })
    }

    /// npud on the node's socket and state directory.
    fn npud(
        dir: &Path,
        budget: &Path,
        (drivers, config, args): &(Drivers, String, Vec<String>),
        nodes: Option<&str>,
    ) -> Daemon {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut builder = match drivers {
            Drivers::Acl => acl_builder(budget, &args).env("NPU_SIM_DEVICES", &DEVICES.to_string()),
            Drivers::Sim => Daemon::builder().args(&args).args(&["--sim-devices", &DEVICES.to_string()]),
            Drivers::Cuda(mig, libs) => {
                let cuda = crate::native::nvidia_libraries(libs);
                Daemon::builder()
                    .args(&args)
                    .args(&["--backend", "cuda", "--cuda-library", cuda.to_str().unwrap()])
                    .env("NPU_SIM_SHARED", budget.to_str().unwrap())
                    .env("NPU_SIM_DEVICES", &DEVICES.to_string())
                    .env("NPU_SIM_CUDA_MIG", mig)
            }
        };
        if let Some(nodes) = nodes {
            builder = builder.env("NPU_SIM_DEVICE_NODES", nodes);
        }
        builder
            .env("NPU_SIM_DCMI_FAULTS", dir.join("dcmi-faults").to_str().unwrap())
            .env("NPU_SIM_NVML_XIDS", dir.join("nvml-xids").to_str().unwrap())
            .socket(&dir.join("run").join("npud.sock"))
            .state_dir(&dir.join("state"))
            .config(config)
            .start()
    }

    /// A new npud started beside the node's, as a DaemonSet rolling with `maxSurge: 1`
    /// starts its new pod: on the same socket and state, standing by (ready) until the
    /// serving one hands over ([`Node::hand_over`]). `edit` makes its configuration from
    /// the node's (a new interposer, say).
    pub fn successor(&self, edit: impl FnOnce(&str) -> String) -> Daemon {
        let (drivers, config, args) = &self.started;
        let started = (drivers.clone(), edit(config), args.clone());
        let nodes = self.nodes.as_ref().map(|n| n.0.clone());
        let next = Node::npud(self.dir.path(), &self.budget, &started, nodes.as_deref());
        assert!(
            crate::eventually(Duration::from_secs(30), || next.log().contains("standing by for its handover")
                && self.d.log().contains("a successor npud is standing by")),
            "the successor stands by:\n{}\n{}",
            next.log(),
            self.d.log()
        );
        next
    }

    /// The node's npud told to stop (SIGTERM, as the DaemonSet deletes the old pod once the
    /// new one is ready); `next` takes the node over and serves it from then on.
    pub async fn hand_over(&mut self, next: Daemon) {
        self.d.signal("TERM");
        assert!(self.d.wait_exit(Duration::from_secs(60)).is_some(), "the old npud stops:\n{}", self.d.log());
        assert!(
            crate::eventually(Duration::from_secs(60), || next.log().contains("npud is serving")),
            "the successor serves:\n{}\n{}",
            self.d.log(),
            next.log()
        );
        self.d = next;
        assert!(self.kubelet.registration().await.is_some(), "registered again:\n{}", self.d.log());
        self.host = self.d.client().await;
        self.plugin = plugin(&self.dp_dir).await;
    }

    /// npud killed (SIGKILL) and started again on the same socket and state, as a
    /// crashed or upgraded DaemonSet pod is.
    pub async fn restart_npud(&mut self) {
        self.d.kill9();
        self.start_npud_again().await;
    }

    /// npud started again on the node's socket and state (after [`Daemon::kill9`]).
    pub async fn start_npud_again(&mut self) {
        let nodes = self.nodes.as_ref().map(|n| n.0.clone());
        self.d = Node::npud(self.dir.path(), &self.budget, &self.started, nodes.as_deref());
        assert!(self.kubelet.registration().await.is_some(), "registered again:\n{}", self.d.log());
        self.host = self.d.client().await;
        self.plugin = plugin(&self.dp_dir).await;
    }

    /// The cgroup the kubelet's driver gives container `container` (a hex digit, repeated)
    /// of pod `pod` (its uid, with `-` or `_`).
    pub fn pod_path(&self, pod: &str, container: char) -> String {
        let id = container.to_string().repeat(64);
        match self.systemd_driver {
            true => format!("/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{id}.scope", pod.replace('-', "_")),
            false => format!("/kubepods/besteffort/pod{}/{id}", pod.replace('_', "-")),
        }
    }

    /// Puts process `pid` in container `container` of pod `pod`.
    pub fn place(&self, pid: u32, pod: &str, container: char) {
        self.cgroups.place(pid, &self.pod_path(pod, container), None);
    }

    /// A client process of pod `pod` (container `container`) presenting `token`.
    pub fn peer(&self, token: &Path, pod: &str, container: char) -> crate::Peer {
        let wrapper = format!("NPUD_ALLOCATION={} \"$0\" \"$@\"", token.display());
        let p = crate::Peer::spawn_under(self.d.socket.to_str().unwrap(), None, &["sh", "-c", &wrapper]);
        self.place(p.pid, pod, container);
        p
    }

    /// (npud's in use, reserved) per device.
    pub async fn books(&self) -> Vec<(u32, u32)> {
        self.host.devices().await.unwrap().iter().map(|x| (x.in_use, x.reserved)).collect()
    }

    /// What the fake driver counts per physical device (npud's own streams aside).
    pub fn driver(&self) -> Vec<u32> {
        let shared = Shared::at(&self.budget);
        (0..DEVICES).map(|d| shared.held_on(d, self.d.pid())).collect()
    }

    /// Waits until npud's count equals the driver's on every device and is `expect`.
    pub async fn settles_at(&self, expect: &[u32]) {
        let ok = eventually_async(Duration::from_secs(30), || async {
            let books: Vec<u32> = self.books().await.iter().map(|b| b.0).collect();
            books == expect && self.driver() == expect
        })
        .await;
        assert!(ok, "npud {:?}, driver {:?}, expected {expect:?}\n{}", self.books().await, self.driver(), self.d.log());
    }

    /// `units` units of npud.io/streams for one container, their ids taken across every
    /// device from `first` on (as a kubelet picking from any device might).
    pub async fn allocate(&mut self, units: u32, first: u32) -> (Vec<String>, Allocated) {
        let ids = spread_ids(units, DEVICES, first);
        let a = allocate(&mut self.plugin, &ids).await;
        (ids, a)
    }

    /// `program` with `args`, interposed, as a process of the container `a` was given,
    /// seeing `view` (physical ids) as its devices; it starts once `go` exists, after its
    /// cgroup is made.
    fn in_pod(&self, program: &Path, args: &[String], a: &Allocated, who: (&str, char), view: &str, go: &Path) -> App {
        let inner = acl_command(program, &self.budget, Some((&self.d, 0)));
        let mut cmd = std::process::Command::new("sh");
        let script = format!("while [ ! -e {} ]; do sleep 0.01; done; exec \"$0\" \"$@\"", go.display());
        cmd.arg("-c").arg(script).arg(inner.get_program()).args(args);
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        // What Allocate set, the token as the host sees the mounted file.
        for (k, v) in &a.envs {
            cmd.env(k, v);
        }
        if let Some((nodes, _)) = &self.nodes {
            cmd.env("NPU_SIM_DEVICE_NODES", nodes);
        }
        cmd.env("NPUD_ALLOCATION", &a.token)
            .env("NPU_SIM_DEVICES", DEVICES.to_string())
            .env("NPU_SIM_CONTAINER_DEVICES", view)
            .env("NPUD_WAIT", "120s");
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let app = App::spawn(cmd);
        self.place(app.child.id(), who.0, who.1);
        app
    }

    /// A process of pod `who.0` (container `who.1`), the AscendCL program making
    /// `streams` streams on its device `at.1`, seeing `at.0` (physical ids) as its
    /// devices; it starts once `go` exists.
    pub fn program(&self, a: &Allocated, who: (&str, char), at: (&str, u32), streams: u32, go: &Path) -> App {
        let (program, _) = acl_apps();
        let args = [streams.to_string(), "-1".into(), at.1.to_string()];
        self.in_pod(program, &args, a, who, at.0, go)
    }

    /// A process of pod `who.0` (container `who.1`) seeing NPU `npu` as its device 0, the
    /// AscendCL program that makes and destroys streams as told (`+N`, `-N`: `held K`),
    /// started at once, asking at start-up for `startup` streams (`NPUD_STREAMS`, the
    /// default stream included) rather than the allocation Allocate set.
    pub fn steps(&self, a: &Allocated, who: (&str, char), npu: u32, startup: u32) -> App {
        let go = self.go(&format!("steps-{}", crate::free_port()));
        let mut a = a.clone();
        a.envs.insert("NPUD_STREAMS".into(), startup.to_string());
        let app = self.in_pod(acl_steps_app(), &[], &a, who, &npu.to_string(), &go);
        std::fs::write(&go, b"").unwrap();
        app
    }

    /// The DRA plugin's endpoint and registration socket, and the CDI directory.
    pub fn dra_paths(&self) -> (PathBuf, PathBuf, PathBuf) {
        let d = self.dir.path();
        (
            d.join("plugins").join(crate::dra::DRIVER).join("dra.sock"),
            d.join("plugins_registry").join(format!("{}-reg.sock", crate::dra::DRIVER)),
            d.join("cdi"),
        )
    }

    pub fn go(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// NPU `physical` holds DCMI error code `code` (hex), or (None) holds none any more.
    pub fn fault(&self, physical: u32, code: Option<&str>) {
        let path = self.dir.path().join("dcmi-faults");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines: Vec<String> =
            text.lines().filter(|l| !l.starts_with(&format!("{physical} "))).map(str::to_string).collect();
        if let Some(code) = code {
            lines.push(format!("{physical} {code}"));
        }
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }

    /// GPU `gpu` raises XID `xid` (NVML's critical error event).
    pub fn xid(&self, gpu: u32, xid: u32) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(self.dir.path().join("nvml-xids")).unwrap();
        writeln!(f, "{gpu} {xid}").unwrap();
    }

    /// Pod `pod` (its uid, with `-` or `_`) ends: the kubelet stops its containers and
    /// removes its cgroup (its processes gone first).
    pub fn end_pod(&self, pod: &str) {
        self.cgroups.remove_pod(&pod.replace('_', "-"));
    }
}

/// A pty per NPU: openable character devices with distinct device numbers, standing for
/// `/dev/davinci<N>`. Their paths (physical id order, comma-separated) and the masters
/// that keep them.
fn device_nodes() -> (String, Vec<std::os::fd::OwnedFd>) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let mut paths = Vec::new();
    let mut masters = Vec::new();
    for _ in 0..DEVICES {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pty");
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        paths.push(ptsname(&master, Vec::new()).unwrap().to_string_lossy().into_owned());
        masters.push(master);
    }
    (paths.join(","), masters)
}

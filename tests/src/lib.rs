//! Harness for end-to-end tests: starts the real `npud` binary on a temporary socket,
//! drives it with the real `npuctl` and `npud-client`, and stops it.
//!
//! The binaries come from the workspace's target directory; the test command builds them
//! first (`cargo build --workspace --bins`).

pub mod bench;
pub mod contention;
pub mod dra;
pub mod h2raw;
pub mod host;
pub mod inproc;
pub mod kubelet;
pub mod native;
pub mod node;
pub mod pki;
pub mod wire;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub use npud_client::{
    Client, Error, Event, EventOptions, SessionOptions, Stream, StreamOptions, Target, TlsOptions, proto,
};

/// Path of a workspace binary (`npud`, `npuctl`, or a helper of this crate).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Tests run from target/<profile>/deps/, helper binaries from target/<profile>/.
    let mut dir = exe.parent().expect("target directory");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("target directory");
    }
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run `cargo build --workspace` before the tests", path.display());
    refuse_stale(&path, name);
    path
}

/// Panics when `path` is older than a source it was compiled from. `cargo test -p
/// npud-tests` does not rebuild `npud` or `npuctl`, so without this check an edit to
/// server/src would be tested against the old daemon without a word. The sources are the
/// ones cargo itself recorded for the artefact (its `.d` dep-info file next to it), so a
/// file the artefact is not built from (a `#[cfg(test)]` module, another crate) never
/// makes it look stale. Looked up once per process.
fn refuse_stale(path: &Path, name: &str) {
    static VERDICTS: std::sync::Mutex<Vec<(String, Option<String>)>> = std::sync::Mutex::new(Vec::new());
    let mut verdicts = VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
    let stale = match verdicts.iter().find(|(n, _)| n == name) {
        Some((_, v)) => v.clone(),
        None => {
            let v = staleness(path, name);
            verdicts.push((name.to_string(), v.clone()));
            v
        }
    };
    drop(verdicts);
    if let Some(message) = stale {
        panic!("{message}");
    }
}

fn staleness(path: &Path, name: &str) -> Option<String> {
    let built = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    let stem = name.strip_suffix(".so").unwrap_or(name);
    let dep_info = std::fs::read_to_string(path.with_file_name(format!("{stem}.d"))).ok()?;
    let newest = dep_info_sources(&dep_info)
        .filter_map(|p| std::fs::metadata(&p).and_then(|m| m.modified()).ok().map(|t| (t, p)))
        .max_by_key(|(t, _)| *t);
    let (t, source) = newest?;
    (t > built).then(|| {
        format!(
            "{} is older than {}: run `cargo build --workspace` (./scripts/test.sh does) before the end-to-end tests",
            path.display(),
            source.display()
        )
    })
}

/// The prerequisites in a Makefile-style dep-info file (`target: a.rs b\\ c.rs`), with
/// escaped spaces put back.
fn dep_info_sources(text: &str) -> impl Iterator<Item = PathBuf> + '_ {
    text.lines().filter_map(|line| line.split_once(": ")).flat_map(|(_, deps)| {
        let mut paths = Vec::new();
        let mut current = String::new();
        let mut chars = deps.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => current.extend(chars.next()),
                ' ' => paths.extend((!current.is_empty()).then(|| PathBuf::from(std::mem::take(&mut current)))),
                c => current.push(c),
            }
        }
        paths.extend((!current.is_empty()).then(|| PathBuf::from(current)));
        paths
    })
}

/// A duration for the helper binaries' flags: `500ms`, `30s`, `10m` (humantime's forms),
/// or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, humantime::DurationError> {
    match s.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(s),
    }
}

/// Which backend the end-to-end suites drive: `NPUD_TEST_BACKEND=sim|acl|cuda`. The
/// vendor backends run over this workspace's fake libascendcl.so / libcuda.so.1, or on
/// `cuda` over the real driver named by `NPUD_TEST_CUDA_LIBRARY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sim,
    Acl,
    Cuda,
}

pub fn backend() -> Backend {
    match std::env::var("NPUD_TEST_BACKEND").as_deref() {
        Ok("acl") => Backend::Acl,
        Ok("cuda") => Backend::Cuda,
        _ => Backend::Sim,
    }
}

/// Whether the suites run on a real device (`NPUD_TEST_CUDA_LIBRARY`, scripts/gpu-check.sh).
/// What only a simulated device offers (injected faults, a chosen device count, too few
/// lanes) is not there: a test that needs it says so and returns.
pub fn skipped_on_real_hardware(needs: &str) -> bool {
    let real = backend() == Backend::Cuda && std::env::var_os("NPUD_TEST_CUDA_LIBRARY").is_some();
    if real {
        eprintln!("skipped on real hardware: needs {needs}");
    }
    real
}

/// How far a device-timed interval may stray from the length of the work in it: the
/// simulator's clock is exact, a GPU adds launch gaps of a few microseconds per task.
pub fn timing_tolerance_ms() -> f32 {
    if std::env::var_os("NPUD_TEST_CUDA_LIBRARY").is_some() { 1.0 } else { 0.05 }
}

/// The admin fault that stops `device` executing work (a hung device), or lets it resume.
pub fn stall(device: u32, stalled: bool) -> proto::InjectFaultRequest {
    use proto::inject_fault_request::Fault;
    proto::InjectFaultRequest { device, fault: Some(if stalled { Fault::Stall(true) } else { Fault::Resume(true) }) }
}

/// The next report of a report stream, within 10 s.
pub async fn next_report(reports: &mut tonic::Streaming<proto::Report>) -> proto::Report {
    use tokio_stream::StreamExt;
    tokio::time::timeout(Duration::from_secs(10), reports.next())
        .await
        .expect("a report within 10 s")
        .expect("the report stream is open")
        .expect("a report, not an error")
}

/// The fake vendor library built in this workspace (`libascendcl.so`, `libcuda.so`).
pub fn fake_library(file: &str) -> PathBuf {
    bin(file)
}

/// The vendor's native code for a situation, per backend under test (sim and AscendCL
/// share aclError codes).
pub fn native(acl: i64, cuda: i64) -> i64 {
    if backend() == Backend::Cuda { cuda } else { acl }
}

/// A free loopback port (bound and released; good enough for tests on one machine).
/// A loopback port nothing listens on now, never the same one twice in this process: the
/// kernel hands a just-closed ephemeral port out again, so two calls in a row (a daemon's
/// metrics port and its TCP port) could otherwise get the same one.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port");
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub struct DaemonBuilder {
    args: Vec<String>,
    config: String,
    tcp: bool,
    state_dir: Option<PathBuf>,
    env: Vec<(String, String)>,
    socket: Option<PathBuf>,
    in_process: bool,
    wrapper: Vec<String>,
}

/// Whether daemons started from now on log at npud's default level (info) instead of the
/// tests' debug level: npud-bench measures npud as it is deployed, and a debug line per
/// grant written to the log file is a cost no user pays.
static QUIET_DAEMONS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Daemons started after this call log at the default level (see `QUIET_DAEMONS`).
pub fn quiet_daemons() {
    QUIET_DAEMONS.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub struct Daemon {
    child: Option<Reaped>,
    /// Set when the daemon serves in this process (`DaemonBuilder::in_process`).
    served: Option<inproc::InProcess>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    /// `http://127.0.0.1:PORT` when started with TCP: callers there are another tenant
    /// (`tcp-anonymous`), which lets tests play two tenants without changing uid.
    pub endpoint: Option<String>,
    log: PathBuf,
}

impl Default for DaemonBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DaemonBuilder {
    pub fn new() -> Self {
        Self {
            args: Vec::new(),
            config: String::new(),
            tcp: false,
            state_dir: None,
            env: Vec::new(),
            socket: None,
            in_process: false,
            wrapper: Vec::new(),
        }
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Lines appended to the TOML config file.
    pub fn config(mut self, toml: &str) -> Self {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    /// Also listen on loopback TCP (plain), giving tests a second tenant.
    pub fn tcp(mut self) -> Self {
        self.tcp = true;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Serve on this socket instead of a fresh one (restart tests reuse a path).
    pub fn socket(mut self, path: &Path) -> Self {
        self.socket = Some(path.to_path_buf());
        self
    }

    pub fn state_dir(mut self, dir: &Path) -> Self {
        self.state_dir = Some(dir.to_path_buf());
        self
    }

    /// Runs the binary under `wrapper` (`setpriv --bounding-set=…`, say): its program
    /// and arguments, followed by npud's command line.
    pub fn wrapped(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|w| w.to_string()).collect();
        self
    }

    /// Serve in this test process (`npud::serve` on a thread of its own) rather than run
    /// the binary: for suites with no process boundary under test. Only on the simulator:
    /// the fake vendor libraries are configured through the environment, which one
    /// process shares, so other backends still run the binary.
    pub fn in_process(mut self) -> Self {
        self.in_process = true;
        self
    }

    fn start_in_process(self) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = self.socket.clone().unwrap_or_else(|| dir.path().join("npud.sock"));
        let config_path = dir.path().join("npud.toml");
        std::fs::write(&config_path, &self.config).expect("write config");
        let mut argv: Vec<String> = vec!["npud".into(), "--socket".into(), socket.display().to_string()];
        argv.extend(["--config".into(), config_path.display().to_string()]);
        argv.extend(self.args.iter().cloned());
        if let Some(state) = &self.state_dir {
            argv.extend(["--state-dir".into(), state.display().to_string()]);
        }
        let endpoint = self.tcp.then(|| {
            let port = free_port();
            argv.extend(["--listen".into(), format!("127.0.0.1:{port}"), "--insecure-tcp".into()]);
            format!("http://127.0.0.1:{port}")
        });
        let served = inproc::InProcess::start(argv);
        let log = dir.path().join("npud.log");
        let mut d = Daemon { child: None, served: Some(served), dir, socket, endpoint, log };
        d.wait_ready();
        d
    }

    pub fn start(self) -> Daemon {
        if self.in_process && backend() == Backend::Sim && self.env.is_empty() {
            return self.start_in_process();
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = self.socket.clone().unwrap_or_else(|| dir.path().join("npud.sock"));
        let config_path = dir.path().join("npud.toml");
        std::fs::write(&config_path, &self.config).expect("write config");
        let log = dir.path().join("npud.log");
        let mut cmd = Command::new(bin("npud"));
        cmd.arg("--socket").arg(&socket).arg("--config").arg(&config_path);
        if backend() == Backend::Sim {
            cmd.args(&self.args);
        }
        if let Some(state) = &self.state_dir {
            cmd.arg("--state-dir").arg(state);
        }
        let endpoint = self.tcp.then(|| {
            let port = free_port();
            cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--insecure-tcp"]);
            format!("http://127.0.0.1:{port}")
        });
        if backend() != Backend::Sim {
            // The fakes are configured by environment; npud's sim flags do not apply.
            let mut args = self.args.iter();
            let mut kept = Vec::new();
            while let Some(a) = args.next() {
                match a.as_str() {
                    "--sim-profile" => {
                        cmd.env("NPU_SIM_PROFILE", args.next().expect("profile"));
                    }
                    "--sim-devices" => {
                        cmd.env("NPU_SIM_DEVICES", args.next().expect("devices"));
                    }
                    _ => kept.push(a.clone()),
                }
            }
            if let Some(lanes) = self.config.lines().find_map(|l| l.trim().strip_prefix("lanes = ")) {
                cmd.env("NPU_SIM_LANES", lanes.trim());
            }
            cmd = rebuild(cmd, &kept);
            match backend() {
                Backend::Acl => {
                    cmd.args(["--backend", "acl", "--acl-library"]).arg(fake_library("libascendcl.so"));
                }
                Backend::Cuda => match std::env::var_os("NPUD_TEST_CUDA_LIBRARY") {
                    // A real driver (docs/hardware.md): the suites run against a GPU.
                    Some(real) => {
                        cmd.args(["--backend", "cuda", "--cuda-library"]).arg(real);
                    }
                    None => {
                        // The driver's file name: libcuda.so.1, next to the daemon's files.
                        let link = dir.path().join("libcuda.so.1");
                        std::os::unix::fs::symlink(fake_library("libcuda.so"), &link).expect("link libcuda.so.1");
                        cmd.args(["--backend", "cuda", "--cuda-library"]).arg(&link);
                    }
                },
                Backend::Sim => {}
            }
        }
        let log_file = std::fs::File::create(&log).expect("log file");
        cmd.env(
            "RUST_LOG",
            if QUIET_DAEMONS.load(std::sync::atomic::Ordering::Relaxed) { "info" } else { "npud=debug,info" },
        )
        .envs(self.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(log_file);
        // The daemon says READY=1 once every listener it was configured with is bound,
        // however it was configured; a test that watches NOTIFY_SOCKET itself keeps it.
        let notify = (!self.env.iter().any(|(k, _)| k == "NOTIFY_SOCKET")).then(|| {
            let path = dir.path().join("notify.sock");
            let sock = std::os::unix::net::UnixDatagram::bind(&path).expect("bind the readiness socket");
            sock.set_read_timeout(Some(Duration::from_millis(50))).expect("read timeout");
            cmd.env("NOTIFY_SOCKET", &path);
            sock
        });
        if let Some((program, args)) = self.wrapper.split_first() {
            let mut under = Command::new(program);
            under.args(args).arg(cmd.get_program()).args(cmd.get_args());
            for (k, v) in cmd.get_envs() {
                if let Some(v) = v {
                    under.env(k, v);
                }
            }
            under.stdout(Stdio::null()).stderr(std::fs::File::options().append(true).open(&log).expect("log file"));
            cmd = under;
        }
        let child = Reaped(cmd.spawn().expect("spawn npud"));
        let mut d = Daemon { child: Some(child), served: None, dir, socket, endpoint, log };
        match notify {
            Some(sock) => d.wait_notified(&sock),
            None => d.wait_ready(),
        }
        d
    }
}

impl Daemon {
    pub fn start() -> Daemon {
        DaemonBuilder::new().start()
    }

    pub fn builder() -> DaemonBuilder {
        DaemonBuilder::new()
    }

    /// How long a daemon may take to start on a loaded two-core machine.
    const START_TIMEOUT: Duration = Duration::from_secs(60);

    /// Waits for READY=1 on the harness's notify socket.
    fn wait_notified(&mut self, sock: &std::os::unix::net::UnixDatagram) {
        let deadline = Instant::now() + Self::START_TIMEOUT;
        let mut buf = [0u8; 512];
        loop {
            if let Ok(n) = sock.recv(&mut buf)
                && buf[..n].split(|b| *b == b'\n').any(|l| l == b"READY=1")
            {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("npud exited with {status} before serving:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "npud did not start within {:?}:\n{}", Self::START_TIMEOUT, self.log());
        }
    }

    /// Polls the listeners the harness knows of (for daemons whose NOTIFY_SOCKET a test owns).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Self::START_TIMEOUT;
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                let tcp_ready = self
                    .endpoint
                    .as_ref()
                    .is_none_or(|e| std::net::TcpStream::connect(e.trim_start_matches("http://")).is_ok());
                if tcp_ready {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("npud exited with {status} before serving:\n{}", self.log());
            }
            if self.served.as_ref().is_some_and(inproc::InProcess::finished) {
                panic!("npud stopped before serving:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "npud did not start within {:?}:\n{}", Self::START_TIMEOUT, self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The config file this daemon was started with (rewrite it, then SIGHUP).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("npud.toml")
    }

    /// The daemon's log (in process: why serving ended, if it did).
    pub fn log(&self) -> String {
        match &self.served {
            Some(served) => served.failure(),
            None => std::fs::read_to_string(&self.log).unwrap_or_default(),
        }
    }

    pub fn pid(&self) -> u32 {
        assert!(self.served.is_none(), "a daemon serving in this process has no pid of its own: start the binary");
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Runs `npuctl --socket <this daemon> ARGS`.
    pub fn npuctl(&self, args: &[&str]) -> Output {
        Command::new(bin("npuctl")).arg("--socket").arg(&self.socket).args(args).output().expect("run npuctl")
    }

    /// Runs npuctl with `-o json` and parses stdout; panics with stderr on failure.
    pub fn npuctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["-o", "json"];
        full.extend_from_slice(args);
        let out = self.npuctl(&full);
        assert!(out.status.success(), "npuctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("npuctl printed JSON")
    }

    /// A client on the Unix socket (tenant of this test process: uid 0 is `root`).
    pub async fn client(&self) -> Client {
        Client::connect(Target::Socket(self.socket.clone())).await.expect("connect")
    }

    /// A client on TCP: tenant `tcp-anonymous`, a different tenant from `client()`.
    pub async fn tcp_client(&self) -> Client {
        let endpoint = self.endpoint.clone().expect("daemon started with .tcp()");
        Client::connect(Target::Endpoint(endpoint)).await.expect("connect over tcp")
    }

    /// Device 0 figures as `npuctl device list -o json` prints them.
    pub fn device0(&self) -> serde_json::Value {
        self.npuctl_json(&["device", "list"])[0].clone()
    }

    pub fn in_use(&self) -> u64 {
        self.device0()["in_use"].as_u64().expect("in_use")
    }

    /// Sends a signal by name ("TERM", "INT", "KILL", "HUP") with kill(1).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill").args(["-s", sig, &self.pid().to_string()]).status().expect("run kill");
        assert!(status.success(), "kill -s {sig} {}", self.pid());
    }

    /// Waits for the daemon to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the daemon and keeps its directory (for restart tests).
    pub fn kill9(&mut self) {
        self.signal("KILL");
        self.wait_exit(Duration::from_secs(10)).expect("npud died");
    }
}

/// A child process that is killed and waited for when dropped, so a test that fails
/// half-way leaves no daemon or client running behind it.
pub struct Reaped(pub Child);

impl Reaped {
    pub fn spawn(command: &mut Command) -> Reaped {
        Reaped(command.spawn().unwrap_or_else(|e| panic!("spawn {command:?}: {e}")))
    }
}

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scripted client in its own process (`npud-peer`): one command per line, one JSON
/// answer per line. It connects on its first command.
pub struct Peer {
    /// Held, not read: the client process goes when the `Peer` does.
    _child: Reaped,
    stdin: std::process::ChildStdin,
    stdout: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    pub pid: u32,
}

impl Peer {
    pub fn spawn(target: &str, uid: Option<u32>) -> Peer {
        Self::spawn_under(target, uid, &[])
    }

    /// The peer run by `wrapper` (e.g. `unshare --pid --fork`, its own pid namespace).
    /// `pid` is then the peer's pid as npud, in the host's namespace, sees it, not the one
    /// it reports from inside.
    pub fn spawn_under(target: &str, uid: Option<u32>, wrapper: &[&str]) -> Peer {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin("npud-peer"));
                c
            }
            None => Command::new(bin("npud-peer")),
        };
        cmd.arg(target).stdin(Stdio::piped()).stdout(Stdio::piped());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = Reaped(cmd.spawn().expect("spawn npud-peer"));
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let hello: serde_json::Value =
            serde_json::from_str(&stdout.next().expect("hello").expect("line")).expect("json");
        let mut pid = hello["pid"].as_u64().expect("pid") as u32;
        if !wrapper.is_empty() {
            // A wrapper that execs the peer (no fork) leaves it the child itself.
            let execed =
                std::fs::read_to_string(format!("/proc/{}/comm", child.id())).is_ok_and(|c| c.trim() == "npud-peer");
            pid = match execed {
                true => child.id(),
                false => descendant_named(child.id(), "npud-peer").expect("the peer under its wrapper"),
            };
        }
        Peer { _child: child, stdin, stdout, pid }
    }

    pub fn ask(&mut self, command: &str) -> serde_json::Value {
        self.send(command);
        self.answer()
    }

    /// Sends a command without waiting for its answer (one that waits in npud's queue).
    pub fn send(&mut self, command: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{command}").expect("write command");
    }

    /// The answer to the command sent last.
    pub fn answer(&mut self) -> serde_json::Value {
        let line = self.stdout.next().expect("an answer").expect("line");
        serde_json::from_str(&line).expect("json answer")
    }
}

/// The pid (in this namespace) of the first process named `name` below `ancestor`.
fn descendant_named(ancestor: u32, name: &str) -> Option<u32> {
    let children = |pid: u32| -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let mut todo = vec![ancestor];
    while let Some(pid) = todo.pop() {
        for child in children(pid) {
            let comm = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            if comm.trim() == name {
                return Some(child);
            }
            todo.push(child);
        }
    }
    None
}

/// The metadata key that names a session.
pub const SESSION_KEY: &str = npud_proto::SESSION_METADATA_KEY;

/// A bare channel to the daemon's socket (no session, no headers), for hand-made requests.
pub async fn npud_channel(socket: &Path) -> tonic::transport::Channel {
    npud_client::channel(&Target::Socket(socket.to_path_buf())).await.expect("channel")
}

/// The whole HTTP/1.1 response to `GET path` on a loopback `port` (the metrics listener).
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics listener");
    write!(conn, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").expect("request");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("response");
    text
}

/// One sample in a metrics text, by its name and labels as printed.
pub fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name_and_labels).and_then(|rest| rest.trim().parse().ok()))
}

/// One sample of the daemon's `GET /metrics` on `port` (started with `--metrics`).
pub fn metric(port: u16, name_and_labels: &str) -> Option<f64> {
    sample(&http_get(port, "/metrics"), name_and_labels)
}

/// Polls `check` until it is true or `timeout` passes.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Async variant of [`eventually`].
pub async fn eventually_async<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The gRPC code and npud reason of a failed call.
pub fn failure<T: std::fmt::Debug>(r: Result<T, Error>) -> (tonic::Code, proto::ErrorReason, Error) {
    let e = r.expect_err("the call should have failed");
    (e.code().unwrap_or(tonic::Code::Unknown), e.reason().unwrap_or(proto::ErrorReason::Unspecified), e)
}

/// The same command with `args` appended (Command cannot remove arguments).
fn rebuild(cmd: Command, args: &[String]) -> Command {
    let mut fresh = Command::new(cmd.get_program());
    fresh.args(cmd.get_args()).args(args);
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            fresh.env(k, v);
        }
    }
    fresh
}

#[cfg(test)]
mod tests {
    use super::{dep_info_sources, parse_duration};
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn helper_flags_take_units_or_bare_seconds() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("12s").unwrap(), Duration::from_secs(12));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("7 fortnights later").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn dep_info_names_the_sources_with_their_spaces() {
        let text = "/t/npud: /w/server/src/main.rs /w/my\\ dir/a.rs\n/w/server/src/main.rs:\n";
        let sources: Vec<PathBuf> = dep_info_sources(text).collect();
        assert_eq!(sources, [PathBuf::from("/w/server/src/main.rs"), PathBuf::from("/w/my dir/a.rs")]);
    }
}

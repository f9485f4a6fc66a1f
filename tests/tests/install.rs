//! Issue 56: npud installed on a real node. The interposer is installed on the host under
//! its content hash and never rewritten while mapped, so a restart or an upgrade of npud
//! leaves running programs alone; Allocate injects it through /etc/ld.so.preload, so an
//! image's own LD_PRELOAD stays; an allocated process requires npud (it waits for it a
//! moment, then is refused, never unadmitted); and npud's start-up refusals say what to do.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::kubelet::{Container, HOST_CGROUP, Kubelet, Pods, allocate, plant, plugin, pod_cgroup};
use npud_tests::native::{self, App, Shared, acl_builder};
use npud_tests::{Daemon, bin, eventually};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Without `--acl-library`, npud looks for AscendCL where CANN installs it; when none
/// loads it exits naming every path it tried and why each failed.
#[test]
fn a_missing_vendor_library_is_refused_naming_every_path_tried() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("npud"))
        .args(["--backend", "acl", "--socket"])
        .arg(dir.path().join("npud.sock"))
        .env("ASCEND_HOME_PATH", "/nonexistent/cann")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for tried in [
        "/nonexistent/cann/lib64/libascendcl.so:",
        "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so:",
        "/usr/local/Ascend/nnrt/latest/lib64/libascendcl.so:",
        "  libascendcl.so:",
    ] {
        assert!(err.contains(tried), "{tried} in:\n{err}");
    }
    assert!(!dir.path().join("npud.sock").exists(), "nothing was bound");
}

/// A node running npud as its device plugin, on the fake AscendCL driver, with the
/// interposer at `source` to install.
struct Node {
    dir: tempfile::TempDir,
    source: PathBuf,
    config: String,
    state: PathBuf,
    budget: PathBuf,
    fake: npud_tests::host::FakeHost,
    pods: Pods,
    kubelet: Kubelet,
}

impl Node {
    async fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("libnpud_preload.so");
        std::fs::copy(native::preload_library(), &source).unwrap();
        let dp = dir.path().join("dp");
        let fake = npud_tests::host::FakeHost::new();
        std::fs::create_dir_all(&dp).unwrap();
        let kubelet = Kubelet::start(&dp);
        let pods = Pods::serve(&dir.path().join("pods.sock"));
        let config = format!(
            "{}[kubernetes]\nenabled = true\ndevice_plugin_dir = {:?}\n\
             pod_resources_socket = {:?}\npod_resources_period = \"1s\"\nallocation_grace = \"2s\"\n\
             preload_library = {:?}\npreload_dir = {:?}\ninterposer_glibc = \"99.0\"\n",
            npud_tests::host::Host::config(&fake),
            dp.to_str().unwrap(),
            dir.path().join("pods.sock").to_str().unwrap(),
            source.to_str().unwrap(),
            dir.path().join("lib").to_str().unwrap(),
        );
        let (state, budget) = (dir.path().join("state"), dir.path().join("budget"));
        Node { dir, source, config, state, budget, fake, pods, kubelet }
    }

    /// npud, once it has registered with the kubelet.
    async fn start(&mut self, socket: &Path) -> Daemon {
        let d = acl_builder(&self.budget, &[]).socket(socket).state_dir(&self.state).config(&self.config).start();
        assert!(self.kubelet.registration().await.is_some(), "registered:\n{}", d.log());
        d
    }

    /// The installed libraries' file names, sorted.
    fn installed(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join("lib"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("libnpud_preload-"))
            .collect();
        names.sort();
        names
    }
}

/// The interposer is installed under its content hash and mounted from there, with the
/// ld.so.preload file naming it and NPUD_REQUIRED set. A process that mapped it keeps
/// running, and keeps being admitted, across an npud restart and an upgrade to a changed
/// library: the upgrade installs a second file beside the first, which stays, unchanged,
/// until the last allocation that mounted it is gone; a pod allocated after the upgrade
/// gets the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_and_upgrades_never_touch_a_mapped_interposer() {
    let mut node = Node::new().await;
    let socket = node.dir.path().join("run").join("npud.sock");
    let mut d = node.start(&socket).await;
    let dp = node.dir.path().join("dp");
    let mut p = plugin(&dp).await;
    let ids: Vec<String> = (0..4).map(|i| format!("npud-0-{i}")).collect();
    let a = allocate(&mut p, &ids).await;
    node.pods.set_pods(&[("ml", "steps", vec![Container::new("main", &ids, None)])]);
    assert_eq!((a.envs.get("NPUD_REQUIRED").map(String::as_str), a.envs.get("LD_PRELOAD")), (Some("1"), None));
    let first = node.installed();
    assert_eq!(first.len(), 1, "{first:?}");
    let library = node.dir.path().join("lib").join(&first[0]);
    let inode = std::fs::metadata(&library).unwrap().ino();
    let bytes = std::fs::read(&library).unwrap();
    // The program maps the installed file itself, as a container that mounted it would.
    let mut cmd = Command::new(native::acl_steps_app());
    cmd.env("NPU_SIM_SHARED", &node.budget)
        .env("LD_LIBRARY_PATH", native::fake_dir())
        .env("LD_PRELOAD", &library)
        .env("NPUD_SOCKET", &socket)
        .env("NPUD_ALLOCATION", &a.token)
        .env("NPUD_STREAMS", &a.envs["NPUD_STREAMS"])
        .env("NPUD_REQUIRED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // Its standard error (the interposer's words included) is kept, to say why it ended
    // should it end before a step.
    let errors = node.dir.path().join("program.err");
    cmd.stderr(std::fs::File::create(&errors).unwrap());
    let mut app = App::spawn(cmd);
    plant(&node.fake, app.child.id(), &pod_cgroup("5a5a5a5a_0000_4000_8000_000000000000", 'a'));
    let shared = Shared::at(&node.budget);
    let step = |app: &mut App, line: &str| {
        if let Ok(Some(status)) = app.child.try_wait() {
            let said = std::fs::read_to_string(&errors).unwrap_or_default();
            panic!("the program ended before {line:?}: {status}; its standard error:\n{said}");
        }
        app.say(line);
        app.line()
    };
    assert_eq!(step(&mut app, "+8"), "held 8");
    // The upgrade: a changed library, and npud killed and started again on it.
    let mut changed = std::fs::read(&node.source).unwrap();
    changed.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&node.source, &changed).unwrap();
    d.kill9();
    let d = node.start(&socket).await;
    let both = node.installed();
    assert_eq!(both.len(), 2, "the new one beside the old: {both:?}");
    assert_eq!(std::fs::metadata(&library).unwrap().ino(), inode, "the mapped file is the same file");
    assert_eq!(std::fs::read(&library).unwrap(), bytes, "and unchanged");
    // The running program is admitted by the new npud (it declares what it holds, then
    // asks for more), and npud's count equals the driver's.
    assert_eq!(step(&mut app, "+8"), "held 16");
    plant(&node.fake, std::process::id(), HOST_CGROUP);
    let host = d.client().await;
    // What the process reports it created (its grant may run ahead of that, up to its
    // start-up need) equals what the driver holds; npud books at least that much.
    let pid = app.child.id();
    let settled = npud_tests::eventually_async(Duration::from_secs(30), || async {
        let status = host.status().await.unwrap();
        let created: u32 = status.native_holders.iter().filter(|h| h.pid == pid).map(|h| h.created).sum();
        created == 17 && shared.held_by_others(d.pid()) == 17 && status.devices[0].in_use >= 17
    })
    .await;
    assert!(
        settled,
        "npud {:?}, driver {}\nthe program's standard error:\n{}\nnpud's log:\n{}",
        host.status().await.unwrap(),
        shared.held_by_others(d.pid()),
        std::fs::read_to_string(&errors).unwrap_or_default(),
        d.log()
    );
    // A pod allocated after the upgrade gets the new library.
    let mut p = plugin(&dp).await;
    let more: Vec<String> = (4..8).map(|i| format!("npud-0-{i}")).collect();
    let b = allocate(&mut p, &more).await;
    let lib_b = std::fs::read_to_string(b.token.with_extension("lib")).unwrap();
    assert_ne!(lib_b.trim(), first[0], "the new library for the new pod");
    node.pods.set_pods(&[("ml", "newer", vec![Container::new("main", &more, None)])]);
    app.release();
    npud_tests::host::Host::remove_pod(&node.fake, "5a5a5a5a-0000-4000-8000-000000000000");
    // The old pod is gone (its cgroup, then the grace): its allocation ends, and the
    // library it mounted with it.
    assert!(
        eventually(Duration::from_secs(20), || node.installed() == vec![lib_b.trim().to_string()]),
        "{:?}\n{}",
        node.installed(),
        d.log()
    );
}

/// With npud away (restarting, or not started yet), an allocated process waits for it a
/// moment and is then refused with the vendor's code, never creating a stream unadmitted;
/// when npud comes back within the wait, it is admitted.
#[test]
fn an_allocated_process_waits_for_npud_and_is_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, shared) = (dir.path().join("npud.sock"), Shared::new());
    let (program, _) = native::acl_apps();
    let run = |wait: &str| {
        let mut cmd = native::acl_command(program, &shared.path, None);
        cmd.env("LD_PRELOAD", native::preload_library())
            .env("NPUD_SOCKET", &socket)
            .env("NPUD_REQUIRED", "1")
            .env("NPUD_CONNECT_WAIT", wait)
            .args(["4", "0"]);
        App::spawn(cmd)
    };
    let started = Instant::now();
    let mut refused = run("2s");
    assert_eq!(refused.started(), Err(207008), "refused with the vendor's code");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(30), "waited {waited:?}");
    assert_eq!(shared.held_by_others(0), 0, "nothing was created unadmitted");
    // npud comes up while the next one waits.
    let mut admitted = run("60s");
    std::thread::sleep(Duration::from_millis(500));
    let d = acl_builder(&shared.path, &[]).socket(&socket).start();
    assert_eq!(admitted.started().map(|w| w[0].clone()), Ok("4".to_string()), "{}", d.log());
}

/// Allocate injects the interposer with /etc/ld.so.preload (mounted into the container):
/// an image's own LD_PRELOAD (a tracer wrapping AscendCL) is kept and the program is
/// admitted through both; a shell, and a set-uid program run by an ordinary user, load it
/// too but never connect to npud, start a thread or print a word. Needs root and unshare(1)
/// to mount over /etc/ld.so.preload in a mount namespace of its own.
#[test]
fn an_images_own_preload_is_kept_and_a_program_without_a_vendor_library_stays_untouched() {
    let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
    let probe = "d=$(mktemp -d) && mkdir $d/u $d/w && mount -t overlay overlay -o lowerdir=/etc,upperdir=$d/u,workdir=$d/w /etc";
    if !root || !Command::new("unshare").args(["--mount", "sh", "-c", probe]).status().is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: needs root, unshare(1) and overlayfs to mount over /etc/ld.so.preload");
        return;
    }
    let shared = Shared::new();
    let port = npud_tests::free_port();
    let d = acl_builder(&shared.path, &["--metrics", &format!("127.0.0.1:{port}")]).start();
    let dir = tempfile::tempdir().unwrap();
    let preload = dir.path().join("ld.so.preload");
    std::fs::write(&preload, format!("{}\n", native::preload_library().display())).unwrap();
    let calls = || {
        let text = npud_tests::http_get(port, "/metrics");
        text.lines()
            .filter(|l| l.starts_with("npud_budget_calls_total"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    // The container's /etc/ld.so.preload, in a mount namespace of the test's own: /etc
    // overlaid (the host's /etc is never written), the file bound over the overlay's.
    let (upper, work) = (dir.path().join("upper"), dir.path().join("work"));
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let under = |inner: &str| {
        let script = format!(
            "mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc && touch /etc/ld.so.preload \
             && mount --bind {} /etc/ld.so.preload && {inner}",
            upper.display(),
            work.display(),
            preload.display()
        );
        Command::new("unshare")
            .args(["--mount", "sh", "-c", &script])
            .env("NPUD_SOCKET", &d.socket)
            .env("NPU_SIM_SHARED", &shared.path)
            .env("LD_LIBRARY_PATH", native::fake_dir())
            .output()
            .unwrap()
    };
    // No vendor library: a shell, and a set-uid program run as another user.
    let quiet =
        under("sh -c true && setpriv --reuid=65534 --regid=65534 --clear-groups /bin/mount --version >/dev/null");
    assert!(quiet.status.success(), "{quiet:?}");
    assert!(quiet.stderr.is_empty(), "no word from the interposer: {}", String::from_utf8_lossy(&quiet.stderr));
    assert_eq!(calls(), 0.0, "no process without a vendor library connected");
    // The image's own preload, kept; the program admitted through both.
    let program = native::acl_wrapped_app().display().to_string();
    let wrapper = native::next_wrapper_library().display().to_string();
    let out = under(&format!("echo | LD_PRELOAD={wrapper} {program} 3"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("ok 3 wrapped 3"), "the image's preload saw every create: {stdout}\n{}", d.log());
    assert!(calls() > 0.0, "the program was admitted");
}

/// Programs in pid namespaces of their own, as containers run them (each is pid 1 there):
/// the fake driver counts each one's streams apart, frees a program's when it exits
/// though its pid lives on in the others' namespaces, and npud's count equals it.
#[test]
fn programs_in_pid_namespaces_of_their_own_are_each_counted() {
    let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
    let unshare = ["--pid", "--fork", "--mount-proc", "true"];
    if !root || !Command::new("unshare").args(unshare).status().is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: needs root and unshare(1) for pid namespaces");
        return;
    }
    let shared = Shared::new();
    let d = acl_builder(&shared.path, &[]).start();
    let (program, _) = native::acl_apps();
    let mut apps: Vec<App> = (0..3)
        .map(|_| {
            let inner = native::acl_command(program, &shared.path, Some((&d, 10)));
            let mut cmd = Command::new("unshare");
            cmd.args(["--pid", "--fork", "--mount-proc"]).arg(inner.get_program()).args(["9", "-1"]);
            for (k, v) in inner.get_envs() {
                if let Some(v) = v {
                    cmd.env(k, v);
                }
            }
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
            App::spawn(cmd)
        })
        .collect();
    for app in &mut apps {
        assert_eq!(app.started().map(|w| w[0].clone()), Ok("9".to_string()), "{}", d.log());
    }
    let lines = std::fs::read_to_string(&shared.path).unwrap();
    assert_eq!(lines.lines().filter(|l| l.starts_with("1 ")).count(), 3, "three pid 1s, apart: {lines}");
    let counted = || (shared.held_by_others(d.pid()), d.device0()["in_use"].as_u64().unwrap() as u32);
    assert!(eventually(Duration::from_secs(20), || counted() == (30, 30)), "{:?}", counted());
    apps.pop().unwrap().release();
    assert!(eventually(Duration::from_secs(20), || counted() == (20, 20)), "one went: {:?}", counted());
    for app in apps {
        app.release();
    }
    assert!(eventually(Duration::from_secs(20), || counted() == (0, 0)), "{:?}", counted());
}

/// While npud cannot be reached (restarting, upgrading), a process that does not require
/// it creates its streams without admission and tries npud again at most every 100 ms,
/// not once per creation: a 69-stream start-up made 72 failed connects, a fifth of its
/// start-up time. A stand-in socket that closes every connection counts the tries. (This
/// build's interposer: not in the previous release's suites.)
#[test]
fn an_unreachable_npud_is_not_tried_again_at_every_creation() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (program, _) = native::acl_apps();
    let shared = Shared::new();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("closing.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let (tries, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let closer = {
        let (tries, stop) = (Arc::clone(&tries), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        tries.fetch_add(1, Ordering::Relaxed);
                        drop(conn);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        })
    };
    let mut cmd = native::acl_command(program, &shared.path, None);
    cmd.env("LD_PRELOAD", native::preload_library()).env("NPUD_SOCKET", &socket).env("NPUD_STREAMS", "70");
    cmd.args(["69", "-1"]);
    let started = std::time::Instant::now();
    let mut app = App::spawn(cmd);
    assert!(app.started().is_ok(), "created without admission, as without the interposer");
    let (made, elapsed) = (tries.load(Ordering::Relaxed), started.elapsed());
    assert_eq!(shared.held_by_others(0), 70, "the driver holds what the program made");
    // The hello at aclInit and the ask at aclrtSetDevice (each may open twice), then one
    // try per 100 ms of the start-up at most, and the watcher's, every 250 ms.
    let bound = 4 + 2 * usize::try_from(elapsed.as_millis() / 100).unwrap_or(usize::MAX);
    assert!(made >= 1 && made <= bound, "{made} connects in {elapsed:?} for 70 streams");
    app.release();
    assert_eq!(shared.held_by_others(0), 0, "nothing left on the device");
    stop.store(true, Ordering::Relaxed);
    closer.join().unwrap();
}

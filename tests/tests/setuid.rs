//! Issue 70: under `/etc/ld.so.preload` (how Allocate admits unmodified images) the
//! interposer is in set-uid programs too, whose environment is their caller's. A
//! set-uid-root AscendCL program run by uid 1000 with a hostile environment sends no byte
//! of a root-only file anywhere, connects to no socket the caller names, waits no longer
//! than the defaults, still refuses to run unadmitted when told to, and is admitted by
//! the npud at the fixed socket.
//!
//! Nothing here touches the machine's own `/etc` or `/run`: each program runs in a mount
//! namespace of its own (`unshare --mount`) over a copy of `/etc` whose `ld.so.preload`
//! names the interposer, and a `/run` of its own, and as uid 1000 (`setpriv`). Where that
//! cannot be done (not root, no `unshare`), the test says it skipped.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::eventually;
use npud_tests::native::{App, Shared, acl_app_rpath, native_created, native_held, preload_library};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Mounts the copies, then runs the program as uid 1000: `$1` the test's directory, `$2`
/// what stands at /run/npud, `$3` at /run/npud-allocation (`-`: nothing), then the program.
const IN_NAMESPACE: &str = r#"set -e
t="$1"; npud="$2"; alloc="$3"; shift 3
mount --bind "$t/etc" /etc
mount -t tmpfs -o mode=0755 npud-test-run /run
mkdir -p /run/npud /run/npud-allocation
[ "$npud" = - ] || mount --bind "$npud" /run/npud
[ "$alloc" = - ] || mount --bind "$alloc" /run/npud-allocation
exec setpriv --reuid=1000 --regid=1000 --clear-groups "$@"
"#;

/// Why this machine cannot run the test, if it cannot.
fn cannot_run() -> Option<String> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Some("it needs root (a set-uid-root program, mounts in a namespace)".into());
    }
    let works = |cmd: &mut Command| cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !works(Command::new("unshare").args(["--mount", "true"])) {
        return Some("`unshare --mount` does not work here".into());
    }
    if !works(Command::new("setpriv").args(["--reuid=1000", "--regid=1000", "--clear-groups", "true"])) {
        return Some("`setpriv` cannot run a program as uid 1000 here".into());
    }
    None
}

/// A listener that records every byte sent to it and closes each connection once it has
/// read what came: npud as an impostor, or as gone.
struct Recorder {
    bytes: Arc<Mutex<Vec<u8>>>,
    connections: Arc<Mutex<u32>>,
    stop: Arc<AtomicBool>,
}

impl Recorder {
    fn at(path: &Path) -> Recorder {
        let listener = UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let r = Recorder { bytes: Arc::default(), connections: Arc::default(), stop: Arc::default() };
        let (bytes, connections, stop) = (Arc::clone(&r.bytes), Arc::clone(&r.connections), Arc::clone(&r.stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                *connections.lock().unwrap() += 1;
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    bytes.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }
        });
        r
    }

    fn heard(&self) -> (u32, String) {
        (*self.connections.lock().unwrap(), String::from_utf8_lossy(&self.bytes.lock().unwrap()).into_owned())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The test's directory (traversable by uid 1000): a copy of /etc naming the interposer
/// in its ld.so.preload, and the set-uid-root program.
struct Stage {
    dir: tempfile::TempDir,
    program: PathBuf,
}

impl Stage {
    fn new() -> Stage {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let etc = dir.path().join("etc");
        assert!(Command::new("cp").arg("-a").arg("/etc").arg(&etc).status().unwrap().success());
        std::fs::write(etc.join("ld.so.preload"), format!("{}\n", preload_library().display())).unwrap();
        let program = dir.path().join("acl_app_setuid");
        std::fs::copy(acl_app_rpath(), &program).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).unwrap();
        Stage { dir, program }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A directory of `files` (name, content, mode), owned by root.
    fn files(&self, name: &str, files: &[(&str, &str, u32)]) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (file, content, mode) in files {
            std::fs::write(dir.join(file), content).unwrap();
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(*mode)).unwrap();
        }
        dir
    }

    /// The program, set-uid root, run by uid 1000 in its own mount namespace with `env`
    /// (and nothing else of the test's), /run/npud and /run/npud-allocation as given.
    fn run(&self, shared: &Shared, env: &[(&str, String)], npud: Option<&Path>, alloc: Option<&Path>) -> App {
        let dash = || PathBuf::from("-");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "sh", "-c", IN_NAMESPACE, "sh"])
            .arg(self.dir.path())
            .arg(npud.map_or_else(dash, Path::to_path_buf))
            .arg(alloc.map_or_else(dash, Path::to_path_buf))
            .arg(&self.program)
            .args(["5", "-1"])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("NPU_SIM_SHARED", &shared.path)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.path("stderr")).unwrap());
        App::spawn(cmd)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("stderr")).unwrap_or_default()
    }
}

/// Waits for the program's exit, at most `limit`; how long it took.
fn exits_within(app: &mut App, limit: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if app.child.try_wait().unwrap().is_some() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = app.child.kill();
    panic!("the program still ran after {limit:?}");
}

#[test]
fn a_set_uid_program_is_steered_by_nothing_its_caller_sets() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let stage = Stage::new();
    let shared = Shared::new();
    // What the caller (uid 1000) sets: its own listener, a root-only file, waits of an hour.
    let hostile_dir = stage.files("hostile", &[]);
    let hostile = Recorder::at(&hostile_dir.join("listener.sock"));
    let secret_dir = stage.files("secret", &[("root-only", "ENV-NAMED-SECRET", 0o600)]);
    let mut env = vec![
        ("NPUD_SOCKET", hostile_dir.join("listener.sock").display().to_string()),
        ("NPUD_ALLOCATION", secret_dir.join("root-only").display().to_string()),
        ("NPUD_CONNECT_WAIT", "1h".into()),
        ("NPUD_WAIT", "1h".into()),
        ("NPUD_STREAMS", "2000".into()),
        ("NPUD_REQUIRED", "1".into()),
    ];

    // 1. npud away (the fixed socket closes each connection), a root-only token where
    // Allocate mounts one: refused unadmitted within the default connect wait (10 s),
    // nothing sent to the caller's listener, no byte of either root-only file anywhere.
    let fixed = stage.files("run-npud", &[]);
    let away = Recorder::at(&fixed.join("npud.sock"));
    let alloc = stage.files("alloc-root-only", &[("token", "MOUNTED-ROOT-ONLY", 0o600)]);
    let mut app = stage.run(&shared, &env, Some(&fixed), Some(&alloc));
    assert_eq!(app.started(), Err(207008), "refused, never run unadmitted\n{}", stage.stderr());
    let took = exits_within(&mut app, Duration::from_secs(120));
    assert!(took < Duration::from_secs(60), "an hour asked for, the default's 10 s waited: {took:?}");
    let (calls, heard) = away.heard();
    assert!(calls >= 1, "it tried npud's fixed socket\n{}", stage.stderr());
    assert!(!heard.contains("SECRET") && !heard.contains("ROOT-ONLY"), "{heard:?}");
    assert_eq!(hostile.heard(), (0, String::new()), "the caller's listener is never reached");
    assert!(stage.stderr().contains("NPUD_SOCKET is not honoured in a set-uid"), "{}", stage.stderr());
    drop(away);

    // 2. A token uid 1000 may read, where Allocate mounts it, and a shorter connect wait
    // (restricting: honoured): the token is read from the fixed path with the caller's
    // rights and presented; npud is required there even without NPUD_REQUIRED.
    env.retain(|(k, _)| *k != "NPUD_REQUIRED" && *k != "NPUD_CONNECT_WAIT");
    env.push(("NPUD_CONNECT_WAIT", "1s".into()));
    let fixed = stage.files("run-npud-2", &[]);
    let away = Recorder::at(&fixed.join("npud.sock"));
    let alloc = stage.files("alloc-readable", &[("token", "MOUNTED-READABLE", 0o444)]);
    let mut app = stage.run(&shared, &env, Some(&fixed), Some(&alloc));
    assert_eq!(app.started(), Err(207008), "{}", stage.stderr());
    exits_within(&mut app, Duration::from_secs(120));
    let (_, heard) = away.heard();
    assert!(heard.contains("MOUNTED-READABLE"), "the mounted token is presented: {heard:?}");
    assert!(!heard.contains("SECRET"), "{heard:?}");
    assert_eq!(hostile.heard(), (0, String::new()));

    // 3. npud at the fixed socket: admitted there, whatever NPUD_SOCKET says, and npud's
    // count equals the driver's.
    let d = shared.daemon(&[]);
    let npud_dir = d.socket.parent().unwrap().to_path_buf();
    let mut app = stage.run(&shared, &env, Some(&npud_dir), None);
    let started = app.started();
    assert_eq!(started.as_ref().map(|w| w[0].as_str()), Ok("5"), "admitted: {started:?}\n{}", stage.stderr());
    // Five streams and the default stream, as npud counts them (the holder's report) and
    // as the driver does.
    let counted = || (native_created(&d), u64::from(shared.held_by_others(d.pid())));
    assert!(eventually(Duration::from_secs(20), || counted() == (6, 6)), "{:?}", counted());
    assert!(native_held(&d) >= 6);
    app.release();
    assert_eq!(hostile.heard(), (0, String::new()));
}

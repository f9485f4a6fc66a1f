//! Issue 70: the directory npud installs the interposer into is nobody's to steer. What
//! npud installs there is mounted into every allocated container and preloaded into every
//! process in it, so a directory another uid can write, a library another uid planted, a
//! link at a name npud writes, or a FIFO at one it reads, stops npud at start, named,
//! and nothing outside the directory changes.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use npud_tests::bin;
use npud_tests::native::preload_library;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A node's directories: the library npud ships, a root-only file outside the install
/// directory (what a planted link would make npud overwrite), and the install directory.
struct Host {
    dir: tempfile::TempDir,
    source: PathBuf,
    outside: PathBuf,
    lib: PathBuf,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let source = dir.path().join("libnpud_preload.so");
        std::fs::copy(preload_library(), &source).unwrap();
        let outside = dir.path().join("root-only");
        std::fs::write(&outside, "root's alone").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        let lib = dir.path().join("lib");
        Host { dir, source, outside, lib }
    }

    /// The installed library's name: `libnpud_preload-` and its content hash's first
    /// 8 bytes in hex.
    fn library_name(&self) -> String {
        let out = Command::new("sha256sum").arg(&self.source).output().unwrap();
        let hex = String::from_utf8(out.stdout).unwrap();
        format!("libnpud_preload-{}.so", &hex[..16])
    }

    /// Starts npud as a device plugin installing into `lib`, through `sh` so that what
    /// `plant` does (`$$`: npud's pid, which `exec` keeps) is in place before it runs.
    /// Ok(()) when it serves, Err(its stderr) when it exits.
    fn start(&self, plant: &str) -> Result<(), String> {
        // The test's interposer is this machine's build: the images it is preloaded into
        // here have this machine's glibc.
        self.start_with(plant, "interposer_glibc = \"99.0\"\n")
    }

    /// [`Host::start`] with `extra` in npud's `[kubernetes]` section.
    fn start_with(&self, plant: &str, extra: &str) -> Result<(), String> {
        let config = self.dir.path().join("npud.toml");
        std::fs::write(
            &config,
            format!(
                "[kubernetes]\nenabled = true\npreload_library = {:?}\npreload_dir = {:?}\n{extra}",
                self.source.to_str().unwrap(),
                self.lib.to_str().unwrap()
            ),
        )
        .unwrap();
        let (socket, dp) = (self.dir.path().join("run/npud.sock"), self.dir.path().join("dp"));
        std::fs::create_dir_all(&dp).unwrap();
        let script = format!("{plant}\nexec \"$@\"");
        let mut child = Command::new("sh")
            .args(["-c", &script, "sh"])
            .arg(bin("npud"))
            .arg("--socket")
            .arg(&socket)
            .arg("--config")
            .arg(&config)
            .arg("--device-plugin-dir")
            .arg(&dp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if child.try_wait().unwrap().is_some() {
                let out = child.wait_with_output().unwrap();
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            if socket.exists() {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("npud neither served nor exited within a minute");
    }

    /// The file outside the directory is as it was: content, mode, owner.
    fn outside_unchanged(&self) {
        let meta = std::fs::metadata(&self.outside).unwrap();
        assert_eq!(std::fs::read_to_string(&self.outside).unwrap(), "root's alone");
        assert_eq!((meta.permissions().mode() & 0o7777, meta.uid()), (0o600, 0));
    }
}

/// Planting another uid's file takes root; elsewhere the test says it skipped.
fn as_root() -> bool {
    let root = rustix::process::geteuid().as_raw() == 0;
    if !root {
        eprintln!("skipped: planting another uid's files needs root");
    }
    root
}

fn refused(result: Result<(), String>, names: &[&str]) -> String {
    let err = result.expect_err("npud must not start");
    assert!(err.contains("cannot install the interposer"), "{err}");
    for n in names {
        assert!(err.contains(n), "the refusal names {n:?}: {err}");
    }
    err
}

#[test]
fn a_directory_others_can_write_is_refused_at_start() {
    if !as_root() {
        return;
    }
    // The install directory itself, group-writable.
    let host = Host::new();
    std::fs::create_dir(&host.lib).unwrap();
    std::fs::set_permissions(&host.lib, std::fs::Permissions::from_mode(0o775)).unwrap();
    refused(host.start(""), &[host.lib.to_str().unwrap(), "writable by its group", "775"]);
    assert_eq!(std::fs::read_dir(&host.lib).unwrap().count(), 0, "nothing written into it");

    // A directory above it, world-writable and not sticky.
    let host = Host::new();
    let above = host.dir.path().join("open");
    std::fs::create_dir(&above).unwrap();
    std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o777)).unwrap();
    let host = Host { lib: above.join("lib"), ..host };
    refused(host.start(""), &[above.to_str().unwrap(), "777"]);

    // Owned by another uid.
    let host = Host::new();
    std::fs::create_dir(&host.lib).unwrap();
    std::os::unix::fs::chown(&host.lib, Some(1000), Some(1000)).unwrap();
    refused(host.start(""), &["owned by uid 1000"]);

    // The same directory, root's and 0755: npud serves, the library installed 0555.
    let host = Host::new();
    assert_eq!(host.start(""), Ok(()));
    let meta = std::fs::symlink_metadata(host.lib.join(host.library_name())).unwrap();
    assert!(meta.is_file() && meta.permissions().mode() & 0o777 == 0o555, "{meta:?}");
}

#[test]
fn a_planted_library_is_refused_and_left_as_it_is() {
    if !as_root() {
        return;
    }
    let host = Host::new();
    std::fs::create_dir(&host.lib).unwrap();
    let planted = host.lib.join(host.library_name());
    // The very bytes npud ships, but another uid's file: it could append to it after.
    std::fs::copy(&host.source, &planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(1000), Some(1000)).unwrap();
    refused(host.start(""), &[planted.to_str().unwrap(), "owned by uid 1000"]);
    assert_eq!(std::fs::metadata(&planted).unwrap().uid(), 1000, "not adopted, not replaced");

    // Root's, but writable by everyone.
    std::os::unix::fs::chown(&planted, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    refused(host.start(""), &[planted.to_str().unwrap(), "666"]);
    host.outside_unchanged();
}

#[test]
fn links_at_every_temporary_name_change_nothing_outside() {
    let host = Host::new();
    std::fs::create_dir(&host.lib).unwrap();
    let name = host.library_name();
    let hash = name.trim_start_matches("libnpud_preload-").trim_end_matches(".so").to_string();
    let outside = host.outside.to_str().unwrap();
    // npud's temporary names carry its pid; `$$` is it, since the shell execs npud.
    for temporary in [format!("{name}.tmp$$"), format!("ld.so.preload-{hash}.tmp$$")] {
        let plant = format!("ln -s {outside:?} {:?}/{temporary}", host.lib.to_str().unwrap());
        let err = refused(host.start(&plant), &["is a symbolic link"]);
        assert!(err.contains(".tmp"), "{err}");
        host.outside_unchanged();
        for e in std::fs::read_dir(&host.lib).unwrap().flatten() {
            if e.file_type().unwrap().is_symlink() {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
    // And a link at the names themselves.
    for file in [name.clone(), format!("ld.so.preload-{hash}")] {
        let at = host.lib.join(&file);
        let _ = std::fs::remove_file(&at);
        std::os::unix::fs::symlink(&host.outside, &at).unwrap();
        refused(host.start(""), &[at.to_str().unwrap(), "is a symbolic link"]);
        host.outside_unchanged();
        std::fs::remove_file(&at).unwrap();
    }
}

#[test]
fn a_fifo_at_the_librarys_name_is_refused_without_blocking() {
    let host = Host::new();
    std::fs::create_dir(&host.lib).unwrap();
    let fifo = host.lib.join(host.library_name());
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    refused(host.start(""), &[fifo.to_str().unwrap(), "not a regular file"]);
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "left as it was");
}

/// Issue 76: an interposer that needs a glibc newer than the oldest the images have
/// (`interposer_glibc`, 2.17 by default) is refused at install, naming the symbol: through
/// `/etc/ld.so.preload` it would stop every process of an older image. This machine's build
/// needs what `readelf` says it does.
#[test]
fn an_interposer_needing_a_newer_glibc_is_refused_naming_the_symbol() {
    let host = Host::new();
    let out = Command::new("readelf").args(["--dyn-syms", "--wide"]).arg(&host.source).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let newer: Vec<String> = table
        .split_whitespace()
        .filter(|w| w.contains("@GLIBC_2."))
        .filter(|w| w.rsplit("GLIBC_2.").next().and_then(|v| v.split('.').next()?.parse::<u32>().ok()) > Some(17))
        .map(str::to_string)
        .collect();
    if newer.is_empty() {
        eprintln!("SKIPPED LOUDLY: this machine's interposer build needs nothing past glibc 2.17");
        return;
    }
    let err = refused(host.start_with("", ""), &["interposer_glibc", "2.17", "scripts/old-glibc.sh"]);
    assert!(newer.iter().any(|sym| err.contains(sym.split(" (").next().unwrap())), "names one of {newer:?}: {err}");
    assert!(!host.lib.join(host.library_name()).exists(), "nothing installed");
    assert!(host.start_with("", "interposer_glibc = \"99.0\"\n").is_ok(), "a floor the build meets installs it");
}

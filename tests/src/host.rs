//! The host as npud reads it, for identity (issue 66): `/proc` (each process's `cgroup`
//! file, its `status` with the pid namespaces it has a pid in) and the cgroup filesystem (directories, and who owns them).
//!
//! [`FakeHost`] builds both in a temporary directory, as root: a process's cgroup file is
//! planted, and the directories of its cgroup are made, owned by root as a runtime or the
//! kubelet would leave them, or handed to a uid as systemd delegates a subtree (`chown`).
//! [`RealHost`] makes the same cgroups on the machine's own cgroup filesystem and moves the
//! process in; npud then reads the real `/proc` and `/sys/fs/cgroup`.
// Test helpers may unwrap: a failure there is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A host npud can be pointed at: its `[identity]` lines, and how a process is placed.
pub trait Host {
    /// The `[identity]` section that points npud here.
    fn config(&self) -> String;

    /// Puts process `pid` in cgroup `path` (of the hierarchy this host places with): its
    /// directories made by root, the ones from depth `delegated.0` on owned by uid
    /// `delegated.1` (systemd's `Delegate=`: what that uid could have made itself).
    fn place(&self, pid: u32, path: &str, delegated: Option<(usize, u32)>);

    /// Whether this host is the machine's own cgroups (the run that may skip).
    fn is_real(&self) -> bool {
        false
    }

    /// Pod `uid` (with `-`) ends: the kubelet removes its cgroup, every container's with it
    /// (their processes gone first).
    fn remove_pod(&self, uid: &str);

    /// A uid's delegated subtree (what systemd hands `user@<uid>.service`), and the depth
    /// of its own directory.
    fn delegated(&self, uid: u32) -> (String, usize) {
        (format!("/user.slice/user-{uid}.slice/user@{uid}.service"), 3)
    }
}

/// `/proc` and the cgroup filesystem as directories of a temporary tree.
pub struct FakeHost {
    pub dir: tempfile::TempDir,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost::new()
    }
}

impl FakeHost {
    /// A pure cgroup v2 host (`cgroup.controllers` at the top), with v1 hierarchies made
    /// as lines name them. On tmpfs where the machine has `/dev/shm`.
    pub fn new() -> FakeHost {
        let shm = Path::new("/dev/shm");
        let dir = match shm.is_dir() {
            true => tempfile::tempdir_in(shm).unwrap(),
            false => tempfile::tempdir().unwrap(),
        };
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let host = FakeHost { dir };
        std::fs::create_dir_all(host.proc()).unwrap();
        std::fs::create_dir_all(host.cgroup()).unwrap();
        std::fs::write(host.cgroup().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        host.write_status(1, "1");
        host
    }

    pub fn proc(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    pub fn cgroup(&self) -> PathBuf {
        self.dir.path().join("cgroup")
    }

    /// Where a hierarchy of a cgroup line (its controllers field) is in the tree.
    fn top(&self, controllers: &str) -> PathBuf {
        match controllers {
            "" => self.cgroup(),
            c => self.cgroup().join(c.strip_prefix("name=").unwrap_or(c)),
        }
    }

    /// `proc/<pid>/status` whose `NSpid` line is `nspid`.
    fn write_status(&self, pid: u32, nspid: &str) {
        let dir = self.proc().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), format!("Name:\tpeer\nPid:\t{pid}\nNSpid:\t{nspid}\n")).unwrap();
    }

    /// Process `pid`'s cgroup file is `cgroup`; every line's directories exist, made by
    /// root; its `NSpid` line is the kernel's (this test's processes run on the host).
    pub fn plant(&self, pid: u32, cgroup: &str) {
        self.plant_as(pid, cgroup, None);
    }

    /// The same, the directories from depth `delegated.0` on owned by `delegated.1`.
    pub fn plant_as(&self, pid: u32, cgroup: &str, delegated: Option<(usize, u32)>) {
        let dir = self.proc().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:")).map(str::trim).unwrap_or("");
        self.write_status(pid, nspid);
        // Its start time is the kernel's too (npud's books name a process by pid and start).
        let stat = dir.join("stat");
        if std::fs::symlink_metadata(&stat).is_err() {
            std::os::unix::fs::symlink(format!("/proc/{pid}/stat"), &stat).unwrap();
        }
        // Its descriptors are the kernel's: the real /proc's (the devices it holds open).
        let fd = dir.join("fd");
        if std::fs::symlink_metadata(&fd).is_err() {
            std::os::unix::fs::symlink(format!("/proc/{pid}/fd"), &fd).unwrap();
        }
        for line in cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let leaf = make(&self.top(controllers), path.trim(), delegated);
            // The process is in it, as cgroup.procs lists.
            let procs = leaf.join("cgroup.procs");
            let mut listed = std::fs::read_to_string(&procs).unwrap_or_default();
            if !listed.split_whitespace().any(|p| p == pid.to_string()) {
                listed.push_str(&format!("{pid}\n"));
                std::fs::write(&procs, listed).unwrap();
            }
        }
    }

    /// Process `pid` runs `below` pid namespaces below the host's, as npud will read it
    /// (0: the host's own).
    pub fn set_pid_namespace_depth(&self, pid: u32, below: usize) {
        let nspid: Vec<String> = (0..=below).map(|i| (pid as usize + i * 1000).to_string()).collect();
        self.write_status(pid, &nspid.join("\t"));
    }
}

/// Where the kubelet puts pod `uid`'s cgroup, under both drivers and every QoS level.
fn pod_dirs(uid: &str) -> Vec<String> {
    let u = uid.replace('-', "_");
    vec![
        format!("kubepods.slice/kubepods-pod{u}.slice"),
        format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
        format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"),
        format!("kubepods/pod{uid}"),
        format!("kubepods/burstable/pod{uid}"),
        format!("kubepods/besteffort/pod{uid}"),
    ]
}

impl Host for FakeHost {
    fn remove_pod(&self, uid: &str) {
        for top in [self.cgroup(), self.cgroup().join("systemd")] {
            for dir in pod_dirs(uid) {
                let _ = std::fs::remove_dir_all(top.join(dir));
            }
        }
    }

    fn config(&self) -> String {
        format!("[identity]\nproc_root = {:?}\ncgroup_root = {:?}\n", self.proc(), self.cgroup())
    }

    fn place(&self, pid: u32, path: &str, delegated: Option<(usize, u32)>) {
        self.plant_as(pid, &format!("0::{path}\n"), delegated);
    }
}

/// Makes `path`'s directories under `top`, owned by root (mode 0755) above depth
/// `delegated.0` and by `delegated.1` from there on; returns the deepest.
fn make(top: &Path, path: &str, delegated: Option<(usize, u32)>) -> PathBuf {
    let mut dir = top.to_path_buf();
    for (depth, seg) in path.split('/').filter(|s| !s.is_empty()).enumerate() {
        dir.push(seg);
        if !dir.exists() {
            std::fs::create_dir(&dir).unwrap();
        }
        if let Some((from, uid)) = delegated
            && depth + 1 >= from
        {
            std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
            // systemd hands the directory's control files over too.
            for file in ["cgroup.procs", "cgroup.subtree_control", "cgroup.threads", "tasks"] {
                let _ = std::os::unix::fs::chown(dir.join(file), Some(uid), Some(uid));
            }
        }
    }
    dir
}

/// The machine's own cgroups: the unified hierarchy (v2, or the hybrid layout's
/// `unified`), or systemd's v1 hierarchy. Directories made here are removed once no
/// `RealHost` of this process uses them (tests run in parallel and share `/kubepods`).
pub struct RealHost {
    top: PathBuf,
    made: std::sync::Mutex<Vec<PathBuf>>,
    /// A slice of its own for delegated subtrees: a real host's `user.slice` is systemd's.
    private: String,
}

/// Directories RealHosts made, and how many of them use each.
static MADE: std::sync::Mutex<Vec<(PathBuf, usize)>> = std::sync::Mutex::new(Vec::new());

impl RealHost {
    /// The unified hierarchy, where this machine lets a test make cgroups in it (root, a
    /// writable cgroup2 mount); Err, saying why, where not.
    pub fn v2() -> Result<RealHost, String> {
        let root = Path::new("/sys/fs/cgroup");
        let top = match root.join("cgroup.controllers").exists() {
            true => root.to_path_buf(),
            false => root.join("unified"),
        };
        RealHost::at(top)
    }

    /// systemd's v1 hierarchy (`name=systemd`), where the machine has one.
    pub fn v1_systemd() -> Result<RealHost, String> {
        RealHost::at(PathBuf::from("/sys/fs/cgroup/systemd"))
    }

    fn at(top: PathBuf) -> Result<RealHost, String> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
            return Err("not root".into());
        }
        if !top.join("cgroup.procs").exists() {
            return Err(format!("no cgroup hierarchy at {}", top.display()));
        }
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let private = format!("npud-test-{}-{n}.slice", std::process::id());
        std::fs::create_dir(top.join(&private))
            .map_err(|e| format!("cannot make a cgroup in {}: {e}", top.display()))?;
        let _ = std::fs::remove_dir(top.join(&private));
        Ok(RealHost { top, made: std::sync::Mutex::new(Vec::new()), private })
    }
}

impl Host for RealHost {
    fn config(&self) -> String {
        "[identity]\nproc_root = \"/proc\"\ncgroup_root = \"/sys/fs/cgroup\"\n".into()
    }

    fn place(&self, pid: u32, path: &str, delegated: Option<(usize, u32)>) {
        let mut dir = self.top.clone();
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            dir.push(seg);
            let mut made = MADE.lock().unwrap();
            match made.iter_mut().find(|(p, _)| *p == dir) {
                Some((_, users)) => *users += 1,
                None if !dir.exists() => {
                    std::fs::create_dir(&dir).unwrap();
                    made.push((dir.clone(), 1));
                }
                // The machine's own (systemd's `system.slice`): never ours to remove.
                None => continue,
            }
            self.made.lock().unwrap().push(dir.clone());
        }
        make(&self.top, path, delegated);
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }

    fn is_real(&self) -> bool {
        true
    }

    fn remove_pod(&self, uid: &str) {
        let mut made = MADE.lock().unwrap();
        for dir in pod_dirs(uid).into_iter().map(|d| self.top.join(d)).filter(|d| d.exists()) {
            let mut below: Vec<PathBuf> = made.iter().map(|(p, _)| p.clone()).filter(|p| p.starts_with(&dir)).collect();
            below.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for d in below {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.split_whitespace() {
                    let _ = std::fs::write(self.top.join("cgroup.procs"), pid);
                }
                std::fs::remove_dir(&d).unwrap();
                made.retain(|(p, _)| *p != d);
            }
        }
    }

    fn delegated(&self, uid: u32) -> (String, usize) {
        (format!("/{}/user@{uid}.service", self.private), 2)
    }
}

impl Drop for RealHost {
    fn drop(&mut self) {
        let mine = std::mem::take(&mut *self.made.lock().unwrap());
        let mut made = MADE.lock().unwrap();
        for dir in &mine {
            if let Some((_, users)) = made.iter_mut().find(|(p, _)| p == dir) {
                *users -= 1;
            }
        }
        // Deepest first; a cgroup still holding a process is moved out of first.
        let mut unused: Vec<PathBuf> = made.iter().filter(|(_, u)| *u == 0).map(|(p, _)| p.clone()).collect();
        unused.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for dir in unused {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(self.top.join("cgroup.procs"), pid);
            }
            if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                made.retain(|(p, _)| *p != dir);
            }
        }
    }
}

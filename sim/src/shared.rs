//! One device budget shared by every process that loads a fake vendor library
//! (`NPU_SIM_SHARED=<path>`), so the multi-process failure the daemon exists for is
//! reproducible: forty processes that each take 61 streams of a 2048-stream device collide
//! near the limit and fail (207008 from fake-acl, CUDA_ERROR_OUT_OF_MEMORY from fake-cuda),
//! as they do on a real device.
//!
//! The budget is a small text file, one `pid device streams ns` line per holder, read and
//! rewritten in place under an exclusive `flock` (readers that want a consistent table
//! take it shared). Like the driver, it frees what a dead process held: a line whose
//! process no longer exists (SIGKILL included) counts in no answer: a count of its device,
//! or a take that would otherwise fail, drops it first, and every update checks a few
//! other lines (see `Table`). A pid reused by a new process within one test would inherit the
//! dead one's line; tests run far too briefly for the kernel to wrap its pid space.
//!
//! The driver counts a device's streams across containers, whose processes each see pids
//! of their own pid namespace (three containers' programs are all pid 1). So a line names
//! its process by pid *and* pid namespace (`ns`, the inode `/proc/self/ns/pid` names), and
//! a process in another namespace, whose pid this one's `/proc` cannot show, is known to
//! live by a lock it holds for as long as it runs: `<budget>.lives/<ns>-<pid>`, locked
//! (flock) when the process first uses the budget and released by the kernel when its last
//! thread goes. A line without `ns` (an older table) is taken as this namespace's.
//!
//! Containers run under different uids, and a pid namespace's inode number is reused once
//! the namespace is gone, so a later process can be pid 1 of a namespace with the inode
//! an earlier one had, under another uid. So every uid may update the table and the lives
//! directory (both made writable by all, as a shared scratch file of a test); a lives file
//! is made under a name of its own, locked, and then renamed over whatever a dead
//! predecessor left at `<ns>-<pid>`; others read it to test its lock (read-only: it is
//! 0644 and its owner's); a process's first use drops any line a dead predecessor of the
//! same pid and namespace left; and lives files nobody holds are removed, by the process
//! that leaves (at exit) and by the next one to open the budget (those of processes
//! killed).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a take failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedError {
    /// The device (all processes together) has fewer streams left than asked for.
    Exhausted,
    /// The budget file could not be locked, read or written.
    Io,
}

pub struct SharedBudget {
    path: std::path::PathBuf,
    /// The file, opened by the process that holds it (pid, file). flock serialises open
    /// file descriptions, not the threads of one process, nor a process and the child it
    /// forked: they share the description (and its offset), so a second one's flock
    /// succeeds at once. The mutex serialises the threads; a forked child opens the file
    /// again on its first update, so its flock excludes its parent's. The third is the
    /// process's lives file (see the module), replaced the same way in a forked child.
    file: std::sync::Mutex<(u32, File, Option<File>)>,
    /// This process's pid namespace.
    ns: u64,
    /// Streams per device, default streams and internal-sync streams included.
    limit: u32,
    /// Where the next update's sweep of the table starts (see [`Table::sweep`]).
    sweep_from: AtomicUsize,
}

/// Holder lines: (pid, device, pid namespace) → streams.
type Holders = BTreeMap<(u32, u32, u64), u32>;

/// The pid namespace this process runs in (0 where it cannot be read).
fn my_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| l.to_str()?.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok())
        .unwrap_or(0)
}

/// Where a process of another pid namespace shows it lives: the file it keeps locked.
fn lives_file(path: &std::path::Path, ns: u64, pid: u32) -> std::path::PathBuf {
    let mut dir = path.as_os_str().to_owned();
    dir.push(".lives");
    std::path::PathBuf::from(dir).join(format!("{ns}-{pid}"))
}

/// The most stale lives files one open of the budget removes.
const SWEEP_LIVES: usize = 64;

/// Locks this process's lives file (kept open, close-on-exec, for as long as it runs):
/// made under a name of its own, locked, and renamed over whatever a dead process of the
/// same namespace and pid left (see the module). Stale files are swept first.
fn hold_lives(path: &std::path::Path, ns: u64, pid: u32) -> Option<File> {
    use std::os::unix::fs::PermissionsExt;
    let file = lives_file(path, ns, pid);
    let dir = file.parent()?;
    if std::fs::create_dir(dir).is_ok() {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
    }
    sweep_lives(dir);
    let tmp = dir.join(format!(".{ns}-{pid}.{}", std::process::id()));
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&tmp).ok()?;
    let _ = f.set_permissions(std::fs::Permissions::from_mode(0o644));
    f.try_lock().ok()?;
    std::fs::rename(&tmp, &file).ok()?;
    OWN_LIVES.lock().unwrap_or_else(|e| e.into_inner()).push((std::process::id(), file));
    register_exit_cleanup();
    Some(f)
}

/// The lives files this process made (one per budget: streams, events), by the pid that
/// made each, removed when it exits (`exit_cleanup`). A forked child inherits its parent's
/// entries and leaves them alone.
static OWN_LIVES: std::sync::Mutex<Vec<(u32, std::path::PathBuf)>> = std::sync::Mutex::new(Vec::new());

fn register_exit_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // Once per process image: a forked child inherits it, with OWN_LIVES its own file.
    ONCE.call_once(|| crate::exit::at_exit(exit_cleanup));
}

extern "C" fn exit_cleanup() {
    // try_lock: exit may run while another thread holds the lock; then a later open
    // sweeps the file instead.
    if let Ok(own) = OWN_LIVES.try_lock() {
        let me = std::process::id();
        for (_, file) in own.iter().filter(|(pid, _)| *pid == me) {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Removes lives files (and unfinished ones a minute old) that no process holds locked,
/// among the first [`SWEEP_LIVES`] entries.
fn sweep_lives(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten().take(SWEEP_LIVES) {
        // A file being made (a dot-name) is locked a moment after it is created: left
        // alone unless it is old enough to be a dead maker's.
        let young =
            |m: std::fs::Metadata| m.modified().ok().and_then(|t| t.elapsed().ok()).is_none_or(|a| a.as_secs() < 60);
        if e.file_name().to_string_lossy().starts_with('.') && e.metadata().map_or(true, young) {
            continue;
        }
        let Ok(f) = File::open(e.path()) else { continue };
        if f.try_lock().is_ok() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl SharedBudget {
    /// Opens (creating) the stream budget file named by `NPU_SIM_SHARED`, if set.
    pub fn from_env(limit: u32) -> Option<SharedBudget> {
        Self::open_env("", limit)
    }

    /// The device event table shared the same way, in `$NPU_SIM_SHARED.events` (inference
    /// parts hold only 1023 events per device).
    pub fn events_from_env(limit: u32) -> Option<SharedBudget> {
        Self::open_env(".events", limit)
    }

    fn open_env(suffix: &str, limit: u32) -> Option<SharedBudget> {
        let mut path = std::env::var_os("NPU_SIM_SHARED").filter(|p| !p.is_empty())?;
        path.push(suffix);
        Self::open(std::path::Path::new(&path), limit)
    }

    /// Opens (creating) the budget file at `path`.
    pub fn open(path: &std::path::Path, limit: u32) -> Option<SharedBudget> {
        let file = open_table(path).ok()?;
        let (pid, ns) = (std::process::id(), my_namespace());
        let lives = hold_lives(path, ns, pid);
        let file = std::sync::Mutex::new((pid, file, lives));
        let budget =
            SharedBudget { path: path.to_path_buf(), file, limit, ns, sweep_from: AtomicUsize::new(pid as usize) };
        budget.forget_predecessor(pid);
        Some(budget)
    }

    /// Drops the lines a dead process of this pid and namespace left: this process has
    /// taken nothing yet, so none of them are its own.
    fn forget_predecessor(&self, pid: u32) {
        let _ = self.update(|t| {
            t.holders.retain(|(p, _, ns), _| !(*p == pid && *ns == self.ns));
            Ok(())
        });
    }

    /// Takes `n` streams on `device` for this process, or fails when the device (all
    /// processes together) has fewer than `n` left.
    pub fn take(&self, device: u32, n: u32) -> Result<(), SharedError> {
        self.update(|t| {
            // Dead holders are dropped where they could change the answer: a take that
            // fits with their lines counted fits without them too.
            if t.used(device).saturating_add(n) > self.limit {
                t.prune(device);
                if t.used(device).saturating_add(n) > self.limit {
                    return Err(SharedError::Exhausted);
                }
            }
            *t.holders.entry((std::process::id(), device, self.ns)).or_insert(0) += n;
            Ok(())
        })
    }

    /// Gives back `n` streams this process held on `device`.
    pub fn give(&self, device: u32, n: u32) {
        let _ = self.update(|t| {
            let me = (std::process::id(), device, self.ns);
            if let Some(held) = t.holders.get_mut(&me) {
                *held = held.saturating_sub(n);
                if *held == 0 {
                    t.holders.remove(&me);
                }
            }
            Ok(())
        });
    }

    /// Streams still free on `device`, all processes counted.
    pub fn available(&self, device: u32) -> u32 {
        self.update(|t| {
            t.prune(device);
            Ok(self.limit.saturating_sub(t.used(device)))
        })
        .unwrap_or(0)
    }

    /// Runs `op` on the holder table under the file lock, and writes the table back. A
    /// few lines of other processes are checked for life first (see [`Table::sweep`]).
    fn update<T>(&self, op: impl FnOnce(&mut Table) -> Result<T, SharedError>) -> Result<T, SharedError> {
        let mut held = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let forked = held.0 != me;
        if forked {
            // A forked child: its own table description, and a lives file of its own (the
            // parent's, inherited, is let go here so the parent's death can be seen).
            let table = open_table(&self.path).map_err(|_| SharedError::Io)?;
            *held = (me, table, None);
            held.2 = hold_lives(&self.path, self.ns, me);
        }
        let table = &held.1;
        // flock(2): one process at a time, released by the kernel if the holder dies.
        table.lock().map_err(|_| SharedError::Io)?;
        let result = (|| {
            let mut file = table;
            let mut text = String::new();
            file.seek(SeekFrom::Start(0)).map_err(|_| SharedError::Io)?;
            file.read_to_string(&mut text).map_err(|_| SharedError::Io)?;
            let text_len = text.len();
            let holders: Holders = text
                .lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    let mut num = || w.next()?.parse::<u64>().ok();
                    let (pid, device, streams) = (num()?, num()?, num()?);
                    let ns = num().unwrap_or(self.ns);
                    Some(((u32::try_from(pid).ok()?, u32::try_from(device).ok()?, ns), u32::try_from(streams).ok()?))
                })
                .collect();
            let mut t = Table { holders, lives: Lives { path: &self.path, ns: self.ns, me } };
            if forked {
                // As at open: lines of this pid are a dead predecessor's.
                t.holders.retain(|(p, _, ns), _| !(*p == me && *ns == self.ns));
            }
            t.sweep(self.sweep_from.fetch_add(SWEEP, Ordering::Relaxed));
            let out = op(&mut t)?;
            let mut text = String::new();
            for ((pid, device, ns), streams) in &t.holders {
                text.push_str(&format!("{pid} {device} {streams} {ns}\n"));
            }
            // Rewritten in place, and cut to its new length only when it shrank: truncating
            // the file to nothing first cost ext4 20 µs to several ms per update, in every
            // vendor call that takes or gives a stream, and made timings of the fake noisy.
            file.seek(SeekFrom::Start(0)).map_err(|_| SharedError::Io)?;
            file.write_all(text.as_bytes()).map_err(|_| SharedError::Io)?;
            if text.len() < text_len {
                table.set_len(text.len() as u64).map_err(|_| SharedError::Io)?;
            }
            Ok(out)
        })();
        let _ = table.unlock();
        result
    }
}

/// Lines checked for life on each update besides those a count needs (see
/// [`Table::sweep`]).
const SWEEP: usize = 2;

/// The holder table as read under the lock, with the means to drop dead processes' lines.
///
/// Checking every line for life on every update cost one `/proc` read per holder per
/// vendor call: with eight devices of forty processes each (issue 59) every stream created
/// read 320 files under the one lock, and the crowd waited on the fake driver for minutes.
/// What a count depends on is still exact: `available` drops the dead of its device before
/// it counts, and a `take` that would fail does so before it fails (one that fits with dead
/// lines counted fits without them). The rest only keeps the file short.
struct Table<'a> {
    holders: Holders,
    lives: Lives<'a>,
}

/// How a line's process is known to live: by pid in this pid namespace (`ns`), by its
/// lives file at `path` in another; this process (`me`) without asking.
struct Lives<'a> {
    path: &'a std::path::Path,
    ns: u64,
    me: u32,
}

impl Lives<'_> {
    fn of(&self, &(pid, _, ns): &(u32, u32, u64)) -> bool {
        match ns == self.ns {
            true => pid == self.me || crate::pidfd::alive(pid).unwrap_or_else(|| alive(pid)),
            false => lives_elsewhere(self.path, ns, pid),
        }
    }
}

impl Table<'_> {
    /// Streams held on `device`, every line counted.
    fn used(&self, device: u32) -> u32 {
        self.holders.iter().filter(|((_, d, _), _)| *d == device).map(|(_, s)| *s).fold(0, u32::saturating_add)
    }

    /// Drops the lines of dead processes on `device`.
    fn prune(&mut self, device: u32) {
        let lives = &self.lives;
        self.holders.retain(|line, _| line.1 != device || lives.of(line));
    }

    /// Checks [`SWEEP`] lines from position `from` (taken round the table) for life, so the
    /// lines of processes that died are dropped within a bounded number of updates even
    /// where no count needs them gone.
    fn sweep(&mut self, from: usize) {
        let n = self.holders.len();
        let looked: Vec<_> =
            (0..SWEEP.min(n)).filter_map(|i| self.holders.keys().nth((from + i) % n).copied()).collect();
        for line in looked.iter().filter(|line| !self.lives.of(line)) {
            self.holders.remove(line);
        }
    }
}

/// Opens the table, made writable by every uid when this process creates it (containers
/// of other uids share it; see the module).
fn open_table(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o666).open(path) {
        Ok(f) => {
            let _ = f.set_permissions(std::fs::Permissions::from_mode(0o666));
            Ok(f)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::OpenOptions::new().read(true).write(true).open(path)
        }
        Err(e) => Err(e),
    }
}

/// Whether `pid` names a live process. A zombie has exited and its streams are freed,
/// unless it is a thread-group leader whose own thread left (`pthread_exit` in `main`)
/// while other threads of the process go on: the process still runs, and holds its
/// streams until its last thread leaves (the kernel shows such a leader as a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself hold spaces.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) if rest.trim_start().starts_with('Z') => other_threads(pid),
            Some(_) => true,
            None => false,
        },
        Err(_) => false,
    }
}

/// Whether process `pid` of pid namespace `ns` (not this one's) still runs: its lives file
/// is locked. One that is not (the process went) is removed.
fn lives_elsewhere(path: &std::path::Path, ns: u64, pid: u32) -> bool {
    let alive = holder_alive(path, pid, ns);
    if !alive {
        let _ = std::fs::remove_file(lives_file(path, ns, pid));
    }
    alive
}

/// Whether the holder line `pid … ns` of the budget at `path` names a live process: by its
/// `/proc` entry in this pid namespace, else by its lives file (see the module). For
/// readers of the table (tests), which change nothing.
pub fn holder_alive(path: &std::path::Path, pid: u32, ns: u64) -> bool {
    if ns == my_namespace() {
        return alive(pid);
    }
    // Read-only: the file is its owner's, 0644, and flock needs no more.
    let Ok(f) = File::open(lives_file(path, ns, pid)) else {
        return false;
    };
    f.try_lock().is_err()
}

/// Whether process `pid` has threads besides its leader.
fn other_threads(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| tasks.take(2).count() > 1)
}

#[cfg(test)]
mod tests {
    use super::SharedBudget;

    /// A process's threads share one file description, so flock alone lets them interleave
    /// and one thread's rewrite can drop another process's line.
    #[test]
    fn threads_of_one_process_never_lose_another_processs_streams() {
        let path = std::env::temp_dir().join(format!("npu-sim-shared-{}", std::process::id()));
        // pid 1 is alive in any pid namespace: its 1000 streams must survive.
        std::fs::write(&path, "1 0 1000\n").expect("write");
        let budget = SharedBudget::open(&path, 2048).expect("open");
        std::thread::scope(|s| {
            for t in 0..8 {
                let budget = &budget;
                s.spawn(move || {
                    for _ in 0..200 {
                        if t % 2 == 0 {
                            assert!(budget.take(0, 1).is_ok());
                            budget.give(0, 1);
                        } else {
                            assert!(budget.available(0) <= 1048);
                        }
                    }
                });
            }
        });
        assert_eq!(budget.available(0), 1048, "{}", std::fs::read_to_string(&path).unwrap_or_default());
        let _ = std::fs::remove_file(&path);
    }

    /// The table is rewritten in place: when it shrinks (a holder gave everything back, a
    /// dead process's line went), no old line is left behind, and it grows again.
    #[test]
    fn a_table_that_shrinks_and_grows_in_place_keeps_every_count() {
        let path = std::env::temp_dir().join(format!("npu-sim-shrink-{}", std::process::id()));
        // pid 1 lives; a pid above the kernel's maximum never does.
        std::fs::write(&path, "1 0 1000\n4294967295 0 700\n1 1 5\n").expect("write");
        let budget = SharedBudget::open(&path, 2048).expect("open");
        assert_eq!(budget.available(0), 1048, "the dead holder's 700 are free");
        let ns = super::my_namespace();
        assert_eq!(std::fs::read_to_string(&path).expect("read"), format!("1 0 1000 {ns}\n1 1 5 {ns}\n"));
        assert!(budget.take(0, 40).is_ok());
        budget.give(0, 40);
        assert_eq!(budget.available(0), 1048);
        assert_eq!(budget.available(1), 2043);
        assert!(budget.take(1, 2000).is_ok());
        assert_eq!(budget.available(1), 43);
        assert_eq!(budget.take(1, 44), Err(super::SharedError::Exhausted));
        let _ = std::fs::remove_file(&path);
    }

    /// A device a dead process filled is free to the next take at once, though takes that
    /// fit never look at that line; the sweep drops dead lines of other devices too.
    #[test]
    fn a_dead_holders_streams_never_refuse_a_take_and_its_line_goes() {
        let path = std::env::temp_dir().join(format!("npu-sim-dead-{}", std::process::id()));
        std::fs::write(&path, "4294967295 0 2048\n4294967294 3 9\n1 1 5\n").expect("write");
        let budget = SharedBudget::open(&path, 2048).expect("open");
        assert!(budget.take(0, 2000).is_ok(), "the dead holder's 2048 are free");
        budget.give(0, 2000);
        for _ in 0..4 {
            budget.give(1, 0);
        }
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(!text.contains("4294967294"), "a dead holder on a device nobody counted is swept: {text}");
        assert_eq!(budget.available(1), 2043);
        let _ = std::fs::remove_file(&path);
    }

    /// Lines of another pid namespace live while their process holds its lives file, and
    /// go once it lets it go; pid 1 there is not this namespace's pid 1.
    #[test]
    fn another_namespaces_holder_lives_by_its_lock() {
        let path = std::env::temp_dir().join(format!("npu-sim-ns-{}", std::process::id()));
        let other = super::my_namespace() + 1;
        std::fs::write(&path, format!("1 0 30 {other}\n2 0 40 {other}\n")).expect("write");
        let lives = super::hold_lives(&path, other, 1).expect("pid 1 of the other namespace lives");
        let budget = SharedBudget::open(&path, 2048).expect("open");
        assert_eq!(budget.available(0), 2048 - 30, "its pid 2 never took its lock: gone");
        drop(lives);
        assert_eq!(budget.available(0), 2048, "and pid 1 went");
        let mut dir = path.clone().into_os_string();
        dir.push(".lives");
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_file(&path);
    }
}

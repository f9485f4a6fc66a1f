//! What native holders hold, on disk (`<state_dir>/natives.json`): each interposed
//! process's pid, start time, tenant, and streams and events per device. Written whole and
//! atomically by a task of its own after every change (off the reply path), so npud dying
//! leaves the last books or the ones before. Not synced to the disk: they only matter while
//! the processes they name run, and none survives the machine. After a restart a process's
//! declaration is booked up to what was recorded for it (the same pid *and* start time: a
//! recycled pid is another process), and beyond that only up to what the device itself
//! confirms.

use crate::policy::state::write_replacing;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A file larger than this is not read: npud writes far less (bounded holders, devices).
const MAX_FILE: usize = 16 << 20;

/// One process's recorded holdings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub pid: u32,
    /// The process's start time (clock ticks since boot, `/proc/<pid>/stat` field 22).
    pub start: u64,
    pub tenant: String,
    #[serde(default)]
    pub streams: BTreeMap<u32, u32>,
    #[serde(default)]
    pub events: BTreeMap<u32, u32>,
}

#[derive(Default, Serialize, Deserialize)]
struct BookFile {
    /// The machine's boot the books were written in (`/proc/sys/kernel/random/boot_id`).
    /// Books of another boot name processes that are gone: a pid and start time can come
    /// round again after a reboot. Absent in books an older npud wrote, which are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    boot: Option<String>,
    holders: Vec<Recorded>,
}

/// Where the books live; without a state directory nothing is kept.
#[derive(Debug, Clone)]
pub struct Books {
    path: Option<PathBuf>,
    /// This boot's id, where the kernel says it.
    boot: Option<String>,
}

/// The kernel's id of this boot, if it says.
fn boot_id() -> Option<String> {
    let text = crate::files::read_text_bounded(Path::new("/proc/sys/kernel/random/boot_id"), 64).ok()?;
    Some(text.trim().to_string()).filter(|id| !id.is_empty())
}

impl Books {
    pub fn new(state_dir: Option<&Path>) -> Self {
        Self::of_boot(state_dir, boot_id())
    }

    /// [`Books::new`] for the boot `boot`.
    fn of_boot(state_dir: Option<&Path>, boot: Option<String>) -> Self {
        Self { path: state_dir.map(|d| d.join("natives.json")), boot }
    }

    /// The books of the last run. A missing file is none; one that cannot be read is
    /// logged and treated as none: declarations then book only what the device confirms,
    /// which is safe, where refusing to start would take admission away from everyone.
    pub fn load(&self) -> Vec<Recorded> {
        let Some(path) = &self.path else { return Vec::new() };
        let read = crate::files::read_bounded(path, MAX_FILE);
        let parsed = match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => Err(e.to_string()),
            Ok(bytes) => serde_json::from_slice::<BookFile>(&bytes).map_err(|e| e.to_string()),
        };
        match parsed {
            Ok(f) if f.boot.is_some() && self.boot.is_some() && f.boot != self.boot => {
                tracing::info!(path = %path.display(), "the native holders' books are of an earlier boot; none of their processes runs");
                Vec::new()
            }
            Ok(f) => f.holders,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "the native holders' books cannot be read; declarations book only what the device confirms");
                Vec::new()
            }
        }
    }

    pub fn save(&self, holders: Vec<Recorded>) -> std::io::Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        let bytes =
            serde_json::to_vec(&BookFile { boot: self.boot.clone(), holders }).map_err(std::io::Error::other)?;
        write_replacing(path, &bytes)
    }
}

/// A record's streams as (tenant, device, streams), what the ledger books for it.
fn holdings(r: &Recorded) -> impl Iterator<Item = (String, u32, u32)> + '_ {
    r.streams.iter().map(|(&d, &n)| (r.tenant.clone(), d, n))
}

/// Records kept from the last run, at most (npud never writes more: holders are bounded
/// per tenant, and a file is not trusted to be npud's).
const MAX_RECORDS: usize = 65_536;

impl super::Natives {
    /// Takes in the books of the last run (at start).
    pub fn restore(&self, recorded: Vec<Recorded>) {
        let mut kept = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        for r in recorded.into_iter().take(MAX_RECORDS) {
            kept.insert((r.pid, r.start), r);
        }
    }

    /// Every recorded holding, (tenant, device, streams): what the ledger books for the
    /// recorded processes until they declare (`Daemon::restore_books`).
    pub fn recorded_holdings(&self) -> Vec<(String, u32, u32)> {
        let kept = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        kept.values().flat_map(holdings).collect()
    }

    /// Recorded streams on `device` not declared yet: booked, so the device's count of them
    /// is not untracked.
    pub fn pending_on(&self, device: u32) -> u32 {
        let kept = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        kept.values().filter_map(|r| r.streams.get(&device)).fold(0u32, |a, &n| a.saturating_add(n))
    }

    /// Drops the records `gone` says are of processes that are gone (every record, once the
    /// declarations' time is over), returned as (tenant, device, streams) for the ledger to
    /// let go of.
    pub fn expire_recorded(&self, gone: impl Fn(u32, u64) -> bool) -> Vec<(String, u32, u32)> {
        let mut kept = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let mut left = Vec::new();
        kept.retain(|&(pid, start), r| {
            if !gone(pid, start) {
                return true;
            }
            left.extend(holdings(r));
            false
        });
        left
    }

    /// What the last run recorded for process `pid` started at `start`, of `tenant`, on
    /// `device`: (streams, events), each only when asked for (a process may declare its
    /// streams and its events in separate calls). Taken, so a record is booked once.
    pub fn take_recorded(&self, pid: u32, start: u64, tenant: &str, device: u32, what: (bool, bool)) -> (u32, u32) {
        let mut kept = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = kept.get_mut(&(pid, start)).filter(|r| r.tenant == tenant) else { return (0, 0) };
        let streams = if what.0 { r.streams.remove(&device).unwrap_or(0) } else { 0 };
        let events = if what.1 { r.events.remove(&device).unwrap_or(0) } else { 0 };
        (streams, events)
    }

    /// The books as they stand: every holder whose process is known, and, while
    /// declarations are accepted, what the last run recorded that is not declared yet.
    pub fn snapshot(&self) -> Vec<Recorded> {
        let mut out: BTreeMap<(u32, u64), Recorded> = BTreeMap::new();
        for h in self.lock().values() {
            let Some(start) = h.start.filter(|_| h.pid != 0) else { continue };
            let r = out.entry((h.pid, start)).or_insert_with(|| Recorded {
                pid: h.pid,
                start,
                tenant: h.tenant.to_string(),
                ..Recorded::default()
            });
            merge(&mut r.streams, &h.held);
            merge(&mut r.events, &h.events);
        }
        if self.accepts_declarations() {
            for (key, r) in self.recorded.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                let entry = out.entry(*key).or_insert_with(|| Recorded {
                    streams: BTreeMap::new(),
                    events: BTreeMap::new(),
                    ..r.clone()
                });
                merge(&mut entry.streams, &r.streams);
                merge(&mut entry.events, &r.events);
            }
        }
        out.into_values().filter(|r| r.streams.values().chain(r.events.values()).any(|&n| n > 0)).collect()
    }

    /// Something the books hold changed: the writer is woken.
    pub(super) fn touch(&self) {
        self.changed.notify_one();
    }

    /// Waits for the next change to the books (for the writer).
    pub async fn next_change(&self) {
        self.changed.notified().await;
    }
}

fn merge(into: &mut BTreeMap<u32, u32>, from: &BTreeMap<u32, u32>) {
    for (&d, &n) in from {
        let e = into.entry(d).or_insert(0);
        *e = e.saturating_add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn books_round_trip_and_a_bad_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let books = Books::new(Some(dir.path()));
        assert!(books.load().is_empty());
        let r = Recorded {
            pid: 7,
            start: 99,
            tenant: "t".into(),
            streams: BTreeMap::from([(1, 70)]),
            events: BTreeMap::from([(1, 3)]),
        };
        books.save(vec![r.clone()]).unwrap();
        assert_eq!(books.load(), vec![r]);
        std::fs::write(dir.path().join("natives.json"), b"{\"holders\": [{\"pid\": -1}]}").unwrap();
        assert!(books.load().is_empty());
        assert!(Books::new(None).load().is_empty());
    }

    #[test]
    fn books_of_another_boot_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recorded { pid: 7, start: 99, tenant: "t".into(), ..Recorded::default() };
        let this = |boot: &str| Books::of_boot(Some(dir.path()), Some(boot.into()));
        this("a").save(vec![r.clone()]).unwrap();
        assert_eq!(this("a").load(), vec![r.clone()], "the same boot");
        assert!(this("b").load().is_empty(), "pid 7 started at tick 99 in boot a is not pid 7 of boot b");
        // An older npud's books say no boot: read, as before.
        Books::of_boot(Some(dir.path()), None).save(vec![r.clone()]).unwrap();
        assert_eq!(this("b").load(), vec![r]);
    }
}

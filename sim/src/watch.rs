//! Waits on a value in memory: the stream memory operations both vendors have (AscendCL's
//! aclrtValueWait, CUDA's cuStreamWaitValue32/64). A fake runtime issues such a wait as a
//! blocking task on its stream; when the stream reaches it, [`until`] reads the value on a
//! watcher thread of its own until the condition holds, then lets the stream go on.
//!
//! The conditions are the vendors' (the same four, by the same flag values): GEQ 0,
//! `(signed)(*addr - value) >= 0` in the value's width, so a counter that wrapped still
//! counts as past; EQ 1, `*addr == value`; AND 2, `(*addr & value) != 0`; NOR 3,
//! `~(*addr | value) != 0`.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How a waited-for value is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    Geq,
    Eq,
    And,
    Nor,
}

impl Compare {
    /// The comparison a vendor flag names (0 to 3), or None.
    pub fn from_flag(flag: u32) -> Option<Self> {
        Some(match flag {
            0 => Self::Geq,
            1 => Self::Eq,
            2 => Self::And,
            3 => Self::Nor,
            _ => return None,
        })
    }

    /// Whether `current` meets the condition against `value`, both `bits` (32 or 64) wide.
    pub fn holds(self, current: u64, value: u64, bits: u32) -> bool {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let (current, value) = (current & mask, value & mask);
        match self {
            Self::Geq if bits >= 64 => current.wrapping_sub(value) as i64 >= 0,
            Self::Geq => (current.wrapping_sub(value) & mask) as u32 as i32 >= 0,
            Self::Eq => current == value,
            Self::And => current & value != 0,
            Self::Nor => !(current | value) & mask != 0,
        }
    }
}

/// How often watched values are read.
const POLL: Duration = Duration::from_micros(50);

type Ready = Box<dyn FnMut() -> bool + Send>;
type Then = Box<dyn FnOnce() + Send>;

struct Watcher {
    waits: Mutex<Vec<(Ready, Then)>>,
    more: Condvar,
}

/// The watcher of this process, by the process it was started in: a child made by fork()
/// has not the thread, and may have the watcher's lock held by it for ever, so it starts
/// one of its own (None: no thread could be started).
static WATCHER: Mutex<Option<(u32, Option<&'static Watcher>)>> = Mutex::new(None);

fn watcher() -> Option<&'static Watcher> {
    let pid = std::process::id();
    let mut current = WATCHER.lock().unwrap_or_else(|e| e.into_inner());
    match *current {
        Some((started_in, w)) if started_in == pid => w,
        _ => {
            let w: &'static Watcher =
                Box::leak(Box::new(Watcher { waits: Mutex::new(Vec::new()), more: Condvar::new() }));
            let started = std::thread::Builder::new().name("npu-sim-watch".into()).spawn(move || watch(w)).is_ok();
            let w = started.then_some(w);
            *current = Some((pid, w));
            w
        }
    }
}

/// Calls `then` once `ready` returns true, on the watcher thread (which reads every
/// pending wait each 50 µs). Without a thread to watch with, `then` runs at once: a
/// stream let go early is a fake's fault a program can see; one held for ever hangs it.
pub fn until(ready: impl FnMut() -> bool + Send + 'static, then: impl FnOnce() + Send + 'static) {
    match watcher() {
        Some(w) => {
            w.waits.lock().unwrap_or_else(|e| e.into_inner()).push((Box::new(ready), Box::new(then)));
            w.more.notify_one();
        }
        None => then(),
    }
}

fn watch(w: &Watcher) {
    loop {
        let mut waits = w.waits.lock().unwrap_or_else(|e| e.into_inner());
        while waits.is_empty() {
            waits = w.more.wait(waits).unwrap_or_else(|e| e.into_inner());
        }
        let pending = std::mem::take(&mut *waits);
        drop(waits);
        // Read without the lock: a new wait is never held up by a read, nor a read by one.
        let mut still = Vec::with_capacity(pending.len());
        for (mut ready, then) in pending {
            if ready() {
                then();
            } else {
                still.push((ready, then));
            }
        }
        w.waits.lock().unwrap_or_else(|e| e.into_inner()).extend(still);
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_condition_is_the_vendors() {
        assert!(Compare::Geq.holds(5, 5, 64) && Compare::Geq.holds(6, 5, 64) && !Compare::Geq.holds(4, 5, 64));
        // GEQ compares the difference as signed in the value's width: past a wrap holds.
        assert!(Compare::Geq.holds(1, u64::MAX, 64) && Compare::Geq.holds(1, u32::MAX as u64, 32));
        assert!(!Compare::Geq.holds(u32::MAX as u64, 1, 32), "0xffffffff is -1 after 1, not past it");
        assert!(Compare::Eq.holds(7, 7, 32) && !Compare::Eq.holds(8, 7, 32));
        assert!(Compare::Eq.holds(0x1_0000_0007, 7, 32), "a 32-bit wait reads 32 bits");
        assert!(Compare::And.holds(0b110, 0b100, 64) && !Compare::And.holds(0b011, 0b100, 64));
        assert!(Compare::Nor.holds(0, 0, 64) && !Compare::Nor.holds(u64::MAX, 0, 64));
        assert!(!Compare::Nor.holds(u32::MAX as u64, 0, 32), "NOR in 32 bits");
        assert_eq!((Compare::from_flag(1), Compare::from_flag(4)), (Some(Compare::Eq), None));
    }

    /// A child forked while the parent's watcher runs (and may hold its lock) watches with
    /// a thread of its own: its wait ends.
    #[test]
    #[allow(unsafe_code)]
    fn a_forked_child_watches_with_a_thread_of_its_own() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        // The parent's watcher is busy with a wait that never ends.
        until(|| false, || {});
        // SAFETY: the child only calls `until`, reads an atomic and sleeps, then leaves
        // with _exit, never returning into the test harness; alarm ends a child that hangs.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            let done = Arc::new(AtomicBool::new(false));
            let d = Arc::clone(&done);
            // SAFETY: as above.
            unsafe { libc::alarm(20) };
            until(|| true, move || d.store(true, Ordering::SeqCst));
            for _ in 0..10_000 {
                if done.load(Ordering::SeqCst) {
                    // SAFETY: as above.
                    unsafe { libc::_exit(0) };
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            // SAFETY: as above.
            unsafe { libc::_exit(1) };
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked, with an out-pointer to a local.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child's wait ended: {status:#x}");
    }

    #[test]
    fn a_wait_ends_once_its_value_is_ready_and_not_before() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let value = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (v, d) = (Arc::clone(&value), Arc::clone(&done));
        until(move || Compare::Eq.holds(v.load(Ordering::SeqCst), 42, 64), move || d.store(true, Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!done.load(Ordering::SeqCst), "held while the value is not there");
        value.store(42, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(done.load(Ordering::SeqCst), "let go once it is");
    }
}

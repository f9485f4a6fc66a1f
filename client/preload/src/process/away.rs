//! While npud is away (restarting, being upgraded, removed): how long a hook waits for it,
//! what a process may do without it, and the operator's escape hatch.
//!
//! A process never needs npud within what it holds: a stream its grant covers is made
//! without a word to npud, a destroyed one is given back when npud is there again, and a
//! pod's process may make its cushion's worth more (`[kubernetes] process_cushion`), which
//! it declares when npud is back. Past that, a process npud already admitted is
//! refused at once while npud is away (a running program asks for a stream it needs now;
//! holding it for a wait that may outlast the program's own timeouts helps nobody), and a
//! process that was never admitted waits at most `NPUD_CONNECT_WAIT` in all, once per
//! call however many connects the call makes.

use super::{Process, lock};
use std::cell::Cell;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The escape hatch: a file of this name in npud's socket directory (which every pod
/// mounts, read-only), made by root or the directory's owner. While it is there, a
/// process that cannot reach npud creates its streams without admission instead of
/// waiting or failing; npud counts them (as declared, or as untracked) once it is back.
pub const HATCH: &str = "bypass";

/// How long after npud said DRAINING a process that npud admitted before keeps trying to
/// reach its successor.
const HANDOVER_PATIENCE: Duration = Duration::from_secs(2);

/// Whether npud said DRAINING within the last [`HANDOVER_PATIENCE`].
fn handing_over() -> bool {
    let seen = crate::wire::DRAINING_SEEN.load(Ordering::Relaxed);
    seen > 0
        && (crate::sys::coarse_now().as_millis() as u64).saturating_sub(seen) < HANDOVER_PATIENCE.as_millis() as u64
}

thread_local! {
    /// When the hook this thread is in stops waiting for npud.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// One bound on the waits of one hook call: set by the outermost caller, restored on drop.
pub(super) struct CallDeadline(Option<Instant>);

impl CallDeadline {
    /// Bounds this thread's waits for npud to `wait` from now, unless an outer call bounds
    /// them already.
    pub(super) fn start(wait: Duration) -> CallDeadline {
        let outer = DEADLINE.with(Cell::get);
        if outer.is_none() {
            DEADLINE.with(|d| d.set(Some(Instant::now() + wait)));
        }
        CallDeadline(outer)
    }
}

impl Drop for CallDeadline {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.0));
    }
}

impl Process {
    /// Until when a connect may keep trying: now for a process that does not require npud,
    /// one npud admitted before (see the module's notes) or one the hatch lets go;
    /// otherwise the call's bound, or `NPUD_CONNECT_WAIT` from now.
    pub(super) fn connect_deadline(&self) -> Instant {
        let now = Instant::now();
        if !self.settings.required || self.hatched() {
            return now;
        }
        if self.welcomed_once.load(Ordering::Relaxed) {
            // npud said it is going a moment ago: its successor may be taking the socket
            // over, so its connects are given that moment (a handover takes milliseconds).
            let patience = match handing_over() {
                true => now + HANDOVER_PATIENCE,
                false => now,
            };
            return DEADLINE.with(Cell::get).map_or(patience, |d| d.min(patience));
        }
        DEADLINE.with(Cell::get).unwrap_or(now + self.settings.connect_wait)
    }

    /// Whether the escape hatch is set: the file exists and is root's or the socket
    /// directory owner's (a pod mounts the directory read-only; anyone else's file there
    /// is not the operator's word).
    pub(super) fn hatched(&self) -> bool {
        let Some(dir) = self.settings.socket.parent() else { return false };
        let (Ok(hatch), Ok(owner)) = (std::fs::symlink_metadata(dir.join(HATCH)), std::fs::metadata(dir)) else {
            return false;
        };
        hatch.uid() == 0 || hatch.uid() == owner.uid()
    }

    /// npud could not be reached for an ask: the streams are made unadmitted (npud not
    /// required, or the hatch set), or refused at once with why.
    pub(super) fn unreachable(&self, e: &impl std::fmt::Display) -> Result<(), super::Refused> {
        if self.settings.required && !self.hatched() {
            let past = match self.welcomed_once.load(Ordering::Relaxed) {
                true => "this process asked past what it holds",
                false => "no npud answered",
            };
            return Err(super::Refused::because(format!(
                "{e}; {past}, and NPUD_REQUIRED is set, so stream creation fails"
            )));
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            match self.settings.required {
                true => eprintln!(
                    "npud-preload: {e}; the escape hatch {} is set, so streams are created without admission",
                    self.settings.socket.with_file_name(HATCH).display()
                ),
                false => eprintln!("npud-preload: {e}; streams are created without admission"),
            }
        }
        Ok(())
    }

    /// Whether `n` more streams on `device` fit the cushion of a pod's process that npud
    /// admitted before and that cannot reach npud now; they are then its to make, and
    /// declared with the rest once npud is back (the device refuses them itself where it
    /// has no room, as it would without npud).
    pub(super) fn within_cushion(&self, device: u32, n: u32) -> bool {
        let cushion = self.cushion.load(Ordering::Relaxed);
        // An npud handing over is not away: its successor answers in a moment.
        if cushion == 0 || !self.welcomed_once.load(Ordering::Relaxed) || handing_over() {
            return false;
        }
        let mut made = lock(&self.away_made);
        let made = made.entry(device).or_default();
        if made.saturating_add(n) > cushion {
            return false;
        }
        *made += n;
        true
    }

    /// npud answered again: what was made past the grant meanwhile is declared, and the
    /// cushion is whole again.
    pub(super) fn npud_back(&self) {
        lock(&self.away_made).clear();
    }

    /// The watcher's reconnect: a process that holds streams and lost npud opens a new
    /// connection (one try, never a wait) and declares them, so npud counts them soon
    /// after it is back, whether or not the program asks for anything again.
    pub(super) fn reconnect_holding(&'static self, guard: &mut Option<crate::wire::Connection>) {
        let _bound = CallDeadline::start(Duration::ZERO);
        if let Ok((conn, _)) = self.connect_with(None, None) {
            *guard = Some(conn);
        }
    }
}

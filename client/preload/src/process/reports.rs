//! What npud hears after the fact, off the program's path where it can be: a creation
//! batch that is over, a surplus grant given back once destroys are quiet, a reset's
//! holdings; and the watcher thread that sends them and notices npud going away.

use super::{Process, lock};
use crate::Map;
use crate::sys::coarse_now;
use crate::wire::{Connection, WireError};
use npud_proto::v1::{self as pb, budget_call::Call};
use std::sync::Mutex;
use std::time::Duration;

/// How often the watcher looks for a closed connection while the process holds streams.
const WATCH_PERIOD: Duration = Duration::from_millis(250);
/// How often it looks while a creation batch is open, and how long a batch must be quiet
/// (no stream created) before npud hears it is done and lets the next process's batch
/// start. Creating a stream takes microseconds to a few milliseconds, so a start-up's
/// creations are much closer together than this. A batch that used its whole grant ends
/// at once where it holds the device's creation turn (see `batch_complete`).
const BATCH_QUIET: Duration = Duration::from_millis(20);
/// How long a pod's process must make no stream on a device before its start-up counts
/// as settled and what it was granted and does not use goes back to its pod: far longer
/// than between a start-up's creations, short enough that the pod's next process (an
/// exec probe, a second worker) finds the rest.
const SETTLE: Duration = Duration::from_millis(500);

/// How often a process holding streams asks npud whether its devices report a fault.
const HEALTH_PERIOD: Duration = Duration::from_secs(2);

/// How often a process that holds streams and lost npud tries to reach it again (one
/// connect each, never a wait), to declare them once npud is back: soon, since until it
/// does npud books its recorded grant, which its pod's newcomers wait on.
const RECONNECT_PERIOD: Duration = Duration::from_millis(250);

/// Takes the devices that have been quiet for `quiet` out of `last_seen` (times on the
/// coarse clock).
fn take_quiet(last_seen: &Mutex<Map<u32, Duration>>, quiet: Duration) -> Vec<u32> {
    let mut map = lock(last_seen);
    let now = coarse_now();
    let quiet: Vec<u32> = map.iter().filter(|(_, last)| now.saturating_sub(**last) >= quiet).map(|(&d, _)| d).collect();
    for d in &quiet {
        map.remove(d);
    }
    quiet
}

impl Process {
    /// Starts the watcher thread, once per process (a forked child starts its own).
    pub(super) fn start_watcher(&'static self) {
        self.watcher.call_once(|| {
            if let Ok(handle) = std::thread::Builder::new().name("npud-preload".into()).spawn(move || self.watch()) {
                let _ = self.watcher_thread.set(handle.thread().clone());
            }
        });
    }

    /// Notices npud going away while the process sits on its streams, and reconnects (and
    /// declares) as soon as npud is back, so a restarted npud counts them without waiting
    /// for the process's next call.
    ///
    /// It also ends creation batches: once a granted batch has been quiet for
    /// `BATCH_QUIET`, it tells npud, off the program's path.
    fn watch(&'static self) {
        let mut heard = coarse_now();
        let mut reconnected = coarse_now();
        loop {
            let open =
                !lock(&self.batches).is_empty() || !lock(&self.releases).is_empty() || !lock(&self.settling).is_empty();
            std::thread::park_timeout(if open { BATCH_QUIET } else { WATCH_PERIOD });
            if std::process::id() != self.pid {
                return;
            }
            // Read before the connection is taken: a thread holding the books may be waiting
            // for the connection.
            let held: Vec<u32> =
                lock(&self.books).devices().into_iter().filter(|(_, d)| d.used > 0).map(|(id, _)| id).collect();
            let holding = !held.is_empty();
            let Ok(mut guard) = self.conn.try_lock() else { continue };
            if let Some(conn) = guard.as_mut()
                && conn.settle_arrived().is_err()
            {
                *guard = None;
            }
            if let Some(conn) = guard.as_mut()
                && holding
                && coarse_now().saturating_sub(heard) >= HEALTH_PERIOD
            {
                heard = coarse_now();
                self.hear_faults(conn, &held);
            }
            if let Some(conn) = guard.as_mut() {
                self.end_quiet_batches(conn);
                self.release_quiet_surplus(conn);
                self.release_settled(conn);
            }
            if guard.as_mut().is_some_and(Connection::closed_by_peer) {
                *guard = None;
            }
            if guard.is_none() && holding && coarse_now().saturating_sub(reconnected) >= RECONNECT_PERIOD {
                reconnected = coarse_now();
                self.reconnect_holding(&mut guard);
            }
        }
    }

    /// Asks npud for the share of each device the process holds streams on, so a device
    /// that reported a fault since is known (its `fault`) before the process's next stream
    /// there, though that stream needs no ask.
    fn hear_faults(&self, conn: &mut Connection, held: &[u32]) {
        for &device in held.iter().filter(|d| !self.devices.is_unowned(**d)) {
            let ask = pb::BudgetShareRequest { device, identity: self.devices.identity(device) };
            let _ = conn.call(Call::Share(ask), Duration::ZERO);
        }
    }

    fn end_quiet_batches(&self, conn: &mut Connection) {
        for device in take_quiet(&self.batches, BATCH_QUIET) {
            // Best effort: npud ends the batch anyway when its pacing window passes. The
            // grant stays the process's: a quiet spell is no proof the batch is over (a slow
            // start-up, lazy creation), and a later ask does not wait, so giving the unused
            // part back here made processes in a crowd fail with 207008.
            let _ = conn.call(self.batch_done(device), Duration::ZERO);
        }
    }

    /// Giving back `count` streams' budget on `device`, saying the process has `created`.
    pub(super) fn release_of(&self, device: u32, count: u32, created: u32) -> Call {
        let identity = self.devices.identity(device);
        Call::Release(pb::ReleaseBudgetRequest { device, count, identity, created: Some(created), client_slot: false })
    }

    /// The report that the batch on `device` is over: what the process has created there.
    pub(super) fn batch_done(&self, device: u32) -> Call {
        let created = Some(lock(&self.books).device(device).used);
        Call::Created(pb::CreatedBudgetRequest { device, identity: self.devices.identity(device), created })
    }

    fn release_quiet_surplus(&self, conn: &mut Connection) {
        for device in take_quiet(&self.releases, BATCH_QUIET) {
            if self.devices.is_unowned(device) {
                continue;
            }
            let (reset_streams, reset_events) = lock(&self.resets).remove(&device).unwrap_or((0, 0));
            let (count, created) = {
                let mut books = lock(&self.books);
                (books.surplus(device, self.kept(device)).saturating_add(reset_streams), books.device(device).used)
            };
            // Nothing to give back still says what the process now has created: npud's
            // reconciliation would otherwise count destroyed streams as still held, and
            // take a program outside npud for that many fewer.
            let report = match count {
                0 => self.batch_done(device),
                _ => self.release_of(device, count, created),
            };
            let _ = conn.call(report, Duration::ZERO);
            let count = lock(&self.events).surplus(device).saturating_add(reset_events);
            self.release_events(conn, device, count);
        }
    }

    /// What unused grant the process keeps on `device` once quiet: its start-up need, so a
    /// program that destroys and re-creates asks npud nothing; none for a pod's process,
    /// whose pod's other processes share its allocation.
    fn kept(&self, device: u32) -> u32 {
        match self.shared.load(std::sync::atomic::Ordering::Relaxed) {
            true => 0,
            false => self.startup(device),
        }
    }

    /// A pod's process's start-up on `device` settled (no stream made there for
    /// `SETTLE`): what it was granted and does not use goes back to its pod.
    fn release_settled(&self, conn: &mut Connection) {
        for device in take_quiet(&self.settling, SETTLE) {
            if self.devices.is_unowned(device) {
                continue;
            }
            let (count, created) = {
                let mut books = lock(&self.books);
                (books.surplus(device, 0), books.device(device).used)
            };
            if count > 0 {
                let _ = conn.call(self.release_of(device, count, created), Duration::ZERO);
            }
        }
    }

    /// A pod's process was granted on `device`: what it does not use goes back once it
    /// has made no stream there for a while.
    pub(super) fn settle(&self, device: u32) {
        lock(&self.settling).insert(device, coarse_now());
    }

    /// Gives back now what a reset of `device` left for the watcher: the process is about to
    /// ask npud again, and must not hold the old grant while it waits for a new one.
    pub(super) fn flush_reset(&'static self, device: u32) {
        let Some((streams, events)) = lock(&self.resets).remove(&device) else { return };
        self.give_back(device, streams);
        if events > 0 {
            let _ = self.with_conn(|c| {
                self.release_events(c, device, events);
                Ok(())
            });
        }
    }

    /// Gives `count` events on `device` back to npud (nothing when there are none).
    fn release_events(&self, conn: &mut Connection, device: u32, count: u32) {
        if count > 0 {
            let release = pb::ReleaseEventsRequest { device, count, identity: self.devices.identity(device) };
            let _ = conn.call(Call::ReleaseEvents(release), Duration::ZERO);
        }
    }

    /// Streams went away on `device`; the surplus goes back once it is quiet.
    pub(super) fn destroying(&self, device: u32) {
        lock(&self.releases).insert(device, coarse_now());
    }

    /// A stream is being created on `device`: an open batch stays open, and so does a
    /// surplus waiting for quiet. A creation the grant covers after the batch ended opens
    /// a report of its own: npud hears what the process has created once the device is
    /// quiet again (what its reconciliation counts against the device), not only at the
    /// process's next ask or release.
    pub(super) fn creating(&self, device: u32, new_batch: bool) {
        let now = coarse_now();
        // A surplus waiting for quiet (one asked ahead), or a start-up settling, waits
        // while creation goes on.
        if let Some(last) = lock(&self.releases).get_mut(&device) {
            *last = now;
        }
        if let Some(last) = lock(&self.settling).get_mut(&device) {
            *last = now;
        }
        let mut batches = lock(&self.batches);
        match batches.get_mut(&device) {
            Some(last) if !new_batch => *last = now,
            _ => {
                batches.insert(device, now);
            }
        }
    }

    /// The batch on `device` used its whole grant: it ends now, not after a quiet period,
    /// so the next process's batch need not wait. The report goes out from here without
    /// waiting for its answer (one write; no thread woken, no round trip on the program's
    /// path); when the connection is busy, or too many such reports are unanswered (a
    /// program that creates and destroys in a loop), the watcher sends it instead. A batch
    /// that holds no creation turn is left to the watcher's next round: nobody waits for
    /// its end, and waking npud now would only take CPU from the program's start-up.
    pub(super) fn batch_complete(&self, device: u32) {
        let mut batches = lock(&self.batches);
        if !batches.contains_key(&device) {
            return;
        }
        if lock(&self.unpaced).contains(&device) {
            batches.insert(device, coarse_now().saturating_sub(BATCH_QUIET));
            return;
        }
        if let Ok(mut guard) = self.conn.try_lock()
            && let Some(conn) = guard.as_mut()
        {
            batches.remove(&device);
            drop(batches);
            match conn.send_report(self.batch_done(device)) {
                Ok(false) => {}
                Err(WireError::Unreachable(_)) => {
                    *guard = None;
                    return;
                }
                Ok(true) | Err(_) => return,
            }
            batches = lock(&self.batches);
        }
        // Quiet already, so the watcher reports it when it wakes.
        batches.insert(device, coarse_now().saturating_sub(BATCH_QUIET));
        drop(batches);
        if let Some(t) = self.watcher_thread.get() {
            t.unpark();
        }
    }

    pub(super) fn give_back(&'static self, device: u32, count: u32) {
        if count == 0 || self.devices.is_unowned(device) {
            return;
        }
        let release = self.release_of(device, count, lock(&self.books).device(device).used);
        let _ = self.with_conn(|c| c.call(release, Duration::ZERO));
    }
}

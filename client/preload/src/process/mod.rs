//! One interposed process: its books, its connection to npud, and the decisions each hook
//! asks for. A child after fork() gets a state of its own (see `ffi::process`), never the
//! parent's connection or holdings.
//!
//! Locks: the books lock is never held across a call to npud or the vendor, and the
//! connection lock is only taken with the books lock released, so no hook can deadlock
//! another thread's hook.

mod away;
mod connection;
mod contexts;
mod events;
mod graphs;
mod refusal;
mod reports;

pub use away::HATCH;
pub use refusal::Refused;

use crate::books::{Books, Plan};
use crate::capture::Captures;
use crate::devices::Devices;
use crate::events::EventBooks;
use crate::settings::{DEFAULT_CAPTURE_HEADROOM, DEFAULT_STREAMS, Settings};
use crate::wire::{Connection, WireError};
use crate::{Map, Set};
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

pub struct Process {
    pub pid: u32,
    settings: Settings,
    books: Mutex<Books>,
    events: Mutex<EventBooks>,
    /// Devices with a creation batch open, and when a stream was last created on each.
    batches: Mutex<Map<u32, Duration>>,
    /// Devices whose last grant holds no creation turn (npud said `unpaced`: the device has
    /// room): nobody waits for the batch's end, so the watcher reports it, off the
    /// program's path.
    unpaced: Mutex<Set<u32>>,
    /// Devices where streams were destroyed, and when last: their surplus grant goes back
    /// to npud in one release once they are quiet, not one round trip per destroy.
    releases: Mutex<Map<u32, Duration>>,
    /// What a device reset gave up, per device: (streams, events) the watcher gives back
    /// with the device's next quiet release, off the program's path (a process that exits
    /// right after its reset gives everything back by closing its connection anyway).
    resets: Mutex<Map<u32, (u32, u32)>>,
    conn: Mutex<Option<Connection>>,
    /// When npud was last found unreachable (coarse clock), and why: not tried again
    /// before `CONNECT_RETRY` has passed, unless the process requires npud.
    unreachable: Mutex<Option<(Duration, String)>>,
    /// Held by the thread asking npud for streams, from its plan to the booking of the
    /// answer (see [`Process::admit`]).
    asking: Mutex<()>,
    /// The vendor's name for each device number the process uses.
    pub devices: Devices,
    /// Graph captures under way and the models holding their streams (`graphs`).
    captures: Mutex<Captures>,
    /// Whether the process ever began a capture: until then the hooks on every task skip
    /// the captures' lock.
    captured_once: std::sync::atomic::AtomicBool,
    /// The tenant's `process_streams` as npud's welcome said (0: none configured).
    tenant_streams: AtomicU32,
    /// The tenant's max_streams as the welcome said (0: not heard yet).
    tenant_max: AtomicU32,
    /// The most urgent priority the tenant may give a stream, as the welcome said
    /// (i32::MIN: no limit, or not heard yet).
    tenant_priority: AtomicI32,
    /// On Kubernetes, the most the process asks for at once on each device its pod is
    /// booked on, as the welcome said (empty: no allocation, or not heard yet).
    bookings: Mutex<Vec<pb::DeviceBooking>>,
    /// The process is a pod's, sharing the pod's allocation with its other processes (the
    /// welcome said so): what it does not use goes back once its start-up settles.
    shared: AtomicBool,
    /// What a first graph capture with no hint is admitted for (the welcome's
    /// `capture_headroom`).
    capture_headroom: AtomicU32,
    /// npud limits some device's processes with a context (client slots).
    client_slots: AtomicBool,
    /// Devices this process holds a client slot on.
    slots: Mutex<crate::Set<u32>>,
    /// Devices whose start-up grant is settling: since when no stream was made there.
    settling: Mutex<crate::Map<u32, Duration>>,
    /// Whether npud has been asked for it (once, before the first plan).
    asked_tenant: AtomicBool,
    /// npud welcomed this process once: while it is away, what the process holds covers
    /// it, and an ask past that fails at once (`away`).
    welcomed_once: AtomicBool,
    /// What a pod's process may make past its grant on each device while npud is away
    /// (the welcome's `cushion`), and what it made so on each since npud last answered.
    cushion: AtomicU32,
    away_made: Mutex<Map<u32, u32>>,
    warned: AtomicBool,
    watcher: Once,
    /// The SoC's streams per context, learned (`learn_context_sync`).
    soc: Once,
    /// The watcher thread, woken early when a batch is complete.
    watcher_thread: OnceLock<std::thread::Thread>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Process {
    pub fn new(pid: u32) -> Process {
        Process {
            pid,
            settings: Settings::from_env(),
            books: Mutex::new(Books::default()),
            events: Mutex::new(EventBooks::default()),
            batches: Mutex::new(Map::default()),
            unpaced: Mutex::new(Set::default()),
            releases: Mutex::new(Map::default()),
            resets: Mutex::new(Map::default()),
            conn: Mutex::new(None),
            unreachable: Mutex::new(None),
            asking: Mutex::new(()),
            devices: Devices::default(),
            captures: Mutex::new(Captures::default()),
            captured_once: std::sync::atomic::AtomicBool::new(false),
            tenant_streams: AtomicU32::new(0),
            tenant_max: AtomicU32::new(0),
            tenant_priority: AtomicI32::new(i32::MIN),
            bookings: Mutex::new(Vec::new()),
            shared: AtomicBool::new(false),
            capture_headroom: AtomicU32::new(DEFAULT_CAPTURE_HEADROOM),
            client_slots: AtomicBool::new(false),
            slots: Mutex::new(crate::Set::default()),
            settling: Mutex::new(crate::Map::default()),
            asked_tenant: AtomicBool::new(false),
            welcomed_once: AtomicBool::new(false),
            cushion: AtomicU32::new(0),
            away_made: Mutex::new(Map::default()),
            warned: AtomicBool::new(false),
            watcher: Once::new(),
            soc: Once::new(),
            watcher_thread: OnceLock::new(),
        }
    }

    /// The process's whole start-up need on `device`: `NPUD_STREAMS`, else its tenant's
    /// `process_streams` in npud's config, else a torch_npu process's.
    /// Never more than the tenant may hold: a larger ask could never be granted, and an
    /// unmodified process would fail at its first aclrtSetDevice under a small quota. On
    /// Kubernetes, never more than its pod's booking on that device (NPUD_STREAMS there is
    /// the whole allocation, which a pod of several NPUs books a part of on each).
    fn startup(&self, device: u32) -> u32 {
        let tenant = self.tenant_streams.load(Ordering::Relaxed);
        let ask = self.settings.streams.or((tenant > 0).then_some(tenant)).unwrap_or(DEFAULT_STREAMS);
        let ask = match self.tenant_max.load(Ordering::Relaxed) {
            0 => ask,
            max => ask.min(max),
        };
        let bookings = lock(&self.bookings);
        if bookings.is_empty() {
            return ask;
        }
        let identity = self.devices.identity(device);
        let booked = bookings.iter().find(|b| match (&identity, &b.identity) {
            (Some(mine), Some(theirs)) => mine.id == theirs.id,
            // A device whose vendor name is unknown is taken by its number.
            _ => identity.is_none() && b.device == device,
        });
        // A pod's streams placed on no device: all of them asked for, npud grants a share
        // over the devices the process sees (`at_least`, `visible_devices`).
        booked.map_or(ask, |b| match b.floating {
            0 => ask.min(b.streams),
            floating => ask.min(b.placed.saturating_add(floating)),
        })
    }

    /// The priority a stream the program asks `asked` for is made with: no more urgent
    /// (a lower number) than its tenant may ask for. npud never sees the priorities of the
    /// streams a process makes, so its tenant's limit is kept here; the vendors clamp a
    /// priority out of the device's range the same way, rather than refuse the stream.
    /// Read after admission, when npud's welcome is in.
    pub fn priority(&self, asked: i32) -> i32 {
        asked.max(self.tenant_priority.load(Ordering::Relaxed))
    }

    /// Admits `n` new streams on `device` (a context's default stream is one).
    pub fn admit(&'static self, device: u32, n: u32) -> Result<(), Refused> {
        self.admit_as(device, n, false)
    }

    /// [`Process::admit`], saying whether the streams are a graph capture's (its Begin
    /// stream, a join, a cascade): npud counts those asks per session as what a later
    /// `captured` claim may match.
    pub fn admit_as(&'static self, device: u32, n: u32, capture: bool) -> Result<(), Refused> {
        // NPUD_CONNECT_WAIT bounds this whole call's waits for npud, however many connects.
        let _bound = away::CallDeadline::start(self.settings.connect_wait);
        // The first ask goes with the hello when the process's ask is fixed (NPUD_STREAMS);
        // otherwise the welcome, which carries the tenant's start-up ask and quota, comes
        // first. An unreachable npud is dealt with by the acquire below.
        let first = !self.asked_tenant.swap(true, Ordering::Relaxed);
        // On Kubernetes the welcome says how much of the allocation is this device's, so it
        // comes first there.
        let with_hello = first && self.settings.streams.is_some() && self.settings.allocation.is_empty();
        if first && !with_hello {
            let _ = self.with_conn(|_| Ok(()));
        }
        if self.devices.is_unowned(device) {
            return self.unadmitted(device, n);
        }
        if crate::devices::fault(device).is_some() {
            // npud's word may be old: it is asked again, and a cleared fault admits as
            // before. Unanswered, the streams go the way an unreachable npud's do below.
            let ask = pb::BudgetShareRequest { device, identity: self.devices.identity(device) };
            if self.with_conn(|c| c.call(Call::Share(ask), Duration::ZERO)).is_err() {
                crate::devices::note_fault(device, "");
            }
            if let Some(why) = crate::devices::fault(device) {
                return Err(Refused::because(format!("device {device} is faulted: {why}; npud admits nothing there")));
            }
        }
        self.flush_reset(device);
        if let Plan::Covered = lock(&self.books).plan(device, n, self.startup(device)) {
            self.creating(device, false);
            return Ok(());
        }
        // One ask at a time, planned again once it is this thread's turn: threads that
        // start together (every thread of a framework sets its device) would otherwise
        // each ask for a whole start-up before the first grant is booked, and hold several
        // times what the process uses.
        let _asking = lock(&self.asking);
        let plan = lock(&self.books).plan(device, n, self.startup(device));
        let Plan::Ask { count, wait, needed } = plan else {
            self.creating(device, false);
            return Ok(());
        };
        let wait = if wait { self.settings.wait } else { Duration::ZERO };
        let wait_ms = wait.as_millis().min(u128::from(u32::MAX)) as u32;
        // What the process created there goes with the ask: a measurement since the last
        // report would otherwise count those streams against this ask too (`created`).
        let created = Some(lock(&self.books).device(device).used);
        // A pod's process says the least that will do (the streams it makes now, or needs
        // past its grant): npud grants it what the pod has left, up to the ask.
        let shared = self.shared.load(Ordering::Relaxed);
        let visible_devices = self.devices.visible();
        let ask = |count: u32| {
            let identity = self.devices.identity(device);
            // At start-up what it makes now, past its grant what it lacks now: a pod's
            // process says so always, anyone's ask ahead too.
            let at_least = (shared || count > needed).then_some(needed.min(n).clamp(1, count));
            Call::Acquire(pb::AcquireBudgetRequest {
                device,
                count,
                wait_ms,
                identity,
                created,
                capture,
                at_least,
                visible_devices,
                client_slot: false,
            })
        };
        let answer = match with_hello {
            true => self.call_opening(ask(count), wait),
            false => self.with_conn(|c| c.call(ask(count), wait)),
        };
        // Sent before the welcome said the tenant's quota: an ask above it is asked again
        // within it, as it would have been had the welcome come first.
        let answer = match answer {
            Err(WireError::Refused { reason, .. })
                if with_hello && reason == pb::ErrorReason::QuotaExceeded as i32 && count > self.startup(device) =>
            {
                let Plan::Ask { count: again, .. } = lock(&self.books).plan(device, n, self.startup(device)) else {
                    return Ok(());
                };
                return self.acquired(device, again, n, self.with_conn(|c| c.call(ask(again), wait)));
            }
            // Asked ahead and refused (no room for that much, or over the quota): what is
            // needed now is asked alone, as it would have been.
            Err(WireError::Refused { reason, .. })
                if count > needed && reason != pb::ErrorReason::DeviceNotOwned as i32 =>
            {
                return self.acquired(device, needed, n, self.with_conn(|c| c.call(ask(needed), wait)));
            }
            // The connection broke, or npud is handing over to its successor: asked once
            // more on a new connection (npud's successor is already listening during a
            // handover; an npud that is gone fails the connect at once).
            Err(WireError::Unreachable(_)) if self.settings.required => self.with_conn(|c| c.call(ask(count), wait)),
            other => other,
        };
        let booked = self.acquired(device, count, n, answer);
        if booked.is_ok() && count > needed {
            // What was asked ahead and is still unused once creation there goes quiet
            // goes back, with any other surplus (`release_quiet_surplus`).
            self.destroying(device);
        }
        if booked.is_ok() && shared {
            // A pod's process gives back what it does not use once its start-up settles.
            self.settle(device);
        }
        booked
    }

    /// Books the answer to an ask of `count` streams for `n` new ones on `device`.
    fn acquired(&self, device: u32, count: u32, n: u32, answer: Result<Reply, WireError>) -> Result<(), Refused> {
        match answer {
            Ok(reply) => {
                // Room to ask ahead in is known only where npud said the device has it.
                let (unpaced, room) = match &reply {
                    Reply::Acquired(a) if a.unpaced => (true, a.share.as_ref().map_or(0, |s| s.available)),
                    _ => (false, 0),
                };
                // What npud granted of an ask that said the least that would do.
                let count = match &reply {
                    Reply::Acquired(a) => a.granted.map_or(count, |g| g.max(n)),
                    _ => count,
                };
                let mut books = lock(&self.books);
                books.granted(device, count, n);
                books.set_room(device, room);
                drop(books);
                if unpaced {
                    lock(&self.unpaced).insert(device);
                } else {
                    lock(&self.unpaced).remove(&device);
                }
                self.creating(device, true);
                Ok(())
            }
            Err(e @ WireError::Unreachable(_)) => {
                if !self.within_cushion(device, n) {
                    self.unreachable(&e)?;
                }
                // Counted as our own grant, so it can be declared once npud is back.
                lock(&self.books).granted(device, n, n);
                Ok(())
            }
            Err(WireError::Refused { reason, .. }) if reason == pb::ErrorReason::DeviceNotOwned as i32 => {
                if self.devices.mark_unowned(device) {
                    match self.settings.required {
                        true => eprintln!("npud-preload: {}", self.not_owned(device)),
                        false => eprintln!(
                            "npud-preload: npud does not own {}; its streams are created without admission",
                            self.devices.describe(device)
                        ),
                    }
                }
                self.unadmitted(device, n)
            }
            Err(WireError::Refused { message, .. }) => {
                // npud's message says how many streams it could not grant, and why.
                Err(Refused::because(format!("device {device}: {message}")))
            }
        }
    }

    /// `n` streams on a device npud does not own: created without admission and booked as
    /// the process's own, or refused under NPUD_REQUIRED.
    fn unadmitted(&self, device: u32, n: u32) -> Result<(), Refused> {
        if self.settings.required {
            // Said on stderr once, when npud first answered so; each refusal's message.
            return Err(Refused::quietly(self.not_owned(device)));
        }
        lock(&self.books).granted(device, n, n);
        Ok(())
    }

    /// Why a device npud does not own refuses under NPUD_REQUIRED.
    fn not_owned(&self, device: u32) -> String {
        format!("npud does not own {}; NPUD_REQUIRED is set, so creation there fails", self.devices.describe(device))
    }

    /// The vendor call that `admit` was for failed.
    pub fn not_created(&self, device: u32, n: u32) {
        lock(&self.books).not_created(device, n);
    }

    pub fn stream_created(&self, stream: usize, device: u32, ctx: usize) {
        let complete = {
            let mut books = lock(&self.books);
            books.stream_created(stream, device, ctx);
            books.grant_used(device)
        };
        if complete {
            self.batch_complete(device);
        }
    }

    pub fn stream_destroyed(&self, stream: usize) {
        self.streams_gone(|books| books.stream_destroyed(stream).map(|d| (d, 1)));
    }

    /// Books the streams `forget` says went away, (device, how many), as freed; their
    /// surplus goes back once the device is quiet.
    fn streams_gone(&self, forget: impl FnOnce(&mut Books) -> Option<(u32, u32)>) {
        let device = {
            let mut books = lock(&self.books);
            forget(&mut books).map(|(d, n)| {
                books.freed(d, n);
                d
            })
        };
        if let Some(device) = device {
            self.destroying(device);
        }
    }
}

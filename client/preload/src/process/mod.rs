//! One interposed process: its books, its connection to npud, and the decisions each hook
//! asks for. A child after fork() gets a state of its own (see `ffi::process`), never the
//! parent's connection or holdings.
//!
//! Locks: the books lock is never held across a call to npud or the vendor, and the
//! connection lock is only taken with the books lock released, so no hook can deadlock
//! another thread's hook.

mod graphs;

use crate::Map;
use crate::books::{Books, Plan};
use crate::capture::Captures;
use crate::devices::Devices;
use crate::events::EventBooks;
use crate::settings::{DEFAULT_STREAMS, Settings};
use crate::sys::coarse_now;
use crate::wire::{Connection, WireError};
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

/// npud refused (or the wait expired, or npud is required and unreachable): the hook
/// returns its vendor's "no stream resource" code instead of creating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;
/// How often the watcher looks for a closed connection while the process holds streams.
const WATCH_PERIOD: Duration = Duration::from_millis(250);
/// How often it looks while a creation batch is open, and how long a batch must be quiet
/// (no stream created) before npud hears it is done and lets the next process's batch
/// start. Creating a stream takes microseconds to a few milliseconds, so a start-up's
/// creations are much closer together than this. A batch that used its whole grant ends
/// at once.
const BATCH_QUIET: Duration = Duration::from_millis(20);

/// How old a share npud sent may be and still answer aclrtGetStreamAvailableNum (and
/// aclrtGetEventAvailNum) without asking again: others' grants in that time are not seen,
/// and the answer is never above the vendor's own count.
const SHARE_FRESH: Duration = Duration::from_millis(100);

pub struct Process {
    pub pid: u32,
    settings: Settings,
    books: Mutex<Books>,
    events: Mutex<EventBooks>,
    /// Devices with a creation batch open, and when a stream was last created on each.
    batches: Mutex<Map<u32, Duration>>,
    /// Devices where streams were destroyed, and when last: their surplus grant goes back
    /// to npud in one release once they are quiet, not one round trip per destroy.
    releases: Mutex<Map<u32, Duration>>,
    /// What a device reset gave up, per device: (streams, events) the watcher gives back
    /// with the device's next quiet release, off the program's path (a process that exits
    /// right after its reset gives everything back by closing its connection anyway).
    resets: Mutex<Map<u32, (u32, u32)>>,
    conn: Mutex<Option<Connection>>,
    /// Held by the thread asking npud for streams, from its plan to the booking of the
    /// answer (see [`Process::admit`]).
    asking: Mutex<()>,
    /// The vendor's name for each device number the process uses.
    pub devices: Devices,
    /// Graph captures under way and the models holding their streams (`graphs`).
    captures: Mutex<Captures>,
    /// The tenant's `process_streams` as npud's welcome said (0: none configured).
    tenant_streams: AtomicU32,
    /// The tenant's max_streams as the welcome said (0: not heard yet).
    tenant_max: AtomicU32,
    /// Whether npud has been asked for it (once, before the first plan).
    asked_tenant: AtomicBool,
    warned: AtomicBool,
    watcher: Once,
    /// The SoC's streams per context, learned (`learn_context_sync`).
    soc: Once,
    /// The watcher thread, woken early when a batch is complete.
    watcher_thread: OnceLock<std::thread::Thread>,
}

/// A connection just opened, and the answer to the call sent with it, if one was.
type Opened = Result<(Connection, Option<Result<Reply, WireError>>), WireError>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the devices that have been quiet for `BATCH_QUIET` out of `last_seen` (times on
/// the coarse clock).
fn take_quiet(last_seen: &Mutex<Map<u32, Duration>>) -> Vec<u32> {
    let mut map = lock(last_seen);
    let now = coarse_now();
    let quiet: Vec<u32> =
        map.iter().filter(|(_, last)| now.saturating_sub(**last) >= BATCH_QUIET).map(|(&d, _)| d).collect();
    for d in &quiet {
        map.remove(d);
    }
    quiet
}

/// Books `made` streams where `admitted` were admitted: threads that made contexts on one
/// device at once each planned from the same books, and only one of them made the
/// device's own default stream. What was admitted and not made stays unused grant; what
/// was made beyond it is used all the same (the next ask covers it).
fn settle(books: &mut Books, device: u32, admitted: u32, made: u32) {
    if admitted > made {
        books.not_created(device, admitted - made);
    } else if made > admitted {
        books.granted(device, 0, made - admitted);
    }
}

fn program() -> String {
    std::env::args_os().next().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default()
}

impl Process {
    pub fn new(pid: u32) -> Process {
        Process {
            pid,
            settings: Settings::from_env(),
            books: Mutex::new(Books::default()),
            events: Mutex::new(EventBooks::default()),
            batches: Mutex::new(Map::default()),
            releases: Mutex::new(Map::default()),
            resets: Mutex::new(Map::default()),
            conn: Mutex::new(None),
            asking: Mutex::new(()),
            devices: Devices::default(),
            captures: Mutex::new(Captures::default()),
            tenant_streams: AtomicU32::new(0),
            tenant_max: AtomicU32::new(0),
            asked_tenant: AtomicBool::new(false),
            warned: AtomicBool::new(false),
            watcher: Once::new(),
            soc: Once::new(),
            watcher_thread: OnceLock::new(),
        }
    }

    /// Runs `f` on the connection, opening it first (and declaring what the process holds,
    /// after npud restarted). A broken connection is dropped so the next call reconnects.
    fn with_conn<T>(&'static self, f: impl FnOnce(&mut Connection) -> Result<T, WireError>) -> Result<T, WireError> {
        let mut guard = lock(&self.conn);
        if guard.as_ref().is_none_or(|c| !c.welcomed()) {
            let started = guard.take();
            *guard = Some(self.connect_with(started, None)?.0);
        }
        let conn = guard.as_mut().ok_or_else(|| WireError::Unreachable("not connected".into()))?;
        let result = f(conn);
        if matches!(result, Err(WireError::Unreachable(_))) {
            *guard = None;
        }
        result
    }

    /// Runs `call` on the connection; when it is still to be opened, `call` goes in the
    /// same write as the hello (one round trip for both). A broken connection is dropped.
    fn call_opening(&'static self, call: Call, wait: Duration) -> Result<Reply, WireError> {
        let mut guard = lock(&self.conn);
        let result = match guard.as_mut() {
            Some(conn) if conn.welcomed() => conn.call(call, wait),
            _ => {
                let started = guard.take();
                self.connect_with(started, Some((call, wait))).and_then(|(conn, answered)| {
                    *guard = Some(conn);
                    answered.unwrap_or_else(|| {
                        Err(WireError::Unreachable("the call sent with the hello went unanswered".into()))
                    })
                })
            }
        };
        if matches!(result, Err(WireError::Unreachable(_))) {
            *guard = None;
        }
        result
    }

    fn connect(&'static self) -> Result<Connection, WireError> {
        self.connect_with(None, None).map(|(conn, _)| conn)
    }

    /// The program has initialised AscendCL (or the CUDA driver): it is about to use a
    /// device. The watcher starts, and the connection opens with its hello sent but no
    /// answer awaited, so npud wakes, identifies the process and opens its session while
    /// the program goes on; its first ask then finds npud awake and the welcome already
    /// there. Nothing happens when the connection is busy or open, and a failed connect is
    /// left to that first ask.
    pub fn prepare(&'static self) {
        if let Ok(mut guard) = self.conn.try_lock()
            && guard.is_none()
        {
            *guard = Connection::start(&self.settings.socket, &program(), &self.settings.allocation, true).ok();
        }
        // After the hello: the thread's start overlaps npud's work on it.
        self.start_watcher();
    }

    /// The descriptor of the connection to npud, when one is open and no thread is using
    /// it (a forked child closes its parent's).
    pub fn connection_fd(&self) -> Option<i32> {
        self.conn.try_lock().ok()?.as_ref().map(Connection::raw_fd)
    }

    fn start_watcher(&'static self) {
        self.watcher.call_once(|| {
            if let Ok(handle) = std::thread::Builder::new().name("npud-preload".into()).spawn(move || self.watch()) {
                let _ = self.watcher_thread.set(handle.thread().clone());
            }
        });
    }

    /// Opens a connection and declares whatever the process already holds (it can only
    /// hold something here if npud went away and came back); then `ahead`, with the hello
    /// when there is nothing to declare first.
    fn connect_with(&'static self, started: Option<Connection>, ahead: Option<(Call, Duration)>) -> Opened {
        // The watcher starts first: its thread's start-up then overlaps the round trip
        // below instead of delaying the program once the answer is in. It sleeps before
        // it looks at anything, and it takes the connection's lock, which is held here.
        self.start_watcher();
        let holding: Vec<(u32, u32)> =
            lock(&self.books).devices().into_iter().filter(|(_, d)| d.used > 0).map(|(id, d)| (id, d.used)).collect();
        let holds_events = !lock(&self.events).holding().is_empty();
        let (with_hello, after) = match holding.is_empty() && !holds_events {
            true => (ahead, None),
            false => (None, ahead),
        };
        let open = |ahead| Connection::open(&self.settings.socket, &program(), &self.settings.allocation, ahead);
        let (mut conn, mut answered) = match started {
            // A connection started at aclInit that broke meanwhile is opened again, once.
            Some(started) => match started.finish(with_hello.clone()) {
                Err(WireError::Unreachable(_)) => open(with_hello)?,
                finished => finished?,
            },
            None => open(with_hello)?,
        };
        self.tenant_streams.store(conn.process_streams, Ordering::Relaxed);
        self.tenant_max.store(conn.max_streams, Ordering::Relaxed);
        for (device, used) in holding.into_iter().filter(|(d, _)| !self.devices.is_unowned(*d)) {
            let identity = self.devices.identity(device);
            let declare = pb::DeclareBudgetRequest { device, count: used, events: 0, identity };
            match conn.call(Call::Declare(declare), Duration::ZERO) {
                Ok(Reply::Declared(d)) => {
                    lock(&self.books).declared(device);
                    if d.accepted < used {
                        eprintln!(
                            "npud-preload: npud counted {} of the {used} streams this process holds on device {device}",
                            d.accepted
                        );
                    }
                }
                Ok(_) => {}
                Err(WireError::Refused { message, .. }) => {
                    eprintln!("npud-preload: declaring {used} streams on device {device}: {message}")
                }
                Err(e) => return Err(e),
            }
        }
        for (device, events) in lock(&self.events).holding() {
            if self.devices.is_unowned(device) {
                continue;
            }
            let declare =
                pb::DeclareBudgetRequest { device, count: 0, events, identity: self.devices.identity(device) };
            if let Ok(Reply::Declared(d)) = conn.call(Call::Declare(declare), Duration::ZERO) {
                lock(&self.events).declared(device, d.events_accepted);
                if d.events_accepted < events {
                    eprintln!(
                        "npud-preload: npud counted {} of the {events} events this process holds on device {device}",
                        d.events_accepted
                    );
                }
            }
        }
        if let Some((call, wait)) = after {
            answered = Some(conn.call(call, wait));
        }
        Ok((conn, answered))
    }

    /// Notices npud going away while the process sits on its streams, and reconnects (and
    /// declares) as soon as npud is back, so a restarted npud counts them without waiting
    /// for the process's next call.
    ///
    /// It also ends creation batches: once a granted batch has been quiet for
    /// `BATCH_QUIET`, it tells npud, off the program's path.
    fn watch(&'static self) {
        loop {
            let open = !lock(&self.batches).is_empty() || !lock(&self.releases).is_empty();
            std::thread::park_timeout(if open { BATCH_QUIET } else { WATCH_PERIOD });
            if std::process::id() != self.pid {
                return;
            }
            let holding = lock(&self.books).devices().iter().any(|(_, d)| d.used > 0);
            let Ok(mut guard) = self.conn.try_lock() else { continue };
            if let Some(conn) = guard.as_mut()
                && conn.settle_arrived().is_err()
            {
                *guard = None;
            }
            if let Some(conn) = guard.as_mut() {
                self.end_quiet_batches(conn);
                self.release_quiet_surplus(conn);
            }
            if guard.as_mut().is_some_and(Connection::closed_by_peer) {
                *guard = None;
            }
            if guard.is_none() && holding {
                *guard = self.connect().ok();
            }
        }
    }

    fn end_quiet_batches(&self, conn: &mut Connection) {
        for device in take_quiet(&self.batches) {
            // Best effort: npud ends the batch anyway when its pacing window passes. The
            // grant stays the process's: a quiet spell is no proof the batch is over (a slow
            // start-up, lazy creation), and a later ask does not wait, so giving the unused
            // part back here made processes in a crowd fail with 207008.
            let _ = conn.call(self.batch_done(device), Duration::ZERO);
        }
    }

    /// Giving back `count` streams' budget on `device`, saying the process has `created`.
    fn release_of(&self, device: u32, count: u32, created: u32) -> Call {
        let identity = self.devices.identity(device);
        Call::Release(pb::ReleaseBudgetRequest { device, count, identity, created: Some(created) })
    }

    /// The report that the batch on `device` is over: what the process has created there.
    fn batch_done(&self, device: u32) -> Call {
        let created = Some(lock(&self.books).device(device).used);
        Call::Created(pb::CreatedBudgetRequest { device, identity: self.devices.identity(device), created })
    }

    fn release_quiet_surplus(&self, conn: &mut Connection) {
        for device in take_quiet(&self.releases) {
            if self.devices.is_unowned(device) {
                continue;
            }
            let (reset_streams, reset_events) = lock(&self.resets).remove(&device).unwrap_or((0, 0));
            let (count, created) = {
                let mut books = lock(&self.books);
                (books.surplus(device, self.startup()).saturating_add(reset_streams), books.device(device).used)
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

    /// Gives back now what a reset of `device` left for the watcher: the process is about to
    /// ask npud again, and must not hold the old grant while it waits for a new one.
    fn flush_reset(&'static self, device: u32) {
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
    fn destroying(&self, device: u32) {
        lock(&self.releases).insert(device, coarse_now());
    }

    /// A stream is being created on `device`: an open batch stays open. A creation the
    /// grant covers after the batch ended opens a report of its own: npud hears what the
    /// process has created once the device is quiet again (what its reconciliation counts
    /// against the device), not only at the process's next ask or release.
    fn creating(&self, device: u32, new_batch: bool) {
        let now = coarse_now();
        let mut batches = lock(&self.batches);
        match batches.get_mut(&device) {
            Some(last) if !new_batch => *last = now,
            _ => {
                batches.insert(device, now);
            }
        }
    }

    fn unreachable(&self, e: &WireError) -> Result<(), Refused> {
        if self.settings.required {
            eprintln!("npud-preload: {e}; NPUD_REQUIRED is set, so stream creation fails");
            return Err(Refused);
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!("npud-preload: {e}; streams are created without admission");
        }
        Ok(())
    }

    /// The process's whole start-up need per device: `NPUD_STREAMS`, else its tenant's
    /// `process_streams` in npud's config, else a torch_npu process's.
    /// Never more than the tenant may hold: a larger ask could never be granted, and an
    /// unmodified process would fail at its first aclrtSetDevice under a small quota.
    fn startup(&self) -> u32 {
        let tenant = self.tenant_streams.load(Ordering::Relaxed);
        let ask = self.settings.streams.or((tenant > 0).then_some(tenant)).unwrap_or(DEFAULT_STREAMS);
        match self.tenant_max.load(Ordering::Relaxed) {
            0 => ask,
            max => ask.min(max),
        }
    }

    /// Admits `n` new streams on `device` (a context's default stream is one).
    pub fn admit(&'static self, device: u32, n: u32) -> Result<(), Refused> {
        // The first ask goes with the hello when the process's ask is fixed (NPUD_STREAMS);
        // otherwise the welcome, which carries the tenant's start-up ask and quota, comes
        // first. An unreachable npud is dealt with by the acquire below.
        let first = !self.asked_tenant.swap(true, Ordering::Relaxed);
        let with_hello = first && self.settings.streams.is_some();
        if first && !with_hello {
            let _ = self.with_conn(|_| Ok(()));
        }
        if self.devices.is_unowned(device) {
            return self.unadmitted(device, n);
        }
        self.flush_reset(device);
        if let Plan::Covered = lock(&self.books).plan(device, n, self.startup()) {
            self.creating(device, false);
            return Ok(());
        }
        // One ask at a time, planned again once it is this thread's turn: threads that
        // start together (every thread of a framework sets its device) would otherwise
        // each ask for a whole start-up before the first grant is booked, and hold several
        // times what the process uses.
        let _asking = lock(&self.asking);
        let plan = lock(&self.books).plan(device, n, self.startup());
        let Plan::Ask { count, wait } = plan else {
            self.creating(device, false);
            return Ok(());
        };
        let wait = if wait { self.settings.wait } else { Duration::ZERO };
        let wait_ms = wait.as_millis().min(u128::from(u32::MAX)) as u32;
        let ask = |count| {
            Call::Acquire(pb::AcquireBudgetRequest { device, count, wait_ms, identity: self.devices.identity(device) })
        };
        let answer = match with_hello {
            true => self.call_opening(ask(count), wait),
            false => self.with_conn(|c| c.call(ask(count), wait)),
        };
        // Sent before the welcome said the tenant's quota: an ask above it is asked again
        // within it, as it would have been had the welcome come first.
        let answer = match answer {
            Err(WireError::Refused { reason, .. })
                if with_hello && reason == pb::ErrorReason::QuotaExceeded as i32 && count > self.startup() =>
            {
                let Plan::Ask { count: again, .. } = lock(&self.books).plan(device, n, self.startup()) else {
                    return Ok(());
                };
                return self.acquired(device, again, n, self.with_conn(|c| c.call(ask(again), wait)));
            }
            other => other,
        };
        self.acquired(device, count, n, answer)
    }

    /// Books the answer to an ask of `count` streams for `n` new ones on `device`.
    fn acquired(&self, device: u32, count: u32, n: u32, answer: Result<Reply, WireError>) -> Result<(), Refused> {
        match answer {
            Ok(_) => {
                lock(&self.books).granted(device, count, n);
                self.creating(device, true);
                Ok(())
            }
            Err(e @ WireError::Unreachable(_)) => {
                self.unreachable(&e)?;
                // Counted as our own grant, so it can be declared once npud is back.
                lock(&self.books).granted(device, n, n);
                Ok(())
            }
            Err(WireError::Refused { reason, .. }) if reason == pb::ErrorReason::DeviceNotOwned as i32 => {
                if self.devices.mark_unowned(device) {
                    let what = self.devices.describe(device);
                    match self.settings.required {
                        true => eprintln!(
                            "npud-preload: npud does not own {what}; NPUD_REQUIRED is set, so stream creation there fails"
                        ),
                        false => eprintln!(
                            "npud-preload: npud does not own {what}; its streams are created without admission"
                        ),
                    }
                }
                self.unadmitted(device, n)
            }
            Err(WireError::Refused { message, .. }) => {
                eprintln!("npud-preload: no budget for {count} streams on device {device}: {message}");
                Err(Refused)
            }
        }
    }

    /// `n` streams on a device npud does not own: created without admission and booked as
    /// the process's own, or refused under NPUD_REQUIRED.
    fn unadmitted(&self, device: u32, n: u32) -> Result<(), Refused> {
        if self.settings.required {
            return Err(Refused);
        }
        lock(&self.books).granted(device, n, n);
        Ok(())
    }

    /// The vendor call that `admit` was for failed.
    pub fn not_created(&self, device: u32, n: u32) {
        lock(&self.books).not_created(device, n);
    }

    fn give_back(&'static self, device: u32, count: u32) {
        if count == 0 || self.devices.is_unowned(device) {
            return;
        }
        let release = self.release_of(device, count, lock(&self.books).device(device).used);
        let _ = self.with_conn(|c| c.call(release, Duration::ZERO));
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

    /// The batch on `device` used its whole grant: it ends now, not after a quiet period,
    /// so the next process's batch need not wait. The report goes out from here without
    /// waiting for its answer (one write; no thread woken, no round trip on the program's
    /// path); when the connection is busy, or too many such reports are unanswered (a
    /// program that creates and destroys in a loop), the watcher sends it instead.
    fn batch_complete(&self, device: u32) {
        let mut batches = lock(&self.batches);
        if !batches.contains_key(&device) {
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

    pub fn stream_destroyed(&self, stream: usize) {
        self.streams_gone(|books| books.stream_destroyed(stream).map(|d| (d, 1)));
    }

    /// A context was made on `device` with aclrtCreateContext, `admitted` streams having
    /// been admitted for it ([`Process::context_adds`]).
    pub fn context_created(&self, ctx: usize, device: u32, admitted: u32) {
        let complete = {
            let mut books = lock(&self.books);
            let made = books.context_created(ctx, device);
            settle(&mut books, device, admitted, made);
            books.grant_used(device)
        };
        if complete {
            self.batch_complete(device);
        }
    }

    /// Learns once, with `sync_streams` (a vendor call), how many internal-sync streams each
    /// AscendCL context holds here (see [`Books::set_context_sync`]).
    pub fn learn_context_sync(&self, sync_streams: impl FnOnce() -> u32) {
        self.soc.call_once(|| {
            let n = sync_streams();
            lock(&self.books).set_context_sync(n);
        });
    }

    /// Streams an aclrtCreateContext on `device` makes (see [`Books::context_adds`]).
    pub fn context_adds(&self, device: u32) -> u32 {
        lock(&self.books).context_adds(device)
    }

    pub fn context_destroyed(&self, ctx: usize) {
        self.streams_gone(|books| books.context_destroyed(ctx));
    }

    /// A CUDA primary context was retained.
    pub fn primary_retained(&self, device: u32, ctx: usize) {
        lock(&self.books).primary_retained(device, ctx);
    }

    /// A primary context was released: its last release destroys it, and its streams.
    pub fn primary_released(&'static self, device: u32) {
        let last = lock(&self.books).primary_released(device);
        if let Some(ctx) = last {
            self.primary_gone(device, ctx);
        }
    }

    /// A primary context was reset (cudaDeviceReset): its streams are gone.
    pub fn primary_reset(&'static self, device: u32) {
        let ctx = lock(&self.books).primary_context(device);
        if let Some(ctx) = ctx {
            self.primary_gone(device, ctx);
        }
    }

    /// The primary context `ctx` of `device` lost its streams: they and every unused grant
    /// on the device go back at once, as after AscendCL's last device reset.
    fn primary_gone(&'static self, device: u32, ctx: usize) {
        let back = {
            let mut books = lock(&self.books);
            if let Some((d, n)) = books.context_streams_gone(ctx) {
                books.freed(d, n);
            }
            books.release_unused(device)
        };
        self.give_back(device, back);
    }

    /// A CUDA context was destroyed, and the streams made in it with it.
    pub fn context_streams_gone(&self, ctx: usize) {
        self.streams_gone(|books| books.context_streams_gone(ctx));
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

    pub fn context_device(&self, ctx: usize) -> Option<u32> {
        lock(&self.books).context_device(ctx)
    }

    /// When the next aclrtSetDevice on `device` makes its default context (the device is
    /// not set yet), the streams it makes (see [`Books::set_adds`]): the default context's
    /// internal-sync stream on the inference parts, and the device's own default stream
    /// unless a context made with aclrtCreateContext holds the device. None when it is set.
    pub fn first_set(&self, device: u32) -> Option<u32> {
        let books = lock(&self.books);
        (books.device(device).set_count == 0).then(|| books.set_adds(device))
    }

    /// aclrtSetDevice succeeded, `admitted` streams having been admitted for it
    /// ([`Process::first_set`]). Threads that set the device at once may each have asked:
    /// only the first set made the context, so the others' stream is not on the device,
    /// and its budget stays unused grant.
    pub fn device_set(&self, device: u32, admitted: u32, default_ctx: Option<usize>) {
        let mut books = lock(&self.books);
        let (first, made) = books.set_device(device);
        if first && let Some(ctx) = default_ctx {
            books.set_default_context(device, ctx);
        }
        settle(&mut books, device, admitted, if first { made } else { 0 });
    }

    pub fn device_reset(&'static self, device: u32, force: bool) {
        let (back, last) = {
            let mut books = lock(&self.books);
            if force || books.device(device).set_count == 1 {
                // The last reset frees the device's graphs too (lock order: books, captures).
                let models = lock(&self.captures).drop_device(device);
                books.freed(device, models);
            }
            let back = books.reset_device(device, force);
            (back, books.device(device).set_count == 0)
        };
        let events = if last { lock(&self.events).reset(device) } else { 0 };
        if (back > 0 || events > 0) && !self.devices.is_unowned(device) {
            let mut resets = lock(&self.resets);
            let pending = resets.entry(device).or_insert((0, 0));
            *pending = (pending.0.saturating_add(back), pending.1.saturating_add(events));
            drop(resets);
            self.destroying(device);
        }
    }

    /// Admits one event on `device`: covered by the process's event grant, or a chunk
    /// (else exactly one) asked for without waiting.
    pub fn admit_event(&'static self, device: u32) -> Result<(), Refused> {
        if self.devices.is_unowned(device) {
            if self.settings.required {
                return Err(Refused);
            }
            lock(&self.events).granted(device, 1);
            return Ok(());
        }
        if lock(&self.events).plan(device).is_none() {
            return Ok(());
        }
        // One ask at a time, planned again once it is this thread's turn (see `admit`).
        let _asking = lock(&self.asking);
        let Some(chunk) = lock(&self.events).plan(device) else { return Ok(()) };
        self.flush_reset(device);
        let mut last = None;
        for count in [chunk, 1] {
            let ask = pb::AcquireEventsRequest { device, count, identity: self.devices.identity(device) };
            match self.with_conn(|c| c.call(Call::AcquireEvents(ask), Duration::ZERO)) {
                Ok(_) => {
                    lock(&self.events).granted(device, count);
                    return Ok(());
                }
                Err(e @ WireError::Unreachable(_)) => {
                    self.unreachable(&e)?;
                    lock(&self.events).granted(device, 1);
                    return Ok(());
                }
                Err(WireError::Refused { message, .. }) => last = Some(message),
            }
        }
        eprintln!("npud-preload: no event on device {device}: {}", last.unwrap_or_default());
        Err(Refused)
    }

    pub fn event_created(&self, event: usize, device: u32) {
        lock(&self.events).created(event, device);
    }

    pub fn event_not_created(&self, device: u32) {
        lock(&self.events).not_created(device);
    }

    pub fn event_destroyed(&self, event: usize) {
        if let Some(device) = lock(&self.events).destroyed(event) {
            self.destroying(device);
        }
    }

    /// aclrtGetEventAvailNum as the caller's share, like [`Process::available`].
    pub fn available_events(&'static self, device: u32, vendor: u32) -> u32 {
        let d = lock(&self.events).device(device);
        let unused = d.granted.saturating_sub(d.used);
        match self.with_conn(|c| self.share(c, device)) {
            Ok(s) => s.events_available.saturating_add(unused).min(vendor),
            _ => vendor,
        }
    }

    /// aclrtGetStreamAvailableNum as the caller's share: what its tenant may still take
    /// plus what this process was granted and has not used, never above what the vendor
    /// says is free.
    pub fn available(&'static self, device: u32, vendor: u32) -> u32 {
        let unused = {
            let d = lock(&self.books).device(device);
            d.granted.saturating_sub(d.used)
        };
        match self.with_conn(|c| self.share(c, device)) {
            Ok(s) => s.available.saturating_add(unused).min(vendor),
            _ => vendor,
        }
    }

    /// The tenant's share of `device`: the one npud's last reply about it carried when that
    /// is recent (a start-up asks right after its grant), else asked for.
    fn share(&self, c: &mut Connection, device: u32) -> Result<pb::BudgetShare, WireError> {
        if let Some(s) = c.recent_share(device, SHARE_FRESH) {
            return Ok(s);
        }
        let ask = pb::BudgetShareRequest { device, identity: self.devices.identity(device) };
        match c.call(Call::Share(ask), Duration::ZERO)? {
            Reply::Share(s) => Ok(s),
            _ => Err(WireError::Unreachable("an answer that is not a share".into())),
        }
    }
}

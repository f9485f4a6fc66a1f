//! The process's one connection to npud: opened at aclInit (hello sent, answer not
//! awaited) or with the first ask, reopened after npud went away, declaring then what the
//! process already holds.

use super::{Process, lock};
use crate::wire::{Connection, WireError};
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often an npud that is not there is tried again: while a process that requires it
/// waits, and between the hooks of one that does not (those let the vendor calls through
/// meanwhile, without a connect each: a 70-stream start-up made 72 failed connects).
const CONNECT_RETRY: Duration = Duration::from_millis(100);

/// A connection just opened, and the answer to the call sent with it, if one was.
type Opened = Result<(Connection, Option<Result<Reply, WireError>>), WireError>;

fn program() -> String {
    std::env::args_os().next().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default()
}

impl Process {
    /// Runs `f` on the connection, opening it first (and declaring what the process holds,
    /// after npud restarted). A broken connection is dropped so the next call reconnects.
    pub(super) fn with_conn<T>(
        &'static self,
        f: impl FnOnce(&mut Connection) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
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
    pub(super) fn call_opening(&'static self, call: Call, wait: Duration) -> Result<Reply, WireError> {
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

    /// Opens a connection and declares whatever the process already holds (it can only
    /// hold something here if npud went away and came back); then `ahead`, with the hello
    /// when there is nothing to declare first.
    pub(super) fn connect_with(&'static self, started: Option<Connection>, ahead: Option<(Call, Duration)>) -> Opened {
        // The watcher starts first: its thread's start-up then overlaps the round trip
        // below instead of delaying the program once the answer is in. It sleeps before
        // it looks at anything, and it takes the connection's lock, which is held here.
        self.start_watcher();
        if started.is_none()
            && !self.settings.required
            && let Some((at, why)) = lock(&self.unreachable).as_ref()
            && crate::sys::coarse_now().saturating_sub(*at) < CONNECT_RETRY
        {
            return Err(WireError::Unreachable(why.clone()));
        }
        // A process that holds something declares it before anything else is asked. Its
        // books change only once npud has welcomed the connection: a connect that fails
        // (npud away) leaves its grant whole, so what it holds goes on covering its
        // streams (`away`).
        let holds = lock(&self.books).devices().iter().any(|(_, d)| d.used > 0) || lock(&self.events).holds_any();
        let (with_hello, after) = match holds {
            false => (ahead, None),
            true => (None, ahead),
        };
        // Where npud is required (a Kubernetes pod's container), it may be restarting: wait
        // for its socket a moment (NPUD_CONNECT_WAIT, the whole call's bound) before the
        // process is refused (`away`).
        let deadline = self.connect_deadline();
        let open = |ahead: Option<(Call, Duration)>| {
            loop {
                match Connection::open(&self.settings.socket, &program(), &self.settings.allocation, ahead.clone()) {
                    Err(WireError::Unreachable(_)) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(
                            CONNECT_RETRY.min(deadline.saturating_duration_since(std::time::Instant::now())),
                        );
                    }
                    opened => return opened,
                }
            }
        };
        let opened = match started {
            // A connection started at aclInit that broke meanwhile is opened again, once.
            Some(started) => match started.finish(with_hello.clone()) {
                Err(WireError::Unreachable(_)) => open(with_hello),
                finished => finished,
            },
            None => open(with_hello),
        };
        *lock(&self.unreachable) = match &opened {
            Err(WireError::Unreachable(why)) => Some((crate::sys::coarse_now(), why.clone())),
            _ => None,
        };
        let (mut conn, mut answered) = opened?;
        // What is declared is taken, and the old grant dropped, now, under the connection's
        // lock: a thread creating meanwhile asks on this connection, after the declaration.
        let (holding, holding_events) = (lock(&self.books).declaring(), lock(&self.events).declaring());
        self.welcomed_once.store(true, Ordering::Relaxed);
        self.npud_back();
        self.cushion.store(conn.cushion, Ordering::Relaxed);
        self.tenant_streams.store(conn.process_streams, Ordering::Relaxed);
        self.tenant_max.store(conn.max_streams, Ordering::Relaxed);
        self.tenant_priority.store(conn.highest_priority.unwrap_or(i32::MIN), Ordering::Relaxed);
        *lock(&self.bookings) = conn.bookings.clone();
        self.shared.store(conn.shared, Ordering::Relaxed);
        self.client_slots.store(conn.client_slots, Ordering::Relaxed);
        // An npud that does not say (an older one) leaves the interposer's own default.
        if conn.capture_headroom > 0 {
            self.capture_headroom.store(conn.capture_headroom, Ordering::Relaxed);
        }
        for (device, used) in holding.into_iter().filter(|(d, _)| !self.devices.is_unowned(*d)) {
            let identity = self.devices.identity(device);
            let declare = pb::DeclareBudgetRequest { device, count: used, events: 0, identity };
            match conn.call(Call::Declare(declare), Duration::ZERO) {
                Ok(Reply::Declared(d)) => {
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
        for (device, events) in holding_events {
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
}

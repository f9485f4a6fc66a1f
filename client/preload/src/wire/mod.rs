//! A blocking client of npud's budget wire (`budget.proto`): a plain Unix stream with
//! timeouts, used on the caller's own thread. No async runtime, no hidden threads.

use crate::Map;
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

mod input;

/// When npud last answered DRAINING (coarse clock, ms; 0: never): it is stopping, and a
/// successor may be taking its socket over (`process::away`).
pub static DRAINING_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long npud may take to answer anything but a wait for budget.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a caller polls for an answer before it sleeps in the kernel. npud answers most
/// calls in tens of microseconds; a thread that slept meanwhile pays its own wake-up on
/// top (tens more on a busy or virtual machine), on the program's start-up path. Polling
/// yields the CPU between tries, so a daemon that needs this core gets it.
const ANSWER_SPIN: Duration = Duration::from_micros(200);

/// Bytes read from the socket at once: every answer npud sends is far smaller.
const READ_CHUNK: usize = 4096;

/// The most reports sent without waiting whose answers may be unread at once. Answers
/// nobody reads fill the socket (a small frame takes about a kilobyte of its buffer), npud
/// then stops reading to write them, and the program's next report blocks; a program
/// that makes and destroys streams in a tight loop sent thousands and lost its connection
/// to the write timeout (seen on an H100 in the hardware check). With this many in flight
/// the buffers never fill.
const MAX_REPORTS_IN_FLIGHT: usize = 8;

/// The descriptor of the process's open connection to npud (-1: none), kept outside any
/// lock so that a forked child can close it even when another thread of the parent was in
/// a call at the moment of the fork (`ffi::forked`). Set once a connection exists, and
/// cleared before its socket closes, so it never names a descriptor already closed (and
/// perhaps reused for another file).
static OPEN_FD: AtomicI32 = AtomicI32::new(-1);

/// Takes the open connection's descriptor (see `OPEN_FD`); async-signal-safe.
pub fn take_open_fd() -> Option<i32> {
    let fd = OPEN_FD.swap(-1, Ordering::AcqRel);
    (fd >= 0).then_some(fd)
}

#[derive(Debug)]
pub enum WireError {
    /// npud cannot be reached, or the connection broke.
    Unreachable(String),
    /// npud answered with a refusal.
    Refused { message: String, reason: i32 },
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Unreachable(m) => write!(f, "npud is unreachable: {m}"),
            WireError::Refused { message, .. } => write!(f, "{message}"),
        }
    }
}

pub struct Connection {
    stream: UnixStream,
    /// Bytes read and not yet taken as answers: the next answers, whole or begun (npud's
    /// welcome and the grant sent with the hello usually come in one read).
    input: VecDeque<u8>,
    /// The read timeout last set on the socket (setting one is a system call).
    read_timeout: Option<Duration>,
    /// Framed and not yet written: the preface and hello of a connection started without
    /// sending them, until its first call goes with them.
    unsent: Vec<u8>,
    /// Whether npud's welcome has been read.
    welcomed: bool,
    pub tenant: String,
    pub epoch: u32,
    /// The tenant's configured start-up ask (0: not configured).
    pub process_streams: u32,
    /// The tenant's max_streams (0: unknown).
    pub max_streams: u32,
    /// The most urgent priority the tenant may give a stream (None: no limit).
    pub highest_priority: Option<i32>,
    /// On Kubernetes, the most a process of this pod may ask for at once on each device
    /// (empty: no allocation bound).
    pub bookings: Vec<pb::DeviceBooking>,
    /// The process is a pod's, sharing its allocation (the welcome's `shared`).
    pub shared: bool,
    /// npud's `capture_headroom` (the welcome's).
    pub capture_headroom: u32,
    /// What a pod's process keeps of its grant past what it uses (the welcome's `cushion`).
    pub cushion: u32,
    /// Some device of npud's limits its processes with a context (the welcome's).
    pub client_slots: bool,
    /// The last share npud sent for each device (the process's own numbers), and when:
    /// every reply about a device carries one, so aclrtGetStreamAvailableNum right after a
    /// grant needs no round trip of its own.
    shares: Map<u32, (Instant, pb::BudgetShare)>,
    /// Answers npud still owes for calls it did not answer in time, oldest first: the
    /// grant each asked for, if any, so one that arrives after the process gave up on it
    /// is given back instead of staying booked to a process that never made the streams.
    owed: VecDeque<Option<pb::AcquireBudgetRequest>>,
    /// How long npud may take to answer beyond a call's own wait ([`ANSWER_TIMEOUT`]).
    patience: Duration,
}

/// The device a call is about (the process's own number); None for the hello.
fn device_of(call: &Call) -> Option<u32> {
    Some(match call {
        Call::Acquire(a) => a.device,
        Call::Release(r) => r.device,
        Call::Declare(d) => d.device,
        Call::Share(s) => s.device,
        Call::Created(c) => c.device,
        Call::AcquireEvents(a) => a.device,
        Call::ReleaseEvents(r) => r.device,
        Call::Captured(c) => c.device,
        Call::Hello(_) => return None,
    })
}

/// The share a reply carries, if it carries one.
fn share_of(reply: &Reply) -> Option<&pb::BudgetShare> {
    match reply {
        Reply::Acquired(r) => r.share.as_ref(),
        Reply::Released(r) => r.share.as_ref(),
        Reply::Declared(r) => r.share.as_ref(),
        Reply::Share(s) => Some(s),
        Reply::EventsAcquired(r) => r.share.as_ref(),
        Reply::EventsReleased(r) => r.share.as_ref(),
        Reply::Captured(r) => r.share.as_ref(),
        Reply::Welcome(_) | Reply::Error(_) | Reply::Created(_) => None,
    }
}

/// The grant an acquire asks for (given back should its answer come too late).
fn asked_of(call: &Call) -> Option<pb::AcquireBudgetRequest> {
    match call {
        Call::Acquire(a) => Some(a.clone()),
        _ => None,
    }
}

/// Appends `call` to `bytes` as one frame.
fn frame(bytes: &mut Vec<u8>, call: Call) {
    npud_proto::frame::put(bytes, &pb::BudgetCall { call: Some(call) });
}

/// npud did not answer within `limit`: a refusal, so the hook fails as the device would.
fn slow(limit: Duration) -> WireError {
    WireError::Refused { message: format!("npud did not answer within {} ms", limit.as_millis()), reason: 0 }
}

fn too_long(npud_proto::frame::TooLong(len): npud_proto::frame::TooLong) -> WireError {
    broken(format!("a {len}-byte answer"))
}

fn broken(e: impl std::fmt::Display) -> WireError {
    WireError::Unreachable(e.to_string())
}

impl Connection {
    /// Connects, sends the preface and the hello (with the container's allocation token,
    /// if any) and, in the same write, `ahead`: a call that does not depend on the welcome
    /// (the first acquire, when the process's ask is fixed), with its wait. Its answer
    /// comes back with the connection, one round trip for both.
    pub fn open(
        socket: &Path,
        program: &str,
        allocation: &str,
        ahead: Option<(Call, Duration)>,
    ) -> Result<(Connection, Option<Result<Reply, WireError>>), WireError> {
        Connection::start(socket, program, allocation, false)?.finish(ahead)
    }

    /// Connects and frames the preface and the hello, writing them at once when `send_now`
    /// (so npud wakes up and opens the session while the program goes on: the `aclInit`
    /// hook), else with the first call of [`Connection::finish`]. The welcome is read by
    /// `finish`.
    pub fn start(socket: &Path, program: &str, allocation: &str, send_now: bool) -> Result<Connection, WireError> {
        let stream = UnixStream::connect(socket).map_err(|e| broken(format!("{}: {e}", socket.display())))?;
        stream.set_write_timeout(Some(ANSWER_TIMEOUT)).map_err(broken)?;
        let hello = Call::Hello(pb::BudgetHello {
            program: program.chars().take(256).collect(),
            allocation: allocation.to_string(),
            // Every created, release and captured call says what the process created.
            reports_created: true,
        });
        let mut unsent = npud_proto::BUDGET_PREFACE.to_vec();
        frame(&mut unsent, hello);
        let mut conn = Connection {
            stream,
            input: VecDeque::new(),
            read_timeout: None,
            unsent,
            welcomed: false,
            tenant: String::new(),
            epoch: 0,
            process_streams: 0,
            max_streams: 0,
            bookings: Vec::new(),
            shared: false,
            capture_headroom: 0,
            cushion: 0,
            client_slots: false,
            highest_priority: None,
            shares: Map::default(),
            owed: VecDeque::new(),
            patience: ANSWER_TIMEOUT,
        };
        OPEN_FD.store(conn.raw_fd(), Ordering::Release);
        if send_now {
            conn.write_unsent()?;
        }
        Ok(conn)
    }

    /// The socket's descriptor.
    pub fn raw_fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    /// Whether npud's welcome has been read ([`Connection::finish`] reads it).
    pub fn welcomed(&self) -> bool {
        self.welcomed
    }

    /// Sends `ahead` (with the hello when that is not sent yet: one write), reads the
    /// welcome, then `ahead`'s answer: a refusal of that call is its answer, a broken
    /// connection the open's.
    pub fn finish(
        mut self,
        ahead: Option<(Call, Duration)>,
    ) -> Result<(Connection, Option<Result<Reply, WireError>>), WireError> {
        let ahead = ahead.map(|(call, wait)| {
            let asked = asked_of(&call);
            let device = device_of(&call);
            frame(&mut self.unsent, call);
            (asked, device, wait)
        });
        self.write_unsent()?;
        if !self.welcomed {
            match self.answer(self.patience)? {
                Some(Ok(Reply::Welcome(w))) => {
                    self.tenant = w.tenant;
                    self.epoch = w.epoch;
                    self.process_streams = w.process_streams;
                    self.max_streams = w.max_streams;
                    self.highest_priority = w.highest_priority;
                    self.bookings = w.bookings;
                    self.shared = w.shared;
                    self.capture_headroom = w.capture_headroom;
                    self.cushion = w.cushion;
                    self.client_slots = w.client_slots;
                    self.welcomed = true;
                }
                Some(Ok(other)) => return Err(broken(format!("unexpected answer to hello: {other:?}"))),
                Some(Err(e)) => return Err(e),
                None => return Err(slow(self.patience)),
            }
        }
        let answered = match ahead {
            Some((asked, device, wait)) => match self.receive(asked, device, wait) {
                Err(e @ WireError::Unreachable(_)) => return Err(e),
                answer => Some(answer),
            },
            None => None,
        };
        Ok((self, answered))
    }

    /// Writes what is framed and not yet sent, in one write.
    fn write_unsent(&mut self) -> Result<(), WireError> {
        if !self.unsent.is_empty() {
            crate::sys::send_all(&self.stream, &self.unsent).map_err(broken)?;
            self.unsent.clear();
        }
        Ok(())
    }

    /// One call, one answer; `wait` extends the answer timeout for a wait for budget.
    pub fn call(&mut self, call: Call, wait: Duration) -> Result<Reply, WireError> {
        self.settle_owed()?;
        let (asked, device) = (asked_of(&call), device_of(&call));
        self.send(call)?;
        self.receive(asked, device, wait)
    }

    /// Sends a report nothing waits on, as [`Connection::send_unanswered`], unless
    /// `MAX_REPORTS_IN_FLIGHT` answers are still owed after taking the ones that have
    /// arrived (which costs no wait): then it sends nothing and says so (false), and the
    /// caller leaves the report to a thread that may wait.
    pub fn send_report(&mut self, call: Call) -> Result<bool, WireError> {
        if self.owed.len() >= MAX_REPORTS_IN_FLIGHT {
            self.settle_arrived()?;
            if self.owed.len() >= MAX_REPORTS_IN_FLIGHT {
                return Ok(false);
            }
        }
        self.send_unanswered(call)?;
        Ok(true)
    }

    /// Sends `call` without waiting for its answer, which is read (and dropped) before the
    /// next call's, or by [`Connection::settle_arrived`]: for a report nothing waits on.
    pub fn send_unanswered(&mut self, call: Call) -> Result<(), WireError> {
        self.send(call)?;
        self.owed.push_back(None);
        Ok(())
    }

    /// Reads the answers owed that have arrived, without waiting for any (a grant among
    /// them goes back, as in `settle_owed`). An error when the connection has ended.
    pub fn settle_arrived(&mut self) -> Result<(), WireError> {
        while !self.owed.is_empty() && self.frame_arrived()? {
            // A whole answer is in `input`: taking it never waits.
            let Some(reply) = self.answer(self.patience)? else { return Ok(()) };
            self.settle_front(reply)?;
        }
        Ok(())
    }

    /// The share npud last sent for `device`, if it is younger than `max_age`.
    pub fn recent_share(&self, device: u32, max_age: Duration) -> Option<pb::BudgetShare> {
        self.shares.get(&device).filter(|(at, _)| at.elapsed() <= max_age).map(|(_, s)| s.clone())
    }

    fn send(&mut self, call: Call) -> Result<(), WireError> {
        frame(&mut self.unsent, call);
        self.write_unsent()
    }

    /// Reads answers owed for calls that timed out; a grant among them goes back at once
    /// (its own answer is owed in turn). Refused, as slow, while they still do not come.
    fn settle_owed(&mut self) -> Result<(), WireError> {
        while !self.owed.is_empty() {
            let Some(reply) = self.answer(self.patience)? else { return Err(slow(self.patience)) };
            self.settle_front(reply)?;
        }
        Ok(())
    }

    /// Takes `reply` as the answer to the oldest call owed one; a grant no one waits for
    /// any more goes back at once (its own answer is owed in turn).
    fn settle_front(&mut self, reply: Result<Reply, WireError>) -> Result<(), WireError> {
        if let (Ok(Reply::Acquired(_)), Some(Some(a))) = (reply, self.owed.pop_front()) {
            let back = pb::ReleaseBudgetRequest {
                device: a.device,
                count: a.count,
                identity: a.identity,
                ..Default::default()
            };
            self.send(Call::Release(back))?;
            self.owed.push_back(None);
        }
        Ok(())
    }

    /// True when npud has closed the connection (it exited or restarted), or sent bytes
    /// nobody asked for (the connection is then out of step and no use either). Only
    /// called while no call is in flight.
    pub fn closed_by_peer(&mut self) -> bool {
        if !self.owed.is_empty() || !self.welcomed {
            // Bytes may be a late answer or the welcome: the next call reads them (and
            // finds a close).
            return false;
        }
        if !self.input.is_empty() {
            return true;
        }
        let mut probe = [0u8; 1];
        match crate::sys::recv_now(&self.stream, &mut probe) {
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted),
            Ok(_) => true,
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Before the socket closes (fields drop after this).
        let _ = OPEN_FD.compare_exchange(self.raw_fd(), -1, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests;

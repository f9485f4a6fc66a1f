//! A blocking client of npud's budget wire (`budget.proto`): a plain Unix stream with
//! timeouts, used on the caller's own thread. No async runtime, no hidden threads.

use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use prost::Message;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long npud may take to answer anything but a wait for budget.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub tenant: String,
    pub epoch: u32,
    /// The tenant's configured start-up ask (0: not configured).
    pub process_streams: u32,
    /// The tenant's max_streams (0: unknown).
    pub max_streams: u32,
    /// The last share npud sent for each device (the process's own numbers), and when:
    /// every reply about a device carries one, so aclrtGetStreamAvailableNum right after a
    /// grant needs no round trip of its own.
    shares: HashMap<u32, (Instant, pb::BudgetShare)>,
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

fn broken(e: impl std::fmt::Display) -> WireError {
    WireError::Unreachable(e.to_string())
}

impl Connection {
    /// Connects, sends the preface and the hello (with the container's allocation token,
    /// if any).
    pub fn open(socket: &Path, program: &str, allocation: &str) -> Result<Connection, WireError> {
        let mut stream = UnixStream::connect(socket).map_err(|e| broken(format!("{}: {e}", socket.display())))?;
        stream.set_write_timeout(Some(ANSWER_TIMEOUT)).map_err(broken)?;
        stream.write_all(npud_proto::BUDGET_PREFACE).map_err(broken)?;
        let mut conn = Connection {
            stream,
            tenant: String::new(),
            epoch: 0,
            process_streams: 0,
            max_streams: 0,
            shares: HashMap::new(),
        };
        match conn.call(
            Call::Hello(pb::BudgetHello {
                program: program.chars().take(256).collect(),
                allocation: allocation.to_string(),
                // Every created, release and captured call says what the process created.
                reports_created: true,
            }),
            Duration::ZERO,
        )? {
            Reply::Welcome(w) => {
                conn.tenant = w.tenant;
                conn.epoch = w.epoch;
                conn.process_streams = w.process_streams;
                conn.max_streams = w.max_streams;
                Ok(conn)
            }
            other => Err(broken(format!("unexpected answer to hello: {other:?}"))),
        }
    }

    /// One call, one answer; `wait` extends the answer timeout for a wait for budget.
    pub fn call(&mut self, call: Call, wait: Duration) -> Result<Reply, WireError> {
        let device = device_of(&call);
        let reply = self.exchange(call, wait)?;
        if let (Some(device), Some(share)) = (device, share_of(&reply)) {
            self.shares.insert(device, (Instant::now(), *share));
        }
        Ok(reply)
    }

    /// The share npud last sent for `device`, if it is younger than `max_age`.
    pub fn recent_share(&self, device: u32, max_age: Duration) -> Option<pb::BudgetShare> {
        self.shares.get(&device).filter(|(at, _)| at.elapsed() <= max_age).map(|(_, s)| *s)
    }

    fn exchange(&mut self, call: Call, wait: Duration) -> Result<Reply, WireError> {
        let body = pb::BudgetCall { call: Some(call) }.encode_to_vec();
        let mut frame = Vec::with_capacity(body.len() + 4);
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).map_err(broken)?;
        self.stream.set_read_timeout(Some(ANSWER_TIMEOUT + wait)).map_err(broken)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).map_err(broken)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > npud_proto::BUDGET_MAX_FRAME {
            return Err(broken(format!("a {len}-byte answer")));
        }
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).map_err(broken)?;
        match pb::BudgetReply::decode(body.as_slice()).map_err(broken)?.reply {
            Some(Reply::Error(e)) => {
                Err(WireError::Refused { message: e.message, reason: e.detail.map_or(0, |d| d.reason) })
            }
            Some(reply) => Ok(reply),
            None => Err(broken("an empty answer")),
        }
    }

    /// True when npud has closed the connection (it exited or restarted), or sent bytes
    /// nobody asked for (the connection is then out of step and no use either). Only
    /// called while no call is in flight.
    pub fn closed_by_peer(&mut self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let mut probe = [0u8; 1];
        let closed = match self.stream.read(&mut probe) {
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            Ok(_) => true,
        };
        closed || self.stream.set_nonblocking(false).is_err()
    }
}

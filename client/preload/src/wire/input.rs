//! Reading npud's answers: bytes buffered as they come (several answers may arrive in one
//! read), a short poll before the thread sleeps in the kernel, every wait bounded.

use super::{ANSWER_SPIN, Connection, READ_CHUNK, WireError, broken, share_of, slow, too_long};
use npud_proto::v1::{self as pb, budget_reply::Reply};
use prost::Message;
use std::io::Read;
use std::time::{Duration, Instant};

impl Connection {
    /// Reads the answer to a call sent (`asked`: the grant it asked for, if any; `device`:
    /// the device it was about). An answer that does not come within its patience
    /// ([`ANSWER_TIMEOUT`]) + `wait` is a refusal (the hook fails as the device would:
    /// 207008), never "npud is unreachable", which would create without admission: only
    /// a failed connect and a broken connection are that. The late answer is read (and a
    /// late grant given back) before the next call.
    pub(super) fn receive(
        &mut self,
        asked: Option<pb::AcquireBudgetRequest>,
        device: Option<u32>,
        wait: Duration,
    ) -> Result<Reply, WireError> {
        let Some(reply) = self.answer(self.patience + wait)? else {
            self.owed.push_back(asked);
            return Err(slow(self.patience + wait));
        };
        let reply = reply?;
        if let (Some(device), Some(share)) = (device, share_of(&reply)) {
            crate::devices::note_fault(device, &share.fault);
            self.shares.insert(device, (Instant::now(), share.clone()));
        }
        Ok(reply)
    }

    /// The next answer, or None when none starts within `limit`. An answer that has
    /// begun must end within the connection's patience, or the connection is broken. What
    /// is read past it stays in `input` for the next call, so a timeout never leaves the
    /// stream out of step.
    pub(super) fn answer(&mut self, limit: Duration) -> Result<Option<Result<Reply, WireError>>, WireError> {
        if self.input.is_empty() && !self.spin()? {
            self.set_read_timeout(limit)?;
            match self.fill() {
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Ok(None);
                }
                read => read.map_err(broken)?,
            }
        }
        let body = loop {
            if let Some(body) = self.take_frame()? {
                break body;
            }
            self.set_read_timeout(self.patience)?;
            self.fill().map_err(broken)?;
        };
        Ok(Some(match pb::BudgetReply::decode(body.as_slice()).map_err(broken)?.reply {
            // An npud that is going (handing over to its successor, or stopping) is treated
            // as one that is not there: the call is made again on a new connection.
            Some(Reply::Error(e))
                if e.detail.as_ref().is_some_and(|d| d.reason == pb::ErrorReason::Draining as i32) =>
            {
                super::DRAINING_SEEN
                    .store(crate::sys::coarse_now().as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
                return Err(broken(e.message));
            }
            Some(Reply::Error(e)) => {
                Err(WireError::Refused { message: e.message, reason: e.detail.map_or(0, |d| d.reason) })
            }
            Some(reply) => Ok(reply),
            None => return Err(broken("an empty answer")),
        }))
    }

    /// Polls for up to [`ANSWER_SPIN`] for bytes to come; true once some are in `input`.
    fn spin(&mut self) -> Result<bool, WireError> {
        let start = Instant::now();
        while !self.read_now()? {
            if start.elapsed() >= ANSWER_SPIN {
                return Ok(false);
            }
            std::thread::yield_now();
        }
        Ok(true)
    }

    /// One blocking read into `input` (under the read timeout set); the end of the stream
    /// is an error.
    fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; READ_CHUNK];
        match self.stream.read(&mut chunk)? {
            0 => Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "npud closed the connection")),
            n => {
                self.input.extend(&chunk[..n]);
                Ok(())
            }
        }
    }

    /// The body of the first whole frame in `input`, taken off; None while it is not all
    /// there.
    fn take_frame(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        npud_proto::frame::take(&mut self.input).map_err(too_long)
    }

    /// Whether `input` begins with a whole frame. A length over the protocol's bound
    /// breaks the connection.
    fn frame_whole(&self) -> Result<bool, WireError> {
        npud_proto::frame::whole(&self.input).map_err(too_long)
    }

    fn set_read_timeout(&mut self, limit: Duration) -> Result<(), WireError> {
        // A zero timeout means "none" to the socket; the shortest real one stands in.
        let limit = limit.max(Duration::from_micros(1));
        if self.read_timeout != Some(limit) {
            self.stream.set_read_timeout(Some(limit)).map_err(broken)?;
            self.read_timeout = Some(limit);
        }
        Ok(())
    }

    /// Whether a whole answer is in `input`, reading what has arrived first.
    pub(super) fn frame_arrived(&mut self) -> Result<bool, WireError> {
        while !self.frame_whole()? {
            if !self.read_now()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Reads what has arrived into `input` without waiting; false when nothing had.
    pub(super) fn read_now(&mut self) -> Result<bool, WireError> {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match crate::sys::recv_now(&self.stream, &mut chunk) {
                Ok(0) => return Err(broken("npud closed the connection")),
                Ok(n) => {
                    self.input.extend(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(broken(e)),
            }
        }
    }
}

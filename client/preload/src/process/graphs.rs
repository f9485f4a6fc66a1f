//! Graph capture in one process: admitted at aclmdlRICaptureBegin, settled at
//! aclmdlRICaptureEnd, given back at aclmdlRIDestroy, device reset and exit (see
//! `crate::capture`). Counting a model's streams is the vendor hooks' business.

use super::{Process, Refused, lock};
use crate::capture::{Active, Captures, Step};
use crate::wire::WireError;
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Process {
    /// aclmdlRICaptureBegin on `device`: admits the capture whole, for the process's
    /// capture need there (`Captures::need`), held as its headroom until it ends; or
    /// refuses it at once, as the device refuses a stream, where npud has no room for all
    /// of it. Never waits: the process holds streams (the capture's own stream exists),
    /// and a holder never waits for room only another holder frees. Returns the need.
    pub fn capture_admit(&'static self, device: u32) -> Result<u32, Refused> {
        self.captured_once.store(true, Ordering::Release);
        let headroom = self.capture_headroom.load(Ordering::Relaxed);
        let need = lock(&self.captures).need(device, self.settings.capture_streams, headroom);
        if lock(&self.books).reserve(device, need) == 0 {
            return Ok(need);
        }
        // The need is planned as streams to make: the ask is what the grant lacks for it,
        // as growth (no wait; all of it, or the Begin is refused). Granted, the need is
        // held as headroom, made by the capture as it goes.
        self.admit_as(device, need, true)?;
        lock(&self.books).to_reserved(device, need);
        Ok(need)
    }

    /// The capture Begin admitted for `admitted` did not begin: its headroom goes.
    pub fn capture_not_begun(&self, device: u32, admitted: u32) {
        lock(&self.books).unreserve(device, admitted);
    }

    /// The capture began on `stream`, its own stream made out of its headroom.
    pub fn capture_begun(&self, stream: usize, capture: Active) {
        lock(&self.books).reserved_used(capture.device, capture.made);
        lock(&self.captures).begun(stream, capture);
        self.creating(capture.device, false);
    }

    /// Plans a call on a stream that may be in a capture, and admits the streams it will
    /// make there before the device makes them (`crate::capture`). Refused: npud has no
    /// room for one, and the capture is invalidated, as the runtime invalidates a capture it
    /// cannot give a stream.
    pub fn capture_step(&'static self, plan: impl FnOnce(&Captures) -> Step) -> Result<Step, Refused> {
        if !self.captured_once.load(Ordering::Acquire) {
            return Ok(Step::Outside);
        }
        let (step, need) = {
            let c = lock(&self.captures);
            if !c.any() {
                return Ok(Step::Outside);
            }
            let step = plan(&c);
            let need = step.grows().and_then(|(origin, n)| {
                let device = c.active(origin)?.device;
                c.shortfall(origin, n).filter(|s| *s > 0).map(|s| (origin, device, s))
            });
            (step, need)
        };
        if let Some((origin, device, short)) = need {
            // Past its headroom: the growth rule, granted at once where the device has room.
            match self.admit_as(device, short, true) {
                Ok(()) => {
                    if lock(&self.captures).admitted_more(origin, short) {
                        // Made by the call that follows, as the headroom's streams are.
                        lock(&self.books).to_reserved(device, short);
                    } else {
                        self.not_created(device, short); // it ended meanwhile
                    }
                }
                Err(r) => {
                    lock(&self.captures).invalidate(origin);
                    return Err(r);
                }
            }
        }
        Ok(step)
    }

    /// The call planned as `step` on `stream` succeeded (`recorded`: the event it recorded).
    pub fn capture_applied(&self, stream: usize, step: Step, recorded: Option<usize>) {
        if self.captured_once.load(Ordering::Acquire) && (step != Step::Outside || recorded.is_some()) {
            let mut captures = lock(&self.captures);
            let made = step.grows().and_then(|(origin, n)| Some((captures.active(origin)?.device, n)));
            captures.applied(stream, step, recorded);
            drop(captures);
            if let Some((device, n)) = made {
                lock(&self.books).reserved_used(device, n);
                // npud hears what now exists once the device is quiet.
                self.creating(device, false);
            }
        }
    }

    /// Whether npud refused a stream the capture `stream` is in needed (it is invalidated).
    pub fn capture_invalidated(&self, stream: usize) -> bool {
        self.captured_once.load(Ordering::Acquire) && lock(&self.captures).invalidated(stream)
    }

    /// The capture under way on `stream`, if any.
    pub fn capture_active(&self, stream: usize) -> Option<Active> {
        lock(&self.captures).active(stream)
    }

    /// aclmdlRICaptureEnd failed and the capture is gone with its streams: what it made
    /// is freed and its headroom goes, reported as the device now holds.
    pub fn capture_abandoned(&self, stream: usize) {
        if let Some(a) = lock(&self.captures).abandoned(stream) {
            let mut books = lock(&self.books);
            books.unreserve(a.device, a.admitted.saturating_sub(a.made));
            books.freed(a.device, a.made);
            drop(books);
            self.destroying(a.device);
        }
    }

    /// aclmdlRICaptureEnd returned `model` holding `held` streams: the unused headroom
    /// goes, and the difference with what the interposer saw made is settled (streams
    /// made by tasks it cannot see are learnt here). Streams beyond the grant exist
    /// already, so they are booked with npud as the tenant's debt.
    pub fn capture_ended(&'static self, stream: usize, model: usize, held: u32) {
        let Some(a) = lock(&self.captures).ended(stream, model, held) else { return };
        let over = {
            let mut books = lock(&self.books);
            books.unreserve(a.device, a.admitted.saturating_sub(a.made));
            if held >= a.made {
                books.granted(a.device, 0, held - a.made);
            } else {
                books.freed(a.device, a.made - held);
            }
            let d = books.device(a.device);
            d.used.saturating_add(d.reserved).saturating_sub(d.granted)
        };
        if held != a.made || a.admitted > a.made {
            self.destroying(a.device);
        }
        if over > 0 && !self.devices.is_unowned(a.device) {
            self.book_debt(a.device, over);
        }
    }

    fn book_debt(&'static self, device: u32, count: u32) {
        let created = Some(lock(&self.books).device(device).used);
        let call = pb::CapturedBudgetRequest { device, count, identity: self.devices.identity(device), created };
        match self.with_conn(|c| c.call(Call::Captured(call), Duration::ZERO)) {
            Ok(Reply::Captured(c)) => {
                lock(&self.books).granted(device, c.accepted, 0);
                if c.accepted < count {
                    eprintln!(
                        "npud-preload: npud booked {} of the {count} streams a graph capture took beyond this process's grant on device {device}",
                        c.accepted
                    );
                }
            }
            Ok(_) | Err(WireError::Unreachable(_)) => {}
            Err(WireError::Refused { message, .. }) => {
                eprintln!("npud-preload: booking a graph capture's {count} extra streams on device {device}: {message}")
            }
        }
    }

    /// aclmdlRIDestroy succeeded: the model's streams are free.
    pub fn model_destroyed(&self, model: usize) {
        let gone = lock(&self.captures).destroyed(model);
        self.streams_gone(|_| gone);
    }
}

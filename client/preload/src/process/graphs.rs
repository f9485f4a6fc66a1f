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
    /// aclmdlRICaptureBegin on `device`: admits a capture the size of the device's last
    /// one where the tenant has room for it, else its own stream (what the device takes at
    /// Begin; the rest is admitted as it is made), refused as the device would refuse it
    /// when there is no room for that one. Returns what was admitted.
    pub fn capture_admit(&'static self, device: u32) -> Result<u32, Refused> {
        self.captured_once.store(true, Ordering::Release);
        let n = lock(&self.captures).expected(device);
        match self.admit_as(device, n, true) {
            Ok(()) => Ok(n),
            Err(_) if n > 1 => self.admit_as(device, 1, true).map(|()| 1),
            Err(r) => Err(r),
        }
    }

    pub fn capture_begun(&self, stream: usize, capture: Active) {
        lock(&self.captures).begun(stream, capture);
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
            match self.admit_as(device, short, true) {
                Ok(()) => {
                    if !lock(&self.captures).admitted_more(origin, short) {
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
            lock(&self.captures).applied(stream, step, recorded);
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

    /// aclmdlRICaptureEnd failed: the capture took nothing.
    pub fn capture_abandoned(&self, stream: usize) {
        if let Some(a) = lock(&self.captures).abandoned(stream) {
            self.not_created(a.device, a.admitted);
        }
    }

    /// aclmdlRICaptureEnd returned `model` holding `held` streams: settles the difference
    /// with what Begin admitted. Streams beyond the grant exist already, so they are booked
    /// with npud as the tenant's debt.
    pub fn capture_ended(&'static self, stream: usize, model: usize, held: u32) {
        let Some(a) = lock(&self.captures).ended(stream, model, held) else { return };
        let over = {
            let mut books = lock(&self.books);
            if held >= a.admitted {
                books.granted(a.device, 0, held - a.admitted);
            } else {
                books.freed(a.device, a.admitted - held);
            }
            let d = books.device(a.device);
            d.used.saturating_sub(d.granted)
        };
        if held < a.admitted {
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

//! Events admitted a chunk at a time, and the tenant's share that answers
//! aclrtGetStreamAvailableNum and aclrtGetEventAvailNum.

use super::{Process, Refused, lock};
use crate::wire::{Connection, WireError};
use npud_proto::v1::{self as pb, budget_call::Call, budget_reply::Reply};
use std::time::Duration;

/// How old a share npud sent may be and still answer aclrtGetStreamAvailableNum (and
/// aclrtGetEventAvailNum) without asking again: others' grants in that time are not seen,
/// and the answer is never above the vendor's own count.
const SHARE_FRESH: Duration = Duration::from_millis(100);

impl Process {
    /// Admits one event on `device`: covered by the process's event grant, or a chunk
    /// (else exactly one) asked for without waiting.
    pub fn admit_event(&'static self, device: u32) -> Result<(), Refused> {
        if self.devices.is_unowned(device) {
            if self.settings.required {
                return Err(Refused::quietly(self.not_owned(device)));
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
        Err(Refused::because(format!("no event on device {device}: {}", last.unwrap_or_default())))
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

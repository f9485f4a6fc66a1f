//! One interposed process as npud knows it: what it holds and says it created per
//! device, and what its falls withheld until the device is measured again.

use crate::types::Tenant;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One interposed process.
#[derive(Debug, Clone)]
pub struct Holder {
    pub pid: u32,
    pub tenant: Tenant,
    pub program: String,
    pub container: Option<String>,
    /// Streams held per device.
    pub held: BTreeMap<u32, u32>,
    /// Events held per device (they need no ledger: they are never queued).
    pub events: BTreeMap<u32, u32>,
    /// Streams the process said it has created per device (the `created` of its calls).
    pub created: BTreeMap<u32, u32>,
    /// Per device, the capture streams it was granted (its Begin streams, joins and
    /// cascades, asked for before the device made them) not yet matched by a `captured`
    /// claim: the most such a claim may book (`natives::captures`).
    pub capture_room: BTreeMap<u32, u32>,
    /// When its process started (with `pid`, names the process across a restart of npud);
    /// None when unknown.
    pub start: Option<u64>,
    /// Whether it said (in its hello) that it reports them: then a device it has not
    /// reported on counts as nothing created; else (a client that never reports) as its
    /// whole holding.
    pub reports_created: bool,
    /// Per device, what the falls of its created count withheld since the device was last
    /// measured (see [`Natives::set_created`](super::Natives::set_created)).
    pub unmeasured: BTreeMap<u32, Unmeasured>,
    /// Per device, the device's measurement count (its epoch) when the holder last
    /// reported what it created there, or was first granted there.
    pub reported: BTreeMap<u32, u64>,
    /// Told when its process has exited while its connection stays open (another process
    /// holds the descriptor): its session then ends (`daemon::exits`).
    pub exited: Arc<tokio::sync::Notify>,
}

/// What one holder's falls withheld on one device since it was last measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unmeasured {
    /// The device's measurement these figures follow.
    epoch: u64,
    /// The most the holder counted as created since.
    high: u32,
    /// What its falls added to the device's untracked count since.
    withheld: u32,
}

impl Holder {
    /// A process that has just connected: it holds nothing yet.
    pub fn new(pid: u32, tenant: Tenant, container: Option<String>, start: Option<u64>) -> Holder {
        Holder {
            pid,
            tenant,
            program: String::new(),
            container,
            held: BTreeMap::new(),
            events: BTreeMap::new(),
            created: BTreeMap::new(),
            capture_room: BTreeMap::new(),
            start,
            reports_created: false,
            unmeasured: BTreeMap::new(),
            reported: BTreeMap::new(),
            exited: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Streams it counts as having created on `device`: what it reported, never above
    /// what it holds (a claim cannot hide another program's streams).
    pub fn created_on(&self, device: u32) -> u32 {
        let held = self.held.get(&device).copied().unwrap_or(0);
        match self.created.get(&device) {
            Some(&c) => c.min(held),
            None if self.reports_created => 0,
            None => held,
        }
    }

    /// Of the streams its count just fell by (`before` → `created_on` now), those that
    /// may still be on `device` and are not withheld yet: since the device was last
    /// measured (`epoch`), its falls together withhold no more than the most it counted
    /// as created. (A holder that says 100, 0, 100, 0 ... has had at most 100 on the
    /// device; each fall withholding another 100 let it fill the device with nothing.)
    pub(super) fn withhold(&mut self, device: u32, epoch: u64, before: u32) -> u32 {
        let fell = before.saturating_sub(self.created_on(device));
        let u = self.unmeasured.entry(device).or_default();
        if u.epoch != epoch {
            *u = Unmeasured { epoch, high: before, withheld: 0 };
        }
        u.high = u.high.max(before);
        let add = fell.min(u.high.saturating_sub(u.withheld));
        u.withheld += add;
        add
    }

    /// What its going away may leave on `device` that its falls did not withhold yet
    /// (`epoch`: the device's measurement now).
    pub(super) fn left_behind(&self, device: u32, epoch: u64) -> u32 {
        let created = self.created_on(device);
        match self.unmeasured.get(&device) {
            Some(u) if u.epoch == epoch => created.min(u.high.max(created).saturating_sub(u.withheld)),
            _ => created,
        }
    }

    /// The holder reports `created` streams on `device` (measured `epoch` times so far):
    /// whether some of them may have been counted twice, outside the books as well, by a
    /// measurement taken since its last report (its count rose, and the device has been
    /// measured since). Records the report.
    pub(super) fn report(&mut self, device: u32, epoch: u64, before: u32) -> bool {
        let last = self.reported.insert(device, epoch);
        self.created_on(device) > before && last != Some(epoch)
    }
}

//! One device's stream budget: who holds what, what is reserved, and who waits.
//!
//! Grants are whole or nothing. Waiting requests are ordered by a weighted-fair tag
//! (start-time fair queueing): a request's tag is `max(V, tenant's last tag) + n / weight`,
//! and the queue is served strictly in tag order. The head blocks later requests that do
//! not fit either, which is what stops a stream of small requests from starving a large
//! one; global virtual time `V` only moves forward, so every request eventually becomes the
//! head. Requests covered by their tenant's reservation go first, and requests held back
//! only by their own tenant's quota step aside instead of blocking others.
//!
//! A request is refused at once only when nothing but a change of configuration could
//! grant it: more than the device holds, than the tenant may hold, or than others' fixed
//! reservations (their quotas') leave. One that pods' reservations keep out waits: those
//! come and go with the pods.

mod figures;
mod left;
mod request;
mod spread;

pub use figures::TenantFigures;
pub use spread::Spread;

use crate::types::{Quota, Tenant};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
struct Tag(f64);
impl PartialEq for Tag {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for Tag {}
impl PartialOrd for Tag {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Tag {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

struct Pending<W> {
    tenant: Tenant,
    count: u32,
    quota: Quota,
    waiter: W,
}

/// What happened to a request.
pub enum Admit<W> {
    /// Granted at once; the waiter is handed back unused.
    Granted(W),
    /// Waiting; `ticket` cancels it.
    Queued(u64),
}

pub struct Ledger<W> {
    capacity: u32,
    /// Requests one tenant may have waiting at once.
    max_pending: u32,
    pending: HashMap<Tenant, u32>,
    in_use: u32,
    /// Released streams being synchronised before they are pooled or destroyed: they still
    /// occupy hardware, so they count against the budget until they are done.
    draining: u32,
    pooled: u32,
    /// Streams the device holds that no one on these books does (a program outside npud,
    /// a vendor library's own): measured by reconciliation, never handed out. Signed: a
    /// measurement can come out below zero, and a correction must add to what it was.
    untracked: i64,
    /// Streams that left the books perhaps after they left the device, in all: a holder's
    /// created count that fell (it destroyed streams, or went away), streams forced out
    /// of a stuck drain. A measurement of the device adds what left between its last
    /// reading of the books and its use, so one that raced such a change never hands
    /// those streams out twice. What leaves the books before it leaves the device (a
    /// release, a drain, an eviction) and grants need nothing: a measurement that misses
    /// them only withholds more.
    lowered: u64,
    /// Of what left the books, each tenant's part not yet settled by a measurement
    /// (`left`): counted against that tenant, and bounded per tenant.
    left: left::Left,
    used: HashMap<Tenant, u32>,
    reservations: HashMap<Tenant, u32>,
    /// Of the reservations, those that stay until the configuration changes (tenants'
    /// quotas), as opposed to pods' bookings.
    fixed: HashMap<Tenant, u32>,
    queue: BTreeMap<(Tag, u64), Pending<W>>,
    tickets: HashMap<u64, (Tag, u64)>,
    tenant_tag: HashMap<Tenant, f64>,
    virtual_time: f64,
    seq: u64,
    /// Every tenant's holdings over all devices and their caps there (shared by all
    /// devices' ledgers).
    spread: Arc<Spread>,
}

impl<W> Ledger<W> {
    pub fn new(capacity: u32) -> Self {
        Self::with_pending_limit(capacity, u32::MAX)
    }

    pub fn with_pending_limit(capacity: u32, max_pending: u32) -> Self {
        Self::shared(capacity, max_pending, Arc::default())
    }

    /// A ledger whose tenants' totals over every device are kept in `spread`, with the
    /// other devices' ledgers.
    pub fn shared(capacity: u32, max_pending: u32, spread: Arc<Spread>) -> Self {
        Self {
            capacity,
            max_pending,
            pending: HashMap::new(),
            in_use: 0,
            draining: 0,
            pooled: 0,
            untracked: 0,
            lowered: 0,
            left: left::Left::default(),
            used: HashMap::new(),
            reservations: HashMap::new(),
            fixed: HashMap::new(),
            queue: BTreeMap::new(),
            tickets: HashMap::new(),
            tenant_tag: HashMap::new(),
            virtual_time: 0.0,
            seq: 0,
            spread,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    pub fn in_use(&self) -> u32 {
        self.in_use
    }
    pub fn pooled(&self) -> u32 {
        self.pooled
    }
    pub fn draining(&self) -> u32 {
        self.draining
    }
    /// Streams outside the books, never below zero nor above the capacity.
    pub fn untracked(&self) -> u32 {
        self.untracked.clamp(0, i64::from(self.capacity)) as u32
    }

    /// What reconciliation measured (may be below zero); waiting grants that now fit are
    /// served by `process`.
    pub fn set_untracked(&mut self, measured: i64) {
        self.untracked = measured;
    }

    /// Streams that just left the books without (as far as npud knows) leaving the device:
    /// until the next measurement they count as untracked.
    pub fn add_untracked(&mut self, n: u32) {
        self.lowered = self.lowered.wrapping_add(u64::from(n));
        self.untracked = self.untracked.saturating_add(i64::from(n));
    }

    /// `n` untracked streams were claimed (declared) by a holder: they move onto the books.
    pub fn claim_untracked(&mut self, n: u32) {
        self.untracked = self.untracked.saturating_sub(i64::from(n));
    }

    /// Streams the books have let go of so far (wrapping): the difference between two
    /// readings is what left the books in between.
    pub fn lowered(&self) -> u64 {
        self.lowered
    }

    /// Room left for grants: capacity less held, draining and untracked streams (pooled
    /// streams are npud's to evict, so they count as room).
    pub fn grantable(&self) -> u32 {
        self.capacity.saturating_sub(self.in_use).saturating_sub(self.draining).saturating_sub(self.untracked())
    }
    pub fn reserved(&self) -> u32 {
        self.reservations.values().sum()
    }
    pub fn queued(&self) -> u32 {
        self.queue.len() as u32
    }

    /// Waiting asks that the device's hardware room keeps out: creation there races for
    /// the last streams. An ask over its own tenant's quota waits for its siblings'
    /// releases, and one kept out only by other tenants' unused reservations (or its turn
    /// in the fair queue) waits for nothing the hardware lacks: neither contends.
    pub fn contending(&self) -> u32 {
        let room = self.grantable();
        self.queue.values().filter(|p| p.count > room && self.fits_quota(&p.tenant, p.count, &p.quota)).count() as u32
    }
    pub fn used_by(&self, tenant: &str) -> u32 {
        self.used.get(tenant).copied().unwrap_or(0)
    }

    /// What the device reserves for `tenant`.
    pub fn reservation_of(&self, tenant: &str) -> u32 {
        self.reservations.get(tenant).copied().unwrap_or(0)
    }

    /// Replaces the reservation table (after a quota change): every reservation fixed.
    pub fn set_reservations(&mut self, reservations: HashMap<Tenant, u32>) {
        self.fixed = reservations.clone();
        self.reservations = reservations;
    }

    /// Replaces the reservation table: `all` of them, of which `fixed` stay until the
    /// configuration changes (pods' bookings are the rest).
    pub fn set_reservations_with(&mut self, all: HashMap<Tenant, u32>, fixed: HashMap<Tenant, u32>) {
        self.reservations = all;
        self.fixed = fixed;
    }

    /// Reserved streams other tenants have not taken yet: room a claim may never use.
    pub fn reserved_unused_by_others(&self, tenant: &str) -> u32 {
        self.reservations
            .iter()
            .filter(|(t, _)| t.as_ref() != tenant)
            .map(|(t, &r)| r.saturating_sub(self.used_by(t)))
            .fold(0u32, u32::saturating_add)
    }

    fn claim(&self, tenant: &str, used: u32) -> u32 {
        used.max(self.reservations.get(tenant).copied().unwrap_or(0))
    }

    /// Sum over tenants of max(held, reserved): what the budget is committed to.
    /// In u64: reservations come from admins and files, and their sum must not wrap.
    fn committed(&self) -> u64 {
        let held: u64 = self.used.iter().map(|(t, &u)| u64::from(self.claim(t, u))).sum();
        let idle_reserved: u64 =
            self.reservations.iter().filter(|(t, _)| !self.used.contains_key(*t)).map(|(_, &r)| u64::from(r)).sum();
        held + idle_reserved
    }

    fn fits_quota(&self, tenant: &str, count: u32, quota: &Quota) -> bool {
        let used = self.used_by(tenant).saturating_add(self.left_by(tenant));
        used.saturating_add(count) <= quota.max_streams && self.spread.fits(tenant, count)
    }

    fn fits_budget(&self, tenant: &str, count: u32) -> bool {
        let used = self.used_by(tenant);
        let committed = self.committed() - u64::from(self.claim(tenant, used))
            + u64::from(self.claim(tenant, used.saturating_add(count)));
        committed + u64::from(self.draining) + u64::from(self.untracked()) <= u64::from(self.capacity)
    }

    /// Books `count` to `tenant` here (its total over every device is already taken).
    fn book(&mut self, tenant: &Tenant, count: u32, tag: Tag) {
        // Checked under every policy: passthrough books asks no admission bounded.
        let used = self.used.entry(Arc::clone(tenant)).or_insert(0);
        *used = used.saturating_add(count);
        self.in_use = self.in_use.saturating_add(count);
        if tag.0.is_finite() {
            self.virtual_time = self.virtual_time.max(tag.0);
        }
    }

    /// Grants queued requests in tag order; returns the waiters to notify, each with the
    /// tenant and count so a grant nobody is waiting for any more can be given back.
    pub fn process(&mut self) -> Vec<(Tenant, u32, W)> {
        let mut granted = Vec::new();
        let keys: Vec<(Tag, u64)> = self.queue.keys().copied().collect();
        for key in keys {
            let Some(p) = self.queue.get(&key) else {
                continue;
            };
            if !self.fits_quota(&p.tenant, p.count, &p.quota) {
                continue;
            }
            if !self.fits_budget(&p.tenant, p.count) {
                break;
            }
            if !self.spread.try_add(&p.tenant, p.count) {
                continue;
            }
            let Some(p) = self.queue.remove(&key) else {
                continue;
            };
            self.tickets.remove(&key.1);
            self.unqueue(&p.tenant);
            self.book(&p.tenant, p.count, key.0);
            granted.push((p.tenant, p.count, p.waiter));
        }
        granted
    }

    /// Withdraws a waiting request. Returns its 1-based queue position, or None when it
    /// had already been granted.
    pub fn cancel(&mut self, ticket: u64) -> Option<u32> {
        let key = self.tickets.remove(&ticket)?;
        let position = self.queue.range(..key).count() as u32 + 1;
        if let Some(p) = self.queue.remove(&key) {
            self.unqueue(&p.tenant);
        }
        Some(position)
    }

    fn unqueue(&mut self, tenant: &Tenant) {
        crate::types::count_down(&mut self.pending, tenant, 1);
    }

    /// A tenant gives streams back to the device; they start draining.
    pub fn release(&mut self, tenant: &str, count: u32, draining: bool) {
        if let Some(used) = self.used.get_mut(tenant) {
            self.spread.sub(tenant, count.min(*used));
            *used = used.saturating_sub(count);
            if *used == 0 {
                self.used.remove(tenant);
            }
        }
        self.in_use = self.in_use.saturating_sub(count);
        if draining {
            self.draining = self.draining.saturating_add(count);
        }
    }

    pub fn drained(&mut self, count: u32, pooled: u32) {
        self.draining = self.draining.saturating_sub(count);
        self.pooled = self.pooled.saturating_add(pooled);
    }

    /// Released streams destroyed before the books let go of them (forced out of a drain
    /// that did not finish): a measurement in between saw them gone already.
    pub fn destroyed_draining(&mut self, count: u32) {
        self.lowered = self.lowered.wrapping_add(u64::from(count));
        self.drained(count, 0);
    }

    pub fn set_pooled(&mut self, pooled: u32) {
        self.pooled = pooled;
    }

    /// Accounts streams that already exist or are created outside the managed path
    /// (declarations, capture debt, passthrough). A device measurement taken before it may
    /// have seen these streams as untracked and count them twice once applied: that only
    /// withholds, until the measurement its caller asks for.
    pub fn force_take(&mut self, tenant: &Tenant, count: u32) {
        self.spread.add(tenant, count);
        self.book(tenant, count, Tag(f64::NEG_INFINITY));
    }

    /// Books as much of `count` as `tenant`'s cap over every device leaves (what a capture
    /// claim may take: every cap a grant goes through); how much.
    pub fn take_within_caps(&mut self, tenant: &Tenant, count: u32) -> u32 {
        let n = self.spread.add_within(tenant, count);
        self.book(tenant, n, Tag(f64::NEG_INFINITY));
        n
    }

    /// Whether `tenant` has an ask waiting here.
    pub fn tenant_waits(&self, tenant: &str) -> bool {
        self.pending.get(tenant).is_some_and(|n| *n > 0)
    }
}

#[cfg(test)]
mod tests;

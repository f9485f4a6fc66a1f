//! The registry's entries and the one table that holds them, with the indexes kept beside
//! it (by raw handle, by tenant, subscriptions). Insertions and removals go through one
//! function each so the indexes never drift from the table.

use crate::backend::{RawEvent, RawStream};
use crate::types::Tenant;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct StreamEntry {
    pub session: u64,
    pub tenant: Tenant,
    pub device: u32,
    pub raw: RawStream,
    pub priority: i32,
    pub flags: u32,
    pub reused: bool,
    /// (session, thread id) of the subscription that receives this stream's callbacks.
    pub subscriber: Option<(u64, u64)>,
}

#[derive(Debug, Clone)]
pub struct EventEntry {
    pub session: u64,
    pub tenant: Tenant,
    pub device: u32,
    pub raw: RawEvent,
    pub flags: u32,
    pub timing: bool,
}

#[derive(Debug)]
pub struct SessionEntry {
    pub id: u64,
    pub tenant: Tenant,
    pub name: Option<String>,
    pub lease: Duration,
    pub expires: Instant,
    pub streams: HashSet<u64>,
    pub events: HashSet<u64>,
    /// Open report streams keep the session alive regardless of the lease.
    pub report_streams: u32,
}

/// What a closed or lapsed session leaves to reclaim.
#[derive(Debug, Default)]
pub struct Reclaim {
    pub tenant: Option<Tenant>,
    pub streams: Vec<StreamEntry>,
    pub events: Vec<EventEntry>,
}

#[derive(Debug, Clone)]
pub struct SessionView {
    pub id: u64,
    pub tenant: Tenant,
    pub name: Option<String>,
    pub streams: u32,
    pub events: u32,
    pub lease_remaining: Duration,
    pub report_stream_open: bool,
}

#[derive(Default)]
pub(super) struct Inner {
    pub(super) sessions: HashMap<u64, SessionEntry>,
    pub(super) names: HashMap<(Tenant, String), u64>,
    pub(super) streams: HashMap<u64, StreamEntry>,
    /// (device, raw stream) → handle, to attribute device reports without a scan.
    pub(super) by_raw: HashMap<(u32, RawStream), u64>,
    pub(super) events: HashMap<u64, EventEntry>,
    /// Sessions per tenant.
    pub(super) per_tenant: HashMap<Tenant, u32>,
    /// Each tenant's handles, so listing and device sync never scan other tenants'.
    pub(super) by_tenant: HashMap<Tenant, TenantIndex>,
    /// Streams subscribed per (session, thread), for process_report's check.
    pub(super) subscriptions: HashMap<(u64, u64), u32>,
}

#[derive(Default)]
pub(super) struct TenantIndex {
    pub(super) streams: HashSet<u64>,
    pub(super) events: HashSet<u64>,
}

impl Inner {
    /// The one place a stream enters the tables, so the indexes never drift.
    pub(super) fn insert_stream(&mut self, h: u64, e: StreamEntry) {
        self.by_raw.insert((e.device, e.raw), h);
        self.by_tenant.entry(Arc::clone(&e.tenant)).or_default().streams.insert(h);
        if let Some(sub) = e.subscriber {
            *self.subscriptions.entry(sub).or_insert(0) += 1;
        }
        self.streams.insert(h, e);
    }

    /// The one place a stream leaves them (its session's set is the caller's business).
    pub(super) fn detach_stream(&mut self, h: u64) -> Option<StreamEntry> {
        let e = self.streams.remove(&h)?;
        self.by_raw.remove(&(e.device, e.raw));
        if let Some(t) = self.by_tenant.get_mut(&e.tenant) {
            t.streams.remove(&h);
            if t.streams.is_empty() && t.events.is_empty() {
                self.by_tenant.remove(&e.tenant);
            }
        }
        if let Some(sub) = e.subscriber {
            unsubscribe_count(&mut self.subscriptions, sub);
        }
        Some(e)
    }

    pub(super) fn insert_event(&mut self, h: u64, e: EventEntry) {
        self.by_tenant.entry(Arc::clone(&e.tenant)).or_default().events.insert(h);
        self.events.insert(h, e);
    }

    pub(super) fn detach_event(&mut self, h: u64) -> Option<EventEntry> {
        let e = self.events.remove(&h)?;
        if let Some(t) = self.by_tenant.get_mut(&e.tenant) {
            t.events.remove(&h);
            if t.streams.is_empty() && t.events.is_empty() {
                self.by_tenant.remove(&e.tenant);
            }
        }
        Some(e)
    }
}

pub(super) fn unsubscribe_count(subs: &mut HashMap<(u64, u64), u32>, key: (u64, u64)) {
    crate::types::count_down(subs, &key, 1);
}

//! Host callbacks and exception reports, routed to the session that owns the stream.
//!
//! Devices hand reports to an unbounded channel (callable from any thread, never blocks);
//! one dispatcher task routes them. Each session has a bounded buffer of reports with
//! sequence numbers: the push stream resumes after the last sequence a client saw, so a
//! short reconnect loses nothing, and the pull API (process_report) takes the reports of
//! one subscriber thread. What overflows is counted and logged, never silently dropped.

use crate::types::Tenant;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

#[derive(Debug, Clone, PartialEq)]
pub enum ReportBody {
    Callback { callback: u64, stream: u64, thread_id: u64, user_data: Arc<[u8]>, blocking: bool, status: i64 },
    Exception { task: u64, stream: u64, device: u32, thread_id: u64, code: i64, message: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SessionReport {
    pub sequence: u64,
    pub body: ReportBody,
}

impl SessionReport {
    fn thread_id(&self) -> u64 {
        match &self.body {
            ReportBody::Callback { thread_id, .. } | ReportBody::Exception { thread_id, .. } => *thread_id,
        }
    }
}

/// A launched callback that has not fired or not been acknowledged yet.
#[derive(Debug, Clone)]
pub struct PendingCallback {
    pub session: u64,
    pub tenant: Tenant,
    pub stream: u64,
    pub device: u32,
    pub raw_stream: crate::backend::RawStream,
    pub thread_id: u64,
    pub user_data: Arc<[u8]>,
    pub blocking: bool,
    pub fired: bool,
}

#[derive(Default)]
struct Mailbox {
    reports: VecDeque<SessionReport>,
    next_sequence: u64,
    /// Highest sequence pushed on a report stream; kept a while for replay on reconnect.
    sent_upto: u64,
    exceptions_enabled: bool,
    /// Wakes only this session's report stream and pull waiters: one global wake-up per
    /// report would stampede every connected tenant's task on each callback.
    notify: Arc<Notify>,
    /// Bytes the queued reports hold (callback user data and a fixed cost each).
    bytes: usize,
}

/// What one queued report costs against the per-session byte bound.
fn report_bytes(body: &ReportBody) -> usize {
    match body {
        ReportBody::Callback { user_data, .. } => REPORT_FIXED + user_data.len(),
        ReportBody::Exception { message, .. } => REPORT_FIXED + message.len(),
    }
}

/// What a report costs beyond its payload.
const REPORT_FIXED: usize = 128;

impl Mailbox {
    fn pop_front(&mut self) -> Option<SessionReport> {
        let r = self.reports.pop_front()?;
        self.bytes = self.bytes.saturating_sub(report_bytes(&r.body));
        Some(r)
    }

    fn retain(&mut self, mut keep: impl FnMut(&SessionReport) -> bool) {
        let mut freed = 0;
        self.reports.retain(|r| {
            let k = keep(r);
            if !k {
                freed += report_bytes(&r.body);
            }
            k
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }
}

/// Reports already sent on a stream that are kept for a reconnecting client.
const REPLAY_WINDOW: usize = 1024;

#[derive(Default)]
struct Inner {
    mailboxes: HashMap<u64, Mailbox>,
    callbacks: HashMap<u64, PendingCallback>,
    per_tenant: HashMap<Tenant, u32>,
    /// What each launched callback's report costs its tenant until it is delivered (or
    /// can no longer be: its session closed), by callback id.
    charges: HashMap<u64, (Tenant, u64, usize)>,
    /// The sum of the charges per tenant.
    tenant_bytes: HashMap<Tenant, usize>,
}

/// The callback a report is about, if it is a callback's.
fn callback_of(body: &ReportBody) -> Option<u64> {
    match *body {
        ReportBody::Callback { callback, .. } => Some(callback),
        ReportBody::Exception { .. } => None,
    }
}

impl Inner {
    /// The callback's report was delivered, or never will be: its bytes are its tenant's
    /// again. Idempotent.
    fn discharge(&mut self, id: u64) {
        let Some((tenant, _, bytes)) = self.charges.remove(&id) else { return };
        crate::types::count_down(&mut self.tenant_bytes, &tenant, bytes);
    }

    fn discharge_all(&mut self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            self.discharge(id);
        }
    }

    fn forget(&mut self, id: u64) -> Option<PendingCallback> {
        let cb = self.callbacks.remove(&id)?;
        if !cb.fired {
            // Its report will never be posted.
            self.discharge(id);
        }
        crate::types::count_down(&mut self.per_tenant, &cb.tenant, 1);
        Some(cb)
    }
}

pub struct ReportHub {
    inner: Mutex<Inner>,
    max_pending: usize,
    /// Bytes of queued reports one session may hold.
    max_bytes: usize,
    /// Bytes one tenant's launched, undelivered callback reports may hold.
    max_tenant_bytes: usize,
    dropped: AtomicU64,
    delivered: AtomicU64,
}

impl ReportHub {
    pub fn new(max_pending: usize, max_bytes: usize, max_tenant_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_pending,
            max_bytes,
            max_tenant_bytes,
            dropped: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn open_mailbox(&self, session: u64) {
        self.lock().mailboxes.entry(session).or_insert_with(|| Mailbox {
            exceptions_enabled: true,
            next_sequence: 1,
            ..Mailbox::default()
        });
    }

    /// Drops a session's mailbox and its callbacks; returns the callbacks that were still
    /// holding a stream so the caller can release them.
    pub fn close_mailbox(&self, session: u64) -> Vec<(u64, PendingCallback)> {
        let mut inner = self.lock();
        if let Some(m) = inner.mailboxes.remove(&session) {
            m.notify.notify_waiters();
        }
        let charged: Vec<u64> =
            inner.charges.iter().filter(|(_, (_, s, _))| *s == session).map(|(id, _)| *id).collect();
        inner.discharge_all(charged);
        let ids: Vec<u64> = inner.callbacks.iter().filter(|(_, c)| c.session == session).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| inner.forget(id).map(|c| (id, c))).collect()
    }

    pub fn set_exceptions(&self, session: u64, enabled: bool) {
        if let Some(m) = self.lock().mailboxes.get_mut(&session) {
            m.exceptions_enabled = enabled;
        }
    }

    /// Registers a launched callback unless its tenant already has `max` in flight, or
    /// its undelivered callback reports already hold the most bytes they may: the launch
    /// is what is refused, so a report once accepted is always delivered.
    pub fn add_callback(&self, id: u64, cb: PendingCallback, max: u32) -> crate::error::NpudResult<()> {
        use crate::error::{NpudError, Reason};
        let mut inner = self.lock();
        let cost = REPORT_FIXED + cb.user_data.len();
        let held = inner.tenant_bytes.get(&cb.tenant).copied().unwrap_or(0);
        if held.saturating_add(cost) > self.max_tenant_bytes {
            return Err(NpudError::new(
                Reason::TooManyReportBytes,
                format!(
                    "tenant {}'s undelivered callback reports hold {held} bytes; this one ({cost}) would pass the \
                     most allowed, {} (limits.max_callback_report_bytes): read the reports first",
                    cb.tenant, self.max_tenant_bytes
                ),
            ));
        }
        let n = inner.per_tenant.entry(std::sync::Arc::clone(&cb.tenant)).or_insert(0);
        if *n >= max {
            return Err(NpudError::new(
                Reason::TooManyCallbacks,
                format!("tenant {} has {n} callbacks in flight, the most allowed", cb.tenant),
            ));
        }
        *n += 1;
        *inner.tenant_bytes.entry(Arc::clone(&cb.tenant)).or_insert(0) += cost;
        inner.charges.insert(id, (Arc::clone(&cb.tenant), cb.session, cost));
        inner.callbacks.insert(id, cb);
        Ok(())
    }

    pub fn remove_callback(&self, id: u64) -> Option<PendingCallback> {
        self.lock().forget(id)
    }

    pub fn callback(&self, id: u64) -> Option<PendingCallback> {
        self.lock().callbacks.get(&id).cloned()
    }

    /// A stream was destroyed. Callbacks still to fire stay tracked, so they are delivered
    /// when the stream reaches them (exactly once, as the vendors promise); those that fired
    /// and still hold the stream (BLOCK, not acknowledged) are forgotten and returned: the
    /// caller releases them, or the stream would never drain.
    pub fn forget_stream(&self, stream: u64) -> Vec<(u64, PendingCallback)> {
        let mut inner = self.lock();
        let ids: Vec<u64> = inner
            .callbacks
            .iter()
            .filter(|(_, c)| c.stream == stream && c.blocking && c.fired)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter().filter_map(|id| inner.forget(id).map(|c| (id, c))).collect()
    }

    /// Callbacks not yet fired or acknowledged, for reclaim checks.
    pub fn pending_callbacks(&self) -> usize {
        self.lock().callbacks.len()
    }

    /// Marks a callback fired and posts its report. Returns it, or None if it is unknown
    /// (its session has gone).
    pub fn fire_callback(&self, id: u64, status: i64) -> Option<PendingCallback> {
        let mut inner = self.lock();
        let cb = inner.callbacks.get_mut(&id)?;
        cb.fired = true;
        let cb = cb.clone();
        if !cb.blocking {
            inner.forget(id);
        }
        let body = ReportBody::Callback {
            callback: id,
            stream: cb.stream,
            thread_id: cb.thread_id,
            user_data: Arc::clone(&cb.user_data),
            blocking: cb.blocking,
            status,
        };
        self.post_locked(&mut inner, cb.session, body, false);
        Some(cb)
    }

    pub fn post(&self, session: u64, body: ReportBody) {
        let is_exception = matches!(body, ReportBody::Exception { .. });
        let mut inner = self.lock();
        self.post_locked(&mut inner, session, body, is_exception);
    }

    fn post_locked(&self, inner: &mut Inner, session: u64, body: ReportBody, is_exception: bool) {
        let about = callback_of(&body);
        let Some(m) = inner.mailboxes.get_mut(&session) else {
            inner.discharge_all(about);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(session, "report for a session that is gone; counted as undeliverable");
            return;
        };
        if is_exception && !m.exceptions_enabled {
            return;
        }
        let size = report_bytes(&body);
        // Bounded by count and by bytes (unread callback payloads add up): the oldest go.
        let mut gone = Vec::new();
        while !m.reports.is_empty() && (m.reports.len() >= self.max_pending || m.bytes + size > self.max_bytes) {
            let Some(r) = m.pop_front() else { break };
            gone.extend(callback_of(&r.body));
            if r.sequence > m.sent_upto {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    session,
                    max = self.max_pending,
                    max_bytes = self.max_bytes,
                    "report buffer full: the oldest undelivered report was dropped"
                );
            }
        }
        let sequence = m.next_sequence;
        m.next_sequence += 1;
        m.bytes += size;
        m.reports.push_back(SessionReport { sequence, body });
        m.notify.notify_waiters();
        inner.discharge_all(gone);
    }

    /// A (re)connecting client has everything up to `after`: forget it.
    pub fn confirm(&self, session: u64, after: u64) -> bool {
        let mut inner = self.lock();
        let Some(m) = inner.mailboxes.get_mut(&session) else {
            return false;
        };
        let mut had = Vec::new();
        while m.reports.front().is_some_and(|r| r.sequence <= after) {
            had.extend(m.pop_front().and_then(|r| callback_of(&r.body)));
        }
        m.sent_upto = m.sent_upto.max(after);
        inner.discharge_all(had);
        true
    }

    /// Reports after `cursor`, marked as sent; None once the mailbox is closed.
    pub fn next_batch(&self, session: u64, cursor: u64, max: usize) -> Option<Vec<SessionReport>> {
        let mut inner = self.lock();
        let m = inner.mailboxes.get_mut(&session)?;
        let batch: Vec<SessionReport> = m.reports.iter().filter(|r| r.sequence > cursor).take(max).cloned().collect();
        if let Some(last) = batch.last() {
            m.sent_upto = m.sent_upto.max(last.sequence);
            self.delivered.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        while m.reports.len() > REPLAY_WINDOW && m.reports.front().is_some_and(|r| r.sequence <= m.sent_upto) {
            m.pop_front();
        }
        // Sent: what their callbacks cost the tenant is free again (the replay copies are
        // the session's, bounded by its own limits).
        inner.discharge_all(batch.iter().filter_map(|r| callback_of(&r.body)));
        Some(batch)
    }

    /// Forgets an acknowledged callback's report: it need not be replayed.
    pub fn forget_report_of(&self, session: u64, callback: u64) {
        let mut inner = self.lock();
        if let Some(m) = inner.mailboxes.get_mut(&session) {
            m.retain(|r| !matches!(r.body, ReportBody::Callback { callback: c, .. } if c == callback));
        }
        inner.discharge(callback);
    }

    /// Takes up to `max` reports addressed to `thread_id` (the pull API).
    pub fn take_for_thread(&self, session: u64, thread_id: u64, max: usize) -> Option<Vec<SessionReport>> {
        let mut inner = self.lock();
        let m = inner.mailboxes.get_mut(&session)?;
        let mut taken = Vec::new();
        m.retain(|r| {
            if taken.len() < max && r.thread_id() == thread_id {
                taken.push(r.clone());
                false
            } else {
                true
            }
        });
        self.delivered.fetch_add(taken.len() as u64, Ordering::Relaxed);
        inner.discharge_all(taken.iter().filter_map(|r| callback_of(&r.body)));
        Some(taken)
    }

    /// The wake-up for one session: fires when a report is posted to it or its mailbox
    /// closes. None when the session has no mailbox.
    pub fn watch(&self, session: u64) -> Option<Arc<Notify>> {
        self.lock().mailboxes.get(&session).map(|m| Arc::clone(&m.notify))
    }
}

#[cfg(test)]
mod tests;

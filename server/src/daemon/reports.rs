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
    const FIXED: usize = 128;
    match body {
        ReportBody::Callback { user_data, .. } => FIXED + user_data.len(),
        ReportBody::Exception { message, .. } => FIXED + message.len(),
    }
}

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
}

impl Inner {
    fn forget(&mut self, id: u64) -> Option<PendingCallback> {
        let cb = self.callbacks.remove(&id)?;
        if let Some(n) = self.per_tenant.get_mut(&cb.tenant) {
            *n -= 1;
            if *n == 0 {
                self.per_tenant.remove(&cb.tenant);
            }
        }
        Some(cb)
    }
}

pub struct ReportHub {
    inner: Mutex<Inner>,
    max_pending: usize,
    /// Bytes of queued reports one session may hold.
    max_bytes: usize,
    dropped: AtomicU64,
    delivered: AtomicU64,
}

impl ReportHub {
    pub fn new(max_pending: usize, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_pending,
            max_bytes,
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
        let ids: Vec<u64> = inner.callbacks.iter().filter(|(_, c)| c.session == session).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| inner.forget(id).map(|c| (id, c))).collect()
    }

    pub fn set_exceptions(&self, session: u64, enabled: bool) {
        if let Some(m) = self.lock().mailboxes.get_mut(&session) {
            m.exceptions_enabled = enabled;
        }
    }

    /// Registers a launched callback unless its tenant already has `max` in flight.
    pub fn add_callback(&self, id: u64, cb: PendingCallback, max: u32) -> crate::error::NpudResult<()> {
        let mut inner = self.lock();
        let n = inner.per_tenant.entry(std::sync::Arc::clone(&cb.tenant)).or_insert(0);
        if *n >= max {
            return Err(crate::error::NpudError::new(
                crate::error::Reason::TooManyCallbacks,
                format!("tenant {} has {n} callbacks in flight, the most allowed", cb.tenant),
            ));
        }
        *n += 1;
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
        let Some(m) = inner.mailboxes.get_mut(&session) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(session, "report for a session that is gone; counted as undeliverable");
            return;
        };
        if is_exception && !m.exceptions_enabled {
            return;
        }
        let size = report_bytes(&body);
        // Bounded by count and by bytes (unread callback payloads add up): the oldest go.
        while !m.reports.is_empty() && (m.reports.len() >= self.max_pending || m.bytes + size > self.max_bytes) {
            if m.pop_front().is_some_and(|r| r.sequence > m.sent_upto) {
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
    }

    /// A (re)connecting client has everything up to `after`: forget it.
    pub fn confirm(&self, session: u64, after: u64) -> bool {
        let mut inner = self.lock();
        let Some(m) = inner.mailboxes.get_mut(&session) else {
            return false;
        };
        while m.reports.front().is_some_and(|r| r.sequence <= after) {
            m.pop_front();
        }
        m.sent_upto = m.sent_upto.max(after);
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
        Some(batch)
    }

    /// Forgets an acknowledged callback's report: it need not be replayed.
    pub fn forget_report_of(&self, session: u64, callback: u64) {
        if let Some(m) = self.lock().mailboxes.get_mut(&session) {
            m.retain(|r| !matches!(r.body, ReportBody::Callback { callback: c, .. } if c == callback));
        }
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
        Some(taken)
    }

    /// The wake-up for one session: fires when a report is posted to it or its mailbox
    /// closes. None when the session has no mailbox.
    pub fn watch(&self, session: u64) -> Option<Arc<Notify>> {
        self.lock().mailboxes.get(&session).map(|m| Arc::clone(&m.notify))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    fn exception(stream: u64) -> ReportBody {
        ReportBody::Exception { task: 1, stream, device: 0, thread_id: 7, code: 507_011, message: "boom".into() }
    }

    /// Polls once: has the wake-up already been delivered?
    fn woken(f: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>) -> bool {
        matches!(f.poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(()))
    }

    #[test]
    fn a_report_wakes_only_its_own_session() {
        let hub = ReportHub::new(8, usize::MAX);
        hub.open_mailbox(1);
        hub.open_mailbox(2);
        let (n1, n2) = (hub.watch(1).unwrap(), hub.watch(2).unwrap());
        let mut w1 = std::pin::pin!(n1.notified());
        let mut w2 = std::pin::pin!(n2.notified());
        w1.as_mut().enable();
        w2.as_mut().enable();
        hub.post(2, exception(5));
        assert!(!woken(w1.as_mut()), "session 1 must not be woken by session 2's report");
        assert!(woken(w2.as_mut()));
        assert_eq!(hub.next_batch(2, 0, 16).unwrap().len(), 1);
        assert!(hub.next_batch(1, 0, 16).unwrap().is_empty());
    }

    #[test]
    fn closing_a_mailbox_wakes_its_waiters_and_ends_the_stream() {
        let hub = ReportHub::new(8, usize::MAX);
        hub.open_mailbox(1);
        let n = hub.watch(1).unwrap();
        let mut w = std::pin::pin!(n.notified());
        w.as_mut().enable();
        hub.close_mailbox(1);
        assert!(woken(w.as_mut()));
        assert!(hub.next_batch(1, 0, 16).is_none());
        assert!(hub.watch(1).is_none());
    }

    #[test]
    fn overflow_drops_the_oldest_and_counts_it() {
        let hub = ReportHub::new(2, usize::MAX);
        hub.open_mailbox(1);
        for s in 1..=3 {
            hub.post(1, exception(s));
        }
        let batch = hub.next_batch(1, 0, 16).unwrap();
        assert_eq!(batch.iter().map(|r| r.sequence).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(hub.dropped(), 1);
    }

    #[test]
    fn queued_payload_bytes_are_bounded_and_the_oldest_go() {
        let hub = ReportHub::new(1000, 3 * (128 + 1000));
        hub.open_mailbox(1);
        let cb = |id| ReportBody::Callback {
            callback: id,
            stream: 1,
            thread_id: 7,
            user_data: Arc::from(vec![0u8; 1000]),
            blocking: false,
            status: 0,
        };
        for id in 1..=5 {
            hub.post(1, cb(id));
        }
        let left = hub.next_batch(1, 0, 100).expect("mailbox");
        let ids: Vec<u64> = left
            .iter()
            .filter_map(|r| if let ReportBody::Callback { callback, .. } = r.body { Some(callback) } else { None })
            .collect();
        assert_eq!(ids, vec![3, 4, 5], "three fit; the two oldest were dropped");
        assert_eq!(hub.dropped(), 2);
    }
}

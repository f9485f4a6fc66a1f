//! Delivering a session's reports (callbacks due and exceptions): as a feed that follows
//! the session's mailbox for a report stream, or pulled by one subscribed thread
//! (aclrtProcessReport). The mailboxes themselves are `reports.rs`.

use super::Daemon;
use super::reports::SessionReport;
use crate::error::{NpudError, NpudResult, Reason};
use npud_proto::codes::acl;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;

/// The longest one pull may wait for a report.
const MAX_PULL_WAIT: Duration = Duration::from_secs(24 * 3600);
/// Reports a feed reads from the mailbox at a time, and keeps ready for a slow reader.
const FEED_BATCH: usize = 256;

/// Keeps the session alive while its report stream is open.
struct OpenStream(Arc<Daemon>, u64);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.registry.set_report_stream(self.1, false);
    }
}

impl Daemon {
    /// The session's reports after `after` (reports up to it are confirmed delivered), then
    /// each new one as it is posted, until the reader goes away. An open feed keeps the
    /// session alive regardless of its lease.
    pub fn report_feed(self: &Arc<Self>, session: u64, after: u64) -> NpudResult<ReceiverStream<SessionReport>> {
        let notify = self.reports.watch(session).ok_or_else(NpudError::unknown_session)?;
        self.registry.open_report_stream(session, self.config.limits.max_report_streams_per_session)?;
        let alive = OpenStream(Arc::clone(self), session);
        self.reports.confirm(session, after);
        let (tx, rx) = tokio::sync::mpsc::channel(FEED_BATCH);
        let mut cursor = after;
        let daemon = Arc::clone(self);
        tokio::spawn(async move {
            let _alive = alive;
            loop {
                let changed = notify.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let Some(batch) = daemon.reports.next_batch(session, cursor, FEED_BATCH) else {
                    return;
                };
                let more = !batch.is_empty();
                for r in batch {
                    cursor = r.sequence;
                    if tx.send(r).await.is_err() {
                        return;
                    }
                }
                if more {
                    continue;
                }
                tokio::select! {
                    _ = &mut changed => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(ReceiverStream::new(rx))
    }

    /// aclrtProcessReport: up to `max` reports due to `thread_id`, waiting up to
    /// `timeout_ms` for the first; none when the wait ends empty.
    pub async fn process_reports(
        &self,
        session: u64,
        thread_id: u64,
        max: u32,
        timeout_ms: u32,
    ) -> NpudResult<Vec<SessionReport>> {
        if max == 0 || max > 1024 {
            return Err(NpudError::invalid(Reason::InvalidCount, "max_reports must be 1..=1024"));
        }
        if !self.registry.thread_subscribed(session, thread_id) {
            return Err(NpudError::new(
                Reason::StreamNotSubscribed,
                format!("thread {thread_id} has no subscribed stream"),
            )
            .with_native(self.backend.name(), i64::from(acl::RT_THREAD_SUBSCRIBE)));
        }
        let wait = Duration::from_millis(u64::from(timeout_ms)).min(MAX_PULL_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let notify = self.reports.watch(session).ok_or_else(NpudError::unknown_session)?;
        loop {
            let changed = notify.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let taken = self
                .reports
                .take_for_thread(session, thread_id, max as usize)
                .ok_or_else(NpudError::unknown_session)?;
            if !taken.is_empty() {
                return Ok(taken);
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            }
        }
    }
}

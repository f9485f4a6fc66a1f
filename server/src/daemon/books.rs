//! Keeps the native holders' books on disk (see `policy::natives::books`): after a
//! change, off the reply path. A change after a calm spell is written at once; changes
//! that follow within [`BOOKS_PERIOD`] of a write are written together by the next one. So
//! the file trails the books by a write at most while processes come and go one by one,
//! and by up to [`BOOKS_PERIOD`] in a crowd, where a write per process start and exit was
//! most of npud's own work (a file replaced on a virtual disk costs more than an
//! admission's whole handshake). npud killed within that window leaves books a moment old:
//! declarations beyond them are then booked only as far as the device confirms.

use crate::daemon::Daemon;
use crate::policy::natives::books::Books;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// At most one write of the books starts per this long.
pub const BOOKS_PERIOD: Duration = Duration::from_millis(100);

impl Daemon {
    /// Writes the books a last time and stops writing them: a successor npud reads them
    /// next, and writes its own (`serve::handover`).
    pub async fn final_books(&self) {
        // Taken before anything can wait: the holders as they are when the handover starts.
        let snapshot = self.natives.snapshot();
        let mut frozen = self.books_writer.lock().await;
        if *frozen || self.config.state_dir.is_none() {
            return;
        }
        *frozen = true;
        let books = Books::new(self.config.state_dir.as_deref());
        let holders = snapshot.len();
        match tokio::task::spawn_blocking(move || books.save(snapshot)).await {
            Ok(Ok(())) => tracing::info!(holders, "the native holders' books written for the successor"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the native holders' books for the successor"),
            Err(e) => tracing::error!(error = %e, "writing the native holders' books panicked"),
        }
    }

    /// Takes in the last run's books (at start).
    pub(crate) fn restore_books(&self) {
        let books = Books::new(self.config.state_dir.as_deref());
        let mut recorded = books.load();
        // Only processes still running (the same pid and start time) hold anything.
        recorded.retain(|r| self.still_runs(r.pid, r.start));
        // And only on devices this npud has (a node's devices may change across a restart).
        let devices = self.devices().len();
        for r in &mut recorded {
            r.streams.retain(|&d, _| (d as usize) < devices);
            r.events.retain(|&d, _| (d as usize) < devices);
        }
        if !recorded.is_empty() {
            tracing::info!(
                processes = recorded.len(),
                "native holders' books of the last run read; what they hold stays booked until they declare it"
            );
        }
        self.natives.restore(recorded);
        for (tenant, device, streams) in self.natives.recorded_holdings() {
            self.admission.book_recorded(device, &crate::types::Tenant::from(tenant), streams);
        }
    }

    /// Whether the process the books name (pid and start time: a recycled pid is another
    /// process) still runs.
    fn still_runs(&self, pid: u32, start: u64) -> bool {
        crate::tenancy::identity::process_start(&self.config.proc_root, pid) == Some(start)
    }

    /// Lets go of what recorded processes that ended, or (`all`: the declarations' time is
    /// over) any that did not declare, were booked at the start.
    pub async fn expire_recorded(&self, all: bool) {
        let left = self.natives.expire_recorded(|pid, start| all || !self.still_runs(pid, start));
        if !left.is_empty() {
            tracing::info!(holdings = left.len(), all, "recorded holdings no process declared are let go of");
        }
        for (tenant, device, streams) in left {
            self.admission.forget_recorded(device, &crate::types::Tenant::from(tenant), streams).await;
        }
    }
}

/// Until the declarations' time is over: every second, what recorded processes that ended
/// before declaring were booked is let go of; at its end, whatever no process declared.
pub async fn expire(daemon: Arc<Daemon>) {
    let grace = daemon.natives.declare_grace();
    let end = Instant::now() + grace;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1).min(grace)).await;
        daemon.expire_recorded(false).await;
    }
    daemon.expire_recorded(true).await;
}

/// Writes the books after each change until the daemon goes. Without a state directory
/// there is nowhere to write, and nothing is woken per change.
pub async fn keep(daemon: Arc<Daemon>) {
    if daemon.config.state_dir.is_none() {
        return;
    }
    let books = Books::new(daemon.config.state_dir.as_deref());
    let mut failing = false;
    let mut last: Option<Instant> = None;
    loop {
        daemon.natives.next_change().await;
        if let Some(last) = last {
            tokio::time::sleep_until(last + BOOKS_PERIOD).await;
        }
        last = Some(Instant::now());
        // One writer at a time, and none once the books went to a successor.
        let frozen = daemon.books_writer.lock().await;
        if *frozen {
            return;
        }
        let snapshot = daemon.natives.snapshot();
        let b = books.clone();
        let written = tokio::task::spawn_blocking(move || b.save(snapshot)).await;
        drop(frozen);
        match written {
            Ok(Ok(())) if failing => {
                failing = false;
                tracing::info!("the native holders' books are written again");
            }
            Ok(Ok(())) => {}
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "cannot write the native holders' books; a restart will book only what devices confirm");
            }
            Ok(Err(_)) => {}
            Err(e) => tracing::error!(error = %e, "writing the native holders' books panicked"),
        }
    }
}

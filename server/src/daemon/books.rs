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
    /// Takes in the last run's books (at start).
    pub(crate) fn restore_books(&self) {
        let books = Books::new(self.config.state_dir.as_deref());
        let recorded = books.load();
        if !recorded.is_empty() {
            tracing::info!(
                processes = recorded.len(),
                "native holders' books of the last run read; their declarations are checked against them"
            );
        }
        self.natives.restore(recorded);
    }
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
        let snapshot = daemon.natives.snapshot();
        let b = books.clone();
        let written = tokio::task::spawn_blocking(move || b.save(snapshot)).await;
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

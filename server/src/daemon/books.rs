//! Keeps the native holders' books on disk (see `policy::natives::books`): after every
//! change, off the reply path. Changes that come while a write is under way are written
//! together by the next one, so the file trails the books by one write at most (a few
//! milliseconds), and a burst of changes costs a write or two, not one each.

use crate::daemon::Daemon;
use crate::policy::natives::books::Books;
use std::sync::Arc;

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
    loop {
        daemon.natives.next_change().await;
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

//! Pacing of native creation: at most one process's creation batch in flight per device,
//! as the vendor advises (bursts of concurrent stream creation from several processes are
//! what fail with 207005/207008 half-way through a start-up).
//!
//! A batch starts when a grant is answered and ends when its session reports that the
//! streams exist, asks again, closes — or, for a session that never says, when the window
//! passes. Waiting for a turn never holds anything another session needs to finish its own
//! batch, so it is bounded by the windows of the sessions ahead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Pacing {
    /// Zero: no pacing.
    window: Duration,
    turns: Mutex<HashMap<u32, Arc<Semaphore>>>,
}

/// One session's creation batch on one device; the device is its own until this drops or
/// the window passes.
pub struct Batch {
    permit: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

impl Pacing {
    pub fn new(window: Duration) -> Self {
        Self { window, turns: Mutex::new(HashMap::new()) }
    }

    /// Waits for `device`'s turn (FIFO); None when pacing is off. Cancellation-safe: a
    /// waiter dropped from the queue takes no turn.
    pub async fn turn(&self, device: u32) -> Option<Batch> {
        if self.window.is_zero() {
            return None;
        }
        let semaphore = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(turns.entry(device).or_insert_with(|| Arc::new(Semaphore::new(1))))
        };
        // The semaphore is never closed, so acquiring only fails if it were.
        let permit = semaphore.acquire_owned().await.ok()?;
        let permit = Arc::new(Mutex::new(Some(permit)));
        let expiry = Arc::downgrade(&permit);
        let window = self.window;
        tokio::spawn(async move {
            tokio::time::sleep(window).await;
            if let Some(slot) = expiry.upgrade() {
                let overdue = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                if overdue.is_some() {
                    tracing::debug!(device, "a native creation batch ran past the pacing window; the next starts");
                }
            }
        });
        Some(Batch { permit })
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.permit.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_batch_waits_until_the_first_ends() {
        let pacing = Pacing::new(Duration::from_secs(3600));
        let first = pacing.turn(0).await.expect("paced");
        let other_device = pacing.turn(1).await;
        assert!(other_device.is_some(), "devices are paced independently");
        let second = pacing.turn(0);
        tokio::pin!(second);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut second).await.is_err(),
            "the device is busy with the first batch"
        );
        drop(first);
        assert!(second.await.is_some(), "the first batch ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_never_ends_gives_way_after_the_window() {
        let pacing = Pacing::new(Duration::from_secs(2));
        let _silent = pacing.turn(0).await.expect("paced");
        // Paused time: the runtime jumps to the window's end once everything is idle.
        let next = tokio::time::timeout(Duration::from_secs(10), pacing.turn(0)).await;
        assert!(next.is_ok_and(|b| b.is_some()), "the window passed");
    }

    #[tokio::test]
    async fn no_window_means_no_pacing() {
        let pacing = Pacing::new(Duration::ZERO);
        assert!(pacing.turn(0).await.is_none());
    }
}

//! Streams a session destroyed that are still finishing their work. A device sync is the
//! process's "wait for everything I enqueued": it must cover those streams too (their work
//! was enqueued by the caller) and return a task failure that happened on them. The
//! admission layer reports each released batch's outcome through a watch channel.

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// A released batch's outcome once drained: `Some(true)` when one of its tasks failed.
pub type Drained = watch::Receiver<Option<bool>>;

#[derive(Default)]
pub struct Released {
    by_session: Mutex<HashMap<u64, Vec<(u32, Drained)>>>,
}

impl Released {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<(u32, Drained)>>> {
        self.by_session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts tracking a batch `session` released on `device`; the sender reports it.
    pub fn track(&self, session: u64, device: u32) -> watch::Sender<Option<bool>> {
        let (tx, rx) = watch::channel(None);
        let mut map = self.lock();
        let list = map.entry(session).or_default();
        // Batches already drained need no more tracking, unless they failed and no device
        // sync has reported it yet.
        list.retain(|(_, r)| r.borrow().is_none_or(|failed| failed));
        list.push((device, rx));
        tx
    }

    /// The batches of `session` on `device` a device sync waits for. Failed ones are handed
    /// out once: the failure is reported by the sync that sees it.
    pub fn take(&self, session: u64, device: u32) -> Vec<Drained> {
        let mut map = self.lock();
        let Some(list) = map.get_mut(&session) else { return Vec::new() };
        let mut out = Vec::new();
        list.retain(|(d, r)| {
            if *d != device {
                return true;
            }
            out.push(r.clone());
            false
        });
        if list.is_empty() {
            map.remove(&session);
        }
        out
    }

    /// The session is gone.
    pub fn forget(&self, session: u64) {
        self.lock().remove(&session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_takes_its_sessions_batches_on_its_device() {
        let r = Released::default();
        let a = r.track(1, 0);
        let _b = r.track(1, 1);
        let _c = r.track(2, 0);
        a.send(Some(true)).expect("open");
        let taken = r.take(1, 0);
        assert_eq!(taken.len(), 1);
        assert_eq!(*taken[0].borrow(), Some(true));
        assert!(r.take(1, 0).is_empty(), "reported once");
        assert_eq!(r.take(1, 1).len(), 1, "another device's batch is its own");
        r.forget(2);
        assert!(r.take(2, 0).is_empty());
    }
}

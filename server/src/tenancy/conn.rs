//! One accepted Unix connection's handle: the replies its peer has not read yet, and a
//! way to close it from outside its task. A peer that keeps its HTTP/2 receive window shut
//! (reading frames, acking pings, but never letting a reply through) holds each reply's
//! memory for as long as it likes; one whose oldest reply has waited past the deadline is
//! closed, and everything its connection held is freed with it (`serve::replies`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Waker;
use std::time::Instant;

pub struct Conn {
    closed: AtomicBool,
    /// The connection's reader, woken when it is closed from outside.
    reader: Mutex<Option<Waker>>,
    /// Replies ready but not yet gone, by call: since when.
    waiting: Mutex<BTreeMap<u64, Instant>>,
    next_call: AtomicU64,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            closed: AtomicBool::new(false),
            reader: Mutex::new(None),
            waiting: Mutex::new(BTreeMap::new()),
            next_call: AtomicU64::new(0),
        }
    }
}

impl Conn {
    /// A reply is ready for the peer: returns its key, for [`Conn::reply_gone`].
    pub fn reply_ready(&self) -> u64 {
        let key = self.next_call.fetch_add(1, Ordering::Relaxed);
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(key, Instant::now());
        key
    }

    /// The reply `key` left (or its stream ended).
    pub fn reply_gone(&self, key: u64) {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    }

    /// Since when the oldest reply not yet gone has been ready.
    pub fn oldest_reply(&self) -> Option<Instant> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).values().min().copied()
    }

    /// Closes the connection: its reads end and its writes fail, so its server drops it
    /// and all it held.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(w) = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.wake();
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The reader waits: remember whom to wake should the connection be closed.
    pub fn reader_waits(&self, waker: &Waker) {
        let mut slot = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_reply_is_the_one_still_waiting_longest() {
        let c = Conn::default();
        assert_eq!(c.oldest_reply(), None);
        let first = c.reply_ready();
        let at = c.oldest_reply().expect("one waits");
        let second = c.reply_ready();
        assert_eq!(c.oldest_reply(), Some(at));
        c.reply_gone(first);
        assert!(c.oldest_reply().is_some_and(|t| t >= at));
        c.reply_gone(second);
        assert_eq!(c.oldest_reply(), None);
        assert!(!c.is_closed());
        c.close();
        assert!(c.is_closed());
    }
}

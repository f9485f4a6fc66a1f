//! Connections per uid on the Unix socket. Each accepted connection takes a slot of its
//! peer's uid and gives it back when it closes, so one user opening connections (idle ones
//! included) runs into its own limit long before npud runs out of descriptors for others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct ConnectionLimiter {
    open: Mutex<HashMap<u32, u32>>,
    max_per_uid: u32,
}

/// One open connection's place; dropping it frees the place.
pub struct ConnectionSlot {
    limiter: Arc<ConnectionLimiter>,
    uid: u32,
}

impl ConnectionLimiter {
    pub fn new(max_per_uid: u32) -> Arc<Self> {
        Arc::new(Self { open: Mutex::new(HashMap::new()), max_per_uid })
    }

    /// A slot for a new connection of `uid`, or None when the uid has the most it may.
    pub fn admit(self: &Arc<Self>, uid: u32) -> Option<ConnectionSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(uid).or_insert(0);
        if *n >= self.max_per_uid {
            return None;
        }
        *n += 1;
        Some(ConnectionSlot { limiter: Arc::clone(self), uid })
    }

    pub fn open(&self, uid: u32) -> u32 {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).get(&uid).copied().unwrap_or(0)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.limiter.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_uid_has_its_own_limit_and_closing_frees_a_place() {
        let l = ConnectionLimiter::new(2);
        let a1 = l.admit(1000).expect("first");
        let _a2 = l.admit(1000).expect("second");
        assert!(l.admit(1000).is_none(), "a third for the same uid");
        let _b = l.admit(1001).expect("another uid is not affected");
        drop(a1);
        assert_eq!(l.open(1000), 1);
        assert!(l.admit(1000).is_some());
    }
}

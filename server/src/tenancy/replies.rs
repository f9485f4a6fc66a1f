//! Memory npud holds for clients on its gRPC fronts, per tenant and in all. A connection
//! holds its HTTP/2 state for its life; a call holds memory from its arrival until its
//! reply has left: its stream, its handler, and its reply, which a peer that never opens
//! its receive window never lets leave. Each tenant's connections and calls, across all
//! its connections, are held to a share of npud's ceiling (`[limits] client_memory_mib`),
//! and a connection or call past it is refused at once, so no client behaviour grows npud
//! past the ceiling.
//!
//! A connection counts [`conn_cost`] for its life. A call counts [`CALL_COST`] from the
//! start (the stream, the request, the handler's state) and every byte of its reply as the
//! reply is produced, until the reply is gone (sent, or its stream or connection ended).

use crate::types::Tenant;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a call is counted before its reply: an HTTP/2 stream's state, the request's
/// headers and message, the handler's future. Measured at 11 KiB a call under the issue-68
/// attack (500 unanswerable `Status` calls held at once); counted high.
pub const CALL_COST: u64 = 16 * 1024;

/// What an HTTP/2 connection is counted for its life: measured at 32 KiB idle (hyper's and
/// h2's buffers), and h2 keeps about 1 KiB for each stream it held at once, up to the
/// connection's most concurrent calls (SETTINGS_MAX_CONCURRENT_STREAMS), whose table it
/// never shrinks.
pub fn conn_cost(max_concurrent_calls: u32) -> u64 {
    32 * 1024 + u64::from(max_concurrent_calls) * 1024
}

/// Connections, calls and bytes held for one tenant.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    conns: u32,
    calls: u32,
    bytes: u64,
}

pub struct Replies {
    per_tenant: u64,
    total: u64,
    conn_cost: u64,
    held: Mutex<HashMap<Tenant, Held>>,
    total_held: AtomicU64,
    refused: AtomicU64,
}

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Its tenant's calls hold its share.
    Tenant { held: u64, share: u64 },
    /// All tenants' calls hold the ceiling.
    Total { held: u64, ceiling: u64 },
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: &u64| b.div_ceil(1 << 20);
        match self {
            Full::Tenant { held, share } => write!(
                f,
                "this tenant's calls in flight and replies not yet read hold {} MiB, its share of npud's memory for \
                 clients ({} MiB): read the replies, or wait for the calls in flight",
                mib(held),
                mib(share)
            ),
            Full::Total { held, ceiling } => write!(
                f,
                "calls in flight and replies not yet read hold {} MiB of npud's {} MiB for clients: try again shortly",
                mib(held),
                mib(ceiling)
            ),
        }
    }
}

/// One call's (or connection's) place: what it holds, given back when it is dropped (its
/// reply gone, or the connection closed).
pub struct Call {
    of: Arc<Replies>,
    tenant: Tenant,
    bytes: u64,
    conn: bool,
}

impl Replies {
    /// At most `per_tenant` bytes for one tenant's connections and calls, `total` for
    /// all; a connection counts `conn_cost`.
    pub fn new(per_tenant: u64, total: u64, conn_cost: u64) -> Arc<Self> {
        Arc::new(Replies {
            per_tenant,
            total,
            conn_cost,
            held: Mutex::new(HashMap::new()),
            total_held: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// A place for one more call of `tenant`, or why not: its share or the ceiling is
    /// held already.
    pub fn enter(self: &Arc<Self>, tenant: &Tenant) -> Result<Call, Full> {
        self.take(tenant, CALL_COST, false, false)
    }

    /// A place for one more HTTP/2 connection of `tenant`, for its life. The host admin's
    /// may pass the ceiling (not its share): `npuctl status` answers while others are at it.
    pub fn enter_conn(self: &Arc<Self>, tenant: &Tenant, admin: bool) -> Result<Call, Full> {
        self.take(tenant, self.conn_cost, true, admin)
    }

    fn take(self: &Arc<Self>, tenant: &Tenant, cost: u64, conn: bool, admin: bool) -> Result<Call, Full> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let total = self.total_held.load(Ordering::Relaxed);
        let mine = held.get(tenant).copied().unwrap_or_default();
        let full = if mine.bytes.saturating_add(cost) > self.per_tenant {
            Some(Full::Tenant { held: mine.bytes, share: self.per_tenant })
        } else if !admin && total.saturating_add(cost) > self.total {
            Some(Full::Total { held: total, ceiling: self.total })
        } else {
            None
        };
        if let Some(full) = full {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(full);
        }
        let e = held.entry(Tenant::clone(tenant)).or_default();
        match conn {
            true => e.conns += 1,
            false => e.calls += 1,
        }
        e.bytes += cost;
        self.total_held.fetch_add(cost, Ordering::Relaxed);
        Ok(Call { of: Arc::clone(self), tenant: Tenant::clone(tenant), bytes: cost, conn })
    }

    /// Bytes held for all clients' calls now.
    pub fn held(&self) -> u64 {
        self.total_held.load(Ordering::Relaxed)
    }

    /// Calls in flight now, all tenants.
    pub fn calls(&self) -> u64 {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).values().map(|h| u64::from(h.calls)).sum()
    }

    /// Calls refused since start for want of room.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The ceiling and one tenant's share, in bytes.
    pub fn limits(&self) -> (u64, u64) {
        (self.total, self.per_tenant)
    }
}

impl Call {
    /// The call's reply produced `n` more bytes: held until the reply is gone.
    pub fn grew(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        self.bytes = self.bytes.saturating_add(n);
        self.of.total_held.fetch_add(n, Ordering::Relaxed);
        let mut held = self.of.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = held.get_mut(&self.tenant) {
            e.bytes = e.bytes.saturating_add(n);
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // Only what this call added: the total never goes below the others' bytes.
        self.of.total_held.fetch_sub(self.bytes, Ordering::Relaxed);
        let mut held = self.of.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = held.get_mut(&self.tenant) {
            match self.conn {
                true => e.conns = e.conns.saturating_sub(1),
                false => e.calls = e.calls.saturating_sub(1),
            }
            e.bytes = e.bytes.saturating_sub(self.bytes);
            if e.calls == 0 && e.conns == 0 {
                held.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_held_to_its_share_and_all_to_the_ceiling() {
        let r = Replies::new(4 * CALL_COST, 6 * CALL_COST, 2 * CALL_COST);
        let (a, b): (Tenant, Tenant) = (Arc::from("a"), Arc::from("b"));
        let mut calls: Vec<Call> = (0..4).map(|_| r.enter(&a).expect("a's four")).collect();
        assert!(matches!(r.enter(&a), Err(Full::Tenant { .. })), "a's fifth");
        calls.extend((0..2).map(|_| r.enter(&b).expect("b's first two")));
        assert!(matches!(r.enter(&b), Err(Full::Total { .. })), "the ceiling");
        assert_eq!((r.held(), r.calls(), r.refused()), (6 * CALL_COST, 6, 2));
        // A reply's bytes count until it is gone.
        calls[0].grew(2 * CALL_COST);
        drop(calls.drain(1..3));
        assert!(matches!(r.enter(&a), Err(Full::Tenant { .. })), "a holds 2 calls and a reply of two calls' size");
        assert!(matches!(r.enter(&b), Err(Full::Total { .. })), "and all hold the ceiling");
        // The reply is gone: its bytes with it.
        calls.remove(0);
        assert!(r.enter(&a).is_ok() && r.enter(&b).is_ok(), "room for each again");
        drop(calls);
        assert_eq!((r.held(), r.calls()), (0, 0));
        // A connection counts for its life; the host admin's may pass the ceiling, never
        // its own share.
        let admin: Tenant = Arc::from("root");
        let conns: Vec<Call> = (0..2).map(|_| r.enter_conn(&admin, true).expect("two connections")).collect();
        let c = r.enter(&a).expect("a call");
        let d = r.enter(&a).expect("a call");
        assert!(matches!(r.enter(&a), Err(Full::Total { .. })));
        assert!(matches!(r.enter_conn(&admin, true), Err(Full::Tenant { .. })), "its share holds");
        assert_eq!(r.calls(), 2, "connections are no calls");
        drop((conns, c, d));
        assert!(r.held.lock().unwrap().is_empty(), "nothing kept for tenants with nothing in flight");
    }
}

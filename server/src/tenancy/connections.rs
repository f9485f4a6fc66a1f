//! Connections on the Unix socket, per tenant and in all. Each accepted connection takes
//! a slot of the tenant its peer resolves to (a container's tenant, not its uid: containers
//! all running as root are not one pool) and gives it back when it closes, so one tenant
//! opening connections (idle ones included) runs into its own limit, and a crowd of
//! tenants into the total, long before npud runs out of descriptors. The host admin has
//! slots of its own beyond both, so `npuctl status` works while tenants are at theirs.

use crate::types::Tenant;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct ConnectionLimiter {
    open: Mutex<Open>,
    per_tenant: u32,
    total: u32,
    admin_reserve: u32,
    /// When a refusal was last logged, and how many were not logged since.
    logged: Mutex<(Option<Instant>, u64)>,
}

/// Refusals are logged at most this often: a flood of connections must not flood the log
/// as well (each is still counted in `npud_connections_refused_total`).
const LOG_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Open {
    by_tenant: HashMap<Tenant, u32>,
    total: u32,
    /// Admin connections in the reserved slots (beyond the limits).
    reserved: u32,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Its tenant has the most it may.
    Tenant,
    /// All tenants together have the most they may.
    Total,
}

/// One open connection's place; dropping it frees the place.
pub struct ConnectionSlot {
    limiter: Arc<ConnectionLimiter>,
    /// None: one of the admin's reserved slots.
    tenant: Option<Tenant>,
}

impl ConnectionLimiter {
    pub fn new(per_tenant: u32, total: u32, admin_reserve: u32) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::new(Open::default()),
            per_tenant,
            total,
            admin_reserve,
            logged: Mutex::new((None, 0)),
        })
    }

    /// Whether to log a refusal now; if so, how many earlier ones went unlogged.
    pub fn log_refusal(&self) -> Option<u64> {
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match logged.0 {
            Some(at) if now.duration_since(at) < LOG_EVERY => {
                logged.1 += 1;
                None
            }
            _ => {
                let unlogged = logged.1;
                *logged = (Some(now), 0);
                Some(unlogged)
            }
        }
    }

    /// A slot for a new connection of `tenant`. An admin (`admin`) whose tenant or all
    /// tenants are at their limit takes one of the reserved slots instead, which count
    /// against no one else.
    pub fn admit(self: &Arc<Self>, tenant: &Tenant, admin: bool) -> Result<ConnectionSlot, Full> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mine = open.by_tenant.get(tenant).copied().unwrap_or(0);
        let full = match (mine >= self.per_tenant, open.total >= self.total) {
            (true, _) => Some(Full::Tenant),
            (false, true) => Some(Full::Total),
            (false, false) => None,
        };
        match full {
            None => {
                *open.by_tenant.entry(Tenant::clone(tenant)).or_insert(0) += 1;
                open.total += 1;
                Ok(ConnectionSlot { limiter: Arc::clone(self), tenant: Some(Tenant::clone(tenant)) })
            }
            Some(_) if admin && open.reserved < self.admin_reserve => {
                open.reserved += 1;
                Ok(ConnectionSlot { limiter: Arc::clone(self), tenant: None })
            }
            Some(full) => Err(full),
        }
    }

    /// Connections `tenant` holds now.
    pub fn open(&self, tenant: &str) -> u32 {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).by_tenant.get(tenant).copied().unwrap_or(0)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.limiter.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tenant) = &self.tenant else {
            open.reserved = open.reserved.saturating_sub(1);
            return;
        };
        open.total = open.total.saturating_sub(1);
        crate::types::count_down(&mut open.by_tenant, tenant, 1);
    }
}

/// `AsyncWrite` for a connection type whose socket is its `inner` field (Unpin) and that
/// adds nothing on the write side (a slot held, an identity attached): every call goes
/// straight through.
macro_rules! write_through_inner {
    ($ty:ty) => {
        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
            }
            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_flush(cx)
            }
            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
            }
            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
            }
            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }
        }
    };
}
pub(crate) use write_through_inner;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> Tenant {
        Arc::from(name)
    }

    #[test]
    fn refusals_are_logged_once_a_second_with_the_count_of_the_rest() {
        let l = ConnectionLimiter::new(1, 1, 0);
        assert_eq!(l.log_refusal(), Some(0), "the first is logged");
        assert_eq!((l.log_refusal(), l.log_refusal()), (None, None), "the next, within the second, are not");
        l.logged.lock().unwrap().0 = Some(Instant::now() - LOG_EVERY);
        assert_eq!(l.log_refusal(), Some(2), "a second later: logged, with the two left out");
    }

    #[test]
    fn each_tenant_has_its_own_limit_and_closing_frees_a_place() {
        let l = ConnectionLimiter::new(2, 100, 0);
        let a1 = l.admit(&t("a"), false).expect("first");
        let _a2 = l.admit(&t("a"), false).expect("second");
        assert_eq!(l.admit(&t("a"), false).err(), Some(Full::Tenant), "a third for the same tenant");
        let _b = l.admit(&t("b"), false).expect("another tenant is not affected");
        drop(a1);
        assert_eq!(l.open("a"), 1);
        assert!(l.admit(&t("a"), false).is_ok());
    }

    #[test]
    fn a_crowd_of_tenants_meets_the_total_and_the_admin_still_gets_in() {
        let l = ConnectionLimiter::new(2, 3, 1);
        let _held: Vec<_> = ["a", "b", "c"].iter().map(|n| l.admit(&t(n), false).expect("room")).collect();
        assert_eq!(l.admit(&t("d"), false).err(), Some(Full::Total));
        let admin = l.admit(&t("root"), true).expect("the admin's reserved slot");
        assert_eq!(l.admit(&t("root"), true).err(), Some(Full::Total), "one reserved slot only");
        drop(_held);
        let _again = l.admit(&t("a"), false).expect("the reserved slot counts against no tenant");
        drop(admin);
        assert!(l.admit(&t("root"), true).is_ok());
    }
}

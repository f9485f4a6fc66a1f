//! Who is calling, what they may set, and the faults an admin may inject: the sequences
//! that must happen together (a quota change and the ledgers' reservations; identity and
//! the request rate) live here, so no front end can do half of one.

use super::Daemon;
use crate::error::{NpudError, NpudResult, Reason, backend_error};
use crate::policy::quota::QuotaChange;
use crate::tenancy::identity::Peer;
use crate::types::{Caller, Quota, Tenant};

/// A fault an admin injects to rehearse failure (simulator and test fakes).
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// The device's next `n` creations fail as the vendor's do when it runs out.
    FailNextCreations(u32),
    /// A task of a stream the admin holds fails with `code`.
    FailTask {
        stream: u64,
        task: u64,
        code: i64,
    },
    /// The device stops answering, or answers again.
    Stall,
    Resume,
    /// The handler panics with the registry locked (the lock must recover).
    Panic,
}

impl Daemon {
    /// A Unix-socket peer as a caller, within its tenant's request rate.
    pub fn resolve_peer(&self, peer: &Peer) -> NpudResult<Caller> {
        let caller = self.identities.read().unwrap_or_else(|e| e.into_inner()).resolve(peer)?;
        if peer.container.as_ref().is_some_and(|c| c.pod_uid.is_some()) {
            self.quotas.saw_pod(&caller.tenant);
        }
        self.limiter.check(&caller.tenant)?;
        Ok(caller)
    }

    /// One more request of `tenant` that came on a connection already resolved (a budget
    /// session's calls): refused, like any other request, beyond the tenant's rate.
    pub fn within_rate(&self, tenant: &Tenant) -> NpudResult<()> {
        self.limiter.check(tenant)
    }

    /// A TCP peer (client certificate names, bearer token) as a caller, within its rate.
    pub fn resolve_remote(&self, cert_names: &[String], token: Option<&str>) -> NpudResult<Caller> {
        let caller = self.identities.read().unwrap_or_else(|e| e.into_inner()).resolve_remote(cert_names, token)?;
        self.limiter.check(&caller.tenant)?;
        Ok(caller)
    }

    /// Whose connection a Unix-socket peer's is, for the connection limits: the tenant it
    /// resolves to (without spending its request rate) and whether it is an admin. A peer
    /// that resolves to none (its calls will be refused) counts under its uid.
    pub fn connection_owner(&self, peer: &Peer) -> (Tenant, bool) {
        match self.identities.read().unwrap_or_else(|e| e.into_inner()).resolve(peer) {
            Ok(caller) => (caller.tenant, caller.admin),
            Err(_) => (Tenant::from(format!("unidentified-uid-{}", peer.uid)), false),
        }
    }

    /// An unauthenticated TCP peer as a caller (tenant `tcp-anonymous`), within its rate.
    pub fn resolve_anonymous_tcp(&self) -> NpudResult<Caller> {
        let caller = self.identities.read().unwrap_or_else(|e| e.into_inner()).resolve_anonymous_tcp()?;
        self.limiter.check(&caller.tenant)?;
        Ok(caller)
    }

    /// Streams per device the tenant's interposed processes ask for at start-up, if set.
    pub fn process_streams(&self, tenant: &Tenant) -> Option<u32> {
        self.identities.read().unwrap_or_else(|e| e.into_inner()).process_streams(tenant)
    }

    /// Changes a tenant's quota at run time (persisted) and the ledgers' reservations with it.
    pub fn set_quota(&self, tenant: &Tenant, change: QuotaChange) -> NpudResult<Quota> {
        let q = self.quotas.set(tenant, change, self.smallest_capacity())?;
        self.apply_reservations();
        Ok(q)
    }

    /// Drops a tenant's run-time quota (it returns to its configured or default one).
    pub fn remove_quota(&self, tenant: &Tenant) -> NpudResult<()> {
        let removed = self.quotas.remove(tenant);
        self.apply_reservations();
        removed
    }

    pub fn inject_fault(&self, caller: &Caller, device: u32, fault: Fault) -> NpudResult<()> {
        self.device(device)?;
        let b = &self.backend;
        let result = match fault {
            Fault::FailNextCreations(n) => b.fail_next_creations(device, n),
            Fault::FailTask { stream, task, code } => {
                let s = self.registry.stream(caller, stream)?;
                b.fail_task(s.device, s.raw, task, code)
            }
            Fault::Stall => b.set_stalled(device, true),
            Fault::Resume => b.set_stalled(device, false),
            Fault::Panic => {
                tracing::warn!(admin = %caller.tenant, "injected fault: this handler panics now");
                self.registry.panic_while_locked();
                Ok(())
            }
        };
        result.map_err(|e| backend_error(b.name(), e))?;
        tracing::info!(admin = %caller.tenant, device, ?fault, "fault injected");
        Ok(())
    }
}

/// The caller must be an admin.
pub fn require_admin(caller: &Caller) -> NpudResult<()> {
    if caller.admin {
        Ok(())
    } else {
        Err(NpudError::new(Reason::NotAdmin, format!("tenant {} is not an admin", caller.tenant)))
    }
}

//! Quota lookup: runtime changes (persisted) over the config file over the default.

use crate::config::Config;
use crate::error::{NpudError, NpudResult, Reason};
use crate::policy::state::{PersistedState, StateStore};
use crate::types::Quota;
use crate::types::Tenant;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    Runtime,
    Default,
    /// A pod's container without a bound `npud.io/streams` allocation (Kubernetes mode).
    Unallocated,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Runtime => "runtime",
            Source::Default => "default",
            Source::Unallocated => "unallocated",
        }
    }
}

/// A requested change; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotaChange {
    pub max_streams: Option<u32>,
    pub reserved_streams: Option<u32>,
    pub max_events: Option<u32>,
    pub weight: Option<u32>,
    pub highest_priority: Option<i32>,
}

pub struct Quotas {
    from_config: RwLock<HashMap<Tenant, Quota>>,
    runtime: RwLock<HashMap<Tenant, Quota>>,
    default: RwLock<Quota>,
    store: StateStore,
    persisted: RwLock<PersistedState>,
    /// Kubernetes mode: the quota of a pod's container that has no allocation bound
    /// (`[kubernetes] unallocated_quota`), and the tenants seen as pod containers.
    unallocated: RwLock<Option<Quota>>,
    pods: RwLock<HashMap<Tenant, u64>>,
    pods_seen: std::sync::atomic::AtomicU64,
}

/// Pod tenants remembered at most; the longest known goes first (a live one is marked
/// again at its next call, before its quota is read).
const MAX_POD_TENANTS: usize = 65_536;

/// The quota of a pod container without an allocation: `streams` streams, no reservation.
fn unallocated_quota(config: &Config, default: Quota) -> Option<Quota> {
    let k = config.kubernetes.as_ref()?;
    Some(Quota { max_streams: k.unallocated_quota, reserved_streams: 0, ..default })
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn config_quotas(config: &Config) -> HashMap<Tenant, Quota> {
    config.tenants.iter().map(|t| (Arc::from(t.name.as_str()), t.quota)).collect()
}

/// The quota of tenants nothing else names. Without a `[default_quota]` section its
/// `max_events` is half the smallest device's event table, so one tenant cannot take every
/// event of a part (an inference part holds 1023): 511 there, 32767 on training parts.
fn default_quota(config: &Config, event_table: u32) -> Quota {
    let mut q = config.default_quota;
    if !config.default_quota_given {
        q.max_events = (event_table / 2).max(1);
    }
    q
}

impl Quotas {
    /// `event_table`: the smallest device's event limit.
    pub fn new(config: &Config, store: StateStore, persisted: PersistedState, event_table: u32) -> Self {
        let runtime = persisted.quotas.iter().map(|(k, v)| (Arc::from(k.as_str()), *v)).collect();
        Self {
            from_config: RwLock::new(config_quotas(config)),
            runtime: RwLock::new(runtime),
            default: RwLock::new(default_quota(config, event_table)),
            store,
            persisted: RwLock::new(persisted),
            unallocated: RwLock::new(unallocated_quota(config, default_quota(config, event_table))),
            pods: RwLock::new(HashMap::new()),
            pods_seen: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Takes the config file's tenants and default quota (SIGHUP). Changes made through
    /// the admin API still win over the file.
    pub fn reload(&self, config: &Config, event_table: u32) {
        *self.from_config.write().unwrap_or_else(|e| e.into_inner()) = config_quotas(config);
        *self.default.write().unwrap_or_else(|e| e.into_inner()) = default_quota(config, event_table);
        *self.unallocated.write().unwrap_or_else(|e| e.into_inner()) =
            unallocated_quota(config, default_quota(config, event_table));
    }

    /// `tenant` is a pod's container (its cgroup says so). In Kubernetes mode, until an
    /// allocation is bound to it (a run-time quota) and unless the config names it, its
    /// quota is the unallocated one: identity fails closed.
    pub fn saw_pod(&self, tenant: &Tenant) {
        // Every call of a pod's process passes here: a tenant already known costs a read.
        if read(&self.unallocated).is_none() || read(&self.pods).contains_key(tenant) {
            return;
        }
        let seen = self.pods_seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut pods = self.pods.write().unwrap_or_else(|e| e.into_inner());
        if pods.len() >= MAX_POD_TENANTS && !pods.contains_key(tenant) {
            let oldest = pods.iter().min_by_key(|(_, s)| **s).map(|(t, _)| Arc::clone(t));
            if let Some(t) = oldest {
                pods.remove(&t);
            }
        }
        pods.insert(Arc::clone(tenant), seen);
    }

    pub fn get(&self, tenant: &str) -> (Quota, Source) {
        if let Some(q) = read(&self.runtime).get(tenant) {
            return (*q, Source::Runtime);
        }
        if let Some(q) = read(&self.from_config).get(tenant) {
            return (*q, Source::Config);
        }
        if let Some(q) = *read(&self.unallocated)
            && read(&self.pods).contains_key(tenant)
        {
            return (q, Source::Unallocated);
        }
        (*read(&self.default), Source::Default)
    }

    /// Every tenant with an explicit quota.
    pub fn all(&self) -> BTreeMap<Tenant, (Quota, Source)> {
        let mut out: BTreeMap<Tenant, (Quota, Source)> =
            read(&self.from_config).iter().map(|(t, q)| (Arc::clone(t), (*q, Source::Config))).collect();
        for (t, q) in read(&self.runtime).iter() {
            out.insert(Arc::clone(t), (*q, Source::Runtime));
        }
        out
    }

    /// Reservations per tenant, as the ledgers need them.
    pub fn reservations(&self) -> HashMap<Tenant, u32> {
        self.all()
            .into_iter()
            .filter(|(_, (q, _))| q.reserved_streams > 0)
            .map(|(t, (q, _))| (t, q.reserved_streams))
            .collect()
    }

    /// Applies a change after checking it against `capacity` (the smallest device's), and
    /// persists it before it takes effect.
    pub fn set(&self, tenant: &Tenant, change: QuotaChange, capacity: u32) -> NpudResult<Quota> {
        let (mut q, _) = self.get(tenant);
        q.max_streams = change.max_streams.unwrap_or(q.max_streams);
        q.reserved_streams = change.reserved_streams.unwrap_or(q.reserved_streams);
        q.max_events = change.max_events.unwrap_or(q.max_events);
        q.weight = change.weight.unwrap_or(q.weight);
        q.highest_priority = change.highest_priority.unwrap_or(q.highest_priority);
        q.validate(&format!("tenant {tenant}")).map_err(|e| NpudError::new(Reason::InvalidArgumentOther, e))?;
        let others: u64 =
            self.reservations().iter().filter(|(t, _)| t.as_ref() != tenant.as_ref()).map(|(_, &r)| u64::from(r)).sum();
        if others + u64::from(q.reserved_streams) > u64::from(capacity) {
            return Err(NpudError::new(
                Reason::InvalidArgumentOther,
                format!(
                    "reserving {} for {tenant} would over-commit the device: capacity {capacity}, already reserved by others {others}",
                    q.reserved_streams
                ),
            ));
        }
        let mut persisted = self.persisted.write().unwrap_or_else(|e| e.into_inner());
        let mut next = persisted.clone();
        next.quotas.insert(tenant.to_string(), q);
        self.store.save(&next).map_err(|e| NpudError::new(Reason::BackendError, e.to_string()))?;
        *persisted = next;
        self.runtime.write().unwrap_or_else(|e| e.into_inner()).insert(Arc::clone(tenant), q);
        Ok(q)
    }

    /// Drops a tenant's runtime quota (persisted): it falls back to the file's or the
    /// default. A tenant without one is left as it is.
    pub fn remove(&self, tenant: &Tenant) -> NpudResult<()> {
        let mut persisted = self.persisted.write().unwrap_or_else(|e| e.into_inner());
        if !persisted.quotas.contains_key(tenant.as_ref()) {
            self.runtime.write().unwrap_or_else(|e| e.into_inner()).remove(tenant);
            return Ok(());
        }
        let mut next = persisted.clone();
        next.quotas.remove(tenant.as_ref());
        self.store.save(&next).map_err(|e| NpudError::new(Reason::BackendError, e.to_string()))?;
        *persisted = next;
        self.runtime.write().unwrap_or_else(|e| e.into_inner()).remove(tenant);
        Ok(())
    }

    pub fn record_epoch(&self, epoch: u16) -> Result<(), crate::policy::state::StateError> {
        let mut persisted = self.persisted.write().unwrap_or_else(|e| e.into_inner());
        persisted.epoch = Some(epoch);
        self.store.save(&persisted)
    }
}

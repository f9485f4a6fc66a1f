//! Types every layer of the daemon shares: who a tenant is, what it may hold, and who is
//! calling. They sit at the bottom of the module graph and depend on nothing in the crate.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// A tenant's name, shared cheaply between the books that key on it.
pub type Tenant = Arc<str>;

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: Tenant,
    pub admin: bool,
    pub uid: u32,
}

/// A tenant's share of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    pub max_streams: u32,
    /// Guaranteed: nobody else's grants eat into it.
    pub reserved_streams: u32,
    pub max_events: u32,
    /// Share of contended budget relative to other tenants.
    pub weight: u32,
    /// Most urgent priority this tenant may ask for; the default allows every priority
    /// (priorities are 0..=7 on AscendCL, negative numbers are the urgent ones on CUDA).
    pub highest_priority: i32,
}

impl Default for Quota {
    fn default() -> Self {
        Self { max_streams: u32::MAX, reserved_streams: 0, max_events: 65536, weight: 1, highest_priority: i32::MIN }
    }
}

impl Quota {
    pub fn validate(&self, who: &str) -> Result<(), String> {
        if self.weight == 0 || self.weight > 1000 {
            return Err(format!("{who}: weight must be 1..=1000, got {}", self.weight));
        }
        if self.reserved_streams > self.max_streams {
            return Err(format!(
                "{who}: reserved_streams {} exceeds max_streams {}",
                self.reserved_streams, self.max_streams
            ));
        }
        Ok(())
    }
}

/// Tenant names appear in logs, metrics labels and file names: keep them plain.
pub fn check_tenant_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok { Ok(()) } else { Err("tenant names are 1..=64 characters of [A-Za-z0-9._:-]".into()) }
}

/// The tenant of every unauthenticated TCP peer (`--insecure-tcp`): one of its own, so a
/// remote caller never shares a local user's streams, quota or limits.
pub const TCP_ANONYMOUS: &str = "tcp-anonymous";

/// Whether npud gives `name` to peers no tenant maps: `root`, `uid-N`, `container-ID`,
/// `pod-UID`, `cert-NAME`, `tcp-anonymous`.
pub fn is_derived(name: &str) -> bool {
    name == "root"
        || name == TCP_ANONYMOUS
        || ["uid-", "container-", "pod-", "cert-"].iter().any(|p| name.starts_with(p))
}

/// A configured tenant may not map peers into a derived name, or its members would share
/// the derived identity's streams (a tenant named `root` with `uids = [1004]` could
/// destroy host root's streams). `maps_peers` is whether the entry names any uid, gid,
/// container, pod, certificate or token, or makes admins: an entry that names none only
/// sets that derived tenant's quota.
pub fn check_not_derived(name: &str, maps_peers: bool) -> Result<(), String> {
    if is_derived(name) && maps_peers {
        Err(format!(
            "{name:?} is a name npud gives unmapped peers (root, uid-N, container-ID, pod-UID, cert-NAME, {TCP_ANONYMOUS}); \
             an entry with that name may set its quota only: give the tenant another name and map the uid, \
             container or certificate to it"
        ))
    } else {
        Ok(())
    }
}

/// Lowers `key`'s count by `by` (never below zero) and forgets the key at zero: npud's
/// per-tenant and per-key counters keep only live keys, so they stay as small as what is
/// held now, not as large as every tenant ever seen.
pub fn count_down<K, Q, V>(map: &mut HashMap<K, V>, key: &Q, by: V)
where
    K: Borrow<Q> + Hash + Eq,
    Q: Hash + Eq + ?Sized,
    V: Copy + PartialOrd + std::ops::Sub<Output = V> + Default,
{
    if let Some(n) = map.get_mut(key) {
        *n = if *n > by { *n - by } else { V::default() };
        if *n == V::default() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_goes_down_never_below_zero_and_its_key_goes_at_zero() {
        let mut m: HashMap<Tenant, usize> = HashMap::from([(Arc::from("a"), 5)]);
        count_down(&mut m, "a", 2);
        assert_eq!(m["a"], 3);
        count_down(&mut m, "a", 7);
        assert!(m.is_empty(), "at zero the key is forgotten");
        count_down(&mut m, "b", 1);
        assert!(m.is_empty(), "an absent key stays absent");
    }
}

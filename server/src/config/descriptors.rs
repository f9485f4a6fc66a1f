//! The descriptors npud may open (RLIMIT_NOFILE) and the connection limits that follow
//! from them: whatever tenants do with connections, npud keeps descriptors for its own
//! work (devices, state files, the kubelet, TCP) and the host admin keeps a few slots.

use super::defaults as d;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Raises the soft descriptor limit to the hard one (at most [`d::MAX_DESCRIPTORS`]), as
/// servers do: the soft default (often 1024) is a guard for interactive shells, not a
/// budget for a daemon that holds one descriptor per connection. Returns the limit now in
/// force; on failure the old one stays and is returned.
pub fn raise_soft_limit() -> u64 {
    let limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(d::MAX_DESCRIPTORS).min(d::MAX_DESCRIPTORS);
    if limit.current.is_some_and(|c| c < wanted) {
        let raised = Rlimit { current: Some(wanted), maximum: limit.maximum };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return wanted;
        }
    }
    soft_limit()
}

/// The soft descriptor limit in force (unlimited reads as [`d::MAX_DESCRIPTORS`]).
pub fn soft_limit() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(d::MAX_DESCRIPTORS).min(d::MAX_DESCRIPTORS)
}

/// Descriptors npud keeps for itself out of `nofile`: an eighth, at least 64.
pub fn own_share(nofile: u64) -> u64 {
    (nofile / 8).max(64)
}

/// The most connections all tenants together may hold with `nofile` descriptors: what
/// npud's own share and the admin's reserved slots leave (at least 1).
pub fn most_connections(nofile: u64) -> u32 {
    let left = nofile.saturating_sub(own_share(nofile)).saturating_sub(u64::from(d::ADMIN_CONNECTIONS));
    left.clamp(1, u64::from(d::MAX_CONNECTIONS)) as u32
}

/// Default per-tenant connections: [`d::MAX_CONNECTIONS_PER_TENANT`], but never more than
/// a quarter of the total, so a few tenants cannot take all of it.
pub fn per_tenant_default(total: u32) -> u32 {
    d::MAX_CONNECTIONS_PER_TENANT.min(total / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_follow_the_descriptor_limit() {
        // The 256 of the issue: npud keeps 64, the admin 16; tenants share 176, 44 each.
        assert_eq!(most_connections(256), 176);
        assert_eq!(per_tenant_default(most_connections(256)), 44);
        // The shipped unit's 65536.
        assert_eq!(most_connections(65536), 65536 - 8192 - 16);
        assert_eq!(per_tenant_default(most_connections(65536)), 512);
        // Nothing at all still leaves one.
        assert_eq!(most_connections(10), 1);
    }
}

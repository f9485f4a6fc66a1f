//! Peer identity → tenant. On the Unix socket the kernel tells us who the peer is
//! (SO_PEERCRED); the config maps uids to tenant names and marks admins.

use crate::config::Config;
use crate::error::{NpudError, NpudResult, Reason};
use crate::ledger::Tenant;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Who is on the other end of a connection, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: Tenant,
    pub admin: bool,
    pub uid: u32,
}

pub struct Identities {
    by_uid: HashMap<u32, Tenant>,
    admin_tenants: HashSet<Tenant>,
    admin_uids: HashSet<u32>,
    refuse_unknown: bool,
}

/// Tenant names appear in logs, metrics labels and file names: keep them plain.
pub fn check_tenant_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok { Ok(()) } else { Err("tenant names are 1..=64 characters of [A-Za-z0-9._:-]".into()) }
}

impl Identities {
    pub fn new(config: &Config) -> Self {
        let mut by_uid = HashMap::new();
        let mut admin_tenants = HashSet::new();
        for t in &config.tenants {
            let name: Tenant = Arc::from(t.name.as_str());
            for uid in &t.uids {
                by_uid.insert(*uid, Arc::clone(&name));
            }
            if t.admin {
                admin_tenants.insert(name);
            }
        }
        Self {
            by_uid,
            admin_tenants,
            admin_uids: config.admin_uids.iter().copied().collect(),
            refuse_unknown: config.refuse_unknown,
        }
    }

    pub fn resolve(&self, peer: &Peer) -> NpudResult<Caller> {
        let admin_uid = self.admin_uids.contains(&peer.uid);
        let tenant = match self.by_uid.get(&peer.uid) {
            Some(t) => Arc::clone(t),
            None if self.refuse_unknown && !admin_uid => {
                return Err(NpudError::new(
                    Reason::TenantRefused,
                    format!("uid {} is not mapped to a tenant and this daemon refuses unknown peers", peer.uid),
                ));
            }
            None if peer.uid == 0 => Arc::from("root"),
            None => Arc::from(format!("uid-{}", peer.uid)),
        };
        let admin = admin_uid || self.admin_tenants.contains(&tenant);
        Ok(Caller { tenant, admin, uid: peer.uid })
    }
}

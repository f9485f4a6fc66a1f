//! Peer identity → tenant. The kernel tells who a Unix-socket peer is (SO_PEERCRED) and
//! its cgroup tells which container it runs in; the config maps container ids, pod uids,
//! uids and gids to tenant names and marks admins.

use crate::config::Config;
use crate::error::{NpudError, NpudResult, Reason};
use crate::tenancy::identity::Peer;
use crate::types::{Caller, Tenant};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub struct Identities {
    by_container: Vec<(String, Tenant)>,
    by_pod: HashMap<String, Tenant>,
    by_uid: HashMap<u32, Tenant>,
    by_gid: HashMap<u32, Tenant>,
    by_cert_name: HashMap<String, Tenant>,
    by_token_hash: HashMap<String, Tenant>,
    admin_tenants: HashSet<Tenant>,
    admin_uids: HashSet<u32>,
    refuse_unknown: bool,
    /// Every configured tenant name: under `refuse_unknown`, anonymous TCP peers are
    /// served only where the operator configured their tenant.
    configured: HashSet<Tenant>,
    /// Tenants' `process_streams`: what their interposed processes ask for at start-up.
    process_streams: HashMap<Tenant, u32>,
}

impl Identities {
    pub fn new(config: &Config) -> Self {
        let mut me = Self {
            by_container: Vec::new(),
            by_pod: HashMap::new(),
            by_uid: HashMap::new(),
            by_gid: HashMap::new(),
            by_cert_name: HashMap::new(),
            by_token_hash: HashMap::new(),
            admin_tenants: HashSet::new(),
            admin_uids: config.admin_uids.iter().copied().collect(),
            refuse_unknown: config.refuse_unknown,
            configured: HashSet::new(),
            process_streams: HashMap::new(),
        };
        for t in &config.tenants {
            let name: Tenant = Arc::from(t.name.as_str());
            me.configured.insert(Arc::clone(&name));
            me.by_container.extend(t.containers.iter().map(|c| (c.to_ascii_lowercase(), Arc::clone(&name))));
            me.by_pod.extend(t.pod_uids.iter().map(|p| (p.clone(), Arc::clone(&name))));
            me.by_uid.extend(t.uids.iter().map(|u| (*u, Arc::clone(&name))));
            me.by_gid.extend(t.gids.iter().map(|g| (*g, Arc::clone(&name))));
            me.by_cert_name.extend(t.cert_names.iter().map(|n| (n.clone(), Arc::clone(&name))));
            me.by_token_hash.extend(t.token_sha256.iter().map(|h| (h.to_ascii_lowercase(), Arc::clone(&name))));
            if let Some(n) = t.process_streams {
                me.process_streams.insert(Arc::clone(&name), n);
            }
            if t.admin {
                me.admin_tenants.insert(name);
            }
        }
        me
    }

    /// The tenant's configured start-up ask for an interposed process, if any.
    pub fn process_streams(&self, tenant: &str) -> Option<u32> {
        self.process_streams.get(tenant).copied()
    }

    /// A configured tenant for the peer: by container id or pod uid for a verified
    /// container, else by uid or gid, except for a uid-0 peer not proven the host's
    /// (uid 0 in a container is the same number, and not the host's root).
    fn mapped(&self, peer: &Peer) -> Option<Tenant> {
        if let Some(c) = &peer.container {
            // A configured id may be the full id or a prefix of at least 12 characters.
            if let Some((_, t)) = self.by_container.iter().find(|(id, _)| c.id.starts_with(id.as_str())) {
                return Some(Arc::clone(t));
            }
            if let Some(t) = c.pod_uid.as_ref().and_then(|p| self.by_pod.get(p)) {
                return Some(Arc::clone(t));
            }
            return None;
        }
        if peer.uid == 0 && !peer.is_host_root() {
            return None;
        }
        self.by_uid.get(&peer.uid).or_else(|| self.by_gid.get(&peer.gid)).cloned()
    }

    /// A remote caller: the names of its verified client certificate, else its bearer
    /// token. Without either there is no identity to act on.
    pub fn resolve_remote(&self, cert_names: &[String], token: Option<&str>) -> NpudResult<Caller> {
        let by_cert = cert_names.iter().find_map(|n| self.by_cert_name.get(n));
        let by_token = token.and_then(|t| self.by_token_hash.get(&token_hash(t)));
        let tenant = match (by_cert, by_token) {
            (Some(t), _) | (None, Some(t)) => Arc::clone(t),
            (None, None) if token.is_some() => {
                return Err(NpudError::new(Reason::NoIdentity, "the bearer token is not known to this daemon"));
            }
            (None, None) => match cert_names.first() {
                Some(_) if self.refuse_unknown => {
                    return Err(NpudError::new(
                        Reason::TenantRefused,
                        format!(
                            "certificate {} is not mapped to a tenant and this daemon refuses unknown peers",
                            crate::error::quoted(&cert_names[0])
                        ),
                    ));
                }
                Some(name) => Arc::from(format!("cert-{}", sanitize(name))),
                None => {
                    return Err(NpudError::new(
                        Reason::NoIdentity,
                        "no client certificate and no bearer token: present one (authorization: Bearer ...)",
                    ));
                }
            },
        };
        let admin = self.admin_tenants.contains(&tenant);
        Ok(Caller { tenant, admin, uid: u32::MAX })
    }

    /// A plain TCP peer (`--insecure-tcp`) with neither certificate nor token: nobody can
    /// be told apart, so all of them are one tenant of their own, never a local uid's.
    pub fn resolve_anonymous_tcp(&self) -> NpudResult<Caller> {
        let tenant: Tenant = Arc::from(crate::types::TCP_ANONYMOUS);
        if self.refuse_unknown && !self.configured.contains(&tenant) {
            return Err(NpudError::new(
                Reason::TenantRefused,
                format!(
                    "unauthenticated TCP peers are tenant {tenant}, which is not configured, and this daemon refuses \
                     unknown peers"
                ),
            ));
        }
        Ok(Caller { tenant, admin: false, uid: u32::MAX })
    }

    /// A Unix-socket peer's tenant: its verified container's (a configured one, else its
    /// pod's or the container's own), else its uid's (a configured one, else `root` for the
    /// proven host root and `uid-<n>` for everyone else, uid 0 included). Admin only for
    /// an admin uid or tenant, and for uid 0 only when proven the host's.
    pub fn resolve(&self, peer: &Peer) -> NpudResult<Caller> {
        if let Some(why) = &peer.refused {
            return Err(NpudError::new(Reason::NoIdentity, why.clone()));
        }
        // `kubectl exec` into npud's own container: npud's operator, as host root is.
        if peer.own {
            return Ok(Caller { tenant: Arc::from("root"), admin: self.admin_uids.contains(&peer.uid), uid: peer.uid });
        }
        // A uid-0 peer not proven the host's is nobody's admin, whatever it maps to.
        let unproven_root = peer.uid == 0 && peer.container.is_none() && !peer.is_host_root();
        // A uid is only meaningful on the host: root inside a container is not root here.
        let host_admin = peer.container.is_none() && !unproven_root && self.admin_uids.contains(&peer.uid);
        let tenant = match self.mapped(peer) {
            Some(t) => t,
            None if self.refuse_unknown && !host_admin => {
                let who = match &peer.container {
                    Some(c) => format!("container {}", c.short()),
                    None => format!("uid {}", peer.uid),
                };
                return Err(NpudError::new(
                    Reason::TenantRefused,
                    format!("{who} is not mapped to a tenant and this daemon refuses unknown peers"),
                ));
            }
            None => match &peer.container {
                // Every container of a pod is one tenant: a pod holds what its containers'
                // allocations give, whichever container presents a token or restarts.
                Some(c) if let Some(uid) = c.pod_uid.as_ref().filter(|u| u.len() <= 36) => pod_tenant_name(uid),
                Some(c) => Arc::from(format!("container-{}", c.short())),
                None if peer.is_host_root() => Arc::from("root"),
                None => Arc::from(format!("uid-{}", peer.uid)),
            },
        };
        let admin = !unproven_root && (host_admin || self.admin_tenants.contains(&tenant));
        Ok(Caller { tenant, admin, uid: peer.uid })
    }
}

impl Identities {
    /// The tenant pod `uid`'s containers are (a configured one, else `pod-<uid>`), where
    /// no container of it is configured by id: what a DRA claim of the pod is booked to.
    pub fn pod_tenant(&self, uid: &str) -> Tenant {
        self.by_pod.get(uid).cloned().unwrap_or_else(|| pod_tenant_name(uid))
    }
}

/// `pod-<uid>`: the tenant a pod's containers are unless the config says otherwise.
fn pod_tenant_name(uid: &str) -> Tenant {
    Arc::from(format!("pod-{}", uid.to_ascii_lowercase()))
}

/// Hex SHA-256 of a bearer token, as the config stores it.
pub fn token_hash(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Certificate names become tenant names: keep the characters tenant names allow.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(59)
        .collect()
}

/// Subject common names and DNS, email and URI alternative names of a DER certificate.
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { return Vec::new() };
    let mut names: Vec<String> =
        cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok().map(str::to_string)).collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(s)
                | x509_parser::extensions::GeneralName::RFC822Name(s)
                | x509_parser::extensions::GeneralName::URI(s) => names.push((*s).to_string()),
                _ => {}
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenancy::identity::{PeerInspector, identify};

    fn identities() -> Identities {
        let args = <crate::config::flags::Args as clap::Parser>::parse_from(["npud"]);
        Identities::new(&crate::Config::load(&args).expect("the default configuration"))
    }

    /// A peer whose /proc entry is gone by the time npud reads it.
    struct Vanished;
    impl PeerInspector for Vanished {
        fn cgroup(&self, _pid: i32) -> std::io::Result<String> {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    }

    /// A `/proc` with nothing for pid 1 (hidepid, an old kernel).
    struct NoHost;
    impl PeerInspector for NoHost {
        fn cgroup(&self, _pid: i32) -> std::io::Result<String> {
            Ok("0::/\n".into())
        }
    }

    /// A uid-0 peer whose cgroup cannot be read is never host root: refused, and told why.
    #[test]
    fn a_peer_whose_cgroup_cannot_be_read_is_refused() {
        let peer = identify(0, 0, Some(42), &Vanished);
        let e = identities().resolve(&peer).expect_err("never host root");
        assert_eq!(e.reason, crate::error::Reason::NoIdentity);
        assert!(e.message.contains("cgroup could not be read"), "{}", e.message);
    }

    /// Issue 66: where npud cannot read a peer's pid namespace, a uid-0 peer is not
    /// proven the host's: not `root`, not an admin, but its uid's tenant.
    #[test]
    fn where_the_namespace_is_unreadable_root_is_not_proven() {
        let peer = identify(0, 0, Some(42), &NoHost);
        assert!(!peer.is_host_root() && peer.elsewhere.is_some(), "{peer:?}");
        let caller = identities().resolve(&peer).expect("its uid's tenant");
        assert_eq!((&*caller.tenant, caller.admin), ("uid-0", false));
    }

    #[test]
    fn token_hashes_are_sha256_hex() {
        assert_eq!(token_hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn certificate_names_come_from_cn_and_san() {
        let mut params = rcgen::CertificateParams::new(vec!["alice.example".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(certificate_names(cert.der()), vec!["alice".to_string(), "alice.example".to_string()]);
        assert!(certificate_names(b"not a certificate").is_empty());
    }
}

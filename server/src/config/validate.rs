//! Whole-config checks: ranges, cross-field rules and tenant tables. Every rule is checked
//! and every failure noted, so an operator fixes a config in one pass.

use super::parse::Problems;
use super::{BackendKind, Config, MAX_PROCESS_STREAMS};
use std::collections::BTreeMap;
use std::time::Duration;

/// `sun_path` in `struct sockaddr_un` on Linux: the path and its terminating NUL.
const MAX_SOCKET_PATH: usize = 108;

impl Config {
    pub(super) fn validate(&self, p: &mut Problems) {
        self.check_sim_and_leases(p);
        self.check_budget_and_limits(p);
        self.check_tenants(p);
        p.check(!matches!(self.log_format.as_str(), "text" | "json"), || {
            format!("log format must be text or json, got {:?}", self.log_format)
        });
        p.check(self.listen.is_some() && self.tls.is_none() && !self.insecure_tcp, || {
            "--listen needs --tls-cert and --tls-key (and usually --client-ca); pass --insecure-tcp to accept plain TCP on a trusted network".into()
        });
        p.check(self.tls.is_some() && self.listen.is_none(), || {
            "--tls-cert/--tls-key are for --listen; the Unix socket needs no TLS".into()
        });
        let socket_len = self.socket.as_os_str().len();
        p.check(socket_len >= MAX_SOCKET_PATH, || {
            format!(
                "socket path {} is {socket_len} bytes; a Unix socket path must be shorter than {MAX_SOCKET_PATH}",
                self.socket.display()
            )
        });
    }

    fn check_sim_and_leases(&self, p: &mut Problems) {
        p.check(self.sim.devices == 0 || self.sim.devices > 64, || {
            format!("sim devices must be 1..=64, got {}", self.sim.devices)
        });
        p.check(self.sim.options.lanes == 0 || self.sim.options.lanes > 1024, || "sim.lanes must be 1..=1024".into());
        p.check(self.sim.options.create_latency > Duration::from_secs(1), || {
            "sim.create_latency must be at most 1s".into()
        });
        for (key, lease) in [("lease", self.lease), ("named_lease", self.named_lease)] {
            p.check(lease < Duration::from_millis(100) || lease > self.max_lease, || {
                format!(
                    "{key} must be between 100ms and max_lease ({}), got {}",
                    humantime::format_duration(self.max_lease),
                    humantime::format_duration(lease)
                )
            });
        }
    }

    fn check_budget_and_limits(&self, p: &mut Problems) {
        let b = &self.budget;
        p.check(b.batch_size == 0 || b.batch_size > 4096, || "budget.batch_size must be 1..=4096".into());
        p.check(b.mps_clients == 0 || b.mps_clients > 1024, || {
            format!("budget.mps_clients must be 1..=1024 (the MPS server's clients per GPU), not {}", b.mps_clients)
        });
        p.check(b.capture_headroom == 0 || b.capture_headroom > 4096, || {
            format!(
                "budget.capture_headroom must be 1..=4096 (streams one graph capture takes), not {}",
                b.capture_headroom
            )
        });
        p.check(b.create_retries > 100, || "budget.create_retries must be at most 100".into());
        p.check(b.safety_margin >= self.sim.profile.stream_limit && self.backend == BackendKind::Sim, || {
            "budget.safety_margin leaves no streams to hand out".into()
        });
        p.check(b.prewarm > b.pool_max, || {
            format!("budget.prewarm {} exceeds budget.pool_max {}", b.prewarm, b.pool_max)
        });
        let l = &self.limits;
        p.check(l.max_streams_per_request == 0 || l.max_streams_per_request > 4096, || {
            "limits.max_streams_per_request must be 1..=4096".into()
        });
        p.check(
            l.max_connections_per_tenant == 0
                || l.max_blocking_calls == 0
                || l.max_callback_report_bytes < 64 * 1024
                || l.max_concurrent_calls == 0
                || l.max_report_streams_per_session == 0
                || l.max_report_bytes < 64 * 1024,
            || "limits.max_connections_per_tenant, max_blocking_calls, max_concurrent_calls and max_report_streams_per_session must be at least 1, max_report_bytes and max_callback_report_bytes at least 64 KiB".into(),
        );
        p.check(
            !(1..=16_384).contains(&l.client_memory_mib)
                || !(1..=l.client_memory_mib).contains(&l.client_memory_per_tenant_mib),
            || {
                format!(
                    "limits.client_memory_mib must be 1..=16384 and limits.client_memory_per_tenant_mib 1..=it, got {}                      and {}",
                    l.client_memory_mib, l.client_memory_per_tenant_mib
                )
            },
        );
        p.check(l.reply_deadline < Duration::from_secs(1) || l.reply_deadline > Duration::from_secs(3600), || {
            format!("limits.reply_deadline must be 1s..=1h, got {}", humantime::format_duration(l.reply_deadline))
        });
        let most = super::descriptors::most_connections(l.descriptors);
        p.check(l.max_connections == 0 || l.max_connections > most, || {
            format!(
                "limits.max_connections must be 1..={most}: npud may open {} descriptors (RLIMIT_NOFILE) and keeps {} \
                 for itself and {} for the host admin",
                l.descriptors,
                super::descriptors::own_share(l.descriptors),
                super::defaults::ADMIN_CONNECTIONS
            )
        });
        p.check(l.max_callback_report_bytes > l.max_report_bytes, || {
            format!(
                "limits.max_callback_report_bytes {} exceeds limits.max_report_bytes {}: a session would drop \
                 callback reports its tenant was allowed to launch",
                l.max_callback_report_bytes, l.max_report_bytes
            )
        });
        p.check(l.max_connections_per_tenant > l.max_connections, || {
            format!(
                "limits.max_connections_per_tenant {} exceeds limits.max_connections {}",
                l.max_connections_per_tenant, l.max_connections
            )
        });
        p.check(
            l.max_sessions_per_tenant == 0 || l.max_pending_requests == 0 || l.max_callbacks_in_flight == 0,
            || {
                "limits.max_sessions_per_tenant, max_pending_requests and max_callbacks_in_flight must be at least 1"
                    .into()
            },
        );
        p.check(l.requests_per_second > 0 && l.request_burst == 0, || {
            "limits.request_burst must be at least 1 when requests_per_second is set".into()
        });
        p.check(l.max_user_data > 4 << 20, || "limits.max_user_data must be at most 4 MiB".into());
    }

    fn check_tenants(&self, p: &mut Problems) {
        if let Err(e) = self.default_quota.validate("default_quota") {
            p.push(e);
        }
        let mut names = BTreeMap::new();
        let mut uids = BTreeMap::new();
        for t in &self.tenants {
            if let Err(e) = crate::types::check_tenant_name(&t.name)
                .and_then(|()| crate::types::check_not_derived(&t.name, t.maps_peers()))
            {
                p.push(format!("tenant {:?}: {e}", t.name));
            }
            if let Err(e) = t.quota.validate(&format!("tenant {}", t.name)) {
                p.push(e);
            }
            if let Some(n) = t.process_streams.filter(|n| !(1..=MAX_PROCESS_STREAMS).contains(n)) {
                p.push(format!("tenant {}: process_streams must be 1..={MAX_PROCESS_STREAMS}, got {n}", t.name));
            }
            p.check(names.insert(t.name.as_str(), ()).is_some(), || format!("tenant {:?} is defined twice", t.name));
            for c in &t.containers {
                p.check(c.len() < 12 || c.len() > 64 || !c.bytes().all(|b| b.is_ascii_hexdigit()), || {
                    format!("tenant {:?}: container {c:?} is not 12..=64 hex digits", t.name)
                });
            }
            for uid in &t.uids {
                if let Some(other) = uids.insert(*uid, t.name.as_str()) {
                    p.push(format!("uid {uid} is mapped to both {other:?} and {:?}", t.name));
                }
            }
            for h in &t.token_sha256 {
                p.check(h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()), || {
                    format!("tenant {:?}: token_sha256 must be 64 hex digits (sha256sum of the token)", t.name)
                });
            }
        }
    }
}

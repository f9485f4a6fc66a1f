//! What a reload (SIGHUP) applies and what it cannot: tenants, their identities and quotas,
//! the default quota, `refuse_unknown` and `admin_uids` take effect at once; everything
//! else shapes sockets, devices or tasks made at start, and waits for the next start.

use super::Config;

impl Config {
    /// Settings `new` changes that a reload does not apply, by their config names: the
    /// daemon names them in a warning, so an operator knows a restart is needed.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        macro_rules! compare {
            ($($field:ident),* $(,)?) => {
                $(
                    if format!("{:?}", self.$field) != format!("{:?}", new.$field) {
                        changed.push(stringify!($field));
                    }
                )*
            };
        }
        compare!(
            socket,
            socket_mode,
            socket_dir_mode,
            socket_group,
            listen,
            insecure_tcp,
            tls,
            backend,
            acl_library,
            cuda_library,
            sim,
            policy,
            metrics,
            state_dir,
            lease,
            named_lease,
            max_lease,
            shutdown_grace,
            health_interval,
            health_timeout,
            check_invariants,
            budget,
            limits,
            log_format,
            proc_root,
            cgroup_root,
            cri_socket,
            kubernetes,
        );
        changed
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Args, Config};
    use clap::Parser;

    fn load(toml: &str) -> Config {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("npud.toml");
        std::fs::write(&path, toml).expect("write");
        Config::load(&Args::parse_from(["npud", "--config", path.to_str().expect("utf-8")])).expect("valid")
    }

    #[test]
    fn tenants_reload_and_the_rest_is_named_for_a_restart() {
        let before = load("[[tenants]]\nname = \"team\"\nuids = [1000]\nmax_streams = 10\n");
        let tenants = load("[[tenants]]\nname = \"team\"\nuids = [1000]\nmax_streams = 30\n");
        assert!(before.restart_only_changes(&tenants).is_empty());
        let other = load("lease = \"20s\"\n[limits]\nmax_sessions_per_tenant = 7\n[budget]\npool_max = 3\n");
        assert_eq!(before.restart_only_changes(&other), ["lease", "budget", "limits"]);
    }
}

//! Config loading without spawning the binary: defaults, precedence, and error reports.

use super::*;
use std::io::Write;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("a temp file");
    f.write_all(text.as_bytes()).expect("written");
    f
}

fn load(text: &str, flags: Args) -> Result<Config, ConfigError> {
    let f = file(text);
    Config::load(&Args { config: Some(f.path().to_path_buf()), ..flags })
}

#[test]
fn without_a_file_every_value_is_its_named_default() {
    let c = Config::load(&Args::default()).expect("the defaults are valid");
    assert_eq!(c.sim.profile.stream_limit, 2048, "atlas-training");
    assert_eq!((c.sim.devices, c.sim.options.lanes), (defaults::SIM_DEVICES, defaults::SIM_LANES as usize));
    assert_eq!((c.lease, c.named_lease, c.max_lease), (defaults::LEASE, defaults::NAMED_LEASE, defaults::MAX_LEASE));
    assert_eq!((c.budget.batch_size, c.budget.pool_max), (defaults::BATCH_SIZE, defaults::POOL_MAX));
    assert_eq!(c.budget.native_pacing, defaults::NATIVE_PACING);
    assert_eq!(c.budget.untracked_hold, defaults::UNTRACKED_HOLD);
    let most = super::descriptors::most_connections(super::descriptors::soft_limit());
    assert_eq!(c.limits.max_connections, most);
    assert_eq!(c.limits.max_connections_per_tenant, super::descriptors::per_tenant_default(most));
    assert_eq!((c.socket_mode, c.socket_dir_mode), (0o660, 0o750));
    assert_eq!((c.backend, c.policy), (BackendKind::Sim, Policy::Managed));
    assert_eq!(c.admin_uids, vec![0]);
    assert!(c.tenants.is_empty() && c.kubernetes.is_none() && c.tls.is_none());
}

#[test]
fn a_flag_wins_over_the_file_and_the_file_over_the_default() {
    let text = "lease = \"30s\"\nsim = { devices = 2, lanes = 4 }\n[budget]\nbatch_size = 8\n";
    let c = load(text, Args { sim_devices: Some(3), ..Args::default() }).expect("valid");
    assert_eq!(c.sim.devices, 3, "--sim-devices wins");
    assert_eq!(c.sim.options.lanes, 4, "the file's lanes");
    assert_eq!(c.lease, Duration::from_secs(30));
    assert_eq!(c.budget.batch_size, 8);
    let c = load(text, Args { lease: Some("5s".into()), ..Args::default() }).expect("valid");
    assert_eq!(c.lease, Duration::from_secs(5));
}

#[test]
fn every_problem_of_a_file_is_reported_at_once() {
    let text = r#"
lease = "soon"
socket_mode = "rwx"
[budget]
batch_size = 0
[limits]
max_user_data = 99999999
[[tenants]]
name = "root"
uids = [1004]
[[tenants]]
name = "a"
uids = [1000]
[[tenants]]
name = "a"
uids = [1000]
weight = 0
"#;
    let e = load(text, Args::default()).unwrap_err().0;
    for expected in [
        "lease: \"soon\" is not a duration",
        "socket_mode: \"rwx\" is not an octal file mode",
        "budget.batch_size must be 1..=4096",
        "limits.max_user_data must be at most 4 MiB",
        "tenant \"root\": \"root\" is a name npud gives unmapped peers",
        "tenant a: weight must be 1..=1000, got 0",
        "tenant \"a\" is defined twice",
        "uid 1000 is mapped to both \"a\" and \"a\"",
    ] {
        assert!(e.contains(expected), "missing {expected:?} in:\n{e}");
    }
    assert!(e.starts_with("8 problems in the configuration:"), "{e}");
}

#[test]
fn the_untracked_hold_is_a_bounded_duration() {
    let c = load("[budget]\nuntracked_hold = \"0s\"\n", Args::default()).expect("valid");
    assert_eq!(c.budget.untracked_hold, Duration::ZERO, "zero believes every fall at once");
    let e = load("[budget]\nuntracked_hold = \"2h\"\n", Args::default()).unwrap_err().0;
    assert!(e.contains("budget.untracked_hold: 2h is longer than the most, 1h"), "{e}");
}

#[test]
fn a_file_that_is_not_the_format_says_where() {
    let e = load("sockett = \"/tmp/x\"\n", Args::default()).unwrap_err().0;
    assert!(e.contains("unknown field `sockett`"), "{e}");
    let e = load("[budget]\nbatch_size = \"many\"\n", Args::default()).unwrap_err().0;
    assert!(e.contains("invalid type"), "{e}");
    let e = Config::load(&Args { config: Some("/nonexistent/npud.toml".into()), ..Args::default() }).unwrap_err().0;
    assert!(e.starts_with("cannot read config /nonexistent/npud.toml"), "{e}");
}

#[test]
fn an_unknown_simulator_profile_is_the_one_problem_reported() {
    let e = Config::load(&Args { sim_profile: Some("atlas-9000".into()), ..Args::default() }).unwrap_err().0;
    assert!(e.contains("atlas-9000"), "{e}");
}

#[test]
fn tls_and_listen_go_together() {
    let e = Config::load(&Args { listen: Some("127.0.0.1:0".into()), ..Args::default() }).unwrap_err().0;
    assert!(e.contains("--listen needs --tls-cert and --tls-key"), "{e}");
    let c = Config::load(&Args { listen: Some("127.0.0.1:0".into()), insecure_tcp: true, ..Args::default() });
    assert!(c.is_ok());
    let e = Config::load(&Args { tls_cert: Some("/x.pem".into()), ..Args::default() }).unwrap_err().0;
    assert!(e.contains("TLS needs both --tls-cert and --tls-key"), "{e}");
}

/// The configuration the Kubernetes manifests ship is one npud loads, with its device
/// plugin on (as the DaemonSet's flag turns it on) and the values its comments state.
#[test]
fn the_shipped_configmap_loads_as_its_comments_say() {
    let yaml = include_str!("../../../deploy/kubernetes/base/configmap.yaml");
    let start = yaml.find("npud.toml: |").expect("the configmap holds npud.toml") + "npud.toml: |".len();
    let toml: String =
        yaml[start..].lines().skip(1).map(|l| l.strip_prefix("    ").unwrap_or(l)).collect::<Vec<_>>().join("\n");
    let flags = Args { device_plugin_dir: Some("/var/lib/kubelet/device-plugins".into()), ..Args::default() };
    let c = load(&toml, flags).expect("the shipped configuration loads");
    let k8s = c.kubernetes.expect("the device plugin is on");
    assert_eq!((k8s.stream_unit, k8s.unallocated_quota, k8s.process_cushion), (8, 0, 4));
}

#[test]
fn a_cushion_past_64_streams_is_refused_by_name() {
    let flags = || Args { device_plugin_dir: Some("/var/lib/kubelet/device-plugins".into()), ..Args::default() };
    let e = load("[kubernetes]\nprocess_cushion = 65\n", flags()).expect_err("refused");
    assert!(e.to_string().contains("kubernetes.process_cushion must be 0..=64, got 65"), "{e}");
    let c = load("[kubernetes]\nprocess_cushion = 0\n", flags()).expect("none is allowed");
    assert_eq!(c.kubernetes.map(|k| k.process_cushion), Some(0));
}

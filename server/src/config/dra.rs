//! `[kubernetes.dra]`: npud as a DRA kubelet plugin (issue 77) beside, or instead of, the
//! device plugin. A ResourceClaim's allocation names a device of npud's and the streams
//! it consumes there; npud books exactly that for the claim's pod when the kubelet
//! prepares the claim.

use crate::config::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;

/// The DRA driver npud is: the `driver` of its ResourceSlices and of the allocation
/// results it books (a DNS subdomain, as the API requires).
pub const DEFAULT_DRIVER: &str = "streams.npud.io";
/// Where the kubelet's DRA plugins serve (`/var/lib/kubelet/plugins/<driver>/dra.sock`).
pub const DEFAULT_PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";
/// The kubelet's plugin watcher's directory: a registration socket there is found and
/// registered (pluginregistration v1).
pub const DEFAULT_REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// Where container runtimes read CDI specs from (containerd, CRI-O, podman).
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// Which kubelet interface npud books pods through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `npud.io/streams` units through the device plugin (the default).
    DevicePlugin,
    /// ResourceClaims through DRA alone.
    Dra,
    /// Both at once (a cluster moving from one to the other).
    Both,
}

impl Mode {
    pub fn parse(text: Option<&str>) -> Result<Mode, ConfigError> {
        match text {
            None | Some("device-plugin") => Ok(Mode::DevicePlugin),
            Some("dra") => Ok(Mode::Dra),
            Some("both") => Ok(Mode::Both),
            Some(other) => Err(ConfigError::new(format!(
                "kubernetes.mode must be \"device-plugin\", \"dra\" or \"both\", got {other:?}"
            ))),
        }
    }

    pub fn device_plugin(self) -> bool {
        self != Mode::Dra
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDra {
    driver: Option<String>,
    plugins_dir: Option<PathBuf>,
    registry_dir: Option<PathBuf>,
    cdi_dir: Option<PathBuf>,
    /// The node's name as the API server knows it (the pool npud's devices are in);
    /// default: `$NODE_NAME` (the DaemonSet sets it from `spec.nodeName`).
    node_name: Option<String>,
    /// The API server's URL, for npud run outside a pod (`kubectl proxy`'s, say);
    /// default: the in-cluster one, with the pod's service account.
    api_server: Option<String>,
    /// What a claim that names no amount consumes (default 8), the least one may ask
    /// (default 1) and the step amounts are rounded up by (default 1): each device's
    /// `streams` capacity's `requestPolicy` (KEP-5075), its most the device's capacity.
    request_default: Option<u32>,
    request_min: Option<u32>,
    request_step: Option<u32>,
}

/// A `streams` capacity's request policy (KEP-5075's `CapacityRequestPolicyRange`): a
/// claim's amount is rounded up to `min` and to `min + k × step`; one that names none
/// consumes `default`. The API wants `default` (and the range's max) a multiple of `step`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPolicy {
    pub default: u32,
    pub min: u32,
    pub step: u32,
}

#[derive(Debug, Clone)]
pub struct DraConfig {
    pub driver: String,
    pub plugins_dir: PathBuf,
    pub registry_dir: PathBuf,
    pub cdi_dir: PathBuf,
    pub node_name: String,
    pub api_server: Option<String>,
    pub request: RequestPolicy,
}

impl DraConfig {
    /// The DRA plugin's own socket, where the kubelet calls NodePrepareResources.
    pub fn endpoint(&self) -> PathBuf {
        self.plugins_dir.join(&self.driver).join("dra.sock")
    }

    /// The registration socket the kubelet's plugin watcher finds.
    pub fn registration(&self) -> PathBuf {
        self.registry_dir.join(format!("{}-reg.sock", self.driver))
    }
}

impl FileDra {
    /// The section resolved; `node_env` is `$NODE_NAME`.
    pub fn resolve(&self, node_env: Option<String>) -> Result<DraConfig, ConfigError> {
        let bad = |m: String| Err(ConfigError::new(m));
        let driver = self.driver.clone().unwrap_or_else(|| DEFAULT_DRIVER.into());
        if !is_dns_subdomain(&driver) || driver.len() > 63 {
            return bad(format!(
                "kubernetes.dra.driver must be a DNS subdomain of at most 63 characters (the API's rule for a driver name), got {driver:?}"
            ));
        }
        let Some(node_name) = self.node_name.clone().or(node_env).filter(|n| !n.is_empty()) else {
            return bad("kubernetes.dra.node_name is not set and neither is $NODE_NAME: npud cannot tell which claims are this node's (set NODE_NAME from spec.nodeName)".into());
        };
        if !is_dns_subdomain(&node_name) {
            return bad(format!("kubernetes.dra.node_name must be a node's name (a DNS subdomain), got {node_name:?}"));
        }
        if let Some(url) = &self.api_server
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad(format!("kubernetes.dra.api_server must be an http:// or https:// URL, got {url:?}"));
        }
        let request = RequestPolicy {
            default: self.request_default.unwrap_or(8),
            min: self.request_min.unwrap_or(1),
            step: self.request_step.unwrap_or(1),
        };
        let RequestPolicy { default, min, step } = request;
        if !(1..=65_536).contains(&min) || !(1..=65_536).contains(&step) || !(min..=65_536).contains(&default) {
            return bad(format!(
                "kubernetes.dra: request_min and request_step must be 1..=65536 and request_default at least request_min and at most 65536, got {min}, {step} and {default}"
            ));
        }
        if default % step != 0 {
            return bad(format!(
                "kubernetes.dra.request_default ({default}) must be a multiple of request_step ({step}), as the API requires of a request policy"
            ));
        }
        let c = DraConfig {
            request,
            driver,
            plugins_dir: self.plugins_dir.clone().unwrap_or_else(|| DEFAULT_PLUGINS_DIR.into()),
            registry_dir: self.registry_dir.clone().unwrap_or_else(|| DEFAULT_REGISTRY_DIR.into()),
            cdi_dir: self.cdi_dir.clone().unwrap_or_else(|| DEFAULT_CDI_DIR.into()),
            node_name,
            api_server: self.api_server.clone(),
        };
        // sun_path holds 108 bytes with its NUL.
        for socket in [c.endpoint(), c.registration()] {
            if socket.as_os_str().len() > 107 || !socket.is_absolute() {
                return bad(format!(
                    "kubernetes.dra: the socket {} must be an absolute path of at most 107 bytes",
                    socket.display()
                ));
            }
        }
        if !c.cdi_dir.is_absolute() {
            return bad(format!("kubernetes.dra.cdi_dir must be absolute, got {}", c.cdi_dir.display()));
        }
        Ok(c)
    }
}

/// RFC 1123 subdomain: lower-case alphanumerics, `-` and `.`, each label starting and
/// ending alphanumeric, 253 characters at most.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_name_and_a_driver_name_are_required_to_be_names() {
        let f = FileDra::default();
        assert!(f.resolve(None).unwrap_err().0.contains("NODE_NAME"));
        let c = f.resolve(Some("node-1".into())).unwrap();
        assert_eq!(c.endpoint(), PathBuf::from("/var/lib/kubelet/plugins/streams.npud.io/dra.sock"));
        assert_eq!(c.registration(), PathBuf::from("/var/lib/kubelet/plugins_registry/streams.npud.io-reg.sock"));
        let upper = FileDra { driver: Some("Streams.npud.io".into()), ..Default::default() };
        assert!(upper.resolve(Some("n".into())).unwrap_err().0.contains("DNS subdomain"));
        let url = FileDra { api_server: Some("localhost:6443".into()), ..Default::default() };
        assert!(url.resolve(Some("n".into())).unwrap_err().0.contains("api_server"));
        let off_step = FileDra { request_default: Some(10), request_step: Some(4), ..Default::default() };
        assert!(off_step.resolve(Some("n".into())).unwrap_err().0.contains("a multiple of request_step"));
        assert_eq!(Mode::parse(Some("dra")).unwrap(), Mode::Dra);
        assert!(Mode::parse(Some("DRA")).is_err());
    }
}

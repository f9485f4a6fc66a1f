//! `[kubernetes]`: npud as the node's device plugin for streams. Off unless the section
//! says `enabled = true` or `--device-plugin-dir` is given.

use crate::config::ConfigError;
use crate::config::device_ids::{DeviceResource, FileDeviceResource, check_resource_name, default_resources};
use serde::Deserialize;
use std::path::PathBuf;

/// The extended resource npud advertises.
pub const DEFAULT_RESOURCE_NAME: &str = "npud.io/streams";
/// Streams per advertised unit: a pod asking for `npud.io/streams: 4` gets 32 streams.
pub const DEFAULT_STREAM_UNIT: u32 = 8;
/// The kubelet's device-plugin directory (its `kubelet.sock` and the plugins' sockets).
pub const DEFAULT_DEVICE_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
/// npud's own plugin socket's file name in that directory.
pub const PLUGIN_SOCKET: &str = "npud.sock";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileKubernetes {
    enabled: Option<bool>,
    resource_name: Option<String>,
    stream_unit: Option<u32>,
    device_plugin_dir: Option<PathBuf>,
    pod_resources_socket: Option<PathBuf>,
    /// How often pod-resources is read (a humantime duration, 10ms..=60s).
    pod_resources_period: Option<String>,
    /// How long an allocation's end must be in evidence (its pod's cgroup gone, or, for
    /// one never presented, complete listings without it) before it ends (1s..=1h).
    allocation_grace: Option<String>,
    /// The interposer npud ships (in its image), installed on the host under its content
    /// hash and mounted into allocated containers when it exists.
    preload_library: Option<PathBuf>,
    /// The host directory it is installed in (default: `<state_dir>/lib`).
    preload_dir: Option<PathBuf>,
    /// Streams a pod's container may hold without an `npud.io/streams` allocation.
    unallocated_quota: Option<u32>,
    /// Streams each process of a pod may make past its grant, per device, while npud is
    /// away (0..=64); it declares them when npud is back.
    process_cushion: Option<u32>,
    /// The oldest glibc the cluster's images have (`2.17`): an interposer that needs a
    /// newer one is refused at install, naming the symbol.
    interposer_glibc: Option<String>,
    /// The vendors' device resources and how their ids name devices (replaces the
    /// defaults when given; an empty list books every allocation per acquisition).
    device_resources: Option<Vec<FileDeviceResource>>,
    /// The container runtime's CRI socket (containerd's `/run/containerd/containerd.sock`,
    /// CRI-O's `/var/run/crio/crio.sock`): where set, a pod's container is named by its
    /// pod only when the runtime's `io.kubernetes.pod.uid` label agrees with its cgroup.
    cri_socket: Option<PathBuf>,
    /// How pods are booked: "device-plugin" (the default), "dra" or "both".
    mode: Option<String>,
    /// The DRA kubelet plugin's settings (`mode` "dra" or "both").
    dra: Option<super::dra::FileDra>,
}

/// How often pod-resources is read: far under the kubelet's 100 requests a second.
pub const DEFAULT_POD_RESOURCES_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a pod's cgroup must be gone before its allocation ends: longer than a
/// crash-looping container's restarts come apart while its pod lives (the kubelet's
/// back-off reaches 300 s between restarts, but the pod's cgroup stays meanwhile), and
/// long enough for a kubelet restart's empty listings to pass for one never presented.
pub const DEFAULT_ALLOCATION_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// A glibc version as its symbol versions spell it: `2.17` is `[2, 17]`, `2.3.4`
/// (`GLIBC_2.3.4`) `[2, 3, 4]`; None for anything else.
pub fn parse_glibc(text: &str) -> Option<Vec<u32>> {
    let parts: Option<Vec<u32>> = text.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|v| (2..=3).contains(&v.len()))
}

/// A pod's container without an allocation gets no streams: identity fails closed.
pub const DEFAULT_UNALLOCATED_QUOTA: u32 = 0;

/// The streams each process of a pod may make past its grant, per device, while npud is
/// away (restarting, being upgraded): a framework makes a stream or two after its start-up
/// (a communicator, a copy stream), and those go on without npud; the process declares
/// them when npud is back. Nothing is held for it: where the device has no room, the
/// device refuses the stream itself, as it would without npud.
pub const DEFAULT_PROCESS_CUSHION: u32 = 4;

#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    pub resource_name: String,
    pub stream_unit: u32,
    pub device_plugin_dir: PathBuf,
    pub pod_resources_socket: Option<PathBuf>,
    /// How often pod-resources is read, and the pods' cgroups looked at.
    pub pod_resources_period: std::time::Duration,
    /// How long an allocation's end must be in evidence before it ends.
    pub allocation_grace: std::time::Duration,
    pub preload_library: PathBuf,
    /// Where it is installed on the host (None: `<state_dir>/lib`).
    pub preload_dir: Option<PathBuf>,
    /// Streams a pod's container may hold without a bound allocation.
    pub unallocated_quota: u32,
    /// Streams each process of a pod may make past its grant, per device, while npud is away.
    pub process_cushion: u32,
    /// The oldest glibc the images have: what the interposer may need at most.
    pub interposer_glibc: Vec<u32>,
    /// The vendors' device resources: which devices the kubelet gave a container.
    pub device_resources: Vec<DeviceResource>,
    /// Which kubelet interface books pods: the device plugin, DRA, or both.
    pub mode: super::dra::Mode,
    /// The DRA plugin's settings where `mode` has it.
    pub dra: Option<super::dra::DraConfig>,
}

impl FileKubernetes {
    /// The runtime's CRI socket, whether or not the device plugin is on (pods are named
    /// either way); an error for a path no socket can have.
    pub fn cri_socket(&self) -> Result<Option<PathBuf>, ConfigError> {
        match &self.cri_socket {
            Some(p) if p.as_os_str().len() > 107 || !p.is_absolute() => Err(ConfigError::new(format!(
                "kubernetes.cri_socket must be an absolute path of at most 107 bytes, got {}",
                p.display()
            ))),
            other => Ok(other.clone()),
        }
    }

    /// Whether the section turns the device plugin on.
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(false)
    }

    /// The section with the flag applied; `None` when the device plugin is off.
    /// `flag_mode` is `--kubernetes-mode`, over the section's `mode`.
    pub fn resolve(
        &self,
        flag_dir: Option<&PathBuf>,
        flag_mode: Option<&str>,
    ) -> Result<Option<KubernetesConfig>, ConfigError> {
        if !self.enabled.unwrap_or(false) && flag_dir.is_none() && flag_mode.is_none() {
            return Ok(None);
        }
        let mode = super::dra::Mode::parse(flag_mode.or(self.mode.as_deref()))?;
        let dra = match mode {
            super::dra::Mode::DevicePlugin if self.dra.is_some() => {
                return Err(ConfigError::new(
                    "[kubernetes.dra] is set but kubernetes.mode is \"device-plugin\": set mode = \"dra\" or \"both\"",
                ));
            }
            super::dra::Mode::DevicePlugin => None,
            _ => Some(self.dra.as_ref().map_or_else(
                || super::dra::FileDra::default().resolve(std::env::var("NODE_NAME").ok()),
                |d| d.resolve(std::env::var("NODE_NAME").ok()),
            )?),
        };
        let c = KubernetesConfig {
            mode,
            dra,
            resource_name: self.resource_name.clone().unwrap_or_else(|| DEFAULT_RESOURCE_NAME.into()),
            stream_unit: self.stream_unit.unwrap_or(DEFAULT_STREAM_UNIT),
            device_plugin_dir: flag_dir
                .cloned()
                .or_else(|| self.device_plugin_dir.clone())
                .unwrap_or_else(|| DEFAULT_DEVICE_PLUGIN_DIR.into()),
            pod_resources_socket: self.pod_resources_socket.clone(),
            pod_resources_period: crate::config::parse::duration(
                "kubernetes.pod_resources_period",
                self.pod_resources_period.as_deref(),
                DEFAULT_POD_RESOURCES_PERIOD,
            )?,
            allocation_grace: crate::config::parse::duration(
                "kubernetes.allocation_grace",
                self.allocation_grace.as_deref(),
                DEFAULT_ALLOCATION_GRACE,
            )?,
            preload_library: self
                .preload_library
                .clone()
                .unwrap_or_else(|| "/usr/local/lib/npud/libnpud_preload.so".into()),
            preload_dir: self.preload_dir.clone(),
            unallocated_quota: self.unallocated_quota.unwrap_or(DEFAULT_UNALLOCATED_QUOTA),
            process_cushion: self.process_cushion.unwrap_or(DEFAULT_PROCESS_CUSHION),
            interposer_glibc: match self.interposer_glibc.as_deref() {
                None => vec![2, 17],
                Some(text) => parse_glibc(text).ok_or_else(|| {
                    ConfigError::new(format!(
                        "kubernetes.interposer_glibc must be a glibc version such as \"2.17\", got {text:?}"
                    ))
                })?,
            },
            device_resources: match &self.device_resources {
                None => default_resources(),
                Some(list) if list.len() > 32 => {
                    return Err(ConfigError::new(format!(
                        "kubernetes.device_resources lists {} resources; at most 32",
                        list.len()
                    )));
                }
                Some(list) => {
                    list.iter().map(FileDeviceResource::resolve).collect::<Result<_, _>>().map_err(ConfigError::new)?
                }
            },
        };
        c.validate()?;
        Ok(Some(c))
    }
}

impl KubernetesConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::new(m));
        if self.unallocated_quota > 65_536 {
            return bad(format!("kubernetes.unallocated_quota must be 0..=65536, got {}", self.unallocated_quota));
        }
        if self.process_cushion > 64 {
            return bad(format!("kubernetes.process_cushion must be 0..=64, got {}", self.process_cushion));
        }
        // Down to 10 ms for tests that play a long kubelet outage as many listings; the
        // kubelet answers 100 a second at most (kubelet.md section 8), so keep a node's at 1 s or more.
        let period = self.pod_resources_period;
        if period < std::time::Duration::from_millis(10) || period > std::time::Duration::from_secs(60) {
            return bad(format!(
                "kubernetes.pod_resources_period must be 10ms..=60s, got {}",
                humantime::format_duration(period)
            ));
        }
        if !(1..=3600).contains(&self.allocation_grace.as_secs()) {
            return bad(format!(
                "kubernetes.allocation_grace must be 1s..=1h, got {}",
                humantime::format_duration(self.allocation_grace)
            ));
        }
        if !(1..=1024).contains(&self.stream_unit) {
            return bad(format!("kubernetes.stream_unit must be 1..=1024, got {}", self.stream_unit));
        }
        if let Err(why) = check_resource_name(&self.resource_name) {
            return bad(format!(
                "kubernetes.resource_name {:?} is not an extended resource name: {why}",
                self.resource_name
            ));
        }
        // sun_path holds 108 bytes with its NUL.
        let socket = self.device_plugin_dir.join("kubelet.sock");
        if socket.as_os_str().len() > 107 {
            return bad(format!("kubernetes.device_plugin_dir is too long for a socket path: {}", socket.display()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_unless_enabled_or_flagged_and_validated_when_on() {
        assert!(FileKubernetes::default().resolve(None, None).unwrap().is_none());
        let on = FileKubernetes::default().resolve(Some(&PathBuf::from("/tmp/dp")), None).unwrap().unwrap();
        assert_eq!((on.resource_name.as_str(), on.stream_unit), (DEFAULT_RESOURCE_NAME, DEFAULT_STREAM_UNIT));
        let zero = FileKubernetes { enabled: Some(true), stream_unit: Some(0), ..Default::default() };
        assert!(zero.resolve(None, None).is_err());
        let name = FileKubernetes { enabled: Some(true), resource_name: Some("streams".into()), ..Default::default() };
        assert!(name.resolve(None, None).unwrap_err().0.contains("resource_name"));
    }
}

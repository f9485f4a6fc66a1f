//! What the kubelet's pod-resources API lists: every running container, named by
//! namespace, pod and container, with the device ids of each resource it was given. npud
//! finds an allocation's container there by its unit ids, and from its vendor devices
//! learns where to book it. The reader itself (a gRPC client) is the Kubernetes front end's;
//! the daemon is handed one.

use super::PodNames;
use std::future::Future;
use std::pin::Pin;

/// One container as pod-resources lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    pub names: PodNames,
    /// Device ids by resource name, each list sorted.
    pub devices: Vec<(String, Vec<String>)>,
}

impl Listed {
    /// The ids it holds of `resource`, sorted (empty when none).
    pub fn ids_of(&self, resource: &str) -> &[String] {
        self.devices.iter().find(|(r, _)| r == resource).map_or(&[], |(_, ids)| ids.as_slice())
    }
}

/// Reads pod-resources `List`.
pub trait PodLister: Send + Sync {
    /// Every container the kubelet lists now.
    fn list(&self) -> Pin<Box<dyn Future<Output = Result<Vec<Listed>, String>> + Send + '_>>;
}

/// A name as npud writes it down: what the API may carry beyond a Kubernetes name (at most
/// 253 characters of letters, digits, `-`, `.` and `_`) is replaced, so a name can never
/// break a record's line or a table's column.
pub fn clean_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .take(253)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') { c } else { '_' })
        .collect();
    if cleaned.is_empty() { "_".into() } else { cleaned }
}

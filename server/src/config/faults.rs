//! `[faults]`: how a device's own fault signals are read.
//!
//! Ascend: the error codes DCMI reports (`dcmi_get_device_errorcode_v2`), classed into the
//! levels Ascend's device plugin uses (mind-cluster `component/ascend-device-plugin/pkg/
//! common/fault_code.go`: NotHandleFault, RestartRequest, RestartBusiness, FreeRestartNPU,
//! RestartNPU, PreSeparateNPU, SeparateNPU, SubHealthFault), from a table in the plugin's own
//! format (`build/faultCode.json`, which its image installs as `/usr/local/faultCode.json`):
//! `codes = "<path>"`. NVIDIA: critical XID events from NVML, less the XIDs NVIDIA's device
//! plugin ignores by default (13, 31, 43, 45, 68 and 109: application errors, not the
//! GPU's; `internal/rm/health.go`): `ignored_xids = [...]`.

use crate::config::ConfigError;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;

/// Where Ascend's device plugin image keeps its fault-code table.
pub const DEFAULT_CODES: &str = "/usr/local/faultCode.json";
/// The XIDs NVIDIA's device plugin does not mark a GPU unhealthy for.
pub const DEFAULT_IGNORED_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];
/// The most codes the table may hold (the vendor's holds a few hundred).
const MAX_CODES: usize = 65_536;
/// The most bytes of the table read.
const MAX_TABLE: usize = 4 << 20;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileFaults {
    codes: Option<PathBuf>,
    ignored_xids: Option<Vec<u64>>,
}

/// A fault level of Ascend's device plugin, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    NotHandle,
    SubHealth,
    RestartRequest,
    RestartBusiness,
    FreeRestartNpu,
    RestartNpu,
    PreSeparateNpu,
    SeparateNpu,
}

impl Level {
    /// The plugin's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Level::NotHandle => "NotHandleFault",
            Level::SubHealth => "SubHealthFault",
            Level::RestartRequest => "RestartRequest",
            Level::RestartBusiness => "RestartBusiness",
            Level::FreeRestartNpu => "FreeRestartNPU",
            Level::RestartNpu => "RestartNPU",
            Level::PreSeparateNpu => "PreSeparateNPU",
            Level::SeparateNpu => "SeparateNPU",
        }
    }

    /// Whether npud stops admitting to the device: from FreeRestartNPU up, the levels at
    /// which the plugin itself advertises the NPU unhealthy. Below it the workload, not the
    /// device, is to restart (RestartRequest, RestartBusiness), or nothing is to be done.
    pub fn keeps_out(self) -> bool {
        self >= Level::FreeRestartNpu
    }
}

#[derive(Debug, Clone, Default)]
pub struct FaultsConfig {
    /// DCMI error code → level; None where no table was found. A code the table does not
    /// hold counts as SeparateNPU, as the plugin counts a code it finds in no list and no
    /// severity for (`getFaultTypeBySeverity` in `fault_code.go`): a device reporting an
    /// unclassified fault is not admitted to.
    pub codes: Option<HashMap<u64, Level>>,
    pub codes_path: PathBuf,
    pub ignored_xids: Vec<u64>,
}

impl FaultsConfig {
    /// The level of `code`.
    pub fn level(&self, code: u64) -> Level {
        match &self.codes {
            Some(table) => table.get(&code).copied().unwrap_or(Level::SeparateNpu),
            None => Level::SeparateNpu,
        }
    }
}

impl FileFaults {
    pub fn resolve(&self) -> Result<FaultsConfig, ConfigError> {
        let given = self.codes.is_some();
        let codes_path = self.codes.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CODES));
        let codes = match std::fs::metadata(&codes_path) {
            Ok(_) => Some(read_table(&codes_path)?),
            Err(e) if given => {
                return Err(ConfigError::new(format!("faults.codes: cannot read {}: {e}", codes_path.display())));
            }
            Err(_) => None,
        };
        let ignored_xids = self.ignored_xids.clone().unwrap_or_else(|| DEFAULT_IGNORED_XIDS.to_vec());
        if ignored_xids.len() > 1024 {
            return Err(ConfigError::new("faults.ignored_xids names at most 1024 XIDs"));
        }
        Ok(FaultsConfig { codes, codes_path, ignored_xids })
    }
}

/// The plugin's table: `{"RestartNPUCodes": ["8C03A000", …], …}`, codes in hex.
fn read_table(path: &std::path::Path) -> Result<HashMap<u64, Level>, ConfigError> {
    let text = crate::files::read_text_bounded(path, MAX_TABLE)
        .map_err(|e| ConfigError::new(format!("faults.codes: {}: {e}", path.display())))?;
    let lists: HashMap<String, Vec<String>> = serde_json::from_str(&text).map_err(|e| {
        ConfigError::new(format!("faults.codes: {} is not the device plugin's fault-code table: {e}", path.display()))
    })?;
    let mut table = HashMap::new();
    for (key, codes) in &lists {
        let level = match key.as_str() {
            "NotHandleFaultCodes" | "NotHandleFaultNetworkCodes" => Level::NotHandle,
            "SubHealthFaultCodes" | "SubHealthFaultNetworkCodes" => Level::SubHealth,
            "RestartRequestCodes" => Level::RestartRequest,
            "RestartBusinessCodes" => Level::RestartBusiness,
            "FreeRestartNPUCodes" => Level::FreeRestartNpu,
            "RestartNPUCodes" => Level::RestartNpu,
            "PreSeparateNPUCodes" | "PreSeparateNPUNetworkCodes" => Level::PreSeparateNpu,
            "SeparateNPUCodes" | "SeparateNPUNetworkCodes" => Level::SeparateNpu,
            other => {
                return Err(ConfigError::new(format!("faults.codes: {}: unknown level {other:?}", path.display())));
            }
        };
        for code in codes {
            let n = u64::from_str_radix(code.trim(), 16).map_err(|_| {
                ConfigError::new(format!("faults.codes: {}: {code:?} is not a hex fault code", path.display()))
            })?;
            // A code in two lists counts at its more severe level.
            let at = table.entry(n).or_insert(level);
            *at = (*at).max(level);
        }
        if table.len() > MAX_CODES {
            return Err(ConfigError::new(format!("faults.codes: more than {MAX_CODES} codes")));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugins_table_classes_codes_and_bad_tables_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faultCode.json");
        std::fs::write(&path, r#"{"RestartNPUCodes":["8C03A000"],"NotHandleFaultCodes":["80E21007"]}"#).unwrap();
        let f = FileFaults { codes: Some(path.clone()), ignored_xids: None }.resolve().unwrap();
        assert_eq!((f.level(0x8C03_A000), f.level(0x80E2_1007)), (Level::RestartNpu, Level::NotHandle));
        assert!(f.level(0x8C03_A000).keeps_out() && !f.level(0x80E2_1007).keeps_out());
        assert_eq!(f.level(0x1234), Level::SeparateNpu, "an unclassified code keeps the device out");
        assert_eq!(f.ignored_xids, DEFAULT_IGNORED_XIDS);
        std::fs::write(&path, r#"{"RestartNPUCodes":["zz"]}"#).unwrap();
        assert!(FileFaults { codes: Some(path.clone()), ignored_xids: None }.resolve().is_err());
        let missing = FileFaults { codes: Some(dir.path().join("nope.json")), ignored_xids: None };
        assert!(missing.resolve().is_err(), "a table named but missing is an error");
    }
}

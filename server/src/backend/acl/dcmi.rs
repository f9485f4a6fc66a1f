//! The NPUs' own health, from DCMI (`libdcmi.so`, the device management interface Ascend's
//! device plugin and npu-smi read): each NPU's error codes (`dcmi_get_device_errorcode_v2`),
//! as the plugin polls them (mind-cluster `component/ascend-common/devmanager/dcmi/dcmi.go`,
//! `DcGetDeviceErrorCode`). DCMI names a chip by card and device; npud finds them from the
//! physical id it already books by (`dcmi_get_card_id_device_id_from_phyid`). Optional:
//! without DCMI npud reads no fault and says so once.

use super::ffi::{Dcmi, Lib};
use crate::backend::FaultSignal;
use std::path::{Path, PathBuf};

/// DCMI's success.
const OK: i32 = 0;

/// Where DCMI is looked for: beside AscendCL, where the driver installs it, the loader.
pub fn candidates(acl: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = acl.parent().filter(|d| !d.as_os_str().is_empty()) {
        out.push(dir.join("libdcmi.so"));
    }
    out.push(PathBuf::from("/usr/local/dcmi/libdcmi.so"));
    out.push(PathBuf::from("/usr/local/Ascend/driver/lib64/driver/libdcmi.so"));
    out.push(PathBuf::from("libdcmi.so"));
    out
}

/// DCMI, opened and initialised, with each of npud's devices' (card, device).
pub struct Faults {
    lib: Lib,
    chips: Vec<(u32, Option<(i32, i32)>)>,
}

impl Faults {
    /// Opens DCMI for the devices of these physical ids (npud's device i is `physical[i]`).
    pub fn open(candidates: &[PathBuf], physical: &[Option<u32>]) -> Option<Faults> {
        let lib = match Lib::open_first("DCMI (libdcmi.so)", candidates) {
            Ok(lib) => lib,
            Err(e) => {
                tracing::info!(error = %e, "DCMI not loaded: npud reads no NPU fault codes");
                return None;
            }
        };
        if !matches!(lib.dcmi_init(), Ok(OK)) {
            tracing::warn!(library = %lib.path().display(), "dcmi_init failed: npud reads no NPU fault codes");
            return None;
        }
        let chips = physical
            .iter()
            .enumerate()
            .map(|(device, phy)| {
                let chip = phy.and_then(|p| {
                    let (mut card, mut dev) = (0i32, 0i32);
                    matches!(lib.dcmi_card_of_physical(&mut card, &mut dev, p), Ok(OK)).then_some((card, dev))
                });
                (device as u32, chip)
            })
            .collect();
        tracing::info!(library = %lib.path().display(), "DCMI opened: npud reads the NPUs' fault codes");
        Some(Faults { lib, chips })
    }

    /// Every device's error codes now (a device DCMI cannot be asked about is left out).
    pub fn read(&self) -> Vec<(u32, FaultSignal)> {
        let mut out = Vec::new();
        for (device, chip) in &self.chips {
            let Some((card, dev)) = chip else { continue };
            let (mut count, mut list) = (0i32, [0u32; 128]);
            if matches!(self.lib.dcmi_error_codes(*card, *dev, &mut count, &mut list), Ok(OK)) {
                let n = usize::try_from(count).unwrap_or(0).min(list.len());
                out.push((*device, FaultSignal::Codes(list[..n].iter().map(|c| u64::from(*c)).collect())));
            }
        }
        out
    }
}

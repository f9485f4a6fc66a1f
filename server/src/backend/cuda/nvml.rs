//! NVML (`libnvidia-ml.so.1`), for what the CUDA driver cannot say from one process: every
//! GPU of the host with its compute mode, and the MIG devices of a GPU in MIG mode, each
//! with its own `MIG-…` UUID (a CUDA process sees only the MIG devices its
//! `CUDA_VISIBLE_DEVICES` names: NVIDIA's MIG user guide, "CUDA Device Enumeration").
//! Signatures from NVIDIA's NVML API reference (`nvml.h`). NVML is optional: without it
//! npud knows the GPUs the CUDA driver shows it, as before.

use super::ffi::{Lib, Nvml};
use std::path::{Path, PathBuf};

/// nvmlReturn_t NVML_SUCCESS and NVML_ERROR_NOT_FOUND.
const SUCCESS: u32 = 0;
const NOT_FOUND: u32 = 6;
/// NVML_DEVICE_MIG_ENABLE.
const MIG_ENABLE: u32 = 1;
/// NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE (both 96).
const TEXT_BUFFER: usize = 96;

/// One GPU as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub uuid: String,
    pub name: String,
    /// N of `/dev/nvidiaN` (None where NVML does not say).
    pub minor: Option<u32>,
    /// nvmlComputeMode_t: 0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS.
    pub compute_mode: u32,
    /// Its MIG devices, where it is in MIG mode: (UUID, name).
    pub migs: Vec<(String, String)>,
}

/// Where NVML is looked for: beside the CUDA driver npud loaded (the NVIDIA container
/// toolkit mounts both into one directory), then the loader's own search.
pub fn candidates(cuda: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = cuda.parent().filter(|d| !d.as_os_str().is_empty()) {
        out.push(dir.join("libnvidia-ml.so.1"));
    }
    out.push(PathBuf::from("libnvidia-ml.so.1"));
    out
}

/// The host's GPUs, or None where NVML cannot be loaded or initialised (said in the log).
pub fn inventory(candidates: &[PathBuf]) -> Option<Vec<Gpu>> {
    let lib = match Lib::open_first("NVML (libnvidia-ml.so.1)", candidates) {
        Ok(lib) => lib,
        Err(e) => {
            tracing::info!(error = %e, "NVML not loaded: GPUs are the ones the CUDA driver shows npud, MIG devices unknown");
            return None;
        }
    };
    match lib.nvml_init() {
        Ok(SUCCESS) => {}
        other => {
            tracing::warn!(?other, library = %lib.path().display(), "nvmlInit_v2 failed: MIG devices and compute modes unknown");
            return None;
        }
    }
    let gpus = list(&lib);
    let _ = lib.nvml_shutdown();
    tracing::info!(library = %lib.path().display(), gpus = gpus.len(), "NVML read");
    Some(gpus)
}

fn list(lib: &Lib) -> Vec<Gpu> {
    let mut count = 0u32;
    if !matches!(lib.nvml_device_count(&mut count), Ok(SUCCESS)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    // At most 64 GPUs a host (what NVML's own tools index).
    for index in 0..count.min(64) {
        let mut handle = 0usize;
        if !matches!(lib.nvml_handle_by_index(index, &mut handle), Ok(SUCCESS)) {
            continue;
        }
        let Some(uuid) = text(lib, "uuid", handle) else { continue };
        let name = text(lib, "name", handle).unwrap_or_default();
        let mut minor = 0u32;
        let minor = matches!(lib.nvml_minor(handle, &mut minor), Ok(SUCCESS)).then_some(minor);
        let mut mode = 0u32;
        if !matches!(lib.nvml_compute_mode(handle, &mut mode), Ok(SUCCESS)) {
            mode = 0;
        }
        out.push(Gpu { uuid, name, minor, compute_mode: mode, migs: migs(lib, handle) });
    }
    out
}

/// The MIG devices of the GPU `handle`, where it is in MIG mode.
fn migs(lib: &Lib, handle: usize) -> Vec<(String, String)> {
    let (mut current, mut pending) = (0u32, 0u32);
    let rc = lib.nvml_mig_mode(handle, &mut current, &mut pending);
    if !matches!(rc, Ok(SUCCESS)) || current != MIG_ENABLE {
        return Vec::new();
    }
    let mut max = 0u32;
    if !matches!(lib.nvml_max_mig(handle, &mut max), Ok(SUCCESS)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for index in 0..max.min(16) {
        let mut mig = 0usize;
        match lib.nvml_mig_handle(handle, index, &mut mig) {
            Ok(SUCCESS) => {}
            Ok(NOT_FOUND) => continue,
            _ => break,
        }
        if let Some(uuid) = text(lib, "uuid", mig) {
            out.push((uuid, text(lib, "name", mig).unwrap_or_default()));
        }
    }
    out
}

/// A device's UUID or name, as text.
fn text(lib: &Lib, what: &str, handle: usize) -> Option<String> {
    let mut buf = [0u8; TEXT_BUFFER];
    let rc = lib.nvml_text(handle, what == "name", &mut buf);
    matches!(rc, Ok(SUCCESS))
        .then(|| String::from_utf8_lossy(buf.split(|b| *b == 0).next().unwrap_or(&[])).into_owned())
        .filter(|t| !t.is_empty())
}

/// nvmlEventTypeXidCriticalError (`nvml.h`) and NVML_ERROR_TIMEOUT.
const XID_CRITICAL_ERROR: u64 = 0x8;
/// The most events one read drains.
const MAX_EVENTS: usize = 1024;

/// NVML's critical XID events of the host's GPUs, each to the npud devices it affects (a
/// GPU, or every MIG device of a GPU in MIG mode: an XID is the GPU's).
pub struct XidWatch {
    lib: Lib,
    set: usize,
    /// GPU handle → npud devices.
    gpus: Vec<(usize, Vec<u32>)>,
}

impl XidWatch {
    /// Registers for XID events on the GPUs of `targets` (GPU UUID → npud devices).
    pub fn open(candidates: &[PathBuf], targets: &[(String, Vec<u32>)]) -> Option<XidWatch> {
        let lib = Lib::open_first("NVML (libnvidia-ml.so.1)", candidates).ok()?;
        if !matches!(lib.nvml_init(), Ok(SUCCESS)) {
            return None;
        }
        let mut set = 0usize;
        if !matches!(lib.nvml_event_set_create(&mut set), Ok(SUCCESS)) {
            tracing::info!("NVML has no event set here: npud reads no XID");
            return None;
        }
        let mut count = 0u32;
        let _ = lib.nvml_device_count(&mut count);
        let mut gpus = Vec::new();
        for index in 0..count.min(64) {
            let mut handle = 0usize;
            if !matches!(lib.nvml_handle_by_index(index, &mut handle), Ok(SUCCESS)) {
                continue;
            }
            let Some(uuid) = text(&lib, "uuid", handle) else { continue };
            let Some((_, devices)) = targets.iter().find(|(u, _)| npud_proto::identity::same_uuid(u, &uuid)) else {
                continue;
            };
            match lib.nvml_register_events(handle, XID_CRITICAL_ERROR, set) {
                Ok(SUCCESS) => gpus.push((handle, devices.clone())),
                other => tracing::info!(gpu = %uuid, ?other, "XID events cannot be registered for this GPU"),
            }
        }
        Some(XidWatch { lib, set, gpus })
    }

    /// The XID events raised since the last read, without waiting.
    pub fn read(&self) -> Vec<(u32, crate::backend::FaultSignal)> {
        let mut out = Vec::new();
        for _ in 0..MAX_EVENTS {
            let mut data = super::ffi::NvmlEventData::default();
            if !matches!(self.lib.nvml_event_wait(self.set, &mut data, 0), Ok(SUCCESS)) {
                break;
            }
            if data.event_type & XID_CRITICAL_ERROR == 0 {
                continue;
            }
            let Some((_, devices)) = self.gpus.iter().find(|(h, _)| *h == data.device) else { continue };
            out.extend(devices.iter().map(|d| (*d, crate::backend::FaultSignal::Xid(data.event_data))));
        }
        out
    }
}

//! Loading the driver: initialise it and learn the devices, with NVML where it loads. No
//! context is held here: `Shared::on` retains a device's primary context when a client
//! first uses it, and loads the spin kernel timed work runs on into it then (before any
//! host function of npud's can run in it: loading a module waits for running host
//! functions, so loading it later could deadlock behind a blocking callback).

use super::CudaBackend;
use super::ffi::{Cuda, Lib};
use super::result::{check, no_device};
use super::shared::{Books, Shared};
use crate::backend::{BackendResult, DeviceDesc};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

/// libcuda.so.1, else libcuda.so (a toolkit stub answers 34, and says so).
pub fn default_library() -> PathBuf {
    PathBuf::from("libcuda.so.1")
}

/// Where the CUDA driver is looked for: `explicit` (`--cuda-library`) alone when given;
/// else the loader's own search for the driver's soname and its development name, then
/// where the NVIDIA container toolkit and the distributions put it.
pub fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let mut out = vec![default_library(), PathBuf::from("libcuda.so")];
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64"] {
        out.push(Path::new(dir).join("libcuda.so.1"));
    }
    out
}

impl CudaBackend {
    /// Loads the driver and learns the devices, holding no context on any (one is opened
    /// when a gRPC client first makes a stream or event there: `Shared::on`). `budget` is
    /// the number of streams npud hands out per device (CUDA itself has no fixed limit).
    /// With NVML, every GPU of the host is known with its compute mode, and a GPU in MIG
    /// mode is its MIG devices (`devices`).
    pub fn open(candidates: &[PathBuf], budget: u32, mps_clients: u32) -> Result<CudaBackend, String> {
        let lib = Lib::open_first("the CUDA driver (libcuda.so.1)", candidates)?;
        let rc = lib.init().map_err(|e| e.to_string())?;
        if rc == 34 {
            return Err(format!(
                "{} is the CUDA toolkit's stub (CUDA_ERROR_STUB_LIBRARY): point --cuda-library at the driver's libcuda.so.1",
                lib.path().display()
            ));
        }
        check(Ok(rc)).map_err(|e| format!("cuInit: {}", e.message))?;
        let mut count = 0i32;
        check(lib.device_get_count(&mut count)).map_err(|e| e.message)?;
        let mut ordinals = Vec::new();
        for ordinal in 0..count.max(0) {
            let mut dev = 0i32;
            check(lib.device_get(&mut dev, ordinal)).map_err(|e| format!("cuDeviceGet({ordinal}): {}", e.message))?;
            let mut name = [0u8; 128];
            check(lib.device_get_name(&mut name, dev)).map_err(|e| e.message)?;
            let name = String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
            ordinals.push(super::devices::Ordinal {
                ordinal,
                handle: dev,
                name,
                uuid: lib.device_uuid(dev),
                pci_bus_id: lib.device_pci_bus_id(dev),
                compute_mode: compute_mode(&lib, dev),
            });
        }
        let gpus = super::nvml::inventory(&super::nvml::candidates(lib.path()));
        let devices = super::devices::assemble(&ordinals, gpus.as_deref(), super::devices::mps_running());
        if devices.is_empty() {
            return Err("the CUDA driver reports no devices".into());
        }
        let mut descs = Vec::new();
        for (id, d) in devices.iter().enumerate() {
            if let Some(why) = &d.books_only {
                tracing::info!(device = id, name = %d.name, uuid = ?d.uuid, "{why}");
            }
            descs.push(DeviceDesc {
                id: id as u32,
                identity: crate::backend::Identity {
                    physical_id: None,
                    uuid: d.uuid.clone(),
                    pci_bus_id: d.pci_bus_id.clone(),
                },
                name: d.name.clone(),
                profile: "cuda".into(),
                hardware_limit: budget,
                runtime_streams: 0,
                event_limit: 1 << 20,
                priority_highest: DEFAULT_GREATEST_PRIORITY,
                priority_lowest: 0,
                client_slots: d.client_slots.map(|per| per.slots(mps_clients)),
            });
        }
        let n = descs.len();
        let shared = Arc::new(Shared {
            lib,
            contexts: (0..n).map(|_| RwLock::new(None)).collect(),
            devices,
            books: Mutex::new(Books::default()),
            sink: crate::backend::SinkSlot::default(),
            callbacks: crate::backend::CallbackGate::default(),
            streams: (0..n).map(|_| AtomicU32::new(0)).collect(),
            events: (0..n).map(|_| AtomicU32::new(0)).collect(),
            creations: (0..n).map(|_| AtomicU64::new(0)).collect(),
        });
        tracing::info!(library = %shared.lib.path().display(), devices = n, budget, "CUDA driver opened; no context held until a client makes a stream");
        let mut targets: Vec<(String, Vec<u32>)> = Vec::new();
        for (id, d) in shared.devices.iter().enumerate() {
            let Some(gpu) = &d.gpu else { continue };
            match targets.iter_mut().find(|(u, _)| u == gpu) {
                Some((_, ids)) => ids.push(id as u32),
                None => targets.push((gpu.clone(), vec![id as u32])),
            }
        }
        let xids = super::nvml::XidWatch::open(&super::nvml::candidates(shared.lib.path()), &targets);
        Ok(CudaBackend { shared, descs, xids })
    }

    /// The spin kernel of a device, in its context (open: the caller holds it).
    pub(super) fn spin_kernel(&self, device: u32) -> BackendResult<usize> {
        let ctx = self.shared.contexts.get(device as usize).ok_or_else(|| no_device(device))?;
        ctx.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|c| c.spin).ok_or_else(|| no_device(device))
    }
}

/// The most urgent stream priority npud offers on a CUDA device: every GPU since Volta
/// reports cuCtxGetStreamPriorityRange as [-5, 0] (least 0), and npud reads no context to
/// ask before a client needs one; the driver clamps a value out of a device's range.
pub const DEFAULT_GREATEST_PRIORITY: i32 = -5;

/// CU_DEVICE_ATTRIBUTE_COMPUTE_MODE (cuda.h); read without a context.
const COMPUTE_MODE: i32 = 20;

/// The device's compute mode (`CUcomputemode`: 0 DEFAULT, 2 PROHIBITED, 3
/// EXCLUSIVE_PROCESS); a driver that cannot say is taken as DEFAULT.
fn compute_mode(lib: &Lib, dev: i32) -> u32 {
    let mut mode = 0i32;
    match lib.device_get_attribute(&mut mode, COMPUTE_MODE, dev) {
        Ok(0) => u32::try_from(mode).unwrap_or(0),
        _ => 0,
    }
}

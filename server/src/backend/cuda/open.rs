//! Loading the driver: initialise it, retain every device's primary context, and load the
//! spin kernel timed work runs on (at start-up: loading a module waits for running host
//! functions, so loading it later could deadlock behind a blocking callback).

use super::CudaBackend;
use super::ffi::{Cuda, Lib};
use super::result::{check, no_device};
use super::shared::{Books, Shared};
use crate::backend::{BackendResult, DeviceDesc};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};

/// Spins one thread until %globaltimer has advanced by `ns` nanoseconds.
const SPIN_PTX: &str = ".version 6.0
.target sm_50
.address_size 64
.visible .entry npud_spin(.param .u64 ns)
{
    .reg .pred p;
    .reg .u64 start, now, target, d;
    ld.param.u64 d, [ns];
    mov.u64 start, %globaltimer;
    add.u64 target, start, d;
spin:
    mov.u64 now, %globaltimer;
    setp.lt.u64 p, now, target;
    @p bra spin;
    ret;
}
";

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
    /// Loads the driver and retains every device's primary context. `budget` is the
    /// number of streams npud hands out per device (CUDA itself has no fixed limit).
    pub fn open(candidates: &[PathBuf], budget: u32) -> Result<CudaBackend, String> {
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
        if count <= 0 {
            return Err("the CUDA driver reports no devices".into());
        }
        let mut contexts = Vec::new();
        let mut spin = Vec::new();
        let mut descs = Vec::new();
        for ordinal in 0..count {
            let mut dev = 0i32;
            check(lib.device_get(&mut dev, ordinal)).map_err(|e| format!("cuDeviceGet({ordinal}): {}", e.message))?;
            let mut name = [0u8; 128];
            check(lib.device_get_name(&mut name, dev)).map_err(|e| e.message)?;
            let name = String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
            refuse_exclusive(&lib, dev, ordinal, &name)?;
            let mut ctx = 0usize;
            check(lib.primary_ctx_retain(&mut ctx, dev))
                .map_err(|e| format!("cuDevicePrimaryCtxRetain({ordinal}): {}", e.message))?;
            check(lib.ctx_set_current(ctx)).map_err(|e| e.message)?;
            let (mut least, mut greatest) = (0i32, 0i32);
            check(lib.ctx_get_stream_priority_range(&mut least, &mut greatest)).map_err(|e| e.message)?;
            spin.push(load_spin_kernel(&lib)?);
            contexts.push(ctx);
            let identity = crate::backend::Identity {
                physical_id: None,
                uuid: lib.device_uuid(dev),
                pci_bus_id: lib.device_pci_bus_id(dev),
            };
            descs.push(DeviceDesc {
                id: ordinal as u32,
                identity,
                name,
                profile: "cuda".into(),
                hardware_limit: budget,
                runtime_streams: 0,
                event_limit: 1 << 20,
                priority_highest: greatest,
                priority_lowest: least,
            });
        }
        let n = descs.len();
        let shared = Arc::new(Shared {
            lib,
            contexts,
            spin,
            books: Mutex::new(Books::default()),
            sink: crate::backend::SinkSlot::default(),
            callbacks: crate::backend::CallbackGate::default(),
            streams: (0..n).map(|_| AtomicU32::new(0)).collect(),
            creations: (0..n).map(|_| AtomicU64::new(0)).collect(),
        });
        tracing::info!(library = %shared.lib.path().display(), devices = n, budget, "CUDA driver opened");
        Ok(CudaBackend { shared, descs })
    }

    /// The spin kernel of a device.
    pub(super) fn spin_kernel(&self, device: u32) -> BackendResult<usize> {
        self.shared.spin.get(device as usize).copied().ok_or_else(|| no_device(device))
    }
}

/// Loads the spin kernel into the current context. Done at start-up, never on first use:
/// on real hardware cuModuleLoadData waits for the context's running host functions, so
/// loading it behind a BLOCK callback would wait for an acknowledgement that cannot come
/// while the caller is stuck here (seen on an H100, docs/hardware.md).
fn load_spin_kernel(lib: &Lib) -> Result<usize, String> {
    let ptx = std::ffi::CString::new(SPIN_PTX).map_err(|e| e.to_string())?;
    let (mut module, mut function) = (0usize, 0usize);
    check(lib.module_load_data(&mut module, &ptx)).map_err(|e| format!("cuModuleLoadData: {}", e.message))?;
    check(lib.module_get_function(&mut function, module, c"npud_spin")).map_err(|e| e.message)?;
    Ok(function)
}

/// CU_DEVICE_ATTRIBUTE_COMPUTE_MODE and its values (cuda.h `CUcomputemode`).
const COMPUTE_MODE: i32 = 20;
const COMPUTE_MODE_PROHIBITED: i32 = 2;
const COMPUTE_MODE_EXCLUSIVE_PROCESS: i32 = 3;

/// npud holds a primary context on every GPU it owns. On a GPU in EXCLUSIVE_PROCESS
/// compute mode that context would be the only one: every workload would fail to make its
/// own (CUDA_ERROR_DEVICE_BUSY). In PROHIBITED mode no context can be made at all. Either
/// way npud refuses to start, saying which GPU and what to do, rather than block the GPU.
fn refuse_exclusive(lib: &Lib, dev: i32, ordinal: i32, name: &str) -> Result<(), String> {
    let mut mode = 0i32;
    // A driver that cannot say is taken as the default mode (it has always been).
    if !matches!(lib.device_get_attribute(&mut mode, COMPUTE_MODE, dev), Ok(0)) {
        return Ok(());
    }
    let why = match mode {
        COMPUTE_MODE_EXCLUSIVE_PROCESS => {
            "EXCLUSIVE_PROCESS: the context npud holds on it would keep every workload off it"
        }
        COMPUTE_MODE_PROHIBITED => "PROHIBITED: no process may make a context on it",
        _ => return Ok(()),
    };
    Err(format!(
        "GPU {ordinal} ({name}) is in compute mode {why}; set it to DEFAULT (nvidia-smi -i {ordinal} -c DEFAULT), \
         or start npud without it (CUDA_VISIBLE_DEVICES)"
    ))
}

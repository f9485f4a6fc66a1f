//! A fake `libnvidia-ml.so.1` (NVML) beside the fake CUDA driver (tests/fake-cuda), for the
//! calls npud makes, as NVIDIA's NVML API reference documents them (`nvml.h`): the GPUs
//! (`nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2`, their UUIDs, names and minor
//! numbers, the N of `/dev/nvidiaN`), each GPU's compute mode (`nvmlDeviceGetComputeMode`),
//! MIG (`nvmlDeviceGetMigMode`, `nvmlDeviceGetMaxMigDeviceCount`,
//! `nvmlDeviceGetMigDeviceHandleByIndex`, `nvmlDeviceIsMigDeviceHandle`).
//!
//! The host it shows, from the environment the fake CUDA reads too:
//! - `NPU_SIM_DEVICES` GPUs (default 1), named and numbered as the fake CUDA names them
//!   (`GPU-5eed…` UUIDs; minor number = index, as on a host where the driver numbered them
//!   in bus order);
//! - `NPU_SIM_CUDA_COMPUTE_MODE` (0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS) on every
//!   GPU;
//! - `NPU_SIM_CUDA_MIG` = `GPU:INSTANCES[,GPU:INSTANCES]`: those GPUs in MIG mode with that
//!   many GPU instances, each with its own `MIG-…` UUID (a MIG device's UUID is not its
//!   GPU's; nvidia-smi -L lists both). A MIG device has no minor number of its own
//!   (NVML_ERROR_NOT_SUPPORTED: its device files are `/dev/nvidia-caps/*`, its GPU's node is
//!   shared by every instance).
//!
//! XID events (`nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`, `nvmlEventSetWait_v2`):
//! lines `GPU XID` a test appends to the file `NPU_SIM_NVML_XIDS`, each read once per
//! process, as the driver hands every watcher each critical XID.
//!
//! Handles are addresses into a table this library keeps for the life of the process.
//! Every call before `nvmlInit_v2` is NVML_ERROR_UNINITIALIZED, as the reference says.

use std::ffi::c_char;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

pub type NvmlReturn = u32;
pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;

/// NVML_DEVICE_MIG_DISABLE / _ENABLE.
pub const MIG_DISABLE: u32 = 0;
pub const MIG_ENABLE: u32 = 1;
/// The most MIG devices one GPU holds (an A100/H100 in seven 1g slices).
pub const MAX_MIG: u32 = 7;

/// One GPU or MIG device.
#[derive(Debug)]
pub struct Node {
    pub uuid: String,
    pub name: String,
    /// The GPU's index; for a MIG device, its parent's.
    pub gpu: u32,
    /// None for a GPU; the instance's index under its GPU for a MIG device.
    pub instance: Option<u32>,
    /// MIG devices of a GPU in MIG mode (indices into the table).
    pub migs: Vec<usize>,
}

/// The host, read once from the environment.
pub fn table() -> &'static Vec<Node> {
    static TABLE: OnceLock<Vec<Node>> = OnceLock::new();
    TABLE.get_or_init(|| build(env_u32("NPU_SIM_DEVICES", 1), std::env::var("NPU_SIM_CUDA_MIG").ok().as_deref()))
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The GPUs of a host of `count`, with `mig` (`GPU:INSTANCES,…`) instances.
pub fn build(count: u32, mig: Option<&str>) -> Vec<Node> {
    let instances = |gpu: u32| -> u32 {
        mig.unwrap_or("")
            .split(',')
            .filter_map(|e| e.split_once(':'))
            .filter(|(g, _)| g.trim().parse() == Ok(gpu))
            .filter_map(|(_, n)| n.trim().parse::<u32>().ok())
            .map(|n| n.min(MAX_MIG))
            .next_back()
            .unwrap_or(0)
    };
    let mut nodes: Vec<Node> = (0..count)
        .map(|g| Node {
            uuid: gpu_uuid(g),
            name: "NVIDIA A100-SXM4-80GB".into(),
            gpu: g,
            instance: None,
            migs: Vec::new(),
        })
        .collect();
    for g in 0..count {
        for k in 0..instances(g) {
            let at = nodes.len();
            nodes.push(Node {
                uuid: mig_uuid(g, k),
                name: "NVIDIA A100-SXM4-80GB MIG 1g.10gb".into(),
                gpu: g,
                instance: Some(k),
                migs: Vec::new(),
            });
            nodes[g as usize].migs.push(at);
        }
    }
    nodes
}

/// GPU `index`'s UUID, as the fake CUDA driver names it (`tests/fake-cuda/src/visible.rs`).
pub fn gpu_uuid(index: u32) -> String {
    let h = 0x5eed_0000u32.wrapping_add(index.wrapping_mul(0x1111)).to_be_bytes();
    let i = index.to_be_bytes();
    let bytes = [h[0], h[1], h[2], h[3], 0x5f, 0x66, 0x41, 0x4b, 0x85, 0x47, 0x50, 0x55, i[0], i[1], i[2], i[3]];
    npud_proto::identity::gpu_uuid(&bytes)
}

/// The UUID of MIG device `instance` of GPU `gpu`: `MIG-` and the UUID's usual groups.
pub fn mig_uuid(gpu: u32, instance: u32) -> String {
    let text = gpu_uuid(gpu);
    let tail = text.trim_start_matches("GPU-");
    format!("MIG-{}{:02x}{}", &tail[..2], 0xa0 + instance, &tail[4..])
}

static INITS: AtomicU32 = AtomicU32::new(0);

fn initialised() -> bool {
    INITS.load(Ordering::Relaxed) > 0
}

/// The node a handle names, if it is one of ours.
fn node(handle: usize) -> Option<&'static Node> {
    let t = table();
    let base = t.as_ptr() as usize;
    let size = std::mem::size_of::<Node>();
    let offset = handle.checked_sub(base)?;
    (offset % size == 0).then(|| t.get(offset / size)).flatten()
}

fn handle_of(index: usize) -> usize {
    table().as_ptr() as usize + index * std::mem::size_of::<Node>()
}

unsafe fn put<T>(out: *mut T, v: T) -> NvmlReturn {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's non-null out-pointer of type T.
    unsafe { out.write(v) };
    SUCCESS
}

/// Copies `text` and its NUL into the caller's buffer of `length` bytes.
unsafe fn put_text(out: *mut c_char, length: u32, text: &str) -> NvmlReturn {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    if text.len() + 1 > length as usize {
        return ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller's buffer holds `length` bytes, checked above to fit text and NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), text.len());
        *out.add(text.len()) = 0;
    }
    SUCCESS
}

fn with(handle: usize, f: impl FnOnce(&'static Node) -> NvmlReturn) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    node(handle).map_or(ERROR_INVALID_ARGUMENT, f)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    table();
    INITS.fetch_add(1, Ordering::Relaxed);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    match INITS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)) {
        Ok(_) => SUCCESS,
        Err(_) => ERROR_UNINITIALIZED,
    }
}

/// The GPUs (MIG devices are not counted: they are reached through their GPU).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut u32) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    let gpus = table().iter().filter(|n| n.instance.is_none()).count() as u32;
    // SAFETY: the caller's out-pointer (checked by `put`).
    unsafe { put(count, gpus) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: u32, device: *mut usize) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    match table().iter().position(|n| n.instance.is_none() && n.gpu == index) {
        // SAFETY: the caller's out-pointer (checked by `put`).
        Some(at) => unsafe { put(device, handle_of(at)) },
        None => ERROR_INVALID_ARGUMENT,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: usize, uuid: *mut c_char, length: u32) -> NvmlReturn {
    // SAFETY: the caller's buffer of `length` bytes (checked by `put_text`).
    with(device, |n| unsafe { put_text(uuid, length, &n.uuid) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: usize, name: *mut c_char, length: u32) -> NvmlReturn {
    // SAFETY: as above.
    with(device, |n| unsafe { put_text(name, length, &n.name) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: usize, minor: *mut u32) -> NvmlReturn {
    // SAFETY: the caller's out-pointer (checked by `put`).
    with(device, |n| if n.instance.is_some() { ERROR_NOT_SUPPORTED } else { unsafe { put(minor, n.gpu) } })
}

/// nvmlComputeMode_t: NVML_COMPUTEMODE_DEFAULT 0, EXCLUSIVE_THREAD 1 (deprecated),
/// PROHIBITED 2, EXCLUSIVE_PROCESS 3.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(device: usize, mode: *mut u32) -> NvmlReturn {
    let m = env_u32("NPU_SIM_CUDA_COMPUTE_MODE", 0);
    // SAFETY: the caller's out-pointer (checked by `put`).
    with(device, |_| unsafe { put(mode, m) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(device: usize, current: *mut u32, pending: *mut u32) -> NvmlReturn {
    with(device, |n| {
        if n.instance.is_some() {
            return ERROR_NOT_SUPPORTED;
        }
        let mode = if n.migs.is_empty() { MIG_DISABLE } else { MIG_ENABLE };
        // SAFETY: the caller's out-pointers (checked by `put`).
        match unsafe { put(current, mode) } {
            SUCCESS => unsafe { put(pending, mode) },
            e => e,
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: usize, count: *mut u32) -> NvmlReturn {
    // SAFETY: the caller's out-pointer (checked by `put`).
    with(device, |n| if n.instance.is_some() { ERROR_NOT_SUPPORTED } else { unsafe { put(count, MAX_MIG) } })
}

/// The MIG device at `index` of a GPU in MIG mode: NVML_ERROR_NOT_FOUND where no instance
/// is there (indices run to the maximum, not to the instances made).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(device: usize, index: u32, mig: *mut usize) -> NvmlReturn {
    with(device, |n| {
        if n.instance.is_some() || n.migs.is_empty() {
            return ERROR_NOT_SUPPORTED;
        }
        if index >= MAX_MIG {
            return ERROR_INVALID_ARGUMENT;
        }
        match n.migs.get(index as usize) {
            // SAFETY: the caller's out-pointer (checked by `put`).
            Some(at) => unsafe { put(mig, handle_of(*at)) },
            None => ERROR_NOT_FOUND,
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: usize, is_mig: *mut u32) -> NvmlReturn {
    // SAFETY: the caller's out-pointer (checked by `put`).
    with(device, |n| unsafe { put(is_mig, u32::from(n.instance.is_some())) })
}

/// NVML_ERROR_TIMEOUT: no event within the wait.
pub const ERROR_TIMEOUT: NvmlReturn = 10;
/// nvmlEventTypeXidCriticalError.
pub const EVENT_XID_CRITICAL: u64 = 0x8;

/// `nvmlEventData_t` (`nvml.h`).
#[repr(C)]
pub struct EventData {
    pub device: usize,
    pub event_type: u64,
    pub event_data: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// The event sets made (each: the GPUs registered for XIDs), and how many lines of the
/// XID file this process has read. XID events come, across processes, from the file
/// `NPU_SIM_NVML_XIDS` a test appends `GPU XID` lines to (as the driver reports an XID to
/// every process watching).
static SETS: std::sync::Mutex<Vec<Vec<u32>>> = std::sync::Mutex::new(Vec::new());
static XIDS_READ: AtomicU32 = AtomicU32::new(0);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut usize) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    let mut sets = SETS.lock().unwrap_or_else(|e| e.into_inner());
    sets.push(Vec::new());
    // SAFETY: the caller's out-pointer (checked by `put`); a set is its index, plus one.
    unsafe { put(set, sets.len()) }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(device: usize, types: u64, set: usize) -> NvmlReturn {
    with(device, |n| {
        let mut sets = SETS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(registered) = set.checked_sub(1).and_then(|i| sets.get_mut(i)) else { return ERROR_INVALID_ARGUMENT };
        if types & EVENT_XID_CRITICAL != 0 && n.instance.is_none() {
            registered.push(n.gpu);
        }
        SUCCESS
    })
}

/// The next XID of a registered GPU not read yet, at once (the fake never waits).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(set: usize, data: *mut EventData, _timeout_ms: u32) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    if data.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let registered = {
        let sets = SETS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = set.checked_sub(1).and_then(|i| sets.get(i)) else { return ERROR_INVALID_ARGUMENT };
        r.clone()
    };
    let text = std::env::var_os("NPU_SIM_NVML_XIDS").and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    loop {
        let at = XIDS_READ.load(Ordering::Relaxed) as usize;
        let Some(line) = lines.get(at) else { return ERROR_TIMEOUT };
        XIDS_READ.store(at as u32 + 1, Ordering::Relaxed);
        let mut w = line.split_whitespace();
        let (Some(gpu), Some(xid)) =
            (w.next().and_then(|g| g.parse::<u32>().ok()), w.next().and_then(|x| x.parse().ok()))
        else {
            continue;
        };
        if !registered.contains(&gpu) {
            continue;
        }
        let Some(index) = table().iter().position(|n| n.instance.is_none() && n.gpu == gpu) else { continue };
        let event = EventData {
            device: handle_of(index),
            event_type: EVENT_XID_CRITICAL,
            event_data: xid,
            gpu_instance_id: 0,
            compute_instance_id: 0,
        };
        // SAFETY: the caller's non-null out-pointer.
        unsafe { data.write(event) };
        return SUCCESS;
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: usize) -> NvmlReturn {
    let sets = SETS.lock().unwrap_or_else(|e| e.into_inner());
    if set == 0 || set > sets.len() { ERROR_INVALID_ARGUMENT } else { SUCCESS }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_devices_have_uuids_of_their_own_under_their_gpu() {
        let t = build(3, Some("1:3, 2:1"));
        assert_eq!(t.len(), 7);
        assert!(t[0].migs.is_empty());
        assert_eq!(t[1].migs, vec![3, 4, 5]);
        assert_eq!(t[2].migs, vec![6]);
        assert!(t[3].uuid.starts_with("MIG-") && t[3].uuid.len() == t[1].uuid.len());
        assert_ne!(t[3].uuid, t[4].uuid);
        assert_eq!((t[6].gpu, t[6].instance), (2, Some(0)));
        assert_eq!(build(2, Some("0:99"))[0].migs.len(), MAX_MIG as usize, "at most seven");
    }
}

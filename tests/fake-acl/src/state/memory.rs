//! Memory as an AscendCL program sees it. npu-sim has no device memory, so "device" memory
//! is host memory here and copies are immediate; what a program can observe through the
//! API (argument checks, error codes, the data after a copy and a sync, the free and total
//! sizes aclrtGetMemInfo reports) is the vendor's.

use crate::state::capture::Task;
use crate::state::{Rt, current_context, rt, soc_name};
use crate::{AclError, Handle, INVALID_PARAM, RT_CONTEXT_NULL, UNINITIALIZE};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use npud_proto::codes::acl::RT_MEMORY_ALLOCATION;
/// aclrtMemcpyKind: HOST_TO_HOST 0 … DEVICE_TO_DEVICE 3.
const MEMCPY_KINDS: u32 = 4;
/// aclrtRunMode: ACL_HOST, a host process driving an NPU card.
const RUN_MODE_HOST: u32 = 1;

/// Where a block lives: aclrtMalloc's device memory or aclrtMallocHost's host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Device,
    Host,
}

/// The blocks this process holds, by address: a free must name one of its own kind (a
/// block freed twice, or with the other call, is refused instead of handed to `free`),
/// and aclrtGetMemInfo's free size falls and rises with the device blocks.
static BLOCKS: Mutex<Option<HashMap<usize, (Kind, usize)>>> = Mutex::new(None);

fn blocks() -> std::sync::MutexGuard<'static, Option<HashMap<usize, (Kind, usize)>>> {
    BLOCKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes of device memory the process holds.
fn device_bytes() -> usize {
    blocks().as_ref().map_or(0, |b| b.values().filter(|(k, _)| *k == Kind::Device).map(|(_, n)| n).sum())
}

fn allocate(out: *mut *mut c_void, size: usize, kind: Kind) -> AclError {
    if out.is_null() || size == 0 {
        return INVALID_PARAM;
    }
    // SAFETY: malloc has no preconditions; a null result is handled.
    let p = unsafe { libc::malloc(size) };
    if p.is_null() {
        return crate::failed(RT_MEMORY_ALLOCATION);
    }
    blocks().get_or_insert_with(HashMap::new).insert(p as usize, (kind, size));
    // SAFETY: checked non-null out-pointer from the caller.
    unsafe { out.write(p) };
    0
}

/// aclrtMalloc: device memory of the current context's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMalloc(dev_ptr: *mut *mut c_void, size: usize, _policy: u32) -> AclError {
    if rt().is_none() {
        return UNINITIALIZE;
    }
    if current_context().is_none() {
        return crate::failed(RT_CONTEXT_NULL);
    }
    allocate(dev_ptr, size, Kind::Device)
}

/// aclrtMallocHost: page-locked host memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) -> AclError {
    if rt().is_none() {
        return UNINITIALIZE;
    }
    allocate(host_ptr, size, Kind::Host)
}

/// Whether `[addr, addr + len)` lies inside one device block the process holds.
pub(crate) fn is_device(addr: usize, len: usize) -> bool {
    blocks().as_ref().is_some_and(|b| inside_device_block(b, addr, len))
}

fn inside_device_block(b: &HashMap<usize, (Kind, usize)>, addr: usize, len: usize) -> bool {
    b.iter().any(|(start, (kind, size))| {
        *kind == Kind::Device && addr >= *start && addr.checked_add(len).is_some_and(|end| end <= start + size)
    })
}

/// The 64-bit value at `addr` while it lies in a device block of the process (read under
/// the books' lock, so a free cannot race the read); None once it does not.
pub(crate) fn read_device_u64(addr: usize) -> Option<u64> {
    let books = blocks();
    let held = books.as_ref().is_some_and(|b| inside_device_block(b, addr, 8));
    // SAFETY: 8 bytes inside a live block of this process's, which cannot be freed while
    // the lock is held; unaligned reads are allowed.
    held.then(|| unsafe { std::ptr::read_volatile(addr as *const [u8; 8]) }).map(u64::from_ne_bytes)
}

/// Frees `p` if it is a block of `kind` the process holds.
fn release(p: *mut c_void, kind: Kind) -> AclError {
    let held = blocks().as_mut().and_then(|b| match b.get(&(p as usize)) {
        Some((k, _)) if *k == kind => b.remove(&(p as usize)),
        _ => None,
    });
    if held.is_none() {
        return INVALID_PARAM;
    }
    // SAFETY: a block malloc gave this process, taken out of the books above, so freed once.
    unsafe { libc::free(p) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> AclError {
    release(dev_ptr, Kind::Device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeHost(host_ptr: *mut c_void) -> AclError {
    release(host_ptr, Kind::Host)
}

/// aclrtMemcpy's checks of its arguments.
fn checked(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: u32) -> AclError {
    if dst.is_null() || src.is_null() || count > dest_max || kind >= MEMCPY_KINDS {
        return INVALID_PARAM;
    }
    0
}

/// Makes one task whose arguments were checked.
fn make(t: &Task) {
    match *t {
        // SAFETY: the program passes buffers of at least `count` bytes (dest_max bounds dst,
        // checked), and keeps the buffers of a captured copy alive while it executes the
        // model (the vendor's contract); they may overlap, as memmove allows.
        Task::Copy { dst, src, count } => unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, count) },
        // SAFETY: as above, for a buffer of at least max_count >= count bytes.
        Task::Set { dst, value, count } => unsafe { std::ptr::write_bytes(dst as *mut u8, value, count) },
        // SAFETY: an aligned address inside a device block of the process (`value_ops`
        // checked both); volatile, as a watcher thread reads it (`read_device_u64`).
        Task::Value { dst, value } => unsafe { std::ptr::write_volatile(dst as *mut u64, value) },
        Task::Kernel => {
            KERNELS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Task::Call { func, data } => {
            // SAFETY: a host function the program issued (`Rt::launch_callback`), kept as
            // its address with its argument; the program keeps both valid while it
            // executes the model, as the vendor requires of a captured host function.
            let func: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(func) };
            // SAFETY: the program's own function and argument (above).
            unsafe { func(data as *mut c_void) }
        }
    }
}

static KERNELS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Kernels run in this process (`launch`).
pub(crate) fn kernels_run() -> u64 {
    KERNELS.load(std::sync::atomic::Ordering::Relaxed)
}

fn copy(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: u32) -> AclError {
    match checked(dst, dest_max, src, count, kind) {
        0 => {
            make(&Task::Copy { dst: dst as usize, src: src as usize, count });
            0
        }
        e => e,
    }
}

/// Makes the tasks an executed model captured, in order.
pub(crate) fn replay(tasks: &[Task]) {
    tasks.iter().for_each(make);
}

/// Issues `task` to `stream` (null: the current context's default stream): made at once,
/// or kept by the capture the stream is in, or by the stream when it is persistent.
pub(crate) fn issue(r: &Rt, stream: Handle, task: Task) -> AclError {
    let stream = match r.resolve(stream).and_then(|s| r.stream(s).map(|_| s)) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match r.capture_task(stream, task) {
        Ok(true) => {}
        Ok(false) if r.kept_task(stream, task) => {}
        Ok(false) => make(&task),
        Err(e) => return e,
    }
    0
}

/// aclrtMemcpy(dst, destMax, src, count, kind).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
) -> AclError {
    if let Err(e) = unsafe_call_allowed() {
        return crate::failed(e);
    }
    copy(dst, dest_max, src, count, kind)
}

/// Whether the capture modes let the calling thread make a synchronous copy or memset now
/// (`capture::modes`); always, before aclInit.
fn unsafe_call_allowed() -> Result<(), AclError> {
    rt().map_or(Ok(()), Rt::unsafe_call_allowed)
}

/// aclrtMemcpyAsync: the copy is done at once (there is no device memory to wait for); the
/// stream must be one of this process's. Issued to a stream in capture, it is kept in the
/// model and made at each execution instead (`capture`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: Handle,
) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match checked(dst, dest_max, src, count, kind) {
        0 => issue(r, stream, Task::Copy { dst: dst as usize, src: src as usize, count }),
        e => e,
    }
}

/// A memset's task once its arguments hold (the byte is `value`'s low byte).
fn set_task(dev_ptr: *mut c_void, max_count: usize, value: i32, count: usize) -> Result<Task, AclError> {
    match dev_ptr.is_null() || count > max_count {
        true => Err(INVALID_PARAM),
        false => Ok(Task::Set { dst: dev_ptr as usize, value: value as u8, count }),
    }
}

/// aclrtMemset(devPtr, maxCount, value, count).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemset(dev_ptr: *mut c_void, max_count: usize, value: i32, count: usize) -> AclError {
    if let Err(e) = unsafe_call_allowed() {
        return crate::failed(e);
    }
    match set_task(dev_ptr, max_count, value, count) {
        Ok(task) => {
            make(&task);
            0
        }
        Err(e) => crate::failed(e),
    }
}

/// aclrtMemsetAsync(devPtr, maxCount, value, count, stream): as aclrtMemset, on `stream`
/// (kept by its capture when it is in one).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: Handle,
) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match set_task(dev_ptr, max_count, value, count) {
        Ok(task) => issue(r, stream, task),
        Err(e) => crate::failed(e),
    }
}

/// The device's memory by SoC: its size, and whether it is HBM (the training parts) or
/// DDR (the inference parts).
fn device_memory() -> (usize, bool) {
    match soc_name().to_bytes() {
        b"Ascend910A" => (32 << 30, true),
        b"Ascend310P3" => (24 << 30, false),
        b"Ascend310B1" => (16 << 30, false),
        _ => (64 << 30, true),
    }
}

/// The most aclrtMemAttr value (ACL_MEM_P2P_HUGE1G).
const MEM_ATTR_MAX: u32 = 17;

/// Whether `attr` (aclrtMemAttr) names memory this SoC has. DDR_MEM 0, DDR_MEM_HUGE 2,
/// DDR_MEM_NORMAL 3 and the DDR P2P kinds 6 and 7 name DDR; 1, 4, 5, 8 and 9 HBM; 10 and 11
/// HBM in 1 GiB pages; 12 to 17 whichever the device has (14 and 17 in 1 GiB pages). The
/// parts without HBM answer HBM queries with their DDR; 1 GiB pages are the A2/A3 parts'.
fn has_memory(attr: u32, hbm: bool) -> bool {
    let huge_1g = matches!(attr, 10 | 11 | 14 | 17);
    if huge_1g
        && !soc_name().to_bytes().starts_with(b"Ascend910_9")
        && !soc_name().to_bytes().starts_with(b"Ascend910B")
    {
        return false;
    }
    let ddr = matches!(attr, 0 | 2 | 3 | 6 | 7);
    !(ddr && hbm)
}

/// aclrtGetMemInfo(attr, free, total): the current device's memory of that kind, free and
/// in all; both 0 for a kind the device does not have (the vendor's rule). A device must be
/// set first: the call names none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetMemInfo(attr: u32, free: *mut usize, total: *mut usize) -> AclError {
    if rt().is_none() {
        return UNINITIALIZE;
    }
    if attr > MEM_ATTR_MAX || free.is_null() || total.is_null() {
        return INVALID_PARAM;
    }
    if current_context().is_none() {
        return crate::failed(RT_CONTEXT_NULL);
    }
    let (size, hbm) = device_memory();
    let (f, t) = match has_memory(attr, hbm) {
        true => (size.saturating_sub(device_bytes()), size),
        false => (0, 0),
    };
    // SAFETY: checked non-null out-pointers from the caller.
    unsafe {
        free.write(f);
        total.write(t);
    }
    0
}

/// aclrtGetRunMode: a host process driving a card.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetRunMode(mode: *mut u32) -> AclError {
    if mode.is_null() {
        return INVALID_PARAM;
    }
    // SAFETY: checked non-null out-pointer.
    unsafe { mode.write(RUN_MODE_HOST) };
    0
}

/// aclGetRecentErrMsg: the fake keeps no error text; an empty string, never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    c"".as_ptr()
}

//! Memory as a CUDA driver program sees it. npu-sim has no device memory, so device memory
//! is host memory and copies are immediate; what a program can observe through the API
//! (argument checks, error codes, the data after a copy and a sync) is the driver's.

use crate::{CuResult, INVALID_VALUE, OUT_OF_MEMORY, SUCCESS, put, rt, with};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

/// The blocks cuMemAlloc and cuMemAllocHost gave, by address: what the driver knows as its
/// memory (a stream memory operation on anything else is refused), and freed only once.
static BLOCKS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

fn blocks() -> MutexGuard<'static, Option<HashMap<usize, usize>>> {
    BLOCKS.lock().unwrap_or_else(|e| e.into_inner())
}

fn inside(b: &Option<HashMap<usize, usize>>, addr: usize, len: usize) -> bool {
    b.as_ref().is_some_and(|b| {
        b.iter().any(|(start, size)| addr >= *start && addr.checked_add(len).is_some_and(|end| end <= start + size))
    })
}

/// Whether `[addr, addr + len)` lies in one block the driver gave.
pub(crate) fn known(addr: usize, len: usize) -> bool {
    inside(&blocks(), addr, len)
}

/// The `bytes`-wide (4 or 8) value at `addr` while it lies in a block the driver gave,
/// read under the blocks' lock so a free cannot race it; None once it does not.
pub(crate) fn read_value(addr: usize, bytes: usize) -> Option<u64> {
    let b = blocks();
    if !inside(&b, addr, bytes) {
        return None;
    }
    // SAFETY: `bytes` bytes inside a live block, which cannot be freed while the lock is
    // held; volatile, as another thread writes it (`write_value`).
    Some(unsafe {
        match bytes {
            4 => u64::from(std::ptr::read_volatile(addr as *const u32)),
            _ => std::ptr::read_volatile(addr as *const u64),
        }
    })
}

/// Writes the `bytes`-wide (4 or 8) `value` at `addr`, an aligned address in a block the
/// driver gave (checked by the caller).
pub(crate) fn write_value(addr: usize, value: u64, bytes: usize) {
    let b = blocks();
    if !inside(&b, addr, bytes) {
        return;
    }
    // SAFETY: as `read_value`; the caller checked the alignment.
    unsafe {
        match bytes {
            4 => std::ptr::write_volatile(addr as *mut u32, value as u32),
            _ => std::ptr::write_volatile(addr as *mut u64, value),
        }
    }
}

/// What cuMemGetInfo reports for the simulated device.
const TOTAL_MEMORY: usize = 80 << 30;

fn allocate(size: usize) -> Result<*mut c_void, CuResult> {
    if size == 0 {
        return Err(INVALID_VALUE);
    }
    // SAFETY: malloc has no preconditions; a null result is handled.
    let p = unsafe { libc::malloc(size) };
    if p.is_null() {
        return Err(OUT_OF_MEMORY);
    }
    blocks().get_or_insert_with(HashMap::new).insert(p as usize, size);
    Ok(p)
}

/// cuMemAlloc_v2: needs a current context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, size: usize) -> CuResult {
    if dptr.is_null() {
        return INVALID_VALUE;
    }
    with(|r| {
        r.current()?;
        let p = allocate(size)?;
        // SAFETY: checked non-null out-pointer.
        unsafe { dptr.write(p as u64) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CuResult {
    if pp.is_null() {
        return INVALID_VALUE;
    }
    with(|r| {
        r.current()?;
        let p = allocate(size)?;
        // SAFETY: checked non-null out-pointer.
        unsafe { pp.write(p) };
        Ok(())
    })
}

fn release(p: *mut c_void) -> CuResult {
    if let Err(e) = rt() {
        return e;
    }
    // A block the driver did not give, or gave and took back, is refused, not freed.
    if blocks().as_mut().and_then(|b| b.remove(&(p as usize))).is_none() {
        return INVALID_VALUE;
    }
    // SAFETY: a block malloc gave, taken out of the books above, so freed once.
    unsafe { libc::free(p) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> CuResult {
    release(dptr as *mut c_void)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CuResult {
    release(p)
}

fn copy(dst: *mut c_void, src: *const c_void, n: usize) -> CuResult {
    if let Err(e) = rt() {
        return e;
    }
    if dst.is_null() || src.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the program passes buffers of at least `n` bytes; memmove semantics.
    unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), n) };
    SUCCESS
}

fn check_stream(s: usize) -> CuResult {
    // The copy is made at once; the stream must exist (0, CU_STREAM_LEGACY and
    // CU_STREAM_PER_THREAD name the current context's default streams).
    with(|r| r.resolve(s).and_then(|h| r.stream(h)).map(drop))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> CuResult {
    copy(dst as *mut c_void, src, n)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> CuResult {
    copy(dst, src as *const c_void, n)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize) -> CuResult {
    copy(dst as *mut c_void, src as *const c_void, n)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, n: usize, s: usize) -> CuResult {
    match check_stream(s) {
        SUCCESS => copy(dst as *mut c_void, src, n),
        e => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, n: usize, s: usize) -> CuResult {
    match check_stream(s) {
        SUCCESS => copy(dst, src as *const c_void, n),
        e => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: u64, value: u8, n: usize) -> CuResult {
    if let Err(e) = rt() {
        return e;
    }
    if dst == 0 {
        return INVALID_VALUE;
    }
    // SAFETY: the program passes a buffer of at least `n` bytes.
    unsafe { std::ptr::write_bytes(dst as *mut u8, value, n) };
    SUCCESS
}

/// cuMemsetD32_v2: `n` 32-bit words set to `value`; the address must be 4-byte aligned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: u64, value: u32, n: usize) -> CuResult {
    if let Err(e) = rt() {
        return e;
    }
    if dst == 0 || !dst.is_multiple_of(4) {
        return INVALID_VALUE;
    }
    // SAFETY: the program passes an aligned buffer of at least `n` words (checked aligned).
    unsafe { std::slice::from_raw_parts_mut(dst as *mut u32, n) }.fill(value);
    SUCCESS
}

/// cuMemsetD8Async: as cuMemsetD8, on stream `s` (made at once, as the fake's copies are).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemsetD8Async(dst: u64, value: u8, n: usize, s: usize) -> CuResult {
    match check_stream(s) {
        // SAFETY: forwarded from the caller.
        SUCCESS => unsafe { cuMemsetD8_v2(dst, value, n) },
        e => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, n: usize, s: usize) -> CuResult {
    match check_stream(s) {
        SUCCESS => copy(dst as *mut c_void, src as *const c_void, n),
        e => e,
    }
}

/// cuDeviceTotalMem_v2: the device's memory, as cuMemGetInfo's total.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: i32) -> CuResult {
    let r = runtime!();
    if let Err(e) = r.physical(dev) {
        return e;
    }
    // SAFETY: out-pointer from the caller (checked non-null by put).
    unsafe { put(bytes, TOTAL_MEMORY) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    with(|r| {
        r.current()?;
        // SAFETY: out-pointers from the caller (checked non-null by put).
        match unsafe { (put(free, TOTAL_MEMORY), put(total, TOTAL_MEMORY)) } {
            (SUCCESS, SUCCESS) => Ok(()),
            _ => Err(INVALID_VALUE),
        }
    })
}

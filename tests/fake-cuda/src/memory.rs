//! Memory as a CUDA driver program sees it. npu-sim has no device memory, so device memory
//! is host memory and copies are immediate; what a program can observe through the API
//! (argument checks, error codes, the data after a copy and a sync) is the driver's.

use crate::{CuResult, INVALID_VALUE, OUT_OF_MEMORY, SUCCESS, put, rt, with};
use std::ffi::c_void;

/// What cuMemGetInfo reports for the simulated device.
const TOTAL_MEMORY: usize = 80 << 30;

fn allocate(size: usize) -> Result<*mut c_void, CuResult> {
    if size == 0 {
        return Err(INVALID_VALUE);
    }
    // SAFETY: malloc has no preconditions; a null result is handled.
    let p = unsafe { libc::malloc(size) };
    if p.is_null() { Err(OUT_OF_MEMORY) } else { Ok(p) }
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
    if p.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the program frees what cuMemAlloc/cuMemAllocHost gave it, once.
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

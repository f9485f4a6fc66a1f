//! Memory as an AscendCL program sees it. npu-sim has no device memory, so "device" memory
//! is host memory here and copies are immediate; what a program can observe through the
//! API (argument checks, error codes, the data after a copy and a sync) is the vendor's.

use crate::capture::Copy;
use crate::state::{current_context, rt};
use crate::{AclError, Handle, INVALID_PARAM, RT_CONTEXT_NULL, UNINITIALIZE};
use std::ffi::{c_char, c_void};

use npud_proto::codes::acl::RT_MEMORY_ALLOCATION;
/// aclrtMemcpyKind: HOST_TO_HOST 0 … DEVICE_TO_DEVICE 3.
const MEMCPY_KINDS: u32 = 4;
/// aclrtRunMode: ACL_HOST, a host process driving an NPU card.
const RUN_MODE_HOST: u32 = 1;

fn allocate(out: *mut *mut c_void, size: usize) -> AclError {
    if out.is_null() || size == 0 {
        return INVALID_PARAM;
    }
    // SAFETY: malloc has no preconditions; a null result is handled.
    let p = unsafe { libc::malloc(size) };
    if p.is_null() {
        return RT_MEMORY_ALLOCATION;
    }
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
        return RT_CONTEXT_NULL;
    }
    allocate(dev_ptr, size)
}

/// aclrtMallocHost: page-locked host memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) -> AclError {
    if rt().is_none() {
        return UNINITIALIZE;
    }
    allocate(host_ptr, size)
}

fn release(p: *mut c_void) -> AclError {
    if p.is_null() {
        return INVALID_PARAM;
    }
    // SAFETY: the program frees what aclrtMalloc/aclrtMallocHost gave it, once.
    unsafe { libc::free(p) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> AclError {
    release(dev_ptr)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtFreeHost(host_ptr: *mut c_void) -> AclError {
    release(host_ptr)
}

/// aclrtMemcpy's checks of its arguments.
fn checked(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: u32) -> AclError {
    if dst.is_null() || src.is_null() || count > dest_max || kind >= MEMCPY_KINDS {
        return INVALID_PARAM;
    }
    0
}

/// Makes one copy whose arguments were `checked`.
fn make(c: &Copy) {
    // SAFETY: the program passes buffers of at least `count` bytes (dest_max bounds dst,
    // checked), and keeps the buffers of a captured copy alive while it executes the model
    // (the vendor's contract); they may overlap, as memmove allows.
    unsafe { std::ptr::copy(c.src as *const u8, c.dst as *mut u8, c.count) };
}

fn copy(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: u32) -> AclError {
    match checked(dst, dest_max, src, count, kind) {
        0 => {
            make(&Copy { dst: dst as usize, src: src as usize, count });
            0
        }
        e => e,
    }
}

/// Makes the copies an executed model captured, in order.
pub(crate) fn replay(copies: &[Copy]) {
    copies.iter().for_each(make);
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
    copy(dst, dest_max, src, count, kind)
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
    if !stream.is_null()
        && let Err(e) = r.stream(stream)
    {
        return e;
    }
    let c = Copy { dst: dst as usize, src: src as usize, count };
    match checked(dst, dest_max, src, count, kind) {
        0 => {
            if stream.is_null() || !r.capture_copy(stream, c) {
                make(&c);
            }
            0
        }
        e => e,
    }
}

/// aclrtMemset(devPtr, maxCount, value, count).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtMemset(dev_ptr: *mut c_void, max_count: usize, value: i32, count: usize) -> AclError {
    if dev_ptr.is_null() || count > max_count {
        return INVALID_PARAM;
    }
    // SAFETY: the program passes a buffer of at least max_count >= count bytes.
    unsafe { std::ptr::write_bytes(dev_ptr.cast::<u8>(), value as u8, count) };
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

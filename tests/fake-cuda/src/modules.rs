//! Modules: PTX text loaded from memory (cuModuleLoadData) or from a file (cuModuleLoad),
//! their functions, and unloading. The answers to bad input are an H100's (driver
//! 580.159.04, `native/cuda_basics.c`): a missing file is CUDA_ERROR_FILE_NOT_FOUND, text
//! that is not PTX CUDA_ERROR_INVALID_IMAGE, unloading NULL or twice
//! CUDA_ERROR_INVALID_HANDLE.

use crate::*;
use npud_proto::codes::cuda::FILE_NOT_FOUND;
use std::ffi::{CStr, c_char, c_void};

/// Accepts NUL-terminated PTX text with at least one `.entry`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(m: *mut usize, image: *const c_void) -> CuResult {
    let r = runtime!();
    if image.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a NUL-terminated PTX image.
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_string_lossy().into_owned();
    if !text.contains(".entry") {
        return INVALID_IMAGE;
    }
    let mut inner = r.lock();
    let h = Rt::mint(&mut inner);
    inner.modules.insert(h, text);
    // SAFETY: out-pointer from the caller.
    unsafe { put(m, h) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(f: *mut usize, m: usize, name: *const c_char) -> CuResult {
    let r = runtime!();
    if name.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    let mut inner = r.lock();
    let Some(ptx) = inner.modules.get(&m) else { return INVALID_HANDLE };
    if !ptx.contains(&format!(".entry {name}")) {
        return NOT_FOUND;
    }
    let h = Rt::mint(&mut inner);
    inner.functions.insert(h, name);
    // SAFETY: out-pointer from the caller.
    unsafe { put(f, h) }
}

/// cuModuleLoad: the PTX in the file `fname`, as cuModuleLoadData.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoad(m: *mut usize, fname: *const c_char) -> CuResult {
    if let Err(e) = rt() {
        return e;
    }
    if m.is_null() || fname.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a NUL-terminated path.
    let path = unsafe { CStr::from_ptr(fname) }.to_string_lossy().into_owned();
    let Ok(mut text) = std::fs::read(path) else { return FILE_NOT_FOUND };
    if text.contains(&0) {
        return INVALID_IMAGE;
    }
    text.push(0);
    // SAFETY: a NUL-terminated image, and the caller's out-pointer (checked non-null).
    unsafe { cuModuleLoadData(m, text.as_ptr().cast()) }
}

/// cuModuleUnload: the module goes; its functions can no longer be launched.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(m: usize) -> CuResult {
    let r = runtime!();
    match r.lock().modules.remove(&m) {
        Some(_) => SUCCESS,
        None => INVALID_HANDLE,
    }
}

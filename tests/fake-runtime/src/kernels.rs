//! The runtime layer's kernel launches as GE, torch_npu's op-plugin and HCCL reach them
//! (`pkg_inc/runtime/runtime/kernel.h` 225-410, `rt_external_kernel.h` 85-90 in
//! hicann/runtime @681ef76): a device binary registered (`rtDevBinaryRegister`), its
//! functions registered under a host stub address (`rtFunctionRegister`), and launched by
//! stub (`rtKernelLaunch`) or by the binary's handle (`rtKernelLaunchWithHandleV2`). The
//! checks are the runtime's for its inputs: a NULL binary, data or handle, a length of 0 or
//! an unknown stub is RT_ERROR_INVALID_VALUE (107000); 0 blocks too. The launch itself is
//! the fake AscendCL library's (one task on the stream, a capture's task in a capture).

use super::{PARAM_INVALID, RtError, RtStream, with};
use std::collections::BTreeSet;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

/// `rtDevBinary_t` (`rt_external_kernel.h` 85-90).
#[repr(C)]
pub struct DevBinary {
    pub magic: u32,
    pub version: u32,
    pub data: *const c_void,
    pub length: u64,
}

/// Binary handles given out, and the stubs registered (addresses, as the runtime keys
/// them).
static REGISTERED: Mutex<(BTreeSet<usize>, BTreeSet<usize>)> = Mutex::new((BTreeSet::new(), BTreeSet::new()));

fn registered() -> std::sync::MutexGuard<'static, (BTreeSet<usize>, BTreeSet<usize>)> {
    REGISTERED.lock().unwrap_or_else(|e| e.into_inner())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtDevBinaryRegister(bin: *const DevBinary, handle: *mut *mut c_void) -> RtError {
    // SAFETY: the caller's binary description, read when non-null.
    let Some(b) = (unsafe { bin.as_ref() }) else { return PARAM_INVALID };
    if b.data.is_null() || b.length == 0 || handle.is_null() {
        return PARAM_INVALID;
    }
    // A handle of its own: a heap cell that lives as long as the process (never reused).
    let h = Box::into_raw(Box::new(b.magic)) as usize;
    registered().0.insert(h);
    // SAFETY: checked non-null out-pointer.
    unsafe { handle.write(h as *mut c_void) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtFunctionRegister(
    bin: *mut c_void,
    stub: *const c_void,
    name: *const c_char,
    _kernel_info: *const c_void,
    _mode: u32,
) -> RtError {
    let mut r = registered();
    if stub.is_null() || name.is_null() || !r.0.contains(&(bin as usize)) {
        return PARAM_INVALID;
    }
    r.1.insert(stub as usize);
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtKernelLaunch(
    stub: *const c_void,
    blocks: u32,
    _args: *mut c_void,
    _args_size: u32,
    _sm_desc: *mut c_void,
    stream: RtStream,
) -> RtError {
    if blocks == 0 || !registered().1.contains(&(stub as usize)) {
        return PARAM_INVALID;
    }
    // SAFETY: the table's launch, with the caller's stream (checked there).
    with(|t| unsafe { (t.launch)(stream, blocks) })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rtKernelLaunchWithHandleV2(
    bin: *mut c_void,
    _tiling_key: u64,
    blocks: u32,
    _args: *mut c_void,
    _sm_desc: *mut c_void,
    stream: RtStream,
    _cfg: *const c_void,
) -> RtError {
    if blocks == 0 || !registered().0.contains(&(bin as usize)) {
        return PARAM_INVALID;
    }
    // SAFETY: as above.
    with(|t| unsafe { (t.launch)(stream, blocks) })
}

/// rtStreamAddToModel(stm, captureMdl): the stream joins the capture the model is being
/// captured into, taking a capture stream of its own (`added` in the fake AscendCL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamAddToModel(stream: RtStream, model: *mut c_void) -> RtError {
    // SAFETY: the table's implementation with the caller's handles (checked there).
    with(|t| unsafe { (t.add_to_model)(stream, model) })
}

/// rtStreamBeginCaptureToModel(stm, mode, mdl).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamBeginCaptureToModel(stream: RtStream, mode: u32, model: *mut c_void) -> RtError {
    // SAFETY: as above.
    with(|t| unsafe { (t.begin_capture_to_model)(stream, mode, model) })
}

//! A fake `libruntime.so`: the runtime layer's stream, device and capture entry points
//! that GE, HCCL and AscendCL itself call (`rt*` from `runtime/stream.h`, `runtime/dev.h`,
//! `rt_external_stream.h`; `rts*` from `runtime/rts/rts_stream.h`; hicann/runtime
//! @681ef76, `pkg_inc/runtime`).
//!
//! The device state lives in the fake AscendCL library beside this one (tests/fake-acl),
//! found through its `npudFakeRuntime` table; that library is loaded on the first call,
//! as the open runtime's AscendCL stubs load libruntime.so. What this library does itself
//! is what the open runtime's `api_c_stream.cc` and `api_c_standard_soc.cc` do before the
//! implementation: read a configuration, check flags, pick the force variant. Which
//! layout the pair copies is said in tests/fake-acl/src/runtime.rs.

/// The table shared with the fake AscendCL library (one file, compiled by both); the
/// stream-type constants are the other side's.
#[path = "../../fake-acl/src/runtime_abi.rs"]
#[allow(dead_code)]
mod abi;

mod kernels;

use abi::{ATTR_FLAGS, ATTR_PRIORITY, CreateConfig, RUNTIME_TABLE_VERSION, RtStream, RuntimeTable};
use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

type RtError = i32;

/// ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_INTERNAL_ERROR.
const PARAM_INVALID: RtError = 107000;
const INTERNAL_ERROR: RtError = 507000;

/// RT_STREAM_DESTORY_FLAG_FORCE (sic, `rts_stream.h`).
const DESTROY_FORCE: u64 = 1;

/// The implementation in the fake AscendCL library, loaded once.
fn table() -> Option<&'static RuntimeTable> {
    static TABLE: OnceLock<usize> = OnceLock::new();
    let p = *TABLE.get_or_init(|| load().map_or(0, |t| t as usize));
    // SAFETY: a non-zero value is the fake AscendCL library's static table, which lives as
    // long as that library, which is never unloaded (its handle is kept).
    (p != 0).then(|| unsafe { &*(p as *const RuntimeTable) })
}

fn load() -> Option<*const RuntimeTable> {
    let dir = own_dir()?;
    let path = std::ffi::CString::new(dir.join("libascendcl.so").into_os_string().into_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; the handle is kept for the life of the process.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let get = unsafe { libc::dlsym(handle, c"npudFakeRuntime".as_ptr()) };
    if get.is_null() {
        return None;
    }
    // SAFETY: npudFakeRuntime is `extern "C" fn() -> *const RuntimeTable` in fake-acl.
    let get: extern "C" fn() -> *const RuntimeTable = unsafe { std::mem::transmute(get) };
    let t = get();
    // SAFETY: the table is static in the library just loaded; its version is read first.
    (!t.is_null() && unsafe { (*t).version } == RUNTIME_TABLE_VERSION).then_some(t)
}

fn own_dir() -> Option<std::path::PathBuf> {
    // SAFETY: all-zero is a valid Dl_info (null pointers), filled by dladdr below.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: an address inside this library and an out-struct of ours.
    if unsafe { libc::dladdr(rtSetDevice as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr filled a NUL-terminated file name.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    std::path::Path::new(&file).parent().map(std::path::Path::to_path_buf)
}

/// `f` on the implementation; ACL_ERROR_RT_INTERNAL_ERROR where the library beside this
/// one cannot be loaded.
fn with(f: impl FnOnce(&RuntimeTable) -> RtError) -> RtError {
    table().map_or(INTERNAL_ERROR, f)
}

#[unsafe(no_mangle)]
pub extern "C" fn rtSetDevice(device: i32) -> RtError {
    // SAFETY: the implementation's C signature, from the shared table.
    with(|t| unsafe { (t.set_device)(device) })
}

#[unsafe(no_mangle)]
pub extern "C" fn rtDeviceReset(device: i32) -> RtError {
    // SAFETY: as above.
    with(|t| unsafe { (t.device_reset)(device, 0) })
}

#[unsafe(no_mangle)]
pub extern "C" fn rtDeviceResetForce(device: i32) -> RtError {
    // SAFETY: as above.
    with(|t| unsafe { (t.device_reset)(device, 1) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtGetDevice(device: *mut i32) -> RtError {
    // SAFETY: as above; the caller's out-pointer, checked there.
    with(|t| unsafe { (t.get_device)(device) })
}

/// rtStreamCreate: `rtStreamCreateWithFlags(stm, priority, RT_STREAM_DEFAULT)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamCreate(stream: *mut RtStream, priority: i32) -> RtError {
    // SAFETY: forwarded arguments.
    unsafe { rtStreamCreateWithFlags(stream, priority, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamCreateWithFlags(stream: *mut RtStream, priority: i32, flags: u32) -> RtError {
    // SAFETY: as above; the out-pointer is checked there.
    with(|t| unsafe { (t.stream_create)(stream, priority, flags) })
}

/// rtStreamCreateWithFlagsExternal: a priority other than RT_STREAM_GREATEST_PRIORITY (0)
/// is RT_ERROR_INVALID_VALUE except on the DC chip, which the simulated parts are not.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamCreateWithFlagsExternal(stream: *mut RtStream, priority: i32, flags: u32) -> RtError {
    if priority != 0 {
        return PARAM_INVALID;
    }
    // SAFETY: forwarded arguments.
    unsafe { rtStreamCreateWithFlags(stream, priority, flags) }
}

/// `rtStreamConfigHandle` (`runtime/stream.h`).
#[repr(C)]
pub struct StreamConfigHandle {
    pub work_ptr: *mut c_void,
    pub work_size: usize,
    pub flag: usize,
    pub priority: u32,
}

/// rtStreamCreateWithConfig (the light runtime's, `runtime_compact/feature/src/stream.c`):
/// a NULL out-pointer is ACL_ERROR_RT_INTERNAL_ERROR there; the handle's flag and priority
/// make the stream (a NULL handle, the defaults).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamCreateWithConfig(stream: *mut RtStream, handle: *const StreamConfigHandle) -> RtError {
    if stream.is_null() {
        return INTERNAL_ERROR;
    }
    // SAFETY: the caller's handle, read when non-null.
    let (priority, flags) = match unsafe { handle.as_ref() } {
        Some(h) => (h.priority as i32, h.flag as u32),
        None => (0, 0),
    };
    // SAFETY: forwarded arguments.
    unsafe { rtStreamCreateWithFlags(stream, priority, flags) }
}

/// rtsStreamCreate (`api_c_stream.cc`): a NULL config makes the default stream; a config
/// with NULL attributes, or an attribute id other than FLAGS and PRIORITY, is
/// ACL_ERROR_RT_PARAM_INVALID.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtsStreamCreate(stream: *mut RtStream, config: *const CreateConfig) -> RtError {
    let (mut priority, mut flags) = (0i32, 0u32);
    // SAFETY: the caller's config, read when non-null.
    if let Some(config) = unsafe { config.as_ref() } {
        if config.attrs.is_null() {
            return PARAM_INVALID;
        }
        for i in 0..config.num_attrs {
            // SAFETY: the caller's array of `num_attrs` attributes.
            let attr = unsafe { &*config.attrs.add(i) };
            match attr.id {
                ATTR_FLAGS => flags = attr.value[0],
                ATTR_PRIORITY => priority = attr.value[0] as i32,
                _ => return PARAM_INVALID,
            }
        }
    }
    // SAFETY: forwarded arguments.
    unsafe { rtStreamCreateWithFlags(stream, priority, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamDestroy(stream: RtStream) -> RtError {
    // SAFETY: the implementation's C signature, from the shared table.
    with(|t| unsafe { (t.stream_destroy)(stream, 0) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamDestroyForce(stream: RtStream) -> RtError {
    // SAFETY: as above.
    with(|t| unsafe { (t.stream_destroy)(stream, 1) })
}

/// rtsStreamDestroy(stm, flags): flags other than DEFAULT (0) and FORCE (1) are
/// ACL_ERROR_RT_PARAM_INVALID.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtsStreamDestroy(stream: RtStream, flags: u64) -> RtError {
    match flags {
        // SAFETY: forwarded handle.
        0 => unsafe { rtStreamDestroy(stream) },
        // SAFETY: as above.
        DESTROY_FORCE => unsafe { rtStreamDestroyForce(stream) },
        _ => PARAM_INVALID,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtGetAvailStreamNum(kind: u32, count: *mut u32) -> RtError {
    // SAFETY: as above; the arguments are checked there.
    with(|t| unsafe { (t.avail_stream_num)(kind, count) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtsStreamGetAvailableNum(count: *mut u32) -> RtError {
    // SAFETY: as above.
    with(|t| unsafe { (t.free_stream_num)(count) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamBeginCapture(stream: RtStream, mode: u32) -> RtError {
    // SAFETY: as above.
    with(|t| unsafe { (t.begin_capture)(stream, mode) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtStreamEndCapture(stream: RtStream, model: *mut *mut c_void) -> RtError {
    // SAFETY: as above; the out-pointer is checked there.
    with(|t| unsafe { (t.end_capture)(stream, model) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rtThreadExchangeCaptureMode(mode: *mut u32) -> RtError {
    // SAFETY: as above; the in/out pointer is checked there.
    with(|t| unsafe { (t.exchange_capture_mode)(mode) })
}

//! The runtime layer under AscendCL, as the fake lays it out.
//!
//! The fake's AscendCL entry points that make, free or count streams, set or reset a device
//! and begin or end a capture reach the runtime layer through the dynamic symbol table
//! (`rtSetDevice`, `rtStreamCreate`, `rtsStreamCreate`, `rtStreamDestroy(Force)`,
//! `rtsStreamGetAvailableNum`, `rtStreamBeginCapture`, `rtStreamEndCapture`,
//! `rtThreadExchangeCaptureMode`), with the arguments the open runtime's
//! `src/acl/aclrt_impl/stream.cpp`, `device.cpp` and `model_ri.cpp` pass (hicann/runtime
//! @681ef76): aclrtCreateStream is `rtStreamCreate(&s, RT_STREAM_PRIORITY_DEFAULT)`,
//! aclrtCreateStreamWithConfig is `rtsStreamCreate` with a PRIORITY and a FLAGS attribute,
//! its ACL_STREAM_* flags mapped to RT_STREAM_* ones and the rest dropped.
//!
//! Which layout this copies: one where AscendCL's library calls libruntime.so through the
//! PLT, so that a preloaded `rt*` hook also sees AscendCL's own calls (issue 57 reads the
//! open runtime so; shared/reference/interposition.md §1.2 reads its current build as
//! linking the Impl code into libruntime.so with `-Bsymbolic`, where such a hook does not
//! see them, and names the PLT layout as older CANN's). It is the harder case for an
//! interposer, which must then book each stream once across both layers. The other case
//! is kept: with `NPU_SIM_ACL_LAYOUT=single`, or where no libruntime.so lies beside this
//! library, AscendCL calls its implementation directly and no `rt*` hook sees it.
//!
//! libruntime.so (tests/fake-runtime) exports the `rt*`/`rts*` names; it finds their
//! implementations here through [`npudFakeRuntime`]. The runtime layer needs no aclInit:
//! its calls initialise the fake's devices themselves.

use crate::runtime_abi::{
    ATTR_FLAGS, ATTR_PRIORITY, CreateAttr, CreateConfig, RT_HUGE_STREAM, RT_NORMAL_STREAM, RUNTIME_TABLE_VERSION,
    RtStream, RuntimeTable,
};
use crate::state::capture::rules;
use crate::state::{self, Rt};
use crate::{ACL_SUCCESS, AclError, Handle, INVALID_PARAM, failed};
use npud_proto::codes::acl::{RT_FEATURE_NOT_SUPPORT, RT_PARAM_INVALID};
use npud_proto::flags as acl;
use std::ffi::{CStr, c_void};
use std::sync::OnceLock;

/// RT_STREAM_* flags (`rt_external_stream.h`, `runtime/stream.h`) against the ACL_STREAM_*
/// flags aclrtCreateStreamWithConfig maps to them.
const FLAG_MAP: [(u32, u32); 6] = [
    (acl::STREAM_FAST_LAUNCH, 0x200),     // RT_STREAM_FAST_LAUNCH
    (acl::STREAM_FAST_SYNC, 0x400),       // RT_STREAM_FAST_SYNC
    (acl::STREAM_PERSISTENT, 0x01),       // RT_STREAM_PERSISTENT
    (acl::STREAM_HUGE, 0x04),             // RT_STREAM_HUGE
    (acl::STREAM_CPU_SCHEDULE, 0x08),     // RT_STREAM_CPU_SCHEDULE
    (acl::STREAM_DEVICE_USE_ONLY, 0x800), // RT_STREAM_CP_PROCESS_USE
];

pub(crate) fn rt_flags(acl_flags: u32) -> u32 {
    FLAG_MAP.iter().filter(|(a, _)| acl_flags & a != 0).fold(0, |f, (_, r)| f | r)
}

fn acl_flags(rt_flags: u32) -> u32 {
    FLAG_MAP.iter().filter(|(_, r)| rt_flags & r != 0).fold(0, |f, (a, _)| f | a)
}

/// The fake's runtime, initialised by the first runtime-layer call that needs it.
fn runtime() -> &'static Rt {
    state::runtime()
}

fn answer(r: Result<(), AclError>) -> i32 {
    r.err().map_or(ACL_SUCCESS, failed)
}

unsafe fn put<T>(out: *mut T, v: T) -> i32 {
    if out.is_null() {
        return failed(RT_PARAM_INVALID);
    }
    // SAFETY: the caller's non-null, aligned out-pointer for T.
    unsafe { out.write(v) };
    ACL_SUCCESS
}

unsafe extern "C" fn set_device(device: i32) -> i32 {
    answer(runtime().set_device(device))
}

unsafe extern "C" fn device_reset(device: i32, force: u32) -> i32 {
    answer(runtime().reset_device(device, force != 0))
}

unsafe extern "C" fn get_device(device: *mut i32) -> i32 {
    let r = runtime();
    match r.current_device() {
        // SAFETY: the caller's out-pointer (checked by `put`).
        Ok(dev) => unsafe { put(device, r.user_id(dev.id()) as i32) },
        Err(e) => failed(e),
    }
}

/// `ApiErrorDecorator::StreamCreate`: the flags checked (`CheckStreamFlags`), the
/// priority clamped, not refused.
unsafe extern "C" fn stream_create(stream: *mut RtStream, priority: i32, flags: u32) -> i32 {
    if stream.is_null() {
        return failed(RT_PARAM_INVALID);
    }
    // SAFETY: checked non-null out-pointer from the caller.
    unsafe { create_rt_stream(stream, priority as u32, flags) }
}

/// A stream of RT_STREAM_* `flags`, checked as the runtime does, into `out` (non-null).
pub(crate) unsafe fn create_rt_stream(out: *mut Handle, priority: u32, flags: u32) -> i32 {
    if let Err(e) = rules::check_create_flags(flags) {
        return failed(e);
    }
    let r = runtime();
    match r.create_stream(crate::clamped_priority(priority), acl_flags(flags)) {
        Ok(h) => {
            r.stream_flags_made(h, flags);
            // SAFETY: the caller's non-null out-pointer.
            unsafe { put(out, h) }
        }
        Err(e) => failed(e),
    }
}

unsafe extern "C" fn stream_destroy(stream: RtStream, force: u32) -> i32 {
    answer(runtime().destroy_stream(stream, force != 0))
}

/// rtGetAvailStreamNum (`ApiErrorDecorator` / `ApiImpl::GetAvailStreamNum`): a type other
/// than NORMAL or HUGE is RT_ERROR_INVALID_VALUE; NORMAL is what the driver has free on
/// the current context's device; HUGE is the product's huge-stream count, which the
/// simulated parts do not have (RT_ERROR_FEATURE_NOT_SUPPORT, as on a chip whose
/// `maxAllocHugeStreamNum` is 0).
unsafe extern "C" fn avail_stream_num(kind: u32, count: *mut u32) -> i32 {
    if (kind != RT_NORMAL_STREAM && kind != RT_HUGE_STREAM) || count.is_null() {
        return failed(RT_PARAM_INVALID);
    }
    let r = runtime();
    if let Err(e) = r.current_device() {
        return failed(e);
    }
    if kind == RT_HUGE_STREAM {
        return failed(RT_FEATURE_NOT_SUPPORT);
    }
    match r.available_streams() {
        // SAFETY: checked non-null out-pointer from the caller.
        Ok(n) => unsafe { put(count, n) },
        Err(e) => failed(e),
    }
}

unsafe extern "C" fn free_stream_num(count: *mut u32) -> i32 {
    match runtime().available_streams() {
        // SAFETY: the caller's out-pointer (checked by `put`).
        Ok(n) => unsafe { put(count, n) },
        Err(e) => failed(e),
    }
}

unsafe extern "C" fn begin_capture(stream: RtStream, mode: u32) -> i32 {
    answer(runtime().capture_begin(stream, mode))
}

unsafe extern "C" fn end_capture(stream: RtStream, model: *mut *mut c_void) -> i32 {
    if model.is_null() {
        return failed(runtime().capture_end_checks(stream).err().unwrap_or(RT_PARAM_INVALID));
    }
    // NULL first, whatever End answers (`context_aclgraph.cc` 510).
    // SAFETY: checked non-null out-pointer from the caller.
    unsafe { model.write(std::ptr::null_mut()) };
    match runtime().capture_end(stream) {
        // SAFETY: checked non-null out-pointer from the caller.
        Ok(m) => unsafe { put(model, m) },
        Err(e) => failed(e),
    }
}

unsafe extern "C" fn exchange_capture_mode(mode: *mut u32) -> i32 {
    if mode.is_null() {
        return failed(RT_PARAM_INVALID);
    }
    // SAFETY: checked non-null in/out pointer from the caller.
    match crate::state::capture::exchange_thread_mode(unsafe { *mode }) {
        // SAFETY: as above.
        Ok(previous) => unsafe { put(mode, previous) },
        Err(e) => failed(e),
    }
}

unsafe extern "C" fn add_to_model(stream: RtStream, model: *mut c_void) -> i32 {
    answer(runtime().capture_add_stream(stream, model))
}

unsafe extern "C" fn begin_capture_to_model(stream: RtStream, mode: u32, model: *mut c_void) -> i32 {
    answer(runtime().capture_begin_to_model(stream, mode, model))
}

unsafe extern "C" fn launch(stream: RtStream, blocks: u32) -> i32 {
    answer(runtime().launch(stream, blocks))
}

static TABLE: RuntimeTable = RuntimeTable {
    version: RUNTIME_TABLE_VERSION,
    set_device,
    device_reset,
    get_device,
    stream_create,
    stream_destroy,
    avail_stream_num,
    free_stream_num,
    begin_capture,
    end_capture,
    exchange_capture_mode,
    add_to_model,
    begin_capture_to_model,
    launch,
};

/// The runtime layer's implementations, for the fake libruntime.so (never a vendor name).
#[unsafe(no_mangle)]
pub extern "C" fn npudFakeRuntime() -> *const RuntimeTable {
    &TABLE
}

// ---- AscendCL's way down --------------------------------------------------------------

/// The `rt*` entry points AscendCL calls, as the dynamic symbol table resolves them from
/// here (a preloaded hook first, then libruntime.so's).
pub(crate) struct Down {
    set_device: unsafe extern "C" fn(i32) -> i32,
    device_reset: unsafe extern "C" fn(i32) -> i32,
    device_reset_force: unsafe extern "C" fn(i32) -> i32,
    stream_create: unsafe extern "C" fn(*mut RtStream, i32) -> i32,
    streams_create: unsafe extern "C" fn(*mut RtStream, *mut CreateConfig) -> i32,
    stream_destroy: unsafe extern "C" fn(RtStream) -> i32,
    stream_destroy_force: unsafe extern "C" fn(RtStream) -> i32,
    available: unsafe extern "C" fn(*mut u32) -> i32,
    begin_capture: unsafe extern "C" fn(RtStream, u32) -> i32,
    end_capture: unsafe extern "C" fn(RtStream, *mut *mut c_void) -> i32,
    exchange_capture_mode: unsafe extern "C" fn(*mut u32) -> i32,
    begin_capture_to_model: unsafe extern "C" fn(RtStream, u32, *mut c_void) -> i32,
}

/// Where AscendCL goes down to the runtime layer; None in the single-library layout.
pub(crate) fn down() -> Option<&'static Down> {
    static DOWN: OnceLock<Option<Down>> = OnceLock::new();
    DOWN.get_or_init(resolve).as_ref()
}

fn resolve() -> Option<Down> {
    if std::env::var("NPU_SIM_ACL_LAYOUT").is_ok_and(|v| v == "single") {
        return None;
    }
    // Only as the library itself: linked into a test program (the crate's rlib), the fake
    // libruntime.so would find its implementation in another copy of this library, with
    // other devices and handles.
    let (dir, file) = own_path()?;
    if file != "libascendcl.so" {
        return None;
    }
    let beside = dir.join("libruntime.so");
    let path = std::ffi::CString::new(beside.into_os_string().into_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path; the handle is kept for the life of the process, as a
    // DT_NEEDED library would be. RTLD_GLOBAL puts its names in the symbol table AscendCL
    // resolves against, as a dependency of the program's would be.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        return None;
    }
    fn find<F: Copy>(name: &CStr) -> Option<F> {
        // SAFETY: RTLD_DEFAULT and a NUL-terminated name.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        // SAFETY: F is the C signature of the name (runtime headers, cited on Down's users).
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }
    Some(Down {
        set_device: find(c"rtSetDevice")?,
        device_reset: find(c"rtDeviceReset")?,
        device_reset_force: find(c"rtDeviceResetForce")?,
        stream_create: find(c"rtStreamCreate")?,
        streams_create: find(c"rtsStreamCreate")?,
        stream_destroy: find(c"rtStreamDestroy")?,
        stream_destroy_force: find(c"rtStreamDestroyForce")?,
        available: find(c"rtsStreamGetAvailableNum")?,
        begin_capture: find(c"rtStreamBeginCapture")?,
        end_capture: find(c"rtStreamEndCapture")?,
        exchange_capture_mode: find(c"rtThreadExchangeCaptureMode")?,
        begin_capture_to_model: find(c"rtStreamBeginCaptureToModel")?,
    })
}

/// The directory this code was loaded from, and the file's name.
fn own_path() -> Option<(std::path::PathBuf, String)> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: an address inside this library and an out-struct of ours.
    if unsafe { libc::dladdr(npudFakeRuntime as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr filled a NUL-terminated file name.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let path = std::path::Path::new(&file);
    Some((path.parent()?.to_path_buf(), path.file_name()?.to_string_lossy().into_owned()))
}

impl Down {
    pub(crate) fn set_device(&self, device: i32) -> AclError {
        // SAFETY: rtSetDevice(int32_t devId), `runtime/dev.h`.
        unsafe { (self.set_device)(device) }
    }

    pub(crate) fn reset(&self, device: i32, force: bool) -> AclError {
        // SAFETY: rtDeviceReset / rtDeviceResetForce(int32_t devId), `runtime/dev.h`.
        unsafe { if force { (self.device_reset_force)(device) } else { (self.device_reset)(device) } }
    }

    /// aclrtCreateStream: `rtStreamCreate(&s, RT_STREAM_PRIORITY_DEFAULT)`.
    pub(crate) fn create(&self, out: *mut Handle) -> AclError {
        // SAFETY: rtStreamCreate(rtStream_t*, int32_t), `runtime/stream.h`; `out` non-null.
        unsafe { (self.stream_create)(out, 0) }
    }

    /// aclrtCreateStreamWithConfig: `rtsStreamCreate` with the priority and the mapped flags.
    pub(crate) fn create_with_config(&self, out: *mut Handle, priority: u32, flags: u32) -> AclError {
        let mut attrs = [
            CreateAttr { id: ATTR_PRIORITY, value: [priority, 0, 0, 0] },
            CreateAttr { id: ATTR_FLAGS, value: [rt_flags(flags), 0, 0, 0] },
        ];
        let mut config = CreateConfig { attrs: attrs.as_mut_ptr(), num_attrs: attrs.len() };
        // SAFETY: rtsStreamCreate(rtStream_t*, rtStreamCreateConfig_t*), `rts/rts_stream.h`;
        // the config and its attributes live across the call.
        unsafe { (self.streams_create)(out, &mut config) }
    }

    pub(crate) fn destroy(&self, stream: Handle, force: bool) -> AclError {
        // SAFETY: rtStreamDestroy / rtStreamDestroyForce(rtStream_t), `runtime/stream.h`.
        unsafe { if force { (self.stream_destroy_force)(stream) } else { (self.stream_destroy)(stream) } }
    }

    pub(crate) fn available(&self, count: *mut u32) -> AclError {
        // SAFETY: rtsStreamGetAvailableNum(uint32_t*), `rts/rts_stream.h`.
        unsafe { (self.available)(count) }
    }

    pub(crate) fn begin_capture(&self, stream: Handle, mode: u32) -> AclError {
        // SAFETY: rtStreamBeginCapture(rtStream_t, rtStreamCaptureMode), `runtime/stream.h`.
        unsafe { (self.begin_capture)(stream, mode) }
    }

    pub(crate) fn begin_capture_to_model(&self, stream: Handle, mode: u32, model: Handle) -> AclError {
        // SAFETY: rtStreamBeginCaptureToModel(rtStream_t, rtStreamCaptureMode, rtModel_t),
        // as aclmdlRICaptureToModelRIBegin calls it (`src/acl/aclrt_impl/model_ri.cpp` 419).
        unsafe { (self.begin_capture_to_model)(stream, mode, model) }
    }

    pub(crate) fn end_capture(&self, stream: Handle, model: *mut Handle) -> AclError {
        // SAFETY: rtStreamEndCapture(rtStream_t, rtModel_t*), `runtime/stream.h`.
        unsafe { (self.end_capture)(stream, model) }
    }

    pub(crate) fn exchange_capture_mode(&self, mode: *mut u32) -> AclError {
        // SAFETY: rtThreadExchangeCaptureMode(rtStreamCaptureMode*), `runtime/stream.h`.
        unsafe { (self.exchange_capture_mode)(mode) }
    }
}

/// ACL flags as aclrtCreateStreamWithConfig takes them: the seed's refusals first (a
/// word the fake's runtime would refuse), then what reaches the runtime.
pub(crate) fn checked_flags(flags: u32) -> Result<u32, AclError> {
    acl::effective_stream_flags(flags).map_err(|_| INVALID_PARAM)
}

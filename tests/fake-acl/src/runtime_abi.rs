//! What the fake `libruntime.so` (tests/fake-runtime) finds in the fake AscendCL library:
//! one table of the runtime layer's implementations, returned by `npudFakeRuntime`. Both
//! crates compile this one file, so the table has one definition.
//!
//! Every function answers the runtime's external codes (the `ACL_ERROR_RT_*` values the
//! open runtime's `api_c_*.cc` entry points return), the same numbers AscendCL passes on.

use std::ffi::c_void;

pub type RtStream = *mut c_void;

/// The runtime layer's calls, at the level the open runtime's `ApiImpl` has them: entry
/// points that only parse a configuration (`rtsStreamCreate`, `rtStreamCreateWithConfig`)
/// do that in libruntime.so and land on `stream_create`.
#[repr(C)]
pub struct RuntimeTable {
    /// Bumped when a field changes, so a stale libruntime.so is refused, not misread.
    pub version: u32,
    pub set_device: unsafe extern "C" fn(i32) -> i32,
    /// `force` 0 or 1 (rtDeviceReset, rtDeviceResetForce).
    pub device_reset: unsafe extern "C" fn(i32, u32) -> i32,
    pub get_device: unsafe extern "C" fn(*mut i32) -> i32,
    /// (out, priority, RT_STREAM_* flags).
    pub stream_create: unsafe extern "C" fn(*mut RtStream, i32, u32) -> i32,
    /// `force` 0 or 1 (rtStreamDestroy, rtStreamDestroyForce).
    pub stream_destroy: unsafe extern "C" fn(RtStream, u32) -> i32,
    /// (RT_NORMAL_STREAM or RT_HUGE_STREAM, out): rtGetAvailStreamNum.
    pub avail_stream_num: unsafe extern "C" fn(u32, *mut u32) -> i32,
    /// rtsStreamGetAvailableNum: the driver's free count on the current device.
    pub free_stream_num: unsafe extern "C" fn(*mut u32) -> i32,
    pub begin_capture: unsafe extern "C" fn(RtStream, u32) -> i32,
    pub end_capture: unsafe extern "C" fn(RtStream, *mut *mut c_void) -> i32,
    pub exchange_capture_mode: unsafe extern "C" fn(*mut u32) -> i32,
    /// rtStreamAddToModel(stream, capture model).
    pub add_to_model: unsafe extern "C" fn(RtStream, *mut c_void) -> i32,
    /// rtStreamBeginCaptureToModel(stream, mode, model).
    pub begin_capture_to_model: unsafe extern "C" fn(RtStream, u32, *mut c_void) -> i32,
    /// A kernel of (stream, blocks) whose function the caller has checked is registered.
    pub launch: unsafe extern "C" fn(RtStream, u32) -> i32,
}

pub const RUNTIME_TABLE_VERSION: u32 = 2;

/// `rtGetAvailStreamNum`'s stream types (`rt_external_stream.h`).
pub const RT_NORMAL_STREAM: u32 = 0;
pub const RT_HUGE_STREAM: u32 = 1;

/// `rtStreamCreateAttr_t` (`runtime/rts/rts_stream.h`): an id and a 16-byte union.
#[repr(C)]
pub struct CreateAttr {
    pub id: u32,
    pub value: [u32; 4],
}

/// `rtStreamCreateConfig_t`: what `rtsStreamCreate` takes.
#[repr(C)]
pub struct CreateConfig {
    pub attrs: *mut CreateAttr,
    pub num_attrs: usize,
}

/// RT_STREAM_CREATE_ATTR_FLAGS and _PRIORITY.
pub const ATTR_FLAGS: u32 = 1;
pub const ATTR_PRIORITY: u32 = 2;

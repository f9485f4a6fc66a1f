//! The runtime layer's hooks (`libruntime.so`): the entry points GE, HCCL and AscendCL
//! itself make, free and count streams with, set and reset devices (each default context
//! holds a default stream), and begin and end captures. Signatures are the published
//! headers' (hicann/runtime @681ef76, `pkg_inc/runtime`): `runtime/stream.h`,
//! `rt_external_stream.h`, `runtime/rts/rts_stream.h`, `runtime/dev.h`.
//!
//! Each stream is booked once, whichever layers a call passes through: where AscendCL's
//! library reaches these names through the PLT (older CANN; the fake's layered layout),
//! an AscendCL hook is already on the thread and these run as plain calls
//! ([`super::hook_or`]); where it does not (the open runtime links its AscendCL code into
//! libruntime.so with `-Bsymbolic`), these see only the calls made at this layer. A
//! runtime-layer call that AscendCL makes for a name we do not hook is booked here.
//!
//! `rtStreamAddToModel` and the runtime's kernel launches are in `launch`. Not hooked:
//! `rtThreadExchangeCaptureMode` (no stream), which passes through as its AscendCL
//! counterpart does.

use super::ascend::{CountFn, IntFn, PtrFn, create_one, destroy, reset, set_device, share};
use super::capture::{CaptureBeginFn, CaptureEndFn};
use super::vendor::{RUNTIME, real};
use super::{Handle, INTERNAL, hook};
use std::ffi::c_void;

type CreateFn = unsafe extern "C" fn(*mut Handle, i32) -> i32;
type CreateFlagsFn = unsafe extern "C" fn(*mut Handle, i32, u32) -> i32;
type CreateConfigFn = unsafe extern "C" fn(*mut Handle, *const ConfigHandle) -> i32;
type CreateAttrsFn = unsafe extern "C" fn(*mut Handle, *const CreateConfig) -> i32;
type DestroyFlagsFn = unsafe extern "C" fn(Handle, u64) -> i32;
type AvailFn = unsafe extern "C" fn(u32, *mut u32) -> i32;

/// `rtStreamConfigHandle` (`runtime/stream.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ConfigHandle {
    work_ptr: *mut c_void,
    work_size: usize,
    flag: usize,
    priority: u32,
}

/// `rtStreamCreateAttr_t` (`rts/rts_stream.h`): an id and a 16-byte union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CreateAttr {
    id: u32,
    value: [u32; 4],
}

/// `rtStreamCreateConfig_t`.
#[repr(C)]
pub struct CreateConfig {
    attrs: *const CreateAttr,
    num_attrs: usize,
}

/// RT_STREAM_CREATE_ATTR_PRIORITY.
const ATTR_PRIORITY: u32 = 2;
/// Most attributes a config is copied with to cap its priority; a longer one (the header
/// defines two ids) goes to the runtime as it is, which refuses the unknown ids.
const MAX_ATTRS: usize = 8;

#[unsafe(no_mangle)]
pub extern "C" fn rtSetDevice(device: i32) -> i32 {
    real!(&RUNTIME, rtSetDevice: IntFn).map_or(INTERNAL, |real| set_device(device, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn rtDeviceReset(device: i32) -> i32 {
    real!(&RUNTIME, rtDeviceReset: IntFn).map_or(INTERNAL, |real| reset(device, false, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn rtDeviceResetForce(device: i32) -> i32 {
    real!(&RUNTIME, rtDeviceResetForce: IntFn).map_or(INTERNAL, |real| reset(device, true, real))
}

/// rtStreamCreate(stm, priority), at a priority no more urgent than the tenant's limit.
#[unsafe(no_mangle)]
pub extern "C" fn rtStreamCreate(stream: *mut Handle, priority: i32) -> i32 {
    let Some(real) = real!(&RUNTIME, rtStreamCreate: CreateFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's out-pointer.
    hook(
        |p| create_one(p, stream, || unsafe { real(stream, p.priority(priority)) }),
        || unsafe { real(stream, priority) },
    )
}

/// A create with a priority argument, the priority held to the tenant's limit where `cap`.
fn create_with_flags(stream: *mut Handle, priority: i32, flags: u32, real: CreateFlagsFn, cap: bool) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| {
            let priority = if cap { p.priority(priority) } else { priority };
            create_one(p, stream, || unsafe { real(stream, priority, flags) })
        },
        || unsafe { real(stream, priority, flags) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn rtStreamCreateWithFlags(stream: *mut Handle, priority: i32, flags: u32) -> i32 {
    real!(&RUNTIME, rtStreamCreateWithFlags: CreateFlagsFn)
        .map_or(INTERNAL, |real| create_with_flags(stream, priority, flags, real, true))
}

/// rtStreamCreateWithFlagsExternal: the runtime refuses any priority but the greatest
/// outside the DC chip, so the caller's priority goes through as it is (a tenant's limit
/// cannot be met by a stream this call could make).
#[unsafe(no_mangle)]
pub extern "C" fn rtStreamCreateWithFlagsExternal(stream: *mut Handle, priority: i32, flags: u32) -> i32 {
    real!(&RUNTIME, rtStreamCreateWithFlagsExternal: CreateFlagsFn)
        .map_or(INTERNAL, |real| create_with_flags(stream, priority, flags, real, false))
}

/// rtStreamCreateWithConfig(stm, handle): the handle copied with its priority capped.
#[unsafe(no_mangle)]
pub extern "C" fn rtStreamCreateWithConfig(stream: *mut Handle, handle: *const ConfigHandle) -> i32 {
    let Some(real) = real!(&RUNTIME, rtStreamCreateWithConfig: CreateConfigFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments, or with a
    // copy of the caller's handle (read only when non-null).
    hook(
        |p| {
            create_one(p, stream, || match unsafe { handle.as_ref() } {
                Some(h) => {
                    let capped = ConfigHandle { priority: p.priority(h.priority as i32) as u32, ..*h };
                    unsafe { real(stream, &capped) }
                }
                None => unsafe { real(stream, handle) },
            })
        },
        || unsafe { real(stream, handle) },
    )
}

/// rtsStreamCreate(stm, config): where the tenant's limit changes the priority asked for
/// (the PRIORITY attribute, or 0 without one), the config's attributes are copied with
/// it capped; otherwise the caller's config goes through as it is.
#[unsafe(no_mangle)]
pub extern "C" fn rtsStreamCreate(stream: *mut Handle, config: *const CreateConfig) -> i32 {
    let Some(real) = real!(&RUNTIME, rtsStreamCreate: CreateAttrsFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments, or with a
    // copy of the caller's attributes.
    hook(
        |p| {
            create_one(p, stream, || match capped_config(config, |asked| p.priority(asked)) {
                Some((attrs, n)) => unsafe { real(stream, &CreateConfig { attrs: attrs.as_ptr(), num_attrs: n }) },
                None => unsafe { real(stream, config) },
            })
        },
        || unsafe { real(stream, config) },
    )
}

/// The caller's attributes with the priority capped, and how many there are; None where
/// nothing changes, or the config is one the runtime refuses anyway (NULL attributes) or
/// longer than we copy.
fn capped_config(config: *const CreateConfig, cap: impl Fn(i32) -> i32) -> Option<([CreateAttr; MAX_ATTRS], usize)> {
    let mut attrs = [CreateAttr { id: ATTR_PRIORITY, value: [0; 4] }; MAX_ATTRS];
    // SAFETY: the caller's config, read when non-null.
    let given = match unsafe { config.as_ref() } {
        None => 0,
        Some(c) if c.attrs.is_null() || c.num_attrs >= MAX_ATTRS => return None,
        Some(c) => {
            // SAFETY: the caller's array of `num_attrs` attributes (fewer than MAX_ATTRS).
            unsafe { std::ptr::copy_nonoverlapping(c.attrs, attrs.as_mut_ptr(), c.num_attrs) };
            c.num_attrs
        }
    };
    match attrs[..given].iter_mut().find(|a| a.id == ATTR_PRIORITY) {
        Some(a) if cap(a.value[0] as i32) == a.value[0] as i32 => None,
        Some(a) => {
            a.value[0] = cap(a.value[0] as i32) as u32;
            Some((attrs, given))
        }
        None if cap(0) == 0 => None,
        None => {
            attrs[given].value[0] = cap(0) as u32;
            Some((attrs, given + 1))
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn rtStreamDestroy(stream: Handle) -> i32 {
    // SAFETY: the vendor function with the caller's handle.
    real!(&RUNTIME, rtStreamDestroy: PtrFn).map_or(INTERNAL, |real| destroy(stream, || unsafe { real(stream) }))
}

#[unsafe(no_mangle)]
pub extern "C" fn rtStreamDestroyForce(stream: Handle) -> i32 {
    // SAFETY: the vendor function with the caller's handle.
    real!(&RUNTIME, rtStreamDestroyForce: PtrFn).map_or(INTERNAL, |real| destroy(stream, || unsafe { real(stream) }))
}

/// rtsStreamDestroy(stm, flags): DEFAULT or FORCE; the runtime refuses other flags.
#[unsafe(no_mangle)]
pub extern "C" fn rtsStreamDestroy(stream: Handle, flags: u64) -> i32 {
    let Some(real) = real!(&RUNTIME, rtsStreamDestroy: DestroyFlagsFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    destroy(stream, || unsafe { real(stream, flags) })
}

/// rtGetAvailStreamNum(streamType, count): the runtime's answer for either type (gert's
/// `NeedRollBackToSingleStream` decides from the normal one), no more than the tenant's
/// share of the current device.
#[unsafe(no_mangle)]
pub extern "C" fn rtGetAvailStreamNum(kind: u32, count: *mut u32) -> i32 {
    let Some(real) = real!(&RUNTIME, rtGetAvailStreamNum: AvailFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    share(count, || unsafe { real(kind, count) })
}

/// rtsStreamGetAvailableNum(count): the driver's free count, no more than the share.
#[unsafe(no_mangle)]
pub extern "C" fn rtsStreamGetAvailableNum(count: *mut u32) -> i32 {
    let Some(real) = real!(&RUNTIME, rtsStreamGetAvailableNum: CountFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's out-pointer.
    share(count, || unsafe { real(count) })
}

#[unsafe(no_mangle)]
pub extern "C" fn rtStreamBeginCapture(stream: Handle, mode: u32) -> i32 {
    real!(&RUNTIME, rtStreamBeginCapture: CaptureBeginFn)
        .map_or(INTERNAL, |real| super::capture::begin(stream, mode, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn rtStreamEndCapture(stream: Handle, model: *mut Handle) -> i32 {
    real!(&RUNTIME, rtStreamEndCapture: CaptureEndFn).map_or(INTERNAL, |real| super::capture::end(stream, model, real))
}

/// Our hook for an exact runtime-layer name, if we interpose it.
pub(crate) fn ours(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"rtSetDevice" => rtSetDevice as *mut c_void,
        b"rtDeviceReset" => rtDeviceReset as *mut c_void,
        b"rtDeviceResetForce" => rtDeviceResetForce as *mut c_void,
        b"rtStreamCreate" => rtStreamCreate as *mut c_void,
        b"rtStreamCreateWithFlags" => rtStreamCreateWithFlags as *mut c_void,
        b"rtStreamCreateWithFlagsExternal" => rtStreamCreateWithFlagsExternal as *mut c_void,
        b"rtStreamCreateWithConfig" => rtStreamCreateWithConfig as *mut c_void,
        b"rtsStreamCreate" => rtsStreamCreate as *mut c_void,
        b"rtStreamDestroy" => rtStreamDestroy as *mut c_void,
        b"rtStreamDestroyForce" => rtStreamDestroyForce as *mut c_void,
        b"rtsStreamDestroy" => rtsStreamDestroy as *mut c_void,
        b"rtGetAvailStreamNum" => rtGetAvailStreamNum as *mut c_void,
        b"rtsStreamGetAvailableNum" => rtsStreamGetAvailableNum as *mut c_void,
        b"rtStreamBeginCapture" => rtStreamBeginCapture as *mut c_void,
        b"rtStreamEndCapture" => rtStreamEndCapture as *mut c_void,
        _ => return None,
    })
}

//! The AscendCL hooks: streams, contexts (each holds a default stream), devices (the
//! default context aclrtSetDevice makes), and the caller's share of the device.

use super::ascend::{
    CountFn, IntFn, OutFn, PtrFn, create_one, current_device, destroy, known, reset, set_device, share,
};
use super::errors::refused;
use super::vendor::{ACL, real};
use super::{Handle, INTERNAL, hook};
use crate::process::Process;
use std::ffi::{c_char, c_void};

/// What a refused or expired admission returns: no stream (or event) resource, as the
/// runtime answers when the device has none left.
use npud_proto::codes::acl::{RT_NO_EVENT_RESOURCE as NO_EVENT_RESOURCE, RT_NO_STREAM_RESOURCE as NO_STREAM_RESOURCE};

type InitFn = unsafe extern "C" fn(*const c_char) -> i32;
type OutIntFn = unsafe extern "C" fn(*mut Handle, i32) -> i32;
type OutFlagFn = unsafe extern "C" fn(*mut Handle, u32) -> i32;
type ConfigFn = unsafe extern "C" fn(*mut Handle, u32, u32) -> i32;
type AttrFn = unsafe extern "C" fn(Handle, u32, *mut [u32; 4]) -> i32;

/// aclInit: a process that initialises AscendCL is about to use a device, so the
/// connection to npud opens now, off the path of its first ask (see `Process::prepare`).
#[unsafe(no_mangle)]
pub extern "C" fn aclInit(config: *const c_char) -> i32 {
    let Some(real) = real!(&ACL, aclInit: InitFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's argument.
    super::init(|| unsafe { real(config) }, INTERNAL)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device: i32) -> i32 {
    real!(&ACL, aclrtSetDevice: IntFn).map_or(INTERNAL, |real| set_device(device, real))
}

/// The open runtime's aclrtSetDeviceWithoutTsdVXX (Ascend 910 parts) is its SetDevice
/// without the TSD daemon: the same default context and default stream.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDeviceWithoutTsdVXX(device: i32) -> i32 {
    real!(&ACL, aclrtSetDeviceWithoutTsdVXX: IntFn).map_or(INTERNAL, |real| set_device(device, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDevice(device: i32) -> i32 {
    real!(&ACL, aclrtResetDevice: IntFn).map_or(INTERNAL, |real| reset(device, false, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceForce(device: i32) -> i32 {
    real!(&ACL, aclrtResetDeviceForce: IntFn).map_or(INTERNAL, |real| reset(device, true, real))
}

/// The reset that pairs with aclrtSetDeviceWithoutTsdVXX: the runtime's DeviceReset.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceWithoutTsdVXX(device: i32) -> i32 {
    real!(&ACL, aclrtResetDeviceWithoutTsdVXX: IntFn).map_or(INTERNAL, |real| reset(device, false, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateContext(ctx: *mut Handle, device: i32) -> i32 {
    let Some(real) = real!(&ACL, aclrtCreateContext: OutIntFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| {
            let Ok(id) = u32::try_from(device) else { return unsafe { real(ctx, device) } };
            let id = known(p, id);
            if ctx.is_null() {
                return unsafe { real(ctx, device) };
            }
            let n = p.context_adds(id);
            if let Err(r) = p.admit(id, n) {
                return refused(NO_STREAM_RESOURCE, r);
            }
            let rc = unsafe { real(ctx, device) };
            if rc == 0 {
                // SAFETY: the vendor filled the caller's non-null out-pointer.
                p.context_created(unsafe { *ctx } as usize, id, n);
            } else {
                p.not_created(id, n);
            }
            rc
        },
        || unsafe { real(ctx, device) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyContext(ctx: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtDestroyContext: PtrFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's handle.
    hook(
        |p| {
            let rc = unsafe { real(ctx) };
            if rc == 0 {
                p.context_destroyed(ctx as usize);
            }
            rc
        },
        || unsafe { real(ctx) },
    )
}

/// aclrtCreateStream makes a stream of priority 0, the most urgent; for a tenant that may
/// not ask for that, the same stream is made with aclrtCreateStreamWithConfig at the
/// tenant's limit (flags 0 make the stream aclrtCreateStream makes: its page).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateStream(stream: *mut Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtCreateStream: OutFn) else { return INTERNAL };
    let with_config = real!(&ACL, aclrtCreateStreamWithConfig: ConfigFn);
    // SAFETY (all three calls): the vendor functions with the caller's out-pointer.
    hook(
        |p| {
            create_one(p, stream, || match (p.priority(0), with_config) {
                (cap, Some(config)) if cap > 0 => unsafe { config(stream, cap as u32, 0) },
                _ => unsafe { real(stream) },
            })
        },
        || unsafe { real(stream) },
    )
}

/// aclrtCreateStreamWithConfig, at a priority no more urgent than the tenant's limit. The
/// priority reaches the runtime as an `int32_t` and is clamped into the device's range
/// there, so it is compared as one here.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateStreamWithConfig(stream: *mut Handle, priority: u32, flag: u32) -> i32 {
    let Some(real) = real!(&ACL, aclrtCreateStreamWithConfig: ConfigFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| create_one(p, stream, || unsafe { real(stream, p.priority(priority as i32) as u32, flag) }),
        || unsafe { real(stream, priority, flag) },
    )
}

/// ACL_STREAM_ATTR_PRIORITY of aclrtStreamAttr.
const STREAM_ATTR_PRIORITY: u32 = 5;

/// aclrtSetStreamAttribute: a stream's priority can be raised after it was made
/// (ACL_STREAM_ATTR_PRIORITY), so that one is held to the tenant's limit as at creation;
/// every other attribute goes through as it is.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetStreamAttribute(stream: Handle, attribute: u32, value: *mut [u32; 4]) -> i32 {
    let Some(real) = real!(&ACL, aclrtSetStreamAttribute: AttrFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments, or with a
    // copy of the caller's aclrtStreamAttrValue (16 bytes, read only when non-null).
    hook(
        |p| {
            if attribute != STREAM_ATTR_PRIORITY || value.is_null() {
                return unsafe { real(stream, attribute, value) };
            }
            let mut copy = unsafe { value.read_unaligned() };
            copy[0] = p.priority(copy[0] as i32) as u32;
            unsafe { real(stream, attribute, &mut copy) }
        },
        || unsafe { real(stream, attribute, value) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(stream: Handle) -> i32 {
    // SAFETY: the vendor function with the caller's handle.
    real!(&ACL, aclrtDestroyStream: PtrFn).map_or(INTERNAL, |real| destroy(stream, || unsafe { real(stream) }))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStreamForce(stream: Handle) -> i32 {
    // SAFETY: the vendor function with the caller's handle.
    real!(&ACL, aclrtDestroyStreamForce: PtrFn).map_or(INTERNAL, |real| destroy(stream, || unsafe { real(stream) }))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetStreamAvailableNum(count: *mut u32) -> i32 {
    let Some(real) = real!(&ACL, aclrtGetStreamAvailableNum: CountFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's out-pointer.
    share(count, || unsafe { real(count) })
}

/// Admits one event on the current device, runs `create`, and books the outcome.
fn create_event(p: &'static Process, out: *mut Handle, create: impl FnOnce() -> i32) -> i32 {
    if out.is_null() {
        return create(); // the vendor's own INVALID_PARAM
    }
    let device = current_device(p);
    if let Err(r) = p.admit_event(device) {
        return refused(NO_EVENT_RESOURCE, r);
    }
    let rc = create();
    if rc == 0 {
        // SAFETY: the vendor filled the caller's non-null out-pointer.
        p.event_created(unsafe { *out } as usize, device);
    } else {
        p.event_not_created(device);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateEvent(event: *mut Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtCreateEvent: OutFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's out-pointer.
    hook(|p| create_event(p, event, || unsafe { real(event) }), || unsafe { real(event) })
}

fn create_event_with_flag(event: *mut Handle, flag: u32, real: OutFlagFn) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(|p| create_event(p, event, || unsafe { real(event, flag) }), || unsafe { real(event, flag) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateEventWithFlag(event: *mut Handle, flag: u32) -> i32 {
    real!(&ACL, aclrtCreateEventWithFlag: OutFlagFn).map_or(INTERNAL, |real| create_event_with_flag(event, flag, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateEventExWithFlag(event: *mut Handle, flag: u32) -> i32 {
    real!(&ACL, aclrtCreateEventExWithFlag: OutFlagFn)
        .map_or(INTERNAL, |real| create_event_with_flag(event, flag, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyEvent(event: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtDestroyEvent: PtrFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's handle.
    hook(
        |p| {
            let rc = unsafe { real(event) };
            if rc == 0 {
                p.event_destroyed(event as usize);
            }
            rc
        },
        || unsafe { real(event) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetEventAvailNum(count: *mut u32) -> i32 {
    let Some(real) = real!(&ACL, aclrtGetEventAvailNum: CountFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's out-pointer, which it
    // filled when it returned 0.
    hook(
        |p| {
            let rc = unsafe { real(count) };
            if rc == 0 && !count.is_null() {
                let device = current_device(p);
                unsafe { *count = p.available_events(device, *count) };
            }
            rc
        },
        || unsafe { real(count) },
    )
}

/// Our hook for an exact AscendCL name, if we interpose it.
pub(crate) fn ours(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"aclInit" => aclInit as *mut c_void,
        b"aclrtSetDevice" => aclrtSetDevice as *mut c_void,
        b"aclrtSetDeviceWithoutTsdVXX" => aclrtSetDeviceWithoutTsdVXX as *mut c_void,
        b"aclrtResetDeviceWithoutTsdVXX" => aclrtResetDeviceWithoutTsdVXX as *mut c_void,
        b"aclrtResetDevice" => aclrtResetDevice as *mut c_void,
        b"aclrtResetDeviceForce" => aclrtResetDeviceForce as *mut c_void,
        b"aclrtCreateContext" => aclrtCreateContext as *mut c_void,
        b"aclrtDestroyContext" => aclrtDestroyContext as *mut c_void,
        b"aclrtCreateStream" => aclrtCreateStream as *mut c_void,
        b"aclrtCreateStreamWithConfig" => aclrtCreateStreamWithConfig as *mut c_void,
        b"aclrtSetStreamAttribute" => aclrtSetStreamAttribute as *mut c_void,
        b"aclrtDestroyStream" => aclrtDestroyStream as *mut c_void,
        b"aclrtDestroyStreamForce" => aclrtDestroyStreamForce as *mut c_void,
        b"aclrtGetStreamAvailableNum" => aclrtGetStreamAvailableNum as *mut c_void,
        b"aclrtCreateEvent" => aclrtCreateEvent as *mut c_void,
        b"aclrtCreateEventWithFlag" => aclrtCreateEventWithFlag as *mut c_void,
        b"aclrtCreateEventExWithFlag" => aclrtCreateEventExWithFlag as *mut c_void,
        b"aclrtDestroyEvent" => aclrtDestroyEvent as *mut c_void,
        b"aclrtGetEventAvailNum" => aclrtGetEventAvailNum as *mut c_void,
        _ => return None,
    })
}

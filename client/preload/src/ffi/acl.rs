//! The AscendCL hooks: streams, contexts (each holds a default stream), devices (the
//! default context aclrtSetDevice makes), and the caller's share of the device.

use super::errors::refused;
use super::{Handle, INTERNAL, Vendor, hook, real};
use crate::process::Process;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;

/// What a refused or expired admission returns: no stream (or event) resource, as the
/// runtime answers when the device has none left.
use npud_proto::codes::acl::{RT_NO_EVENT_RESOURCE as NO_EVENT_RESOURCE, RT_NO_STREAM_RESOURCE as NO_STREAM_RESOURCE};

pub(crate) static LIBRARY: Vendor = Vendor::new(&[c"libascendcl.so", c"libacl_rt.so"]);

pub(super) type IntFn = unsafe extern "C" fn(i32) -> i32;
type SocFn = unsafe extern "C" fn() -> *const c_char;
type InitFn = unsafe extern "C" fn(*const c_char) -> i32;
pub(super) type PtrFn = unsafe extern "C" fn(Handle) -> i32;
type OutFn = unsafe extern "C" fn(*mut Handle) -> i32;
type OutIntFn = unsafe extern "C" fn(*mut Handle, i32) -> i32;
type OutFlagFn = unsafe extern "C" fn(*mut Handle, u32) -> i32;
type ConfigFn = unsafe extern "C" fn(*mut Handle, u32, u32) -> i32;
pub(super) type CountFn = unsafe extern "C" fn(*mut u32) -> i32;
type DeviceFn = unsafe extern "C" fn(*mut i32) -> i32;
type MapFn = unsafe extern "C" fn(i32, *mut i32) -> i32;
type AttrFn = unsafe extern "C" fn(Handle, u32, *mut [u32; 4]) -> i32;

/// The physical device the process calls `user`, by the vendor's own call:
/// aclrtGetPhyDevIdByUserDevId where the library has it, else aclrtGetPhyDevIdByLogicDevId,
/// whose argument the vendor notes is in fact the user id. Never from the environment.
fn physical_of(user: u32) -> Option<npud_proto::v1::DeviceIdentity> {
    let id = i32::try_from(user).ok()?;
    let map = real!(&LIBRARY, aclrtGetPhyDevIdByUserDevId: MapFn, null_mut())
        .or_else(|| real!(&LIBRARY, aclrtGetPhyDevIdByLogicDevId: MapFn, null_mut()))?;
    let mut phy = -1;
    // SAFETY: the vendor function with an out-pointer to a local.
    let rc = unsafe { map(id, &mut phy) };
    let phy = u32::try_from(phy).ok().filter(|_| rc == 0)?;
    Some(crate::devices::physical(phy))
}

/// `device` (the process's own number), its physical identity looked up once; and, once
/// per process, how many streams a context holds on this SoC.
fn known(p: &Process, device: u32) -> u32 {
    p.devices.learn(device, || physical_of(device));
    p.learn_context_sync(context_sync);
    device
}

/// Internal-sync streams per context on this machine's SoC, by aclrtGetSocName (0 where
/// the library has no such call or names no SoC).
fn context_sync() -> u32 {
    let Some(name) = real!(&LIBRARY, aclrtGetSocName: SocFn, null_mut()) else { return 0 };
    // SAFETY: the vendor function takes nothing and returns a NUL-terminated string that
    // lives as long as the process, or null.
    let soc = unsafe { name() };
    if soc.is_null() {
        return 0;
    }
    // SAFETY: checked non-null above; the vendor's string is NUL-terminated.
    npud_proto::soc::context_sync_streams(&unsafe { CStr::from_ptr(soc) }.to_string_lossy())
}

/// The device of the calling thread's current context.
pub(super) fn current_device(p: &Process) -> u32 {
    known(p, context_device(p))
}

fn context_device(p: &Process) -> u32 {
    if let Some(get) = real!(&LIBRARY, aclrtGetDevice: DeviceFn, null_mut()) {
        let mut d = -1;
        // SAFETY: the vendor function with an out-pointer to a local.
        if unsafe { get(&mut d) } == 0
            && let Ok(d) = u32::try_from(d)
        {
            return d;
        }
    }
    if let Some(d) = super::rt::current_device() {
        return d;
    }
    p.context_device(current_context()).unwrap_or(0)
}

pub(super) fn current_context() -> usize {
    let mut ctx: Handle = null_mut();
    match real!(&LIBRARY, aclrtGetCurrentContext: OutFn, null_mut()) {
        // SAFETY: the vendor function with an out-pointer to a local.
        Some(get) if unsafe { get(&mut ctx) } == 0 => ctx as usize,
        _ => 0,
    }
}

/// Admits one stream on the current device, runs `create`, and books the outcome.
pub(super) fn create_one(p: &'static Process, out: *mut Handle, create: impl FnOnce() -> i32) -> i32 {
    if out.is_null() {
        return create(); // the vendor's own INVALID_PARAM
    }
    let device = current_device(p);
    if let Err(r) = p.admit(device, 1) {
        return refused(NO_STREAM_RESOURCE, r);
    }
    let rc = create();
    if rc == 0 {
        // SAFETY: the vendor filled the caller's non-null out-pointer.
        p.stream_created(unsafe { *out } as usize, device, current_context());
    } else {
        p.not_created(device, 1);
    }
    rc
}

/// aclInit: a process that initialises AscendCL is about to use a device, so the
/// connection to npud opens now, off the path of its first ask (see `Process::prepare`).
#[unsafe(no_mangle)]
pub extern "C" fn aclInit(config: *const c_char) -> i32 {
    let Some(real) = real!(&LIBRARY, aclInit: InitFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's argument.
    super::init(|| unsafe { real(config) }, INTERNAL)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device: i32) -> i32 {
    real!(&LIBRARY, aclrtSetDevice: IntFn).map_or(INTERNAL, |real| set_device(device, real))
}

/// The open runtime's aclrtSetDeviceWithoutTsdVXX (Ascend 910 parts) is its SetDevice
/// without the TSD daemon: the same default context and default stream.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDeviceWithoutTsdVXX(device: i32) -> i32 {
    real!(&LIBRARY, aclrtSetDeviceWithoutTsdVXX: IntFn).map_or(INTERNAL, |real| set_device(device, real))
}

/// A device set (the default context, with its default stream, on the first set): the
/// process's start-up need admitted first.
pub(super) fn set_device(device: i32, real: IntFn) -> i32 {
    // SAFETY (both closures): the vendor function, called as the program called it.
    hook(
        |p| {
            let Ok(id) = u32::try_from(device) else { return unsafe { real(device) } };
            let id = known(p, id);
            let first = p.first_set(id);
            let n = first.unwrap_or(0);
            if n > 0
                && let Err(r) = p.admit(id, n)
            {
                return refused(NO_STREAM_RESOURCE, r);
            }
            let rc = unsafe { real(device) };
            if rc != 0 {
                p.not_created(id, n);
                return rc;
            }
            p.device_set(id, n, first.is_some().then(current_context));
            0
        },
        || unsafe { real(device) },
    )
}

pub(super) fn reset(device: i32, force: bool, real: IntFn) -> i32 {
    // SAFETY (both closures): the vendor function, called as the program called it.
    hook(
        |p| {
            let rc = unsafe { real(device) };
            if rc == 0
                && let Ok(id) = u32::try_from(device)
            {
                p.device_reset(id, force);
            }
            rc
        },
        || unsafe { real(device) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDevice(device: i32) -> i32 {
    real!(&LIBRARY, aclrtResetDevice: IntFn).map_or(INTERNAL, |real| reset(device, false, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceForce(device: i32) -> i32 {
    real!(&LIBRARY, aclrtResetDeviceForce: IntFn).map_or(INTERNAL, |real| reset(device, true, real))
}

/// The reset that pairs with aclrtSetDeviceWithoutTsdVXX: the runtime's DeviceReset.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceWithoutTsdVXX(device: i32) -> i32 {
    real!(&LIBRARY, aclrtResetDeviceWithoutTsdVXX: IntFn).map_or(INTERNAL, |real| reset(device, false, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateContext(ctx: *mut Handle, device: i32) -> i32 {
    let Some(real) = real!(&LIBRARY, aclrtCreateContext: OutIntFn) else { return INTERNAL };
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
    let Some(real) = real!(&LIBRARY, aclrtDestroyContext: PtrFn) else { return INTERNAL };
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
    let Some(real) = real!(&LIBRARY, aclrtCreateStream: OutFn) else { return INTERNAL };
    let with_config = real!(&LIBRARY, aclrtCreateStreamWithConfig: ConfigFn);
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
    let Some(real) = real!(&LIBRARY, aclrtCreateStreamWithConfig: ConfigFn) else { return INTERNAL };
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
    let Some(real) = real!(&LIBRARY, aclrtSetStreamAttribute: AttrFn) else { return INTERNAL };
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

/// `stream` destroyed by `call` (the vendor's destroy, of either layer): booked when it
/// succeeded.
pub(super) fn destroy(stream: Handle, call: impl Fn() -> i32) -> i32 {
    hook(
        |p| {
            let rc = call();
            if rc == 0 {
                p.stream_destroyed(stream as usize);
            }
            rc
        },
        &call,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(stream: Handle) -> i32 {
    // SAFETY: the vendor function with the caller's handle.
    real!(&LIBRARY, aclrtDestroyStream: PtrFn).map_or(INTERNAL, |real| destroy(stream, || unsafe { real(stream) }))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStreamForce(stream: Handle) -> i32 {
    // SAFETY: the vendor function with the caller's handle.
    real!(&LIBRARY, aclrtDestroyStreamForce: PtrFn).map_or(INTERNAL, |real| destroy(stream, || unsafe { real(stream) }))
}

/// A count of available streams written to `count` by `call` (the vendor's, of either
/// layer), lowered to the caller's share of the current device when it succeeded.
pub(super) fn share(count: *mut u32, call: impl Fn() -> i32) -> i32 {
    hook(
        |p| {
            let rc = call();
            if rc == 0 && !count.is_null() {
                let device = current_device(p);
                // SAFETY: the vendor filled the caller's non-null out-pointer.
                unsafe { *count = p.available(device, *count) };
            }
            rc
        },
        &call,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetStreamAvailableNum(count: *mut u32) -> i32 {
    let Some(real) = real!(&LIBRARY, aclrtGetStreamAvailableNum: CountFn) else { return INTERNAL };
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
    let Some(real) = real!(&LIBRARY, aclrtCreateEvent: OutFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's out-pointer.
    hook(|p| create_event(p, event, || unsafe { real(event) }), || unsafe { real(event) })
}

fn create_event_with_flag(event: *mut Handle, flag: u32, real: OutFlagFn) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(|p| create_event(p, event, || unsafe { real(event, flag) }), || unsafe { real(event, flag) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateEventWithFlag(event: *mut Handle, flag: u32) -> i32 {
    real!(&LIBRARY, aclrtCreateEventWithFlag: OutFlagFn)
        .map_or(INTERNAL, |real| create_event_with_flag(event, flag, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtCreateEventExWithFlag(event: *mut Handle, flag: u32) -> i32 {
    real!(&LIBRARY, aclrtCreateEventExWithFlag: OutFlagFn)
        .map_or(INTERNAL, |real| create_event_with_flag(event, flag, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyEvent(event: Handle) -> i32 {
    let Some(real) = real!(&LIBRARY, aclrtDestroyEvent: PtrFn) else { return INTERNAL };
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
    let Some(real) = real!(&LIBRARY, aclrtGetEventAvailNum: CountFn) else { return INTERNAL };
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
        b"aclmdlRICaptureBegin" => super::capture::aclmdlRICaptureBegin as *mut c_void,
        b"aclmdlRICaptureEnd" => super::capture::aclmdlRICaptureEnd as *mut c_void,
        b"aclmdlRIDestroy" => super::capture::aclmdlRIDestroy as *mut c_void,
        b"aclmdlRICaptureGetInfo" => super::capture::aclmdlRICaptureGetInfo as *mut c_void,
        b"aclrtRecordEvent" => super::capture::aclrtRecordEvent as *mut c_void,
        b"aclrtStreamWaitEvent" => super::capture::aclrtStreamWaitEvent as *mut c_void,
        b"aclrtStreamWaitEventWithTimeout" => super::capture::aclrtStreamWaitEventWithTimeout as *mut c_void,
        b"aclrtMemcpyAsync" => super::capture::aclrtMemcpyAsync as *mut c_void,
        b"aclrtRecordEventWithFlag" => super::capture::aclrtRecordEventWithFlag as *mut c_void,
        b"aclrtStreamWaitEventWithFlag" => super::capture::aclrtStreamWaitEventWithFlag as *mut c_void,
        b"aclrtMemsetAsync" => super::capture::aclrtMemsetAsync as *mut c_void,
        _ => return None,
    })
}

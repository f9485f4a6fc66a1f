//! AscendCL as both of its layers are asked (AscendCL and the runtime layer below it):
//! the calling thread's device and context, a device's physical identity and the SoC's
//! streams per context, and the hook bodies both layers' entry points share (a device
//! set and reset, a stream made and destroyed, the caller's share of the device). The
//! entry points themselves are in `acl.rs` and `rt.rs`.

use super::errors::refused;
use super::vendor::{ACL, RUNTIME, real};
use super::{Handle, hook};
use crate::process::Process;
use npud_proto::codes::acl::RT_NO_STREAM_RESOURCE as NO_STREAM_RESOURCE;
use std::ffi::{CStr, c_char};
use std::ptr::null_mut;

pub(super) type IntFn = unsafe extern "C" fn(i32) -> i32;
pub(super) type PtrFn = unsafe extern "C" fn(Handle) -> i32;
pub(super) type OutFn = unsafe extern "C" fn(*mut Handle) -> i32;
pub(super) type CountFn = unsafe extern "C" fn(*mut u32) -> i32;
type SocFn = unsafe extern "C" fn() -> *const c_char;
type DeviceFn = unsafe extern "C" fn(*mut i32) -> i32;
type MapFn = unsafe extern "C" fn(i32, *mut i32) -> i32;

/// The physical device the process calls `user`, by the vendor's own call:
/// aclrtGetPhyDevIdByUserDevId where the library has it, else aclrtGetPhyDevIdByLogicDevId,
/// whose argument the vendor notes is in fact the user id. Never from the environment.
fn physical_of(user: u32) -> Option<npud_proto::v1::DeviceIdentity> {
    let id = i32::try_from(user).ok()?;
    let map = real!(&ACL, aclrtGetPhyDevIdByUserDevId: MapFn, null_mut())
        .or_else(|| real!(&ACL, aclrtGetPhyDevIdByLogicDevId: MapFn, null_mut()))?;
    let mut phy = -1;
    // SAFETY: the vendor function with an out-pointer to a local.
    let rc = unsafe { map(id, &mut phy) };
    let phy = u32::try_from(phy).ok().filter(|_| rc == 0)?;
    Some(crate::devices::physical(phy))
}

/// How many devices AscendCL shows the process (aclrtGetDeviceCount: the container's,
/// within ASCEND_RT_VISIBLE_DEVICES).
fn device_count() -> Option<u32> {
    let count = real!(&ACL, aclrtGetDeviceCount: CountFn, null_mut())?;
    let mut n = 0u32;
    // SAFETY: the vendor function with an out-pointer to a local.
    (unsafe { count(&mut n) } == 0 && n > 0).then_some(n)
}

/// `device` (the process's own number), its physical identity looked up once; and, once
/// per process, how many streams a context holds on this SoC and how many devices it sees.
pub(super) fn known(p: &Process, device: u32) -> u32 {
    p.devices.learn(device, || physical_of(device));
    p.devices.learn_visible(device_count);
    p.learn_context_sync(context_sync);
    device
}

/// Internal-sync streams per context on this machine's SoC, by aclrtGetSocName (0 where
/// the library has no such call or names no SoC).
fn context_sync() -> u32 {
    let Some(name) = real!(&ACL, aclrtGetSocName: SocFn, null_mut()) else { return 0 };
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
    if let Some(get) = real!(&ACL, aclrtGetDevice: DeviceFn, null_mut()) {
        let mut d = -1;
        // SAFETY: the vendor function with an out-pointer to a local.
        if unsafe { get(&mut d) } == 0
            && let Ok(d) = u32::try_from(d)
        {
            return d;
        }
    }
    if let Some(d) = runtime_device() {
        return d;
    }
    p.context_device(current_context()).unwrap_or(0)
}

pub(super) fn current_context() -> usize {
    let mut ctx: Handle = null_mut();
    match real!(&ACL, aclrtGetCurrentContext: OutFn, null_mut()) {
        // SAFETY: the vendor function with an out-pointer to a local.
        Some(get) if unsafe { get(&mut ctx) } == 0 => ctx as usize,
        _ => 0,
    }
}

/// The device of the calling thread's context, by `rtGetDevice`, for a process that
/// has no AscendCL library to ask.
fn runtime_device() -> Option<u32> {
    let get = real!(&RUNTIME, rtGetDevice: DeviceFn, null_mut())?;
    let mut d = -1;
    // SAFETY: the vendor function with an out-pointer to a local.
    (unsafe { get(&mut d) } == 0).then(|| u32::try_from(d).ok()).flatten()
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

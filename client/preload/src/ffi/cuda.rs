//! The CUDA driver hooks: `cuInit` (the hello to npud goes out there), stream creation
//! and destruction (green contexts' streams included), context destruction (which
//! destroys the context's streams), and
//! `cuGetProcAddress(_v2)`, through which the CUDA runtime (since 11.3) fetches every
//! driver entry point, so symbol interposition alone would catch nothing a cudart
//! program does. A CUDA context's NULL stream is not a created stream and costs no
//! budget.

use super::vendor::{CUDA, real};
use super::{Handle, hook_or};
use crate::process::Process;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::null_mut;

/// OUT_OF_MEMORY: what the driver answers when it cannot make a stream, and what a
/// refused or expired admission returns. UNKNOWN: the real function could not be found,
/// or a hook failed.
use npud_proto::codes::cuda::{CuResult, DEVICE_UNAVAILABLE, OUT_OF_MEMORY, UNKNOWN};
/// The CUDA version from which a base name means its `_v2` entry point (cudaTypedefs.h).
const V2_FROM: i32 = 4000;
const PROC_ADDRESS_V2_FROM: i32 = 12000;
/// From CUDA 11.0, cuDevicePrimaryCtxRelease and ...Reset mean their `_v2` entry points.
const PRIMARY_V2_FROM: i32 = 11000;

type CreateFn = unsafe extern "C" fn(*mut Handle, u32) -> CuResult;
type CreatePriorityFn = unsafe extern "C" fn(*mut Handle, u32, i32) -> CuResult;
type HandleFn = unsafe extern "C" fn(Handle) -> CuResult;
type OutHandleFn = unsafe extern "C" fn(*mut Handle) -> CuResult;
type OutIntFn = unsafe extern "C" fn(*mut i32) -> CuResult;
type RetainFn = unsafe extern "C" fn(*mut Handle, i32) -> CuResult;
type DeviceFn = unsafe extern "C" fn(i32) -> CuResult;
type InitFn = unsafe extern "C" fn(u32) -> CuResult;
type UuidFn = unsafe extern "C" fn(*mut u8, i32) -> CuResult;
type ProcFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64) -> CuResult;
type ProcV2Fn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64, *mut i32) -> CuResult;

/// The calling thread's current context and its device; None without a context.
fn current() -> Option<(usize, u32)> {
    let (get_ctx, get_dev) =
        (real!(&CUDA, cuCtxGetCurrent: OutHandleFn, null_mut())?, real!(&CUDA, cuCtxGetDevice: OutIntFn, null_mut())?);
    let (mut ctx, mut dev): (Handle, i32) = (null_mut(), -1);
    // SAFETY: the vendor functions with out-pointers to locals.
    let ok = unsafe { get_ctx(&mut ctx) == 0 && !ctx.is_null() && get_dev(&mut dev) == 0 };
    ok.then_some((ctx as usize, u32::try_from(dev).ok()?))
}

/// The UUID of the device the process calls `ordinal`, by the driver's own call:
/// cuDeviceGetUuid_v2 (which names a MIG instance too) where the driver has it, else
/// cuDeviceGetUuid. Never from CUDA_VISIBLE_DEVICES.
fn uuid_of(ordinal: u32) -> Option<npud_proto::v1::DeviceIdentity> {
    let dev = i32::try_from(ordinal).ok()?;
    let get = real!(&CUDA, cuDeviceGetUuid_v2: UuidFn, null_mut())
        .or_else(|| real!(&CUDA, cuDeviceGetUuid: UuidFn, null_mut()))?;
    let mut raw = [0u8; 16];
    // SAFETY: the driver function with a 16-byte out-buffer (CUuuid) on our stack.
    let rc = unsafe { get(raw.as_mut_ptr(), dev) };
    (rc == 0).then(|| crate::devices::uuid(npud_proto::identity::gpu_uuid(&raw)))
}

/// How many devices the driver shows the process (cuDeviceGetCount: within
/// CUDA_VISIBLE_DEVICES).
fn device_count() -> Option<u32> {
    let count = real!(&CUDA, cuDeviceGetCount: OutIntFn, null_mut())?;
    let mut n = 0i32;
    // SAFETY: the driver function with an out-pointer to a local.
    (unsafe { count(&mut n) } == 0).then(|| u32::try_from(n).ok()).flatten().filter(|n| *n > 0)
}

/// cuInit: a process that initialises the driver is about to use a device, so the
/// connection to npud opens now, off the path of its first ask (see `Process::prepare`),
/// as at AscendCL's aclInit.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: u32) -> CuResult {
    let Some(real) = real!(&CUDA, cuInit: InitFn) else { return UNKNOWN };
    // SAFETY: the driver function with the caller's argument.
    super::init(|| unsafe { real(flags) }, UNKNOWN)
}

/// Admits one stream on the current context's device, runs `create`, books the outcome.
fn create(out: *mut Handle, create: impl Fn() -> CuResult) -> CuResult {
    create_in(out, |_| current(), create)
}

/// Admits one stream in the context `place` names (its handle and device; None: one this
/// process cannot place, created unadmitted as the driver decides), runs `create`, books
/// the outcome.
fn create_in(
    out: *mut Handle,
    place: impl FnOnce(&'static Process) -> Option<(usize, u32)>,
    create: impl Fn() -> CuResult,
) -> CuResult {
    hook_or(
        |p: &'static Process| {
            let Some((ctx, device)) = place(p).filter(|_| !out.is_null()) else { return create() };
            p.devices.learn(device, || uuid_of(device));
            p.devices.learn_visible(device_count);
            if p.admit(device, 1).is_err() {
                return OUT_OF_MEMORY;
            }
            let rc = create();
            if rc == 0 {
                // SAFETY: the driver filled the caller's non-null out-pointer.
                p.stream_created(unsafe { *out } as usize, device, ctx);
            } else {
                p.not_created(device, 1);
            }
            rc
        },
        &create,
        UNKNOWN,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreate(stream: *mut Handle, flags: u32) -> CuResult {
    let Some(real) = real!(&CUDA, cuStreamCreate: CreateFn) else { return UNKNOWN };
    // SAFETY: the driver function with the caller's arguments.
    create(stream, || unsafe { real(stream, flags) })
}

/// cuStreamCreateWithPriority, at a priority no more urgent than the tenant's limit (the
/// driver clamps one out of its range the same way). cuStreamCreate makes the least
/// urgent, which no limit touches.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamCreateWithPriority(stream: *mut Handle, flags: u32, priority: i32) -> CuResult {
    let Some(real) = real!(&CUDA, cuStreamCreateWithPriority: CreatePriorityFn) else { return UNKNOWN };
    // SAFETY: the driver function with the caller's arguments.
    create(stream, || unsafe { real(stream, flags, super::capped_priority(priority)) })
}

fn destroy(stream: Handle, real: HandleFn) -> CuResult {
    // SAFETY (both closures): the driver function with the caller's handle.
    hook_or(
        |p: &'static Process| {
            let rc = unsafe { real(stream) };
            if rc == 0 {
                p.stream_destroyed(stream as usize);
            }
            rc
        },
        || unsafe { real(stream) },
        UNKNOWN,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(stream: Handle) -> CuResult {
    real!(&CUDA, cuStreamDestroy: HandleFn).map_or(UNKNOWN, |real| destroy(stream, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(stream: Handle) -> CuResult {
    real!(&CUDA, cuStreamDestroy_v2: HandleFn).map_or(UNKNOWN, |real| destroy(stream, real))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(ctx: Handle) -> CuResult {
    let Some(real) = real!(&CUDA, cuCtxDestroy_v2: HandleFn) else { return UNKNOWN };
    // SAFETY (both closures): the driver function with the caller's handle.
    hook_or(
        |p: &'static Process| {
            let rc = unsafe { real(ctx) };
            if rc == 0 {
                p.context_streams_gone(ctx as usize);
            }
            rc
        },
        || unsafe { real(ctx) },
        UNKNOWN,
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: i32) -> CuResult {
    let Some(real) = real!(&CUDA, cuDevicePrimaryCtxRetain: RetainFn) else { return UNKNOWN };
    // SAFETY (both closures): the driver function with the caller's arguments.
    hook_or(
        |p: &'static Process| {
            // The process's first context on a device that limits them waits for a slot.
            let device = u32::try_from(dev).ok();
            if let Some(device) = device
                && p.client_slot(device).is_err()
            {
                // As the driver answers a context the device cannot take now (the refusal
                // was said on stderr).
                return DEVICE_UNAVAILABLE;
            }
            let rc = unsafe { real(ctx, dev) };
            match (rc, device) {
                (0, Some(device)) if !ctx.is_null() => {
                    // SAFETY: the driver filled the caller's non-null out-pointer.
                    p.primary_retained(device, unsafe { *ctx } as usize);
                }
                (0, _) => {}
                (_, Some(device)) => p.client_slot_done(device),
                (_, None) => {}
            }
            rc
        },
        || unsafe { real(ctx, dev) },
        UNKNOWN,
    )
}

/// Release or reset of a primary context: `after` books what went away once the driver
/// agreed.
fn primary(dev: i32, real: DeviceFn, after: fn(&'static Process, u32)) -> CuResult {
    // SAFETY (both closures): the driver function with the caller's device.
    hook_or(
        |p: &'static Process| {
            let rc = unsafe { real(dev) };
            if rc == 0
                && let Ok(device) = u32::try_from(dev)
            {
                after(p, device);
            }
            rc
        },
        || unsafe { real(dev) },
        UNKNOWN,
    )
}

/// The last release of a primary context destroys it and its streams.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: i32) -> CuResult {
    real!(&CUDA, cuDevicePrimaryCtxRelease: DeviceFn).map_or(UNKNOWN, |r| primary(dev, r, Process::primary_released))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: i32) -> CuResult {
    real!(&CUDA, cuDevicePrimaryCtxRelease_v2: DeviceFn).map_or(UNKNOWN, |r| primary(dev, r, Process::primary_released))
}

/// What cudaDeviceReset calls: the primary context's streams are gone.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset(dev: i32) -> CuResult {
    real!(&CUDA, cuDevicePrimaryCtxReset: DeviceFn).map_or(UNKNOWN, |r| primary(dev, r, Process::primary_reset))
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: i32) -> CuResult {
    real!(&CUDA, cuDevicePrimaryCtxReset_v2: DeviceFn).map_or(UNKNOWN, |r| primary(dev, r, Process::primary_reset))
}

type GreenCreateFn = unsafe extern "C" fn(*mut Handle, Handle, i32, u32) -> CuResult;
type GreenStreamFn = unsafe extern "C" fn(*mut Handle, Handle, u32, i32) -> CuResult;

/// cuGreenCtxCreate: remembers the green context's device, where its streams are booked.
#[unsafe(no_mangle)]
pub extern "C" fn cuGreenCtxCreate(ctx: *mut Handle, desc: Handle, dev: i32, flags: u32) -> CuResult {
    let Some(real) = real!(&CUDA, cuGreenCtxCreate: GreenCreateFn) else { return UNKNOWN };
    // SAFETY (both closures): the driver function with the caller's arguments.
    hook_or(
        |p: &'static Process| {
            let rc = unsafe { real(ctx, desc, dev, flags) };
            if rc == 0
                && !ctx.is_null()
                && let Ok(device) = u32::try_from(dev)
            {
                // SAFETY: the driver filled the caller's non-null out-pointer.
                p.set_green(unsafe { *ctx } as usize, Some(device));
            }
            rc
        },
        || unsafe { real(ctx, desc, dev, flags) },
        UNKNOWN,
    )
}

/// cuGreenCtxStreamCreate: a stream in a green context, admitted on its device like any
/// other (the context current to the thread plays no part, as in the driver).
#[unsafe(no_mangle)]
pub extern "C" fn cuGreenCtxStreamCreate(stream: *mut Handle, ctx: Handle, flags: u32, priority: i32) -> CuResult {
    let Some(real) = real!(&CUDA, cuGreenCtxStreamCreate: GreenStreamFn) else { return UNKNOWN };
    let place = |p: &'static Process| p.green_device(ctx as usize).map(|d| (ctx as usize, d));
    // SAFETY: the driver function with the caller's arguments.
    create_in(stream, place, || unsafe { real(stream, ctx, flags, super::capped_priority(priority)) })
}

/// cuGreenCtxDestroy: the context goes; the streams made in it stay booked ("The API does
/// not destroy streams created via cuGreenCtxStreamCreate"). After it, an H100 refuses
/// to destroy them (709) and holds them until the process exits: only a destroy that
/// succeeds gives one back (`destroy`), so the books follow the driver.
#[unsafe(no_mangle)]
pub extern "C" fn cuGreenCtxDestroy(ctx: Handle) -> CuResult {
    let Some(real) = real!(&CUDA, cuGreenCtxDestroy: HandleFn) else { return UNKNOWN };
    // SAFETY (both closures): the driver function with the caller's handle.
    hook_or(
        |p: &'static Process| {
            let rc = unsafe { real(ctx) };
            if rc == 0 {
                p.set_green(ctx as usize, None);
            }
            rc
        },
        || unsafe { real(ctx) },
        UNKNOWN,
    )
}

/// Replaces a driver entry point the program fetched with our hook for it.
///
/// # Safety
/// `symbol` is NUL-terminated and `pfn` valid, as the driver just accepted them.
unsafe fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: i32) {
    // SAFETY: per this function's contract.
    if symbol.is_null() || pfn.is_null() || unsafe { (*pfn).is_null() } {
        return;
    }
    // SAFETY: per this function's contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let hook = match name {
        b"cuInit" => cuInit as *mut c_void,
        b"cuStreamCreate" => cuStreamCreate as *mut c_void,
        b"cuStreamCreateWithPriority" => cuStreamCreateWithPriority as *mut c_void,
        b"cuStreamDestroy" if version >= V2_FROM => cuStreamDestroy_v2 as *mut c_void,
        b"cuStreamDestroy" => cuStreamDestroy as *mut c_void,
        b"cuCtxDestroy" if version >= V2_FROM => cuCtxDestroy_v2 as *mut c_void,
        b"cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain as *mut c_void,
        b"cuDevicePrimaryCtxRelease" if version >= PRIMARY_V2_FROM => cuDevicePrimaryCtxRelease_v2 as *mut c_void,
        b"cuDevicePrimaryCtxRelease" => cuDevicePrimaryCtxRelease as *mut c_void,
        b"cuDevicePrimaryCtxReset" if version >= PRIMARY_V2_FROM => cuDevicePrimaryCtxReset_v2 as *mut c_void,
        b"cuDevicePrimaryCtxReset" => cuDevicePrimaryCtxReset as *mut c_void,
        b"cuGreenCtxCreate" => cuGreenCtxCreate as *mut c_void,
        b"cuGreenCtxStreamCreate" => cuGreenCtxStreamCreate as *mut c_void,
        b"cuGreenCtxDestroy" => cuGreenCtxDestroy as *mut c_void,
        // Lookups through the returned pointer must stay hooked too.
        b"cuGetProcAddress" if version >= PROC_ADDRESS_V2_FROM => cuGetProcAddress_v2 as *mut c_void,
        b"cuGetProcAddress" => cuGetProcAddress as *mut c_void,
        _ => return,
    };
    // SAFETY: per this function's contract.
    unsafe { *pfn = hook };
}

/// # Safety
/// The same contract as the driver's cuGetProcAddress.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
) -> CuResult {
    let Some(real) = real!(&CUDA, cuGetProcAddress: ProcFn) else { return UNKNOWN };
    // SAFETY: forwarded exactly as called; substitute only on success.
    let rc = unsafe { real(symbol, pfn, version, flags) };
    if rc == 0 {
        // SAFETY: the driver accepted these arguments.
        unsafe { substitute(symbol, pfn, version) };
    }
    rc
}

/// # Safety
/// The same contract as the driver's cuGetProcAddress_v2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut i32,
) -> CuResult {
    let Some(real) = real!(&CUDA, cuGetProcAddress_v2: ProcV2Fn) else { return UNKNOWN };
    // SAFETY: forwarded exactly as called; substitute only on success.
    let rc = unsafe { real(symbol, pfn, version, flags, status) };
    if rc == 0 {
        // SAFETY: the driver accepted these arguments.
        unsafe { substitute(symbol, pfn, version) };
    }
    rc
}

/// Our hook for an exact CUDA driver name, if we interpose it.
pub(crate) fn ours(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"cuInit" => cuInit as *mut c_void,
        b"cuStreamCreate" => cuStreamCreate as *mut c_void,
        b"cuStreamCreateWithPriority" => cuStreamCreateWithPriority as *mut c_void,
        b"cuStreamDestroy" => cuStreamDestroy as *mut c_void,
        b"cuStreamDestroy_v2" => cuStreamDestroy_v2 as *mut c_void,
        b"cuCtxDestroy_v2" => cuCtxDestroy_v2 as *mut c_void,
        b"cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain as *mut c_void,
        b"cuDevicePrimaryCtxRelease" => cuDevicePrimaryCtxRelease as *mut c_void,
        b"cuDevicePrimaryCtxRelease_v2" => cuDevicePrimaryCtxRelease_v2 as *mut c_void,
        b"cuDevicePrimaryCtxReset" => cuDevicePrimaryCtxReset as *mut c_void,
        b"cuDevicePrimaryCtxReset_v2" => cuDevicePrimaryCtxReset_v2 as *mut c_void,
        b"cuGreenCtxCreate" => cuGreenCtxCreate as *mut c_void,
        b"cuGreenCtxStreamCreate" => cuGreenCtxStreamCreate as *mut c_void,
        b"cuGreenCtxDestroy" => cuGreenCtxDestroy as *mut c_void,
        b"cuGetProcAddress" => cuGetProcAddress as *mut c_void,
        b"cuGetProcAddress_v2" => cuGetProcAddress_v2 as *mut c_void,
        _ => return None,
    })
}

//! What a program reads and sets of its contexts besides making them current: the primary
//! context's state and flags (cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxSetFlags), the
//! current context's flags (cuCtxGetFlags) and API version (cuCtxGetApiVersion), and the
//! context a stream belongs to (cuStreamGetCtx).
//!
//! As an H100's driver answers (driver 580.159.04, `native/cuda_basics.c`): the primary
//! context's flags may be set whether it is active or not, and go back to 0 when its last
//! retain is released; cuCtxGetFlags of the primary context adds CU_CTX_MAP_HOST to them,
//! while a context made by cuCtxCreate reports the flags it was made with; every context's
//! API version is 3020; the NULL stream and CU_STREAM_LEGACY belong to the current context.

use crate::*;

/// CU_CTX_SCHED_MASK, and every flag a context may be given (up to CU_CTX_SYNC_MEMOPS).
const SCHED_MASK: u32 = 0x07;
const KNOWN_FLAGS: u32 = 0xff;
/// CU_CTX_MAP_HOST: always among a primary context's flags.
const MAP_HOST: u32 = 0x08;
/// What cuCtxGetApiVersion reports for every context.
const API_VERSION: u32 = 3020;

/// Flags a context may be made or set with: known bits, at most one scheduling policy.
pub(crate) fn valid_flags(flags: u32) -> bool {
    flags & !KNOWN_FLAGS == 0 && matches!(flags & SCHED_MASK, 0 | 1 | 2 | 4)
}

/// cuDevicePrimaryCtxGetState: the primary context's flags, and whether it is retained.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: i32, flags: *mut u32, active: *mut i32) -> CuResult {
    let r = runtime!();
    if let Err(e) = r.physical(dev) {
        return e;
    }
    if flags.is_null() || active.is_null() {
        return INVALID_VALUE;
    }
    let retained = r.retains()[dev as usize] > 0;
    let set = r.lock().primary_flags.get(&(dev as usize)).copied().unwrap_or(0);
    // SAFETY: out-pointers from the caller, checked non-null.
    unsafe {
        put(flags, set);
        put(active, i32::from(retained))
    }
}

/// cuDevicePrimaryCtxSetFlags_v2: the primary context's flags, active or not.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: i32, flags: u32) -> CuResult {
    with(|r| {
        r.physical(dev)?;
        if !valid_flags(flags) {
            return Err(INVALID_VALUE);
        }
        r.lock().primary_flags.insert(dev as usize, flags);
        Ok(())
    })
}

/// The name programs built before CUDA 11 link against; the same call here.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(dev: i32, flags: u32) -> CuResult {
    cuDevicePrimaryCtxSetFlags_v2(dev, flags)
}

/// cuCtxGetFlags: the current context's flags.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut u32) -> CuResult {
    let r = runtime!();
    let ctx = CURRENT.with(std::cell::Cell::get);
    if r.device_of_ctx(ctx).is_none() {
        return INVALID_CONTEXT;
    }
    let inner = r.lock();
    let value = match r.primary.iter().position(|c| *c == ctx) {
        Some(ordinal) => inner.primary_flags.get(&ordinal).copied().unwrap_or(0) | MAP_HOST,
        None => inner.ctx_flags.get(&ctx).copied().unwrap_or(0),
    };
    drop(inner);
    // SAFETY: out-pointer from the caller.
    unsafe { put(flags, value) }
}

/// cuCtxGetApiVersion: 3020 for every context there is (NULL: the current one).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: usize, version: *mut u32) -> CuResult {
    let r = runtime!();
    let ctx = if ctx == 0 { CURRENT.with(std::cell::Cell::get) } else { ctx };
    if r.device_of_ctx(ctx).is_none() {
        return INVALID_CONTEXT;
    }
    // SAFETY: out-pointer from the caller.
    unsafe { put(version, API_VERSION) }
}

/// cuStreamGetCtx: the context a stream was made in; the NULL stream, CU_STREAM_LEGACY and
/// CU_STREAM_PER_THREAD are the current context's. A green context's stream answers with
/// the green context's CUcontext (cuCtxFromGreenCtx).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCtx(s: usize, ctx: *mut usize) -> CuResult {
    let r = runtime!();
    if ctx.is_null() {
        return INVALID_VALUE;
    }
    let made_in = match s {
        0 | defaults::LEGACY | defaults::PER_THREAD => {
            let current = CURRENT.with(std::cell::Cell::get);
            if r.device_of_ctx(current).is_none() {
                return INVALID_CONTEXT;
            }
            current
        }
        _ => {
            let inner = r.lock();
            if let Err(e) = inner.stream(s) {
                return e;
            }
            inner.stream_ctx.get(&s).copied().unwrap_or(0)
        }
    };
    if r.device_of_ctx(made_in).is_some() {
        // SAFETY: checked non-null out-pointer.
        return unsafe { put(ctx, made_in) };
    }
    // SAFETY: forwarded out-pointer; a handle that is no green context is refused there.
    unsafe { green::cuCtxFromGreenCtx(ctx, made_in) }
}

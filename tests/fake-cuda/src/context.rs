//! Contexts: each device's primary context (retained, released, reset) and contexts made
//! with cuCtxCreate, the one current on each thread, and what their streams become when
//! they go.

use crate::*;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut usize, dev: i32) -> CuResult {
    let r = runtime!();
    match r.primary.get(dev as usize) {
        Some(c) => {
            if ctx.is_null() {
                return INVALID_VALUE;
            }
            let mut retains = r.retains();
            if retains[dev as usize] == 0 {
                let physical = r.physical(dev).unwrap_or(dev as u32);
                if let Err(rc) = clients::take(physical) {
                    return rc;
                }
                held::opened(dev);
            }
            retains[dev as usize] += 1;
            // SAFETY: the caller's non-null out-pointer.
            unsafe { put(ctx, *c) }
        }
        None => INVALID_DEVICE,
    }
}

/// Releasing the primary context: the last release destroys it, its streams and its flags
/// (the handle stays valid for a later retain, as the driver's does). A release with no
/// retain left does nothing and succeeds, as an H100's driver answers it.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: i32) -> CuResult {
    with(|r| {
        r.physical(dev)?;
        let last = {
            let mut retains = r.retains();
            let n = &mut retains[dev as usize];
            if *n == 0 {
                return Ok(());
            }
            *n -= 1;
            *n == 0
        };
        if !last {
            return Ok(());
        }
        // The context ends, and the flags set for it with it (`ctx_state`).
        held::closed(dev);
        clients::give(r.physical(dev).unwrap_or(dev as u32));
        r.lock().primary_flags.remove(&(dev as usize));
        r.destroy_primary_streams(dev as usize)
    })
}

/// The unversioned name older programs link against; the same call.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: i32) -> CuResult {
    cuDevicePrimaryCtxRelease_v2(dev)
}

/// cuDevicePrimaryCtxReset (what cudaDeviceReset calls): destroys every stream of the
/// device's primary context in this process; the context itself stays usable.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: i32) -> CuResult {
    with(|r| {
        r.physical(dev)?;
        r.destroy_primary_streams(dev as usize)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset(dev: i32) -> CuResult {
    cuDevicePrimaryCtxReset_v2(dev)
}

thread_local! {
    /// The thread's context stack below its current context (`CURRENT` is the top): what
    /// cuCtxPushCurrent and cuCtxCreate push down and cuCtxPopCurrent makes current again.
    static BELOW: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Makes `ctx` current, pushing the one current before (if any) down the stack.
fn push(ctx: usize) {
    let top = CURRENT.with(|c| c.replace(ctx));
    if top != 0 {
        BELOW.with(|b| b.borrow_mut().push(top));
    }
}

/// Takes the current context off the stack; the one below becomes current.
fn pop() -> usize {
    let below = BELOW.with(|b| b.borrow_mut().pop()).unwrap_or(0);
    CURRENT.with(|c| c.replace(below))
}

/// cuCtxSetCurrent: replaces the top of the thread's context stack with `ctx`; NULL pops
/// it ("a no-op if the calling CPU thread's CUDA context stack is empty").
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: usize) -> CuResult {
    with(|r| {
        if ctx == 0 {
            pop();
            return Ok(());
        }
        r.device_of_ctx(ctx).ok_or(INVALID_CONTEXT)?;
        CURRENT.with(|c| c.set(ctx));
        Ok(())
    })
}

/// cuCtxPushCurrent_v2: `ctx` becomes current; the one before comes back at the pop.
/// NULL is CUDA_ERROR_INVALID_VALUE (as an H100's driver answers it), a handle that names
/// no context CUDA_ERROR_INVALID_CONTEXT.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: usize) -> CuResult {
    if ctx == 0 {
        return rt().err().unwrap_or(INVALID_VALUE);
    }
    with(|r| {
        r.device_of_ctx(ctx).ok_or(INVALID_CONTEXT)?;
        push(ctx);
        Ok(())
    })
}

/// cuCtxPopCurrent_v2: takes the current context off the thread's stack and passes it
/// back in `*ctx` (when not NULL); the context below becomes current again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(ctx: *mut usize) -> CuResult {
    if let Err(e) = rt() {
        return e;
    }
    if CURRENT.with(std::cell::Cell::get) == 0 {
        return INVALID_CONTEXT;
    }
    let popped = pop();
    if ctx.is_null() {
        return SUCCESS;
    }
    // SAFETY: checked non-null out-pointer from the caller.
    unsafe { put(ctx, popped) }
}

/// The names older programs link against; the same calls.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent(ctx: usize) -> CuResult {
    cuCtxPushCurrent_v2(ctx)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent(ctx: *mut usize) -> CuResult {
    // SAFETY: forwarded out-pointer.
    unsafe { cuCtxPopCurrent_v2(ctx) }
}

/// cuCtxCreate_v2: a new context on `dev`, pushed on this thread's context stack.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(ctx: *mut usize, flags: u32, dev: i32) -> CuResult {
    let r = runtime!();
    if ctx.is_null() || !ctx_state::valid_flags(flags) {
        return INVALID_VALUE;
    }
    let device = match r.physical(dev) {
        Ok(p) => p as usize,
        Err(e) => return e,
    };
    let h = {
        let mut inner = r.lock();
        let h = Rt::mint(&mut inner);
        inner.contexts.insert(h, device as u32);
        inner.ctx_flags.insert(h, flags);
        h
    };
    push(h);
    // SAFETY: checked non-null out-pointer.
    unsafe { put(ctx, h) }
}

/// cuCtxDestroy_v2: the context and every stream made in it go away.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(ctx: usize) -> CuResult {
    with(|r| {
        r.lock().contexts.remove(&ctx).ok_or(INVALID_CONTEXT)?;
        r.lock().ctx_flags.remove(&ctx);
        let streams: Vec<usize> = r.lock().stream_ctx.iter().filter(|(_, c)| **c == ctx).map(|(s, _)| *s).collect();
        for s in streams {
            r.destroy_stream(s)?;
        }
        r.drop_defaults(ctx);
        // Current to this thread: popped, as though cuCtxPopCurrent were called.
        if CURRENT.with(std::cell::Cell::get) == ctx {
            pop();
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut usize) -> CuResult {
    // Before cuInit, in a forked child and in a host function, as every call.
    if let Err(e) = crate::rt() {
        return e;
    }
    // SAFETY: out-pointer from the caller.
    unsafe { put(ctx, CURRENT.with(std::cell::Cell::get)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut i32) -> CuResult {
    let r = runtime!();
    match r.device_of_ctx(CURRENT.with(std::cell::Cell::get)).and_then(|p| r.ordinal(p)) {
        // SAFETY: out-pointer from the caller.
        Some(d) => unsafe { put(dev, d as i32) },
        None => INVALID_CONTEXT,
    }
}

/// cuCtxSynchronize: waits for every stream of the current context's device made by this
/// process; a failed stream's error is returned.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    with(|r| {
        let dev = r.current()?;
        let streams: Vec<StreamId> =
            r.lock().streams.values().filter(|(d, ..)| *d == dev.id()).map(|(_, id, ..)| *id).collect();
        let mut first = None;
        for id in streams {
            match block_on(|w| dev.on_stream_drained(id, w)) {
                // Destroyed meanwhile: nothing left to wait for.
                Ok(()) | Err(INVALID_HANDLE) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    })
}

/// Which processes hold a primary context on which device, where other processes can see:
/// a file `<NPU_SIM_SHARED>.contexts/<pid>-<device>` while one is retained (a context
/// costs device memory on a real GPU, so a test can tell npud holds none). A killed
/// process's file stays; readers check the pid.
mod held {
    fn path(dev: i32) -> Option<std::path::PathBuf> {
        let mut dir = std::env::var_os("NPU_SIM_SHARED").filter(|p| !p.is_empty())?;
        dir.push(".contexts");
        Some(std::path::PathBuf::from(dir).join(format!("{}-{dev}", std::process::id())))
    }

    pub(super) fn opened(dev: i32) {
        if let Some(p) = path(dev) {
            let _ = p.parent().map(std::fs::create_dir_all);
            let _ = std::fs::write(p, b"");
        }
    }

    pub(super) fn closed(dev: i32) {
        if let Some(p) = path(dev) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Processes with a context on a GPU in EXCLUSIVE_PROCESS compute mode: one, as the
/// driver allows (a second is CUDA_ERROR_DEVICE_UNAVAILABLE), or under MPS
/// (`NPU_SIM_CUDA_MPS_CLIENTS`, the MPS server's client limit: NVIDIA's MPS documentation,
/// "Client-Server Connection Limits") that many, the next CUDA_ERROR_MPS_MAX_CLIENTS_REACHED.
/// Counted across processes in `<NPU_SIM_SHARED>.clients`, a dead process's freed.
mod clients {
    use npud_proto::codes::cuda::{CuResult, DEVICE_UNAVAILABLE, MPS_MAX_CLIENTS_REACHED};
    use std::sync::OnceLock;

    fn mps() -> Option<u32> {
        std::env::var("NPU_SIM_CUDA_MPS_CLIENTS").ok().and_then(|v| v.parse().ok())
    }

    fn table() -> Option<&'static npu_sim::shared::SharedBudget> {
        static TABLE: OnceLock<Option<npu_sim::shared::SharedBudget>> = OnceLock::new();
        TABLE
            .get_or_init(|| {
                if crate::attributes::compute_mode() != 3 {
                    return None;
                }
                let mut path = std::env::var_os("NPU_SIM_SHARED").filter(|p| !p.is_empty())?;
                path.push(".clients");
                npu_sim::shared::SharedBudget::open(std::path::Path::new(&path), mps().unwrap_or(1))
            })
            .as_ref()
    }

    pub(super) fn take(physical: u32) -> Result<(), CuResult> {
        let Some(t) = table() else { return Ok(()) };
        t.take(physical, 1).map_err(|_| if mps().is_some() { MPS_MAX_CLIENTS_REACHED } else { DEVICE_UNAVAILABLE })
    }

    pub(super) fn give(physical: u32) {
        if let Some(t) = table() {
            t.give(physical, 1);
        }
    }
}

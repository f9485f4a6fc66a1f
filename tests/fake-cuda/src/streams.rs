//! The stream entry points: streams made with a priority and flags, destroyed, queried,
//! synchronised, made to wait for events; host functions and callbacks on them, and the
//! one kernel this fake knows (npud's spin kernel, a sim delay).

use crate::*;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) -> CuResult {
    // SAFETY: out-pointers from the caller.
    unsafe {
        let a = put(least, LEAST_PRIORITY);
        if a != SUCCESS {
            return a;
        }
        put(greatest, GREATEST_PRIORITY)
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(s: *mut usize, flags: u32, priority: i32) -> CuResult {
    let r = runtime!();
    if s.is_null() || flags & !NON_BLOCKING != 0 {
        return INVALID_VALUE;
    }
    let dev = match r.current() {
        Ok(d) => d.id(),
        Err(e) => return e,
    };
    // SAFETY: checked non-null out-pointer.
    unsafe { r.create_stream(s, dev, flags, priority, CURRENT.with(std::cell::Cell::get)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(s: *mut usize, flags: u32) -> CuResult {
    // SAFETY: forwarded out-pointer.
    unsafe { cuStreamCreateWithPriority(s, flags, 0) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(s: usize) -> CuResult {
    with(|r| r.destroy_stream(s))
}

/// The pre-4.0 name; the same call.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(s: usize) -> CuResult {
    cuStreamDestroy_v2(s)
}

/// A stream with a failed task answers LAUNCH_FAILED from then on (a sticky error).
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery(s: usize) -> CuResult {
    with(|r| {
        let (dev, id) = r.settled(s)?;
        if dev.stream_status(id).map_err(sim)?.failed {
            return Err(LAUNCH_FAILED);
        }
        match dev.stream_query(id).map_err(sim)? {
            true => Ok(()),
            false => Err(NOT_READY),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(s: usize) -> CuResult {
    with(|r| {
        let (dev, id) = r.settled(s)?;
        block_on(|w| dev.on_stream_drained(id, w))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(s: usize, e: usize, flags: u32) -> CuResult {
    match flags {
        0 => {}
        WAIT_EXTERNAL => return rt().err().unwrap_or(ILLEGAL_STATE),
        _ => return INVALID_VALUE,
    }
    with(|r| {
        let (other, eid, _) = r.event(e)?;
        let (dev, sid) = r.issue_to(s)?;
        if other.id() != dev.id() {
            return gate::wait_across(r, dev, sid, other, eid);
        }
        dev.stream_wait_event(sid, eid).map_err(sim)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetPriority(s: usize, p: *mut i32) -> CuResult {
    let r = runtime!();
    let Ok(s) = r.resolve(s) else { return INVALID_CONTEXT };
    match r.lock().stream(s) {
        // SAFETY: out-pointer from the caller.
        Ok((_, _, _, prio)) => unsafe { put(p, prio) },
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuLaunchHostFunc(s: usize, func: Option<HostFn>, user_data: *mut c_void) -> CuResult {
    let Some(func) = func else { return INVALID_VALUE };
    with(|r| enqueue_host_call(r, s, HostCall::Func(func), user_data))
}

/// cuStreamAddCallback: `callback(stream, status, user_data)` runs once the stream's
/// earlier work is done, exactly once, and later work waits for it. `flags` must be 0.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamAddCallback(
    s: usize,
    callback: Option<StreamCallback>,
    user_data: *mut c_void,
    flags: u32,
) -> CuResult {
    let Some(callback) = callback else { return INVALID_VALUE };
    if flags != 0 {
        return INVALID_VALUE;
    }
    with(|r| enqueue_host_call(r, s, HostCall::Callback(callback, s), user_data))
}

fn enqueue_host_call(r: &Rt, s: usize, call: HostCall, user_data: *mut c_void) -> Result<(), CuResult> {
    let (dev, id) = r.issue_to(s)?;
    let cb = r.next_host_call();
    r.register_host_call(cb, call, user_data as usize);
    // Host functions block later work on the stream until they return.
    dev.launch_callback(id, cb, true).map(drop).map_err(sim)
}

/// cuStreamGetFlags: the flags the stream was created with.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetFlags(s: usize, flags: *mut u32) -> CuResult {
    let r = runtime!();
    let Ok(s) = r.resolve(s) else { return INVALID_CONTEXT };
    let found = r.lock().stream(s).map(|(_, _, f, _)| f);
    match found {
        // SAFETY: out-pointer from the caller.
        Ok(f) => unsafe { put(flags, f) },
        Err(e) => e,
    }
}

/// The spin kernel (`npud_spin(u64 ns)`) becomes a sim delay; other kernels are refused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: usize,
    _gx: u32,
    _gy: u32,
    _gz: u32,
    _bx: u32,
    _by: u32,
    _bz: u32,
    _shared: u32,
    s: usize,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CuResult {
    let r = runtime!();
    if r.lock().functions.get(&f).map(String::as_str) != Some("npud_spin") {
        return NOT_SUPPORTED;
    }
    if params.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: CUDA's convention: params[0] points at the kernel's first parameter, a u64.
    let ns = unsafe { *(*params).cast::<u64>() };
    with(|r| {
        let (dev, id) = r.issue_to(s)?;
        dev.enqueue_delay(id, Duration::from_nanos(ns.max(1))).map(drop).map_err(sim)
    })
}

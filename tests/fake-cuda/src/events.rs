//! Events: created, recorded on a stream, queried, waited for and timed, on npu-sim's.

use crate::*;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(e: *mut usize, flags: u32) -> CuResult {
    let r = runtime!();
    // CU_EVENT_INTERPROCESS (0x4) "must be specified with CU_EVENT_DISABLE_TIMING".
    if e.is_null() || flags & !0x7 != 0 || (flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0) {
        return INVALID_VALUE;
    }
    let dev = match r.current() {
        Ok(d) => d,
        Err(code) => return code,
    };
    let timing = flags & DISABLE_TIMING == 0;
    let sim_flags = npu_sim::flags::EVENT_SYNC | if timing { npu_sim::flags::EVENT_TIME_LINE } else { 0 };
    match dev.create_event(sim_flags, timing) {
        Ok(id) => {
            let mut inner = r.lock();
            let h = Rt::mint(&mut inner);
            inner.events.insert(h, (dev.id(), id, timing));
            // SAFETY: checked non-null out-pointer.
            unsafe { put(e, h) }
        }
        Err(err) => sim(err),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(e: usize) -> CuResult {
    with(|r| {
        let (dev, id, _) = r.event(e)?;
        r.lock().events.remove(&e);
        dev.destroy_event(id).map_err(sim)
    })
}

/// The pre-4.0 name of cuEventDestroy_v2; the same call.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy(e: usize) -> CuResult {
    cuEventDestroy_v2(e)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(e: usize, s: usize) -> CuResult {
    with(|r| {
        let (dev, eid, _) = r.event(e)?;
        let (sdev, sid) = r.issue_to(s)?;
        // "hEvent and hStream must be from the same context otherwise
        // CUDA_ERROR_INVALID_HANDLE is returned."
        if sdev.id() != dev.id() {
            return Err(INVALID_HANDLE);
        }
        dev.record_event(eid, sid).map_err(sim)
    })
}

/// A never-recorded event queries as SUCCESS.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(e: usize) -> CuResult {
    with(|r| {
        let (dev, id, _) = r.event(e)?;
        match dev.event_state(id).map_err(sim)? {
            npu_sim::EventState::Pending => Err(NOT_READY),
            _ => Ok(()),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(e: usize) -> CuResult {
    with(|r| {
        let (dev, id, _) = r.event(e)?;
        block_on(|w| dev.on_event_complete(id, w))
    })
}

/// INVALID_HANDLE if either was never recorded or has no timing; NOT_READY if unfinished.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) -> CuResult {
    let r = runtime!();
    let v = r.event(start).and_then(|(dev, a, _)| {
        let (_, b, _) = r.event(end)?;
        dev.elapsed_ms(a, b).map_err(sim)
    });
    match v {
        // SAFETY: out-pointer from the caller.
        Ok(v) => unsafe { put(ms, v) },
        Err(e) => e,
    }
}

/// cuEventElapsedTime_v2 (CUDA 12.8, the version this fake driver reports): documented
/// exactly as cuEventElapsedTime, which it is here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: usize, end: usize) -> CuResult {
    // SAFETY: the caller's out-pointer, passed on.
    unsafe { cuEventElapsedTime(ms, start, end) }
}

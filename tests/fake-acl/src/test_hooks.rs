//! npud's test hooks: entry points only this fake has, through which the suites make a
//! device slow, stall it, fail its tasks and creations, and read what it holds.

use crate::*;

/// Timed work on a stream (the sim's delay).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npudFakeLaunchDelay(stream: Handle, microseconds: u64, task: *mut u64) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r
        .stream(stream)
        .and_then(|(dev, id)| dev.enqueue_delay(id, Duration::from_micros(microseconds)).map_err(|e| e.code))
    {
        // SAFETY: out-pointer from the caller.
        Ok(t) => unsafe { put(task, t) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn npudFakeFailTask(stream: Handle, task: u64, error: i32) -> AclError {
    with_rt(|r| {
        let (dev, id) = r.stream(stream)?;
        dev.fail_task(id, task, error).map_err(|e| e.code)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn npudFakeFailNextCreations(device: i32, count: u32) -> AclError {
    with_rt(|r| {
        r.device(device)?.fail_next_creations(count);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn npudFakeStall(device: i32, stalled: u32) -> AclError {
    with_rt(|r| {
        r.device(device)?.set_stalled(stalled != 0);
        Ok(())
    })
}

/// Streams the device holds (all contexts), for npud's ledger checks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npudFakeStreamsInUse(device: i32, count: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.device(device) {
        // SAFETY: out-pointer from the caller.
        Ok(d) => unsafe { put(count, d.counts().streams_in_use) },
        Err(e) => failed(e),
    }
}

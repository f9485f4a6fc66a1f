//! npud's test hooks: entry points only this fake has, through which the suites fail a
//! stream's task, stall a device and read what it holds.

use crate::*;

#[unsafe(no_mangle)]
pub extern "C" fn npudFakeFailTask(s: usize, task: u64, code: i32) -> CuResult {
    with(|r| {
        let (dev, id) = r.stream(s)?;
        dev.fail_task(id, task, code).map_err(sim)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn npudFakeStall(device: i32, stalled: u32) -> CuResult {
    with(|r| {
        r.devices[r.physical(device)? as usize].set_stalled(stalled != 0);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn npudFakeStreamsInUse(device: i32, n: *mut u32) -> CuResult {
    let r = runtime!();
    match r.physical(device) {
        // SAFETY: out-pointer from the caller.
        Ok(p) => unsafe { put(n, r.devices[p as usize].counts().streams_in_use) },
        Err(e) => e,
    }
}

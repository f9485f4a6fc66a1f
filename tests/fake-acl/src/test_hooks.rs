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

/// The host's node of physical device `physical`, as the driver names it (see
/// `device_nodes`), written NUL-terminated into `buf` of `len` bytes: its length, or -1
/// where no node is named or `buf` is too small. npud matches processes' open descriptors
/// against these to know which devices a pod holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn npudFakeDeviceNode(physical: i32, buf: *mut c_char, len: usize) -> i32 {
    let paths = crate::device_nodes::paths();
    let Some(path) = usize::try_from(physical).ok().and_then(|p| paths.get(p)) else { return -1 };
    let bytes = path.as_os_str().as_encoded_bytes();
    if buf.is_null() || bytes.len() >= len {
        return -1;
    }
    // SAFETY: `buf` is the caller's, non-null and at least `len` bytes, more than the path.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        buf.add(bytes.len()).write(0);
    }
    i32::try_from(bytes.len()).unwrap_or(-1)
}

//! Stream memory operations (the "Stream memory operation" pages; the open runtime's
//! `rtsValueWrite`, `rtsValueWait` and their `ApiErrorDecorator` checks): aclrtValueWrite
//! writes a 64-bit value into device memory in stream order, and aclrtValueWait holds a
//! stream's later work until a 64-bit value in device memory meets a condition:
//! - GEQ (0): `(int64_t)(*devAddr - value) >= 0`; EQ (1): `*devAddr == value`;
//!   AND (2): `(*devAddr & value) != 0`; NOR (3): `~(*devAddr | value) != 0`;
//! - only where the chip has the feature (`RT_FEATURE_TASK_VALUE_WAIT`: A2/A3 and 950);
//!   elsewhere ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
//! - a NULL address is AscendCL's refusal (100000); a write's flag other than 0, a wait's
//!   flag past NOR, an address outside the process's device memory, and (the write page:
//!   "devAddr要求8字节对齐") an unaligned write are the runtime's (107000).
//!
//! The fake makes the write as its other memory tasks: at once, or kept by a capture and
//! made at each execution. A wait is a blocking task on the stream; when the stream reaches
//! it, a watcher thread of the runtime's own reads the value until the condition holds and
//! then lets the stream go on. A block freed while a wait watches it lets the stream go
//! (the device would read whatever memory is there; a fake that hung would hide the bug).

use crate::capture::Task;
use crate::state::{Rt, rt, soc_name};
use crate::{AclError, Handle, INVALID_PARAM, UNINITIALIZE, failed, memory, with_rt};
use npu_sim::StreamId;
use npud_proto::codes::acl::{RT_FEATURE_NOT_SUPPORT, RT_PARAM_INVALID};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// ACL_STREAM_WAIT_VALUE_GEQ, EQ, AND and NOR.
const GEQ: u32 = 0;
const EQ: u32 = 1;
const AND: u32 = 2;
const NOR: u32 = 3;

/// How often a watched value is read.
const POLL: Duration = Duration::from_micros(50);

/// A wait a stream has reached or will reach.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    addr: usize,
    value: u64,
    flag: u32,
    device: u32,
    stream: StreamId,
}

impl Wait {
    /// The device and the stream that waits.
    pub fn place(&self) -> (u32, StreamId) {
        (self.device, self.stream)
    }

    fn holds(&self, current: u64) -> bool {
        match self.flag {
            GEQ => current.wrapping_sub(self.value) as i64 >= 0,
            EQ => current == self.value,
            AND => current & self.value != 0,
            NOR => !(current | self.value) != 0,
            _ => true,
        }
    }
}

/// Whether the chip runs value tasks.
fn supported() -> bool {
    let soc = soc_name().to_bytes();
    soc.starts_with(b"Ascend910B") || soc.starts_with(b"Ascend910_93") || soc.starts_with(b"Ascend950")
}

/// The checks both calls make before the stream is looked at.
fn precheck(addr: usize) -> Result<&'static Rt, AclError> {
    if addr == 0 {
        return Err(INVALID_PARAM);
    }
    let r = rt().ok_or(UNINITIALIZE)?;
    if !supported() {
        return Err(failed(RT_FEATURE_NOT_SUPPORT));
    }
    Ok(r)
}

/// aclrtValueWrite(devAddr, value, flag, stream).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtValueWrite(addr: Handle, value: u64, flag: u32, stream: Handle) -> AclError {
    if let Err(e) = precheck(addr as usize) {
        return e;
    }
    let wrong = flag != 0 || !memory::is_device(addr as usize, 8) || !(addr as usize).is_multiple_of(8);
    if wrong {
        return failed(RT_PARAM_INVALID);
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    memory::issue(r, stream, Task::Value { dst: addr as usize, value })
}

/// aclrtValueWait(devAddr, value, flag, stream).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtValueWait(addr: Handle, value: u64, flag: u32, stream: Handle) -> AclError {
    if let Err(e) = precheck(addr as usize) {
        return e;
    }
    with_rt(|r| {
        if flag > NOR || !memory::is_device(addr as usize, 8) {
            return Err(RT_PARAM_INVALID);
        }
        let stream = r.resolve(stream)?;
        let (dev, id) = r.stream(stream)?;
        let wait = Wait { addr: addr as usize, value, flag, device: dev.id(), stream: id };
        r.launch_value_wait(wait)
    })
}

/// The waits streams have reached, and the thread that watches them.
struct Watcher {
    waits: Mutex<Vec<(u64, Wait)>>,
    more: Condvar,
}

static WATCHER: OnceLock<Option<Arc<Watcher>>> = OnceLock::new();

fn watcher(r: &'static Rt) -> Option<&'static Arc<Watcher>> {
    WATCHER
        .get_or_init(|| {
            let w = Arc::new(Watcher { waits: Mutex::new(Vec::new()), more: Condvar::new() });
            let watched = Arc::clone(&w);
            let spawned = std::thread::Builder::new().name("fake-acl-values".into()).spawn(move || watch(r, &watched));
            spawned.ok().map(|_| w)
        })
        .as_ref()
}

/// A stream reached the wait under `callback`: watched until its condition holds.
pub fn reached(r: &'static Rt, callback: u64, wait: Wait) {
    match watcher(r) {
        Some(w) => {
            w.waits.lock().unwrap_or_else(|e| e.into_inner()).push((callback, wait));
            w.more.notify_one();
        }
        // No thread to watch with: the stream is let go rather than held for ever.
        None => release(r, callback, &wait),
    }
}

fn release(r: &Rt, callback: u64, wait: &Wait) {
    let _ = r.devices[wait.device as usize].ack_callback(wait.stream, callback);
}

/// Reads every watched value until its condition holds (or its block is freed), then lets
/// its stream go on.
fn watch(r: &'static Rt, w: &Watcher) {
    let mut waits = w.waits.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if waits.is_empty() {
            waits = w.more.wait(waits).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let (done, pending): (Vec<_>, Vec<_>) =
            waits.drain(..).partition(|(_, wait)| memory::read_device_u64(wait.addr).is_none_or(|v| wait.holds(v)));
        *waits = pending;
        drop(waits);
        for (callback, wait) in &done {
            release(r, *callback, wait);
        }
        std::thread::sleep(POLL);
        waits = w.waits.lock().unwrap_or_else(|e| e.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(flag: u32, value: u64) -> Wait {
        Wait { addr: 8, value, flag, device: 0, stream: StreamId::default() }
    }

    #[test]
    fn each_condition_is_the_pages() {
        assert!(wait(GEQ, 5).holds(5) && wait(GEQ, 5).holds(6) && !wait(GEQ, 5).holds(4));
        // GEQ compares the difference as signed: a value that wrapped past the target holds.
        assert!(wait(GEQ, u64::MAX).holds(1));
        assert!(wait(EQ, 7).holds(7) && !wait(EQ, 7).holds(8));
        assert!(wait(AND, 0b100).holds(0b110) && !wait(AND, 0b100).holds(0b011));
        assert!(wait(NOR, 0).holds(0) && !wait(NOR, 0).holds(u64::MAX));
        assert!(!wait(NOR, 1).holds(u64::MAX - 1));
    }
}

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
//! it, npu-sim's watcher reads the value until the condition holds and then lets the
//! stream go on (`npu_sim::watch`, which fake-cuda's value waits use too). A block freed
//! while a wait watches it lets the stream go (the device would read whatever memory is
//! there; a fake that hung would hide the bug).

use crate::state::capture::Task;
use crate::state::memory;
use crate::state::{Rt, a2_a3_or_950, rt};
use crate::{AclError, Handle, INVALID_PARAM, UNINITIALIZE, failed, with_rt};
use npu_sim::StreamId;
use npu_sim::watch::Compare;
use npud_proto::codes::acl::{RT_FEATURE_NOT_SUPPORT, RT_PARAM_INVALID};

/// A wait a stream has reached or will reach.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    addr: usize,
    value: u64,
    compare: Compare,
    device: u32,
    stream: StreamId,
}

impl Wait {
    /// The device and the stream that waits.
    pub fn place(&self) -> (u32, StreamId) {
        (self.device, self.stream)
    }
}

/// The checks both calls make before the stream is looked at.
fn precheck(addr: usize) -> Result<&'static Rt, AclError> {
    if addr == 0 {
        return Err(INVALID_PARAM);
    }
    let r = rt().ok_or(UNINITIALIZE)?;
    // The chips with value tasks (`RT_FEATURE_TASK_VALUE_WAIT`).
    if !a2_a3_or_950() {
        return Err(failed(RT_FEATURE_NOT_SUPPORT));
    }
    Ok(r)
}

/// aclrtValueWrite(devAddr, value, flag, stream).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtValueWrite(addr: Handle, value: u64, flag: u32, stream: Handle) -> AclError {
    let r = match precheck(addr as usize) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let wrong = flag != 0 || !memory::is_device(addr as usize, 8) || !(addr as usize).is_multiple_of(8);
    if wrong {
        return failed(RT_PARAM_INVALID);
    }
    memory::issue(r, stream, Task::Value { dst: addr as usize, value })
}

/// aclrtValueWait(devAddr, value, flag, stream).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtValueWait(addr: Handle, value: u64, flag: u32, stream: Handle) -> AclError {
    if let Err(e) = precheck(addr as usize) {
        return e;
    }
    with_rt(|r| {
        let compare = Compare::from_flag(flag).ok_or(RT_PARAM_INVALID)?;
        if !memory::is_device(addr as usize, 8) {
            return Err(RT_PARAM_INVALID);
        }
        let stream = r.resolve(stream)?;
        let (dev, id) = r.stream(stream)?;
        let wait = Wait { addr: addr as usize, value, compare, device: dev.id(), stream: id };
        r.launch_value_wait(wait)
    })
}

/// A stream reached the wait under `callback`: watched until its condition holds (or its
/// block is freed, or the stream destroyed by force), then the stream goes on.
pub fn reached(r: &'static Rt, callback: u64, wait: Wait) {
    let dev = &r.devices[wait.device as usize];
    npu_sim::watch::until(
        move || {
            dev.stream_status(wait.stream).is_err()
                || memory::read_device_u64(wait.addr).is_none_or(|v| wait.compare.holds(v, wait.value, 64))
        },
        move || {
            let _ = dev.ack_callback(wait.stream, callback);
        },
    );
}

//! Stream memory operations (the driver API's "Stream Memory Operations"): a stream that
//! waits for a 32- or 64-bit value in memory to meet a condition (cuStreamWaitValue32/64),
//! and one that writes such a value in stream order (cuStreamWriteValue32/64), on device
//! memory or page-locked host memory the driver gave.
//!
//! As an H100's driver answers (driver 580.159.04, `native/cuda_value_ops.c`): CUDA 12's
//! `_v2` entry points work; the pre-12 ones answer CUDA_ERROR_NOT_SUPPORTED, as on a device
//! without CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1; CU_STREAM_WAIT_VALUE_FLUSH is
//! CUDA_ERROR_NOT_SUPPORTED too; an address not aligned to the value's size, NULL, memory
//! the driver did not give, an unknown wait flag and any write flag but 0
//! (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER included) are CUDA_ERROR_INVALID_VALUE.
//!
//! A write is made at once, as the fake's copies are. A wait is a blocking host call on its
//! stream; once the stream reaches it, npu-sim's watcher reads the value until the
//! condition holds and lets the stream go on (`npu_sim::watch`).

use crate::*;
use npu_sim::watch::Compare;

/// CU_STREAM_WAIT_VALUE_FLUSH.
const FLUSH: u32 = 1 << 30;

/// A wait's or write's address: aligned to `bytes`, in memory the driver gave.
fn checked(addr: u64, bytes: usize) -> Result<usize, CuResult> {
    let addr = addr as usize;
    match addr != 0 && addr.is_multiple_of(bytes) && memory::known(addr, bytes) {
        true => Ok(addr),
        false => Err(INVALID_VALUE),
    }
}

fn wait(s: usize, addr: u64, value: u64, flags: u32, bytes: usize) -> CuResult {
    with(|r| {
        if flags & FLUSH != 0 {
            return Err(NOT_SUPPORTED);
        }
        let compare = Compare::from_flag(flags).ok_or(INVALID_VALUE)?;
        let addr = checked(addr, bytes)?;
        let (dev, id) = r.issue_to(s)?;
        let callback = r.next_host_call();
        let bits = (bytes * 8) as u32;
        r.register_host_call(callback, HostCall::Watch(Watch { addr, value, compare, bits }), 0);
        dev.launch_callback(id, callback, true).map(drop).map_err(sim)
    })
}

fn write(s: usize, addr: u64, value: u64, flags: u32, bytes: usize) -> CuResult {
    with(|r| {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let addr = checked(addr, bytes)?;
        r.issue_to(s)?;
        memory::write_value(addr, value, bytes);
        Ok(())
    })
}

/// A wait a stream will reach: what `dispatch` hands to the watcher.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch {
    addr: usize,
    value: u64,
    compare: Compare,
    bits: u32,
}

impl Watch {
    /// Watches until the value meets the condition (or its memory is freed, or the stream
    /// is gone), then lets `stream` of `dev` go on past the wait's `callback`.
    pub(crate) fn start(self, dev: &'static Arc<SimDevice>, stream: StreamId, callback: u64) {
        let bytes = (self.bits / 8) as usize;
        npu_sim::watch::until(
            move || {
                dev.stream_status(stream).is_err()
                    || memory::read_value(self.addr, bytes).is_none_or(|v| self.compare.holds(v, self.value, self.bits))
            },
            move || {
                let _ = dev.ack_callback(stream, callback);
            },
        );
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitValue32_v2(s: usize, addr: u64, value: u32, flags: u32) -> CuResult {
    wait(s, addr, u64::from(value), flags, 4)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitValue64_v2(s: usize, addr: u64, value: u64, flags: u32) -> CuResult {
    wait(s, addr, value, flags, 8)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWriteValue32_v2(s: usize, addr: u64, value: u32, flags: u32) -> CuResult {
    write(s, addr, u64::from(value), flags, 4)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWriteValue64_v2(s: usize, addr: u64, value: u64, flags: u32) -> CuResult {
    write(s, addr, value, flags, 8)
}

/// The pre-12 entry points, which need CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1.
fn v1() -> CuResult {
    match rt() {
        Ok(_) => NOT_SUPPORTED,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitValue32(_s: usize, _addr: u64, _value: u32, _flags: u32) -> CuResult {
    v1()
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitValue64(_s: usize, _addr: u64, _value: u64, _flags: u32) -> CuResult {
    v1()
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWriteValue32(_s: usize, _addr: u64, _value: u32, _flags: u32) -> CuResult {
    v1()
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWriteValue64(_s: usize, _addr: u64, _value: u64, _flags: u32) -> CuResult {
    v1()
}

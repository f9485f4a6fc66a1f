//! A fake `libascendcl.so` built on npu-sim.
//!
//! It exports the AscendCL runtime C ABI of shared/reference/acl.md (the subset npud
//! uses) so that npud's real `acl` backend, its libloading path and its FFI calls run in
//! CI without an NPU. Semantics and error codes are npu-sim's, which follows the vendor
//! documents. Configured by environment: NPU_SIM_PROFILE, NPU_SIM_DEVICES, NPU_SIM_LANES.
//!
//! Callbacks are delivered the AscendCL way: to the thread that subscribed the stream,
//! when it calls aclrtProcessReport. Exception callbacks run on a thread of this library.
//! A few `npudFake*` symbols exist only here (fault injection and timed work for tests);
//! npud resolves them optionally and reports "unsupported" where a real library lacks them.

mod callbacks;
mod device_ids;
mod device_nodes;
mod events;
mod graphs;
mod last_error;
mod launch;
mod numbering;
mod peer;
mod runtime;
mod runtime_abi;
mod state;
mod stream_state;
mod test_hooks;

pub use callbacks::*;
pub use device_ids::*;
pub use events::*;
pub use graphs::*;
pub(crate) use last_error::failed;
pub use last_error::{aclrtGetErrorVerbose, aclrtGetLastError, aclrtPeekAtLastError};
pub use launch::*;
pub use peer::*;
pub use state::stream_attrs::{aclrtGetStreamAttribute, aclrtSetStreamAttribute};
pub use state::value_ops::{aclrtValueWait, aclrtValueWrite};
pub use stream_state::aclrtRegStreamStateCallback;
pub use test_hooks::*;

use state::{Rt, rt};
use std::ffi::{c_char, c_void};
use std::time::{Duration, Instant};

pub type Handle = *mut c_void;

use npud_proto::codes::acl::{
    API_NOT_SUPPORT, REPEAT_INITIALIZE, RT_EVENT_SYNC_TIMEOUT, RT_PARAM_INVALID, RT_REPORT_TIMEOUT, RT_STREAM_CONTEXT,
    RT_STREAM_NO_CB_REG, RT_STREAM_SUBSCRIBE, RT_STREAM_SYNC_TIMEOUT, RT_THREAD_SUBSCRIBE,
};
pub use npud_proto::codes::acl::{AclError, SUCCESS as ACL_SUCCESS};
pub(crate) use npud_proto::codes::acl::{INVALID_PARAM, RT_CONTEXT_NULL, UNINITIALIZE};

fn code(r: Result<(), AclError>) -> AclError {
    r.err().map_or(ACL_SUCCESS, failed)
}

/// Writes `v` through an out-pointer, 100000 for NULL (the vendor's answer).
unsafe fn put<T>(out: *mut T, v: T) -> AclError {
    if out.is_null() {
        return INVALID_PARAM;
    }
    // SAFETY: the caller passes a valid, aligned out-pointer for T (checked non-null).
    unsafe { out.write(v) };
    ACL_SUCCESS
}

/// Through the runtime layer's entry points where the fake is layered (see [`runtime`]),
/// else straight to the implementation; UNINITIALIZE before the runtime started either way.
fn via(down: impl FnOnce(&runtime::Down) -> AclError, direct: impl FnOnce() -> AclError) -> AclError {
    if rt().is_none() {
        return UNINITIALIZE;
    }
    match runtime::down() {
        Some(d) => down(d),
        None => direct(),
    }
}

fn with_rt(f: impl FnOnce(&Rt) -> Result<(), AclError>) -> AclError {
    match rt() {
        Some(r) => code(f(r)),
        None => UNINITIALIZE,
    }
}

/// Waits (blocking the calling thread, as the vendor call does) for a sim waiter.
fn block_on(
    register: impl FnOnce(npu_sim::Waiter) -> Result<(), npu_sim::SimError>,
    timeout_ms: i32,
    expired: AclError,
) -> Result<(), AclError> {
    block_until(register, deadline(timeout_ms)?, expired)
}

/// When a wait of `timeout_ms` started now expires (-1: never); below -1 is invalid.
fn deadline(timeout_ms: i32) -> Result<Option<Instant>, AclError> {
    match timeout_ms {
        -1 => Ok(None),
        t if t < -1 => Err(RT_PARAM_INVALID),
        t => Ok(Some(Instant::now() + Duration::from_millis(t as u64))),
    }
}

fn block_until(
    register: impl FnOnce(npu_sim::Waiter) -> Result<(), npu_sim::SimError>,
    deadline: Option<Instant>,
    expired: AclError,
) -> Result<(), AclError> {
    let (tx, rx) = std::sync::mpsc::channel();
    register(Box::new(move |r| drop(tx.send(r)))).map_err(|e| e.code)?;
    let r = match deadline {
        None => rx.recv().map_err(|_| state::INTERNAL)?,
        Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())).map_err(|_| expired)?,
    };
    r.map_err(|e| e.code)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclInit(_config: *const c_char) -> AclError {
    if state::init() { ACL_SUCCESS } else { REPEAT_INITIALIZE }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclFinalize() -> AclError {
    ACL_SUCCESS
}

/// aclrtGetVersion(major, minor, patch): the AscendCL version of the runtime's headers the
/// fake follows, 1.17.0 (`ACL_MAJOR_VERSION` ... in acl_rt.h); each pointer is required.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetVersion(major: *mut i32, minor: *mut i32, patch: *mut i32) -> AclError {
    if major.is_null() || minor.is_null() || patch.is_null() {
        return failed(INVALID_PARAM);
    }
    // SAFETY: three checked non-null out-pointers from the caller.
    unsafe {
        major.write(1);
        minor.write(17);
        patch.write(0);
    }
    ACL_SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> AclError {
    match rt() {
        // SAFETY: out-pointer from the caller.
        Some(r) => unsafe { put(count, r.numbering.count()) },
        None => UNINITIALIZE,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDevice(device: i32) -> AclError {
    via(|d| d.set_device(device), || with_rt(|r| r.set_device(device)))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDevice(device: i32) -> AclError {
    via(|d| d.reset(device, false), || with_rt(|r| r.reset_device(device, false)))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceForce(device: i32) -> AclError {
    via(|d| d.reset(device, true), || with_rt(|r| r.reset_device(device, true)))
}

/// aclrtSetDeviceWithoutTsdVXX and aclrtResetDeviceWithoutTsdVXX: exported by the open
/// runtime's libacl_rt (declared in its `aclrt/set_device_vxx.h`: "implicitly create the
/// default context and the default stream"). Its implementation refuses with 200001 unless
/// the SoC's name starts with "Ascend910" (the training, A2 and A3 parts), then calls the
/// runtime's SetDevice or DeviceReset, the same as aclrtSetDevice's and aclrtResetDevice's,
/// only without starting the TSD daemon, which the fake does not have.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetDeviceWithoutTsdVXX(device: i32) -> AclError {
    if !state::soc_name().to_bytes().starts_with(b"Ascend910") {
        return API_NOT_SUPPORT;
    }
    aclrtSetDevice(device)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetDeviceWithoutTsdVXX(device: i32) -> AclError {
    if !state::soc_name().to_bytes().starts_with(b"Ascend910") {
        return API_NOT_SUPPORT;
    }
    aclrtResetDevice(device)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateContext(ctx: *mut Handle, device: i32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    if ctx.is_null() {
        return INVALID_PARAM;
    }
    match r.create_context(device) {
        Ok(h) => {
            // The vendor's aclrtSetCurrentContext notes: a context a thread creates is that
            // thread's context without a call to aclrtSetCurrentContext.
            let _ = r.set_current(h);
            // SAFETY: out-pointer from the caller.
            unsafe { put(ctx, h) }
        }
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyContext(ctx: Handle) -> AclError {
    with_rt(|r| r.destroy_context(ctx))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetCurrentContext(ctx: Handle) -> AclError {
    with_rt(|r| r.set_current(ctx))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetCurrentContext(ctx: *mut Handle) -> AclError {
    match state::current_context() {
        // SAFETY: out-pointer from the caller.
        Some(h) => unsafe { put(ctx, h) },
        None => failed(RT_CONTEXT_NULL),
    }
}

/// The runtime's stream priorities: 0, the greatest, to 7, the least
/// (`RT_STREAM_GREATEST_PRIORITY`, `RT_STREAM_LEAST_PRIORITY`).
const GREATEST_PRIORITY: i32 = 0;
const LEAST_PRIORITY: i32 = 7;

/// aclrtDeviceGetStreamPriorityRange(leastPriority, greatestPriority): 7 and 0, whatever
/// the device (the open runtime's `ApiImpl::DeviceGetStreamPriorityRange`); either
/// out-pointer may be NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtDeviceGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) -> AclError {
    for (out, v) in [(least, LEAST_PRIORITY), (greatest, GREATEST_PRIORITY)] {
        if !out.is_null() {
            // SAFETY: a non-null out-pointer from the caller.
            unsafe { out.write(v) };
        }
    }
    ACL_SUCCESS
}

/// A priority as the runtime takes it: an `int32_t`, clamped into 0..=7, not refused
/// (`ApiErrorDecorator::StreamCreate` and `SetStreamPriorityValue`: "Input priority is out
/// of range, adjusted").
pub(crate) fn clamped_priority(priority: u32) -> u32 {
    (priority as i32).clamp(GREATEST_PRIORITY, LEAST_PRIORITY) as u32
}

/// aclrtCreateStreamWithConfig, at the priority clamped (`clamped_priority`); on A2/A3 the
/// page calls it reserved, to be set to 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStreamWithConfig(stream: *mut Handle, priority: u32, flag: u32) -> AclError {
    if stream.is_null() {
        return INVALID_PARAM;
    }
    if rt().is_none() {
        return UNINITIALIZE;
    }
    if let Some(down) = runtime::down() {
        return match runtime::checked_flags(flag) {
            Ok(flag) => down.create_with_config(stream, priority, flag),
            Err(e) => failed(e),
        };
    }
    match runtime::checked_flags(flag) {
        // SAFETY: checked non-null out-pointer from the caller; the runtime's own checks
        // on the flags AscendCL maps.
        Ok(flag) => unsafe { runtime::create_rt_stream(stream, priority, runtime::rt_flags(flag)) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateStream(stream: *mut Handle) -> AclError {
    if stream.is_null() {
        return INVALID_PARAM;
    }
    // SAFETY: forwarded out-pointer.
    via(|d| d.create(stream), || unsafe { aclrtCreateStreamWithConfig(stream, 0, 0) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStream(stream: Handle) -> AclError {
    via(|d| d.destroy(stream, false), || with_rt(|r| r.destroy_stream(stream, false)))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyStreamForce(stream: Handle) -> AclError {
    via(|d| d.destroy(stream, true), || with_rt(|r| r.destroy_stream(stream, true)))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeStreamWithTimeout(stream: Handle, timeout_ms: i32) -> AclError {
    with_rt(|r| {
        let (dev, id) = r.stream(r.not_capturing(r.resolve(stream)?)?)?;
        block_on(|w| dev.on_stream_drained(id, w), timeout_ms, RT_STREAM_SYNC_TIMEOUT)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeStream(stream: Handle) -> AclError {
    aclrtSynchronizeStreamWithTimeout(stream, -1)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamQuery(stream: Handle, status: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    let stream = r.resolve(stream).and_then(|s| r.not_capturing(s)).and_then(|s| r.stream(s));
    match stream.and_then(|(dev, id)| dev.stream_query(id).map_err(|e| e.code)) {
        // SAFETY: out-pointer from the caller. ACL_STREAM_STATUS_COMPLETE 0, NOT_READY 1.
        Ok(done) => unsafe { put(status, if done { 0 } else { 1 }) },
        Err(e) => failed(e),
    }
}

/// aclrtStreamWaitEventWithTimeout(stream, event, timeout): as aclrtStreamWaitEvent; the
/// timeout is in seconds, 0 for none, and a negative one is ACL_ERROR_RT_PARAM_INVALID.
/// The fake does not time the wait out: a wait that outlasts its timeout still ends when
/// the record completes.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtStreamWaitEventWithTimeout(stream: Handle, event: Handle, timeout: i32) -> AclError {
    if timeout < 0 {
        return failed(RT_PARAM_INVALID);
    }
    aclrtStreamWaitEvent(stream, event)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtStreamWaitEvent(stream: Handle, event: Handle) -> AclError {
    with_rt(|r| {
        let stream = r.resolve(stream)?;
        let (dev, e, s) = same_device(r, event, stream)?;
        // A task of the capture the stream is in; waiting on an event recorded in a
        // capture pulls the stream into it (`capture`).
        r.capture_waits(stream, event)?;
        dev.stream_wait_event(s, e).map_err(|e| e.code)
    })
}

/// An event and a stream one call uses together. Events and streams belong to one
/// device's context; AscendCL answers a stream outside that context with
/// ACL_ERROR_RT_STREAM_CONTEXT.
fn same_device(
    r: &Rt,
    event: Handle,
    stream: Handle,
) -> Result<(&std::sync::Arc<npu_sim::SimDevice>, npu_sim::EventId, npu_sim::StreamId), AclError> {
    let (dev, e) = r.event(event)?;
    let (sdev, s) = r.stream(stream)?;
    if sdev.id() != dev.id() {
        return Err(RT_STREAM_CONTEXT);
    }
    Ok((dev, e, s))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetPriority(stream: Handle, priority: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.named_stream(stream).and_then(|(dev, id)| dev.stream_status(id).map_err(|e| e.code)) {
        // SAFETY: out-pointer from the caller.
        Ok(s) => unsafe { put(priority, s.priority) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetFlags(stream: Handle, flags: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.named_stream(stream).and_then(|(dev, id)| dev.stream_status(id).map_err(|e| e.code)) {
        // SAFETY: out-pointer from the caller.
        Ok(s) => unsafe { put(flags, s.flags) },
        Err(e) => failed(e),
    }
}

/// Not in every CANN version: npud resolves it optionally to attribute exceptions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtStreamGetId(stream: Handle, id: *mut i32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.named_stream(stream) {
        // SAFETY: out-pointer from the caller.
        Ok((_, sid)) => unsafe { put(id, sid as i32) },
        Err(e) => failed(e),
    }
}

/// aclrtCtxGetCurrentDefaultStream: the current context's default stream, the one a NULL
/// stream names (`Rt::resolve`). It goes with its context; aclrtDestroyStream refuses it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCtxGetCurrentDefaultStream(stream: *mut Handle) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.resolve(std::ptr::null_mut()) {
        // SAFETY: out-pointer from the caller (`put` checks it is not null).
        Ok(h) => unsafe { put(stream, h) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetStreamAvailableNum(count: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    if count.is_null() {
        return INVALID_PARAM;
    }
    if let Some(down) = runtime::down() {
        return down.available(count);
    }
    match r.available_streams() {
        // SAFETY: out-pointer from the caller.
        Ok(n) => unsafe { put(count, n) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetStreamFailureMode(stream: Handle, mode: u64) -> AclError {
    let mode = match mode {
        0 => npu_sim::FailureMode::Continue,
        1 => npu_sim::FailureMode::Stop,
        _ => return INVALID_PARAM,
    };
    with_rt(|r| {
        // The default stream (NULL) only where the vendor's page allows it: Ascend 950,
        // A3 and A2; the training, inference and 200I/500 A2 parts refuse it.
        let stream = if state::default_failure_mode_allowed() { r.resolve(stream)? } else { stream };
        let (dev, id) = r.stream(stream)?;
        dev.set_failure_mode(id, mode).map_err(|e| e.code)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeDeviceWithTimeout(timeout_ms: i32) -> AclError {
    with_rt(|r| {
        let dev = r.current_device()?;
        // One timeout for the whole device, not one per stream.
        let deadline = deadline(timeout_ms)?;
        for id in r.streams_on(dev.id()) {
            block_until(|w| dev.on_stream_drained(id, w), deadline, RT_STREAM_SYNC_TIMEOUT)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeDevice() -> AclError {
    aclrtSynchronizeDeviceWithTimeout(-1)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetDevice(device: *mut i32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.current_device() {
        // SAFETY: out-pointer from the caller.
        Ok(dev) => unsafe { put(device, r.user_id(dev.id()) as i32) },
        Err(e) => failed(e),
    }
}

/// aclrtGetSocName: the SoC of the simulated product (NPU_SIM_PROFILE), as real parts name
/// theirs. The string lives for the whole process, as the vendor's does.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetSocName() -> *const std::ffi::c_char {
    state::soc_name().as_ptr()
}

//! Events: created, recorded and reset on streams, queried, waited for and timed.

use crate::state::capture::{EVENT_FLAG_DEFAULT, EVENT_FLAG_EXTERNAL};
use crate::state::rt;
use crate::*;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventWithFlag(event: *mut Handle, flag: u32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { create_event(event, flag, false) }
}

/// The "Ex" variant: the runtime's new-mode event (`rtEventCreateExWithFlag`), the only
/// kind a capture may record or wait on (`state::capture::rules`). On a real device it
/// may also come from a larger table on newer parts; the fake's one table serves both.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEventExWithFlag(event: *mut Handle, flag: u32) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { create_event(event, flag, true) }
}

unsafe fn create_event(event: *mut Handle, flag: u32, ex: bool) -> AclError {
    if event.is_null() {
        return INVALID_PARAM;
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.create_event(flag) {
        Ok(h) => {
            r.event_made(h, flag, ex);
            // SAFETY: checked non-null out-pointer.
            unsafe { put(event, h) }
        }
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetEventAvailNum(count: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.available_events() {
        // SAFETY: out-pointer from the caller.
        Ok(n) => unsafe { put(count, n) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtCreateEvent(event: *mut Handle) -> AclError {
    // SAFETY: forwarded out-pointer.
    unsafe { aclrtCreateEventWithFlag(event, npu_sim::flags::EVENT_DEFAULT) }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtDestroyEvent(event: Handle) -> AclError {
    with_rt(|r| {
        r.destroy_event(event)?;
        r.event_forgotten(event);
        r.capture_attrs_gone(event as usize);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtRecordEvent(event: Handle, stream: Handle) -> AclError {
    with_rt(|r| {
        let stream = r.resolve(stream)?;
        let (dev, e, s) = same_device(r, event, stream)?;
        // A record in a capture records the capture's own event, not this one (the
        // runtime's `CaptureEventRecord`): it does not count as this event's record.
        let captured = r.in_capture(stream);
        r.capture_recorded(event, stream)?;
        dev.record_event(e, s).map_err(|e| e.code)?;
        if !captured {
            r.event_recorded(event);
        }
        Ok(())
    })
}

/// aclrtRecordEventWithFlag(event, stream, flag): ACL_EVENT_RECORD_DEFAULT (0) is
/// aclrtRecordEvent; ACL_EVENT_RECORD_EXTERNAL (1) records, in a capture, an event that
/// streams outside the graph (or another graph) may wait on (`capture::external`).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtRecordEventWithFlag(event: Handle, stream: Handle, flag: u32) -> AclError {
    if event.is_null() || (flag != EVENT_FLAG_DEFAULT && flag != EVENT_FLAG_EXTERNAL) {
        return INVALID_PARAM;
    }
    with_event_flag(event, stream, flag, true, || aclrtRecordEvent(event, stream))
}

/// aclrtStreamWaitEventWithFlag(stream, event, timeout, flag): ACL_EVENT_WAIT_DEFAULT (0)
/// is aclrtStreamWaitEventWithTimeout (seconds, 0 for none; unsigned here);
/// ACL_EVENT_WAIT_EXTERNAL (1) makes a graph being captured wait on an event recorded
/// outside it, with a timeout of 0 only (`capture::external`).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtStreamWaitEventWithFlag(stream: Handle, event: Handle, timeout: u32, flag: u32) -> AclError {
    let known = flag == EVENT_FLAG_DEFAULT || flag == EVENT_FLAG_EXTERNAL;
    if event.is_null() || !known || (flag == EVENT_FLAG_EXTERNAL && timeout != 0) {
        return INVALID_PARAM;
    }
    with_event_flag(event, stream, flag, false, || aclrtStreamWaitEvent(stream, event))
}

/// The two calls above once the ACL layer's checks passed: the event must exist, its
/// records (`record`) or waits keep the flag of their first call, the default flag is the
/// `ordinary` call, and EXTERNAL a task of the capture the stream is in.
fn with_event_flag(
    event: Handle,
    stream: Handle,
    flag: u32,
    record: bool,
    ordinary: impl FnOnce() -> AclError,
) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    if let Err(e) = r.event(event) {
        return failed(e);
    }
    if !r.flag_kept(event, flag, record) {
        return failed(RT_PARAM_INVALID);
    }
    if flag == EVENT_FLAG_DEFAULT {
        return ordinary();
    }
    with_rt(|r| {
        let stream = r.resolve(stream)?;
        same_device(r, event, stream)?;
        r.capture_external(event, stream, record)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtResetEvent(event: Handle, stream: Handle) -> AclError {
    with_rt(|r| {
        let stream = r.resolve(stream)?;
        let (dev, e, s) = same_device(r, event, stream)?;
        dev.reset_event(e, s).map_err(|e| e.code)
    })
}

/// aclrtEventRecordedStatus: NOT_READY 0 (also never recorded), COMPLETE 1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventStatus(event: Handle, status: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.waitable_event(event).and_then(|(dev, e)| dev.event_state(e).map_err(|e| e.code)) {
        // SAFETY: out-pointer from the caller.
        Ok(s) => unsafe { put(status, u32::from(s == npu_sim::EventState::Complete)) },
        Err(e) => failed(e),
    }
}

/// aclrtQueryEventWaitStatus / aclrtEventWaitStatus: COMPLETE 0 when the stream waits on
/// the event are done (a wait ends when its stream reaches the event's latest record, at
/// once for a never-recorded event), NOT_READY 1 while that record is pending.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEventWaitStatus(event: Handle, status: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.waitable_event(event).and_then(|(dev, e)| dev.event_state(e).map_err(|e| e.code)) {
        // SAFETY: out-pointer from the caller.
        Ok(s) => unsafe { put(status, u32::from(s == npu_sim::EventState::Pending)) },
        Err(e) => failed(e),
    }
}

/// Deprecated aclrtQueryEvent / aclrtEventStatus: COMPLETE 0, NOT_READY 1 (pending).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtQueryEvent(event: Handle, status: *mut u32) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.waitable_event(event).and_then(|(dev, e)| dev.event_state(e).map_err(|e| e.code)) {
        // SAFETY: out-pointer from the caller.
        Ok(s) => unsafe { put(status, u32::from(s == npu_sim::EventState::Pending)) },
        Err(e) => failed(e),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeEventWithTimeout(event: Handle, timeout_ms: i32) -> AclError {
    with_rt(|r| {
        let (dev, e) = r.waitable_event(event)?;
        block_on(|w| dev.on_event_complete(e, w), timeout_ms, RT_EVENT_SYNC_TIMEOUT)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSynchronizeEvent(event: Handle) -> AclError {
    aclrtSynchronizeEventWithTimeout(event, -1)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) -> AclError {
    let Some(r) = rt() else { return UNINITIALIZE };
    let elapsed = r.waitable_event(start).and_then(|(dev, a)| {
        let (_, b) = r.waitable_event(end)?;
        dev.elapsed_ms(a, b).map_err(|e| e.code)
    });
    match elapsed {
        // SAFETY: out-pointer from the caller.
        Ok(v) => unsafe { put(ms, v) },
        Err(e) => failed(e),
    }
}

/// aclrtEventGetTimestamp(event, timestamp): when the event's latest record completed, in
/// microseconds since the device started (in the fake: since aclInit). The event must be
/// timed, recorded and complete (the errors aclrtEventElapsedTime gives), and not recorded
/// in a capture under way (ACL_ERROR_RT_EVENT_CAPTURED, `ApiErrorDecorator::EventGetTimeStamp`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtEventGetTimestamp(event: Handle, timestamp: *mut u64) -> AclError {
    if timestamp.is_null() || event.is_null() {
        return failed(INVALID_PARAM);
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.waitable_event(event).and_then(|(dev, id)| dev.completed_at(id).map_err(|e| e.code)) {
        // SAFETY: checked non-null out-pointer from the caller.
        Ok(at) => unsafe { put(timestamp, at.saturating_duration_since(r.started).as_micros() as u64) },
        Err(e) => failed(e),
    }
}

/// aclrtGetEventId(event, eventId): the event's id on its device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetEventId(event: Handle, id: *mut u32) -> AclError {
    if id.is_null() || event.is_null() {
        return failed(INVALID_PARAM);
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    match r.event(event) {
        // SAFETY: checked non-null out-pointer from the caller.
        Ok((_, e)) => unsafe { put(id, e as u32) },
        Err(e) => failed(e),
    }
}

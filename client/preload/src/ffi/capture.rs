//! Graph capture, at both layers: aclmdlRICaptureBegin/End (AscendCL) and
//! rtStreamBeginCapture/EndCapture (the runtime layer, which AscendCL's calls reach in some
//! layouts and GE calls itself) are admitted and booked by the same code, the real call
//! passed in. aclmdlRIDestroy gives a model's streams back.
//!
//! While a capture goes on, the calls that make its streams are admitted before the device
//! makes them (`crate::capture`): event records and waits (a join), and the tasks that fill
//! a capture stream's queue (copies, memsets, records, waits: a cascade). A stream npud
//! refuses fails the call with 207008 and invalidates the capture, as the runtime does when
//! it has none: aclmdlRICaptureGetInfo then says INVALIDATED and End fails with 507903,
//! the model destroyed with its streams.

use super::ascend::{CountFn, PtrFn, current_context, current_device};
use super::errors::refused;
use super::vendor::{ACL, real};
use super::{Handle, INTERNAL, hook};
use crate::capture::{Captures, ENTRIES_EXTERNAL_WAIT, ENTRIES_TASK, Step};
use crate::process::Refused;
use npud_proto::codes::acl::{
    RT_NO_STREAM_RESOURCE as NO_STREAM_RESOURCE, RT_STREAM_CAPTURE_INVALIDATED, RT_STREAM_CAPTURE_WRONG_THREAD,
};
use std::ffi::c_void;
use std::ptr::null_mut;

/// aclmdlRICaptureStatus ACTIVE and INVALIDATED.
const CAPTURE_STATUS_ACTIVE: u32 = 1;
const CAPTURE_STATUS_INVALIDATED: u32 = 2;

type RecordFn = unsafe extern "C" fn(Handle, Handle) -> i32;
type WaitTimeoutFn = unsafe extern "C" fn(Handle, Handle, i32) -> i32;
type MemcpyAsyncFn = unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, u32, Handle) -> i32;
type MemsetAsyncFn = unsafe extern "C" fn(*mut c_void, usize, i32, usize, Handle) -> i32;

pub(super) type CaptureBeginFn = unsafe extern "C" fn(Handle, u32) -> i32;
pub(super) type CaptureEndFn = unsafe extern "C" fn(Handle, *mut Handle) -> i32;
type ModelStreamsFn = unsafe extern "C" fn(Handle, *mut Handle, *mut u32) -> i32;
type CaptureInfoFn = unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> i32;

/// The vendor's device-wide free count on the current device.
fn vendor_free() -> Option<u32> {
    let get = real!(&ACL, aclrtGetStreamAvailableNum: CountFn, super::acl::aclrtGetStreamAvailableNum as *mut c_void)?;
    let mut n = 0u32;
    // SAFETY: the vendor function with an out-pointer to a local.
    (unsafe { get(&mut n) } == 0).then_some(n)
}

/// The streams a model holds, where the library says (aclmdlRIGetStreams, CANN 9.1 on
/// A2/A3); None where it cannot.
fn model_streams(model: Handle) -> Option<u32> {
    let get = real!(&ACL, aclmdlRIGetStreams: ModelStreamsFn, null_mut())?;
    let mut n = 0u32;
    // SAFETY: the vendor function; NULL streams asks for the count only.
    (unsafe { get(model, null_mut(), &mut n) } == 0).then_some(n)
}

/// aclmdlRICaptureBegin: the capture is admitted whole, for the process's capture need on
/// the device (`crate::capture`), or refused here with 207008, as the device refuses a
/// stream, where npud has no room for all of it.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRICaptureBegin(stream: Handle, mode: u32) -> i32 {
    real!(&ACL, aclmdlRICaptureBegin: CaptureBeginFn).map_or(INTERNAL, |real| begin(stream, mode, real))
}

/// A capture begun on `stream` by `real` (either layer's Begin).
pub(super) fn begin(stream: Handle, mode: u32, real: CaptureBeginFn) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| {
            let device = current_device(p);
            let admitted = match p.capture_admit(device) {
                Ok(admitted) => admitted,
                Err(r) => return refused(NO_STREAM_RESOURCE, r),
            };
            // Without aclmdlRIGetStreams the model's size is the change in the free count.
            let counted = real!(&ACL, aclmdlRIGetStreams: ModelStreamsFn, null_mut()).is_some();
            let free_before = if counted { None } else { vendor_free() };
            let rc = unsafe { real(stream, mode) };
            if rc == 0 {
                let context = current_context();
                // The model it captures into: what rtStreamAddToModel names it by.
                let model = capturing_into(stream).map_or(0, |m| m as usize);
                let active = crate::capture::Active { device, context, admitted, free_before, made: 1, model };
                p.capture_begun(stream as usize, active);
            } else {
                p.capture_not_begun(device, admitted);
            }
            rc
        },
        || unsafe { real(stream, mode) },
    )
}

/// The model a capture under way on `stream` is capturing into (aclmdlRICaptureGetInfo),
/// where the library says.
fn capturing_into(stream: Handle) -> Option<Handle> {
    let info = real!(&ACL, aclmdlRICaptureGetInfo: CaptureInfoFn)?;
    let (mut status, mut model) = (0u32, null_mut());
    // SAFETY: the vendor function with two out-pointers of ours.
    let rc = unsafe { info(stream, &mut status, &mut model) };
    (rc == 0 && status == CAPTURE_STATUS_ACTIVE && !model.is_null()).then_some(model)
}

/// aclmdlRICaptureEnd: books what the model holds. A failed End leaves one of three
/// things (`ApiImpl::StreamEndCapture`, `Context::StreamEndCapture`):
/// - refused before the capture is touched (no current context, a stream of another
///   context, a NULL out-pointer...): the capture goes on, admitted as it was;
/// - ended from the wrong thread (begun in a mode other than RELAXED): the stream leaves
///   capture but the model is not destroyed, so its streams stay held until aclmdlRIDestroy
///   on the handle aclmdlRICaptureGetInfo gave, the end of its context or exit, and stay
///   booked as long;
/// - any other failure destroys the model with its streams.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRICaptureEnd(stream: Handle, model: *mut Handle) -> i32 {
    real!(&ACL, aclmdlRICaptureEnd: CaptureEndFn).map_or(INTERNAL, |real| end(stream, model, real))
}

/// A capture on `stream` ended by `real` (either layer's End).
pub(super) fn end(stream: Handle, model: *mut Handle, real: CaptureEndFn) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| {
            let active = p.capture_active(stream as usize);
            let into = active.and_then(|_| capturing_into(stream));
            let invalidated = p.capture_invalidated(stream as usize);
            let rc = unsafe { real(stream, model) };
            let Some(a) = active else { return rc };
            if invalidated && rc == 0 && !model.is_null() && destroyed(unsafe { *model }) {
                // As the runtime ends a capture it invalidated: no model, its streams free.
                unsafe { *model = null_mut() };
                p.capture_abandoned(stream as usize);
                let why = "npud refused a stream this capture needed, which invalidated it";
                return refused(RT_STREAM_CAPTURE_INVALIDATED, Refused::quietly(why.into()));
            }
            let kept = match rc {
                // SAFETY: the vendor filled the caller's out-pointer (checked non-null).
                0 if !model.is_null() => unsafe { *model },
                // Without the model's handle, the stream stands for it until its context ends.
                RT_STREAM_CAPTURE_WRONG_THREAD => into.unwrap_or(stream),
                _ if into.is_some() && capturing_into(stream) == into => return rc,
                _ => {
                    p.capture_abandoned(stream as usize);
                    return rc;
                }
            };
            let held = model_streams(kept)
                .or_else(|| a.free_before.zip(vendor_free()).map(|(before, now)| before.saturating_sub(now)))
                .unwrap_or(a.admitted);
            p.capture_ended(stream as usize, kept as usize, held);
            rc
        },
        || unsafe { real(stream, model) },
    )
}

/// The vendor's aclmdlRIDestroy on a model npud never booked.
fn destroyed(model: Handle) -> bool {
    let Some(destroy) = real!(&ACL, aclmdlRIDestroy: PtrFn, aclmdlRIDestroy as *mut c_void) else { return false };
    // SAFETY: the vendor function on the model its End just returned.
    unsafe { destroy(model) == 0 }
}

/// aclmdlRICaptureGetInfo: the vendor's answer, but INVALIDATED for a capture npud refused
/// a stream (the device did not see the refusal, so it still says ACTIVE).
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRICaptureGetInfo(stream: Handle, status: *mut u32, model: *mut Handle) -> i32 {
    let Some(real) = real!(&ACL, aclmdlRICaptureGetInfo: CaptureInfoFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's arguments; `status`
    // was filled when it returned 0 and is non-null.
    hook(
        |p| {
            let rc = unsafe { real(stream, status, model) };
            if rc == 0
                && !status.is_null()
                && unsafe { *status } == CAPTURE_STATUS_ACTIVE
                && p.capture_invalidated(stream as usize)
            {
                unsafe { *status = CAPTURE_STATUS_INVALIDATED };
            }
            rc
        },
        || unsafe { real(stream, status, model) },
    )
}

/// A call on `stream` that may make a stream of a capture (planned by `plan`): the stream
/// admitted first, the step applied once the call succeeded.
pub(super) fn captured(
    stream: Handle,
    plan: impl FnOnce(&Captures) -> Step,
    recorded: Option<usize>,
    real: impl Fn() -> i32,
) -> i32 {
    hook(
        |p| {
            let step = match p.capture_step(plan) {
                Ok(step) => step,
                Err(r) => return refused(NO_STREAM_RESOURCE, r),
            };
            let rc = real();
            if rc == 0 {
                p.capture_applied(stream as usize, step, recorded);
            }
            rc
        },
        &real,
    )
}

/// aclrtRecordEvent(event, stream): a task of the capture `stream` is in, and what a
/// stream waiting on `event` joins.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtRecordEvent(event: Handle, stream: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtRecordEvent: RecordFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    captured(
        stream,
        |c| c.plan_task(stream as usize, ENTRIES_TASK),
        Some(event as usize),
        || unsafe { real(event, stream) },
    )
}

/// ACL_EVENT_RECORD_DEFAULT / _WAIT_DEFAULT (0): the ordinary record and wait; EXTERNAL (1):
/// a task of the capture that makes no join (`capture::external` in the fake).
const EVENT_FLAG_DEFAULT: u32 = 0;

type RecordFlagFn = unsafe extern "C" fn(Handle, Handle, u32) -> i32;
type WaitFlagFn = unsafe extern "C" fn(Handle, Handle, u32, u32) -> i32;

#[unsafe(no_mangle)]
pub extern "C" fn aclrtRecordEventWithFlag(event: Handle, stream: Handle, flag: u32) -> i32 {
    let Some(real) = real!(&ACL, aclrtRecordEventWithFlag: RecordFlagFn) else { return INTERNAL };
    let recorded = (flag == EVENT_FLAG_DEFAULT).then_some(event as usize);
    // SAFETY: the vendor function with the caller's arguments.
    captured(stream, |c| c.plan_task(stream as usize, ENTRIES_TASK), recorded, || unsafe { real(event, stream, flag) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtStreamWaitEventWithFlag(stream: Handle, event: Handle, timeout: u32, flag: u32) -> i32 {
    let Some(real) = real!(&ACL, aclrtStreamWaitEventWithFlag: WaitFlagFn) else { return INTERNAL };
    let plan = |c: &Captures| match flag {
        EVENT_FLAG_DEFAULT => c.plan_wait(stream as usize, event as usize),
        _ => c.plan_task(stream as usize, ENTRIES_EXTERNAL_WAIT),
    };
    // SAFETY: the vendor function with the caller's arguments.
    captured(stream, plan, None, || unsafe { real(stream, event, timeout, flag) })
}

/// aclrtStreamWaitEvent(stream, event): a join when `event` was recorded in a capture
/// `stream` is not in; a task of its capture when it is in one.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtStreamWaitEvent(stream: Handle, event: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtStreamWaitEvent: RecordFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    captured(stream, |c| c.plan_wait(stream as usize, event as usize), None, || unsafe { real(stream, event) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtStreamWaitEventWithTimeout(stream: Handle, event: Handle, timeout: i32) -> i32 {
    let Some(real) = real!(&ACL, aclrtStreamWaitEventWithTimeout: WaitTimeoutFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    captured(stream, |c| c.plan_wait(stream as usize, event as usize), None, || unsafe { real(stream, event, timeout) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: u32,
    stream: Handle,
) -> i32 {
    let Some(real) = real!(&ACL, aclrtMemcpyAsync: MemcpyAsyncFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    captured(
        stream,
        |c| c.plan_task(stream as usize, ENTRIES_TASK),
        None,
        || unsafe { real(dst, dest_max, src, count, kind, stream) },
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtMemsetAsync(dst: *mut c_void, max: usize, value: i32, count: usize, stream: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtMemsetAsync: MemsetAsyncFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    captured(
        stream,
        |c| c.plan_task(stream as usize, ENTRIES_TASK),
        None,
        || unsafe { real(dst, max, value, count, stream) },
    )
}

/// aclmdlRIDestroy: the model's streams go back.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIDestroy(model: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclmdlRIDestroy: PtrFn) else { return INTERNAL };
    // SAFETY (both closures): the vendor function with the caller's handle.
    hook(
        |p| {
            let rc = unsafe { real(model) };
            if rc == 0 {
                p.model_destroyed(model as usize);
            }
            rc
        },
        || unsafe { real(model) },
    )
}

/// Our hook for an exact AscendCL name of a capture's (its begin, end and model, and the
/// calls that grow its streams), if we interpose it.
pub(crate) fn ours(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"aclmdlRICaptureBegin" => aclmdlRICaptureBegin as *mut c_void,
        b"aclmdlRICaptureEnd" => aclmdlRICaptureEnd as *mut c_void,
        b"aclmdlRIDestroy" => aclmdlRIDestroy as *mut c_void,
        b"aclmdlRICaptureGetInfo" => aclmdlRICaptureGetInfo as *mut c_void,
        b"aclrtRecordEvent" => aclrtRecordEvent as *mut c_void,
        b"aclrtStreamWaitEvent" => aclrtStreamWaitEvent as *mut c_void,
        b"aclrtStreamWaitEventWithTimeout" => aclrtStreamWaitEventWithTimeout as *mut c_void,
        b"aclrtMemcpyAsync" => aclrtMemcpyAsync as *mut c_void,
        b"aclrtRecordEventWithFlag" => aclrtRecordEventWithFlag as *mut c_void,
        b"aclrtStreamWaitEventWithFlag" => aclrtStreamWaitEventWithFlag as *mut c_void,
        b"aclrtMemsetAsync" => aclrtMemsetAsync as *mut c_void,
        _ => return None,
    })
}

//! Graph capture, at both layers: aclmdlRICaptureBegin/End (AscendCL) and
//! rtStreamBeginCapture/EndCapture (the runtime layer, which AscendCL's calls reach in some
//! layouts and GE calls itself) are admitted and booked by the same code, the real call
//! passed in. aclmdlRIDestroy gives a model's streams back.

use super::acl::{CountFn, LIBRARY, PtrFn, current_context, current_device};
use super::errors::refused;
use super::{Handle, INTERNAL, hook, real};
use npud_proto::codes::acl::{RT_NO_STREAM_RESOURCE as NO_STREAM_RESOURCE, RT_STREAM_CAPTURE_WRONG_THREAD};
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

/// aclmdlRICaptureStatus ACTIVE.
const CAPTURE_STATUS_ACTIVE: u32 = 1;

pub(super) type CaptureBeginFn = unsafe extern "C" fn(Handle, u32) -> i32;
pub(super) type CaptureEndFn = unsafe extern "C" fn(Handle, *mut Handle) -> i32;
type ModelStreamsFn = unsafe extern "C" fn(Handle, *mut Handle, *mut u32) -> i32;
type CaptureInfoFn = unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> i32;

/// The vendor's device-wide free count on the current device.
fn vendor_free() -> Option<u32> {
    let get =
        real!(&LIBRARY, aclrtGetStreamAvailableNum: CountFn, super::acl::aclrtGetStreamAvailableNum as *mut c_void)?;
    let mut n = 0u32;
    // SAFETY: the vendor function with an out-pointer to a local.
    (unsafe { get(&mut n) } == 0).then_some(n)
}

/// The streams a model holds, where the library says (aclmdlRIGetStreams, CANN 9.1 on
/// A2/A3); None where it cannot.
fn model_streams(model: Handle) -> Option<u32> {
    let get = real!(&LIBRARY, aclmdlRIGetStreams: ModelStreamsFn, null_mut())?;
    let mut n = 0u32;
    // SAFETY: the vendor function; NULL streams asks for the count only.
    (unsafe { get(model, null_mut(), &mut n) } == 0).then_some(n)
}

/// aclmdlRICaptureBegin: the capture is admitted for the size of the device's last one
/// (at least its own stream); a tenant with no room gets 207008 here, as the device would.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRICaptureBegin(stream: Handle, mode: u32) -> i32 {
    real!(&LIBRARY, aclmdlRICaptureBegin: CaptureBeginFn).map_or(INTERNAL, |real| begin(stream, mode, real))
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
            let counted = real!(&LIBRARY, aclmdlRIGetStreams: ModelStreamsFn, null_mut()).is_some();
            let free_before = if counted { None } else { vendor_free() };
            let rc = unsafe { real(stream, mode) };
            if rc == 0 {
                let context = current_context();
                p.capture_begun(stream as usize, crate::capture::Active { device, context, admitted, free_before });
            } else {
                p.not_created(device, admitted);
            }
            rc
        },
        || unsafe { real(stream, mode) },
    )
}

/// The model a capture under way on `stream` is capturing into (aclmdlRICaptureGetInfo),
/// where the library says.
fn capturing_into(stream: Handle) -> Option<Handle> {
    let info = real!(&LIBRARY, aclmdlRICaptureGetInfo: CaptureInfoFn, null_mut())?;
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
    real!(&LIBRARY, aclmdlRICaptureEnd: CaptureEndFn).map_or(INTERNAL, |real| end(stream, model, real))
}

/// A capture on `stream` ended by `real` (either layer's End).
pub(super) fn end(stream: Handle, model: *mut Handle, real: CaptureEndFn) -> i32 {
    // SAFETY (both closures): the vendor function with the caller's arguments.
    hook(
        |p| {
            let active = p.capture_active(stream as usize);
            let into = active.and_then(|_| capturing_into(stream));
            let rc = unsafe { real(stream, model) };
            let Some(a) = active else { return rc };
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

/// aclmdlRIDestroy: the model's streams go back.
#[unsafe(no_mangle)]
pub extern "C" fn aclmdlRIDestroy(model: Handle) -> i32 {
    let Some(real) = real!(&LIBRARY, aclmdlRIDestroy: PtrFn) else { return INTERNAL };
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

//! The calls that issue tasks and are not copies, memsets, records or waits: kernel
//! launches (AscendCL's `aclrtLaunchKernel`, the runtime's `rtKernelLaunch` and
//! `rtKernelLaunchWithHandleV2`), the single-operator executor (`aclopExecuteV2`),
//! callbacks and host functions, value writes. Each is a task on its stream; in a graph
//! capture it counts toward the capture stream's depth, and a full capture stream
//! cascades into one more stream of the device (hicann/runtime
//! `feature/aclgraph/stream_capture.cc` 75-118), so each is planned and admitted as the
//! capture's other tasks are (`capture::captured`). A task the runtime issues by a path no
//! entry point shows (an operator's internal launches) is not seen here: the capture's
//! headroom covers it, and End learns it.
//!
//! `rtStreamAddToModel(stm, captureMdl)` adds a stream to a capture under way by its model
//! (GE, HCCL): the runtime makes a capture stream for it (`capture_model.cc` 726-731), a
//! join of the capture the model is being captured into.

use super::capture::captured;
use super::vendor::{ACL, RUNTIME, real};
use super::{Handle, INTERNAL};
use crate::capture::{Captures, ENTRIES_TASK};
use std::ffi::{c_char, c_void};

type LaunchKernelFn = unsafe extern "C" fn(Handle, u32, *const c_void, usize, Handle) -> i32;
type OpExecuteFn = unsafe extern "C" fn(
    *const c_char,
    i32,
    *const c_void,
    *const c_void,
    i32,
    *const c_void,
    *const c_void,
    *const c_void,
    Handle,
) -> i32;
type CallbackFn = unsafe extern "C" fn(*mut c_void, *mut c_void, u32, Handle) -> i32;
type HostFuncFn = unsafe extern "C" fn(Handle, *mut c_void, *mut c_void) -> i32;
type ValueWriteFn = unsafe extern "C" fn(Handle, u64, u32, Handle) -> i32;
type RtKernelLaunchFn = unsafe extern "C" fn(*const c_void, u32, *mut c_void, u32, *mut c_void, Handle) -> i32;
type RtLaunchHandleFn =
    unsafe extern "C" fn(*mut c_void, u64, u32, *mut c_void, *mut c_void, Handle, *const c_void) -> i32;
type AddToModelFn = unsafe extern "C" fn(Handle, Handle) -> i32;

/// One task on `stream`, by `real`.
fn task(stream: Handle, real: impl Fn() -> i32) -> i32 {
    captured(stream, |c: &Captures| c.plan_task(stream as usize, ENTRIES_TASK), None, real)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtLaunchKernel(
    func: Handle,
    blocks: u32,
    args: *const c_void,
    size: usize,
    stream: Handle,
) -> i32 {
    let Some(real) = real!(&ACL, aclrtLaunchKernel: LaunchKernelFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe { real(func, blocks, args, size, stream) })
}

/// aclopExecuteV2: counted as one task (an operator may issue more, by the runtime's
/// internal path: the headroom covers those, and End learns them).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn aclopExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    input_desc: *const c_void,
    inputs: *const c_void,
    num_outputs: i32,
    output_desc: *const c_void,
    outputs: *const c_void,
    attr: *const c_void,
    stream: Handle,
) -> i32 {
    let Some(real) = real!(&ACL, aclopExecuteV2: OpExecuteFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe {
        real(op_type, num_inputs, input_desc, inputs, num_outputs, output_desc, outputs, attr, stream)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtLaunchCallback(func: *mut c_void, data: *mut c_void, block: u32, stream: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtLaunchCallback: CallbackFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe { real(func, data, block, stream) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtLaunchHostFunc(stream: Handle, func: *mut c_void, args: *mut c_void) -> i32 {
    let Some(real) = real!(&ACL, aclrtLaunchHostFunc: HostFuncFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe { real(stream, func, args) })
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtValueWrite(addr: Handle, value: u64, flag: u32, stream: Handle) -> i32 {
    let Some(real) = real!(&ACL, aclrtValueWrite: ValueWriteFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe { real(addr, value, flag, stream) })
}

#[unsafe(no_mangle)]
pub extern "C" fn rtKernelLaunch(
    stub: *const c_void,
    blocks: u32,
    args: *mut c_void,
    size: u32,
    sm: *mut c_void,
    stream: Handle,
) -> i32 {
    let Some(real) = real!(&RUNTIME, rtKernelLaunch: RtKernelLaunchFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe { real(stub, blocks, args, size, sm, stream) })
}

#[unsafe(no_mangle)]
pub extern "C" fn rtKernelLaunchWithHandleV2(
    handle: *mut c_void,
    tiling_key: u64,
    blocks: u32,
    args: *mut c_void,
    sm: *mut c_void,
    stream: Handle,
    cfg: *const c_void,
) -> i32 {
    let Some(real) = real!(&RUNTIME, rtKernelLaunchWithHandleV2: RtLaunchHandleFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    task(stream, || unsafe { real(handle, tiling_key, blocks, args, sm, stream, cfg) })
}

#[unsafe(no_mangle)]
pub extern "C" fn rtStreamAddToModel(stream: Handle, model: Handle) -> i32 {
    let Some(real) = real!(&RUNTIME, rtStreamAddToModel: AddToModelFn) else { return INTERNAL };
    // SAFETY: the vendor function with the caller's arguments.
    captured(
        stream,
        |c: &Captures| c.plan_add(stream as usize, model as usize),
        None,
        || unsafe { real(stream, model) },
    )
}

/// Our hook for an AscendCL name of this module's.
pub(crate) fn ours_acl(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"aclrtLaunchKernel" => aclrtLaunchKernel as *mut c_void,
        b"aclopExecuteV2" => aclopExecuteV2 as *mut c_void,
        b"aclrtLaunchCallback" => aclrtLaunchCallback as *mut c_void,
        b"aclrtLaunchHostFunc" => aclrtLaunchHostFunc as *mut c_void,
        b"aclrtValueWrite" => aclrtValueWrite as *mut c_void,
        _ => return None,
    })
}

/// Our hook for a runtime-layer name of this module's.
pub(crate) fn ours_rt(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"rtKernelLaunch" => rtKernelLaunch as *mut c_void,
        b"rtKernelLaunchWithHandleV2" => rtKernelLaunchWithHandleV2 as *mut c_void,
        b"rtStreamAddToModel" => rtStreamAddToModel as *mut c_void,
        _ => return None,
    })
}

//! Kernel launches, as a framework's operators reach the device: AscendCL's binaries and
//! functions (`aclrtBinaryLoadFromData`, `aclrtBinaryGetFunction`, `aclrtLaunchKernel`;
//! `include/external/acl/acl_rt.h` 3281-3321, 4436 in hicann/runtime @681ef76) and the
//! single-operator executor (`aclopExecuteV2`, acl_op.h). The runtime layer's launches
//! (`rtDevBinaryRegister`, `rtFunctionRegister`, `rtKernelLaunch`,
//! `rtKernelLaunchWithHandleV2`) are in tests/fake-runtime and land on [`Rt::launch`].
//!
//! A launch is one task on its stream (the simulated device runs nothing, and counts it:
//! `npudFakeKernelsRun`); issued to a stream in capture it is a task of the capture, which
//! counts toward the capture stream's depth and cascades like any other (`capture::tasks`),
//! and runs at each execution of the model.
//!
//! `aclopExecuteV2` issues its kernels by the runtime's internal path, as the real
//! single-operator executor does through GE's task building: no exported launch entry
//! point sees them, so an interposer that hooks launches sees one call, not its tasks.

use crate::state::capture::Task;
use crate::*;
use std::collections::BTreeSet as HashSet;
use std::sync::Mutex;

/// Binaries loaded and the functions found in them: handles the fake gave out.
static HANDLES: Mutex<(HashSet<usize>, HashSet<usize>)> = Mutex::new((HashSet::new(), HashSet::new()));

fn handles() -> std::sync::MutexGuard<'static, (HashSet<usize>, HashSet<usize>)> {
    HANDLES.lock().unwrap_or_else(|e| e.into_inner())
}

/// aclrtBinaryLoadFromData(data, length, options, binHandle): the device binary's bytes
/// (not read: nothing runs on the simulated device).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryLoadFromData(
    data: *const c_void,
    length: usize,
    _options: *const c_void,
    bin: *mut Handle,
) -> AclError {
    if data.is_null() || length == 0 || bin.is_null() {
        return INVALID_PARAM;
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    let h = r.mint_handle();
    handles().0.insert(h);
    // SAFETY: checked non-null out-pointer.
    unsafe { put(bin, h as Handle) }
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtBinaryUnLoad(bin: Handle) -> AclError {
    if handles().0.remove(&(bin as usize)) { ACL_SUCCESS } else { INVALID_PARAM }
}

/// aclrtBinaryGetFunction(binHandle, kernelName, funcHandle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtBinaryGetFunction(bin: Handle, name: *const c_char, func: *mut Handle) -> AclError {
    if name.is_null() || func.is_null() || !handles().0.contains(&(bin as usize)) {
        return INVALID_PARAM;
    }
    let Some(r) = rt() else { return UNINITIALIZE };
    let h = r.mint_handle();
    handles().1.insert(h);
    // SAFETY: checked non-null out-pointer.
    unsafe { put(func, h as Handle) }
}

/// aclrtLaunchKernel(funcHandle, numBlocks, argsData, argsSize, stream).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtLaunchKernel(
    func: Handle,
    blocks: u32,
    _args: *const c_void,
    _args_size: usize,
    stream: Handle,
) -> AclError {
    if blocks == 0 || !handles().1.contains(&(func as usize)) {
        return INVALID_PARAM;
    }
    with_rt(|r| r.launch(stream, blocks))
}

/// aclopExecuteV2(opType, numInputs, inputDesc, inputs, numOutputs, outputDesc, outputs,
/// attr, stream): the operator's two kernels (its tiling kernel and its compute kernel,
/// as an operator compiled with dynamic shapes runs), by the runtime's internal path
/// (module docs): two tasks for one call, which no entry point shows.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn aclopExecuteV2(
    op_type: *const c_char,
    num_inputs: i32,
    _input_desc: *const c_void,
    _inputs: *const c_void,
    num_outputs: i32,
    _output_desc: *const c_void,
    _outputs: *const c_void,
    _attr: *const c_void,
    stream: Handle,
) -> AclError {
    if op_type.is_null() || num_inputs < 0 || num_outputs < 0 {
        return INVALID_PARAM;
    }
    with_rt(|r| {
        r.launch(stream, 1)?;
        r.launch(stream, 1)
    })
}

/// Kernels the simulated devices have run in this process (each execution of a model
/// runs its captured ones again).
#[unsafe(no_mangle)]
pub extern "C" fn npudFakeKernelsRun() -> u64 {
    crate::state::memory::kernels_run()
}

impl Rt {
    /// One kernel on `stream` (NULL: the current context's default); `blocks` is checked
    /// by the entry points, and the simulated device runs no block of it.
    pub fn launch(&self, stream: Handle, _blocks: u32) -> Result<(), AclError> {
        match crate::state::memory::issue(self, stream, Task::Kernel) {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

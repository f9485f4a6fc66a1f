//! cuGetProcAddress: how the CUDA runtime (and cuda.bindings) find the driver's entry points,
//! by name and the CUDA version the caller was built for, as `cudaTypedefs.h` maps them.

use crate::*;
use std::ffi::{CStr, c_char, c_void};

/// The driver entry point a versioned request names, as `cudaTypedefs.h` maps them.
fn proc_address(symbol: &[u8], version: i32) -> Option<*mut c_void> {
    Some(match symbol {
        b"cuInit" => cuInit as *mut c_void,
        b"cuDeviceGet" => cuDeviceGet as *mut c_void,
        b"cuDeviceGetCount" => cuDeviceGetCount as *mut c_void,
        b"cuDevicePrimaryCtxRetain" => cuDevicePrimaryCtxRetain as *mut c_void,
        b"cuCtxSetCurrent" => cuCtxSetCurrent as *mut c_void,
        b"cuCtxGetCurrent" => cuCtxGetCurrent as *mut c_void,
        b"cuCtxGetDevice" => cuCtxGetDevice as *mut c_void,
        b"cuCtxPushCurrent" if version >= 4000 => cuCtxPushCurrent_v2 as *mut c_void,
        b"cuCtxPushCurrent" => cuCtxPushCurrent as *mut c_void,
        b"cuCtxPopCurrent" if version >= 4000 => cuCtxPopCurrent_v2 as *mut c_void,
        b"cuCtxPopCurrent" => cuCtxPopCurrent as *mut c_void,
        b"cuCtxCreate" if version >= 3020 => cuCtxCreate_v2 as *mut c_void,
        b"cuCtxDestroy" if version >= 4000 => cuCtxDestroy_v2 as *mut c_void,
        b"cuStreamCreate" => cuStreamCreate as *mut c_void,
        b"cuStreamCreateWithPriority" => cuStreamCreateWithPriority as *mut c_void,
        b"cuStreamDestroy" if version >= 4000 => cuStreamDestroy_v2 as *mut c_void,
        b"cuStreamDestroy" => cuStreamDestroy as *mut c_void,
        b"cuStreamSynchronize" => cuStreamSynchronize as *mut c_void,
        b"cuStreamQuery" => cuStreamQuery as *mut c_void,
        b"cuStreamGetPriority" => cuStreamGetPriority as *mut c_void,
        b"cuStreamGetFlags" => cuStreamGetFlags as *mut c_void,
        b"cuStreamWaitEvent" => cuStreamWaitEvent as *mut c_void,
        b"cuStreamAddCallback" => cuStreamAddCallback as *mut c_void,
        b"cuLaunchHostFunc" => cuLaunchHostFunc as *mut c_void,
        b"cuLaunchKernel" => cuLaunchKernel as *mut c_void,
        b"cuModuleLoadData" => cuModuleLoadData as *mut c_void,
        b"cuModuleLoad" => cuModuleLoad as *mut c_void,
        b"cuModuleUnload" => cuModuleUnload as *mut c_void,
        b"cuDevicePrimaryCtxGetState" => cuDevicePrimaryCtxGetState as *mut c_void,
        b"cuDevicePrimaryCtxSetFlags" if version >= 11000 => cuDevicePrimaryCtxSetFlags_v2 as *mut c_void,
        b"cuDevicePrimaryCtxSetFlags" => cuDevicePrimaryCtxSetFlags as *mut c_void,
        b"cuCtxGetFlags" => cuCtxGetFlags as *mut c_void,
        b"cuCtxGetApiVersion" => cuCtxGetApiVersion as *mut c_void,
        b"cuStreamGetCtx" => cuStreamGetCtx as *mut c_void,
        b"cuModuleGetFunction" => cuModuleGetFunction as *mut c_void,
        b"cuCtxSynchronize" => cuCtxSynchronize as *mut c_void,
        b"cuCtxGetStreamPriorityRange" => cuCtxGetStreamPriorityRange as *mut c_void,
        b"cuEventCreate" => cuEventCreate as *mut c_void,
        b"cuEventRecord" => cuEventRecord as *mut c_void,
        b"cuEventQuery" => cuEventQuery as *mut c_void,
        b"cuEventSynchronize" => cuEventSynchronize as *mut c_void,
        b"cuEventElapsedTime" if version >= 12080 => cuEventElapsedTime_v2 as *mut c_void,
        b"cuEventElapsedTime" => cuEventElapsedTime as *mut c_void,
        b"cuEventDestroy" if version >= 4000 => cuEventDestroy_v2 as *mut c_void,
        b"cuEventDestroy" => cuEventDestroy as *mut c_void,
        b"cuDevicePrimaryCtxRelease" if version >= 11000 => cuDevicePrimaryCtxRelease_v2 as *mut c_void,
        b"cuDevicePrimaryCtxRelease" => cuDevicePrimaryCtxRelease as *mut c_void,
        b"cuDevicePrimaryCtxReset" if version >= 11000 => cuDevicePrimaryCtxReset_v2 as *mut c_void,
        b"cuDevicePrimaryCtxReset" => cuDevicePrimaryCtxReset as *mut c_void,
        b"cuDeviceGetUuid" if version >= 11040 => cuDeviceGetUuid_v2 as *mut c_void,
        b"cuDeviceGetUuid" => cuDeviceGetUuid as *mut c_void,
        b"cuDeviceGetPCIBusId" => cuDeviceGetPCIBusId as *mut c_void,
        b"cuDeviceGetName" => cuDeviceGetName as *mut c_void,
        b"cuDeviceGetAttribute" => attributes::cuDeviceGetAttribute as *mut c_void,
        b"cuDriverGetVersion" => cuDriverGetVersion as *mut c_void,
        b"cuGetErrorName" => cuGetErrorName as *mut c_void,
        b"cuGetErrorString" => cuGetErrorString as *mut c_void,
        b"cuMemAlloc" if version >= 3020 => memory::cuMemAlloc_v2 as *mut c_void,
        b"cuMemAllocHost" if version >= 3020 => memory::cuMemAllocHost_v2 as *mut c_void,
        b"cuMemFree" if version >= 3020 => memory::cuMemFree_v2 as *mut c_void,
        b"cuMemFreeHost" => memory::cuMemFreeHost as *mut c_void,
        b"cuMemcpyHtoD" if version >= 3020 => memory::cuMemcpyHtoD_v2 as *mut c_void,
        b"cuMemcpyDtoH" if version >= 3020 => memory::cuMemcpyDtoH_v2 as *mut c_void,
        b"cuMemcpyDtoD" if version >= 3020 => memory::cuMemcpyDtoD_v2 as *mut c_void,
        b"cuMemcpyHtoDAsync" if version >= 3020 => memory::cuMemcpyHtoDAsync_v2 as *mut c_void,
        b"cuMemcpyDtoHAsync" if version >= 3020 => memory::cuMemcpyDtoHAsync_v2 as *mut c_void,
        b"cuMemsetD8" if version >= 3020 => memory::cuMemsetD8_v2 as *mut c_void,
        b"cuMemGetInfo" if version >= 3020 => memory::cuMemGetInfo_v2 as *mut c_void,
        b"cuMemsetD32" if version >= 3020 => memory::cuMemsetD32_v2 as *mut c_void,
        b"cuMemsetD8Async" => memory::cuMemsetD8Async as *mut c_void,
        b"cuStreamWaitValue32" if version >= 12000 => cuStreamWaitValue32_v2 as *mut c_void,
        b"cuStreamWaitValue32" => cuStreamWaitValue32 as *mut c_void,
        b"cuStreamWaitValue64" if version >= 12000 => cuStreamWaitValue64_v2 as *mut c_void,
        b"cuStreamWaitValue64" => cuStreamWaitValue64 as *mut c_void,
        b"cuStreamWriteValue32" if version >= 12000 => cuStreamWriteValue32_v2 as *mut c_void,
        b"cuStreamWriteValue32" => cuStreamWriteValue32 as *mut c_void,
        b"cuStreamWriteValue64" if version >= 12000 => cuStreamWriteValue64_v2 as *mut c_void,
        b"cuStreamWriteValue64" => cuStreamWriteValue64 as *mut c_void,
        b"cuMemcpyDtoDAsync" if version >= 3020 => memory::cuMemcpyDtoDAsync_v2 as *mut c_void,
        b"cuDeviceTotalMem" if version >= 3020 => memory::cuDeviceTotalMem_v2 as *mut c_void,
        b"cuDeviceGetDevResource" => green::cuDeviceGetDevResource as *mut c_void,
        b"cuDevResourceGenerateDesc" => green::cuDevResourceGenerateDesc as *mut c_void,
        b"cuGreenCtxCreate" => green::cuGreenCtxCreate as *mut c_void,
        b"cuGreenCtxDestroy" => green::cuGreenCtxDestroy as *mut c_void,
        b"cuCtxFromGreenCtx" => green::cuCtxFromGreenCtx as *mut c_void,
        b"cuGreenCtxStreamCreate" => green::cuGreenCtxStreamCreate as *mut c_void,
        b"cuStreamGetGreenCtx" => green::cuStreamGetGreenCtx as *mut c_void,
        b"cuGetProcAddress" if version >= 12000 => cuGetProcAddress_v2 as *mut c_void,
        b"cuGetProcAddress" => cuGetProcAddress as *mut c_void,
        _ => return None,
    })
}

/// cuGetProcAddress (CUDA 11.3): how the runtime finds driver entry points.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    _flags: u64,
) -> CuResult {
    // SAFETY: forwarded; no status out-pointer.
    unsafe { cuGetProcAddress_v2(symbol, pfn, version, _flags, std::ptr::null_mut()) }
}

/// cuGetProcAddress_v2 (CUDA 12): the same, with why a symbol was not found.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    _flags: u64,
    status: *mut i32,
) -> CuResult {
    if symbol.is_null() || pfn.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: a NUL-terminated name from the caller.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let found = proc_address(name, version);
    // SAFETY: out-pointers from the caller (status may be NULL).
    unsafe {
        *pfn = found.unwrap_or(std::ptr::null_mut());
        if !status.is_null() {
            *status = if found.is_some() { 0 } else { 1 };
        }
    }
    if found.is_some() { SUCCESS } else { NOT_FOUND }
}

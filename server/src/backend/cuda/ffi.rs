//! Layer 1 of the CUDA driver binding: the C ABI of libcuda.so.1
//! (shared/reference/cuda.md). Loading, lazy symbols and the callback trampoline are
//! `dl`'s; this file adds the signatures. CUresult stays a plain u32.
#![allow(unsafe_code)]

use super::super::dl::call;
pub use super::super::dl::{Lib, LoadError, Thunk, UserData, callback_trampoline};
use std::ffi::{c_char, c_void};

pub use npud_proto::codes::cuda::CuResult;
pub type HostFn = unsafe extern "C" fn(user_data: *mut c_void);
/// CUstreamCallback: (hStream, status, userData).
pub type StreamCallback = unsafe extern "C" fn(stream: usize, status: CuResult, user_data: *mut c_void);

/// A one-shot closure for cuStreamAddCallback, given the stream's status.
pub type StatusThunk = Box<dyn FnOnce(CuResult) + Send>;

/// The C entry point of cuStreamAddCallback: runs the boxed closure once with the status.
pub unsafe extern "C" fn stream_callback_trampoline(_stream: usize, status: CuResult, user_data: *mut c_void) {
    // SAFETY: the driver passes back exactly the user data of one successful
    // cuStreamAddCallback, which came from a `UserData<StatusThunk>`, and calls once.
    let f = unsafe { Box::from_raw(user_data.cast::<StatusThunk>()) };
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || f(status)));
}

/// The CUDA driver calls npud makes, one safe method each. Handles are opaque usizes.
pub trait Cuda {
    fn lib(&self) -> &Lib;

    fn init(&self) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuInit", fn(u32) -> CuResult, 0)
    }
    fn device_get_count(&self, n: &mut i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuDeviceGetCount", fn(*mut i32) -> CuResult, n)
    }
    fn device_get(&self, dev: &mut i32, ordinal: i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuDeviceGet", fn(*mut i32, i32) -> CuResult, dev, ordinal)
    }
    /// cuDeviceGetAttribute(value, attribute, dev).
    fn device_get_attribute(&self, value: &mut i32, attribute: i32, dev: i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuDeviceGetAttribute", fn(*mut i32, i32, i32) -> CuResult, value, attribute, dev)
    }
    fn device_get_name(&self, buf: &mut [u8; 128], dev: i32) -> Result<CuResult, LoadError> {
        call!(
            self.lib(),
            "cuDeviceGetName",
            fn(*mut c_char, i32, i32) -> CuResult,
            buf.as_mut_ptr().cast::<c_char>(),
            128,
            dev
        )
    }
    /// The device's UUID (cuDeviceGetUuid_v2, which names a MIG instance too, else
    /// cuDeviceGetUuid), as `GPU-…` text; None when the driver has neither or refuses.
    fn device_uuid(&self, dev: i32) -> Option<String> {
        let mut raw = [0u8; 16];
        let rc = if self.lib().has("cuDeviceGetUuid_v2") {
            call!(self.lib(), "cuDeviceGetUuid_v2", fn(*mut u8, i32) -> CuResult, raw.as_mut_ptr(), dev)
        } else if self.lib().has("cuDeviceGetUuid") {
            call!(self.lib(), "cuDeviceGetUuid", fn(*mut u8, i32) -> CuResult, raw.as_mut_ptr(), dev)
        } else {
            return None;
        };
        (rc.ok()? == 0).then(|| npud_proto::identity::gpu_uuid(&raw))
    }
    /// The device's PCI bus id (`0000:3b:00.0`); None when the driver refuses.
    fn device_pci_bus_id(&self, dev: i32) -> Option<String> {
        let mut buf = [0u8; 64];
        let rc = call!(
            self.lib(),
            "cuDeviceGetPCIBusId",
            fn(*mut c_char, i32, i32) -> CuResult,
            buf.as_mut_ptr().cast::<c_char>(),
            64,
            dev
        );
        (rc.ok()? == 0).then(|| String::from_utf8_lossy(buf.split(|b| *b == 0).next().unwrap_or(&[])).into_owned())
    }
    fn primary_ctx_retain(&self, ctx: &mut usize, dev: i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuDevicePrimaryCtxRetain", fn(*mut usize, i32) -> CuResult, ctx, dev)
    }
    fn primary_ctx_release(&self, dev: i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuDevicePrimaryCtxRelease_v2", fn(i32) -> CuResult, dev)
    }
    fn ctx_set_current(&self, ctx: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuCtxSetCurrent", fn(usize) -> CuResult, ctx)
    }
    fn stream_create_with_priority(&self, s: &mut usize, flags: u32, priority: i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuStreamCreateWithPriority", fn(*mut usize, u32, i32) -> CuResult, s, flags, priority)
    }
    fn stream_destroy(&self, s: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuStreamDestroy_v2", fn(usize) -> CuResult, s)
    }
    fn stream_query(&self, s: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuStreamQuery", fn(usize) -> CuResult, s)
    }
    fn stream_wait_event(&self, s: usize, e: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuStreamWaitEvent", fn(usize, usize, u32) -> CuResult, s, e, 0)
    }
    fn event_create(&self, e: &mut usize, flags: u32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuEventCreate", fn(*mut usize, u32) -> CuResult, e, flags)
    }
    fn event_destroy(&self, e: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuEventDestroy_v2", fn(usize) -> CuResult, e)
    }
    fn event_record(&self, e: usize, s: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuEventRecord", fn(usize, usize) -> CuResult, e, s)
    }
    fn event_query(&self, e: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuEventQuery", fn(usize) -> CuResult, e)
    }
    /// cuEventElapsedTime_v2 from CUDA 12.8, cuEventElapsedTime before.
    fn event_elapsed_time(&self, ms: &mut f32, start: usize, end: usize) -> Result<CuResult, LoadError> {
        if self.lib().has("cuEventElapsedTime_v2") {
            call!(self.lib(), "cuEventElapsedTime_v2", fn(*mut f32, usize, usize) -> CuResult, ms, start, end)
        } else {
            call!(self.lib(), "cuEventElapsedTime", fn(*mut f32, usize, usize) -> CuResult, ms, start, end)
        }
    }
    fn launch_host_func(&self, s: usize, f: HostFn, user_data: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuLaunchHostFunc", fn(usize, HostFn, usize) -> CuResult, s, f, user_data)
    }
    /// Flags must be 0 ("reserved for future use").
    fn stream_add_callback(&self, s: usize, f: StreamCallback, user_data: usize) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuStreamAddCallback", fn(usize, StreamCallback, usize, u32) -> CuResult, s, f, user_data, 0)
    }
    /// `image` must be NUL-terminated PTX text.
    fn module_load_data(&self, m: &mut usize, image: &std::ffi::CStr) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuModuleLoadData", fn(*mut usize, *const c_char) -> CuResult, m, image.as_ptr())
    }
    fn module_get_function(&self, f: &mut usize, m: usize, name: &std::ffi::CStr) -> Result<CuResult, LoadError> {
        call!(self.lib(), "cuModuleGetFunction", fn(*mut usize, usize, *const c_char) -> CuResult, f, m, name.as_ptr())
    }
    /// A 1x1x1 launch of a kernel whose one parameter is a u64.
    fn launch_kernel_u64(&self, f: usize, s: usize, arg: u64) -> Result<CuResult, LoadError> {
        let mut arg = arg;
        let mut params: [*mut c_void; 1] = [(&raw mut arg).cast::<c_void>()];
        call!(
            self.lib(),
            "cuLaunchKernel",
            fn(usize, u32, u32, u32, u32, u32, u32, u32, usize, *mut *mut c_void, *mut *mut c_void) -> CuResult,
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut()
        )
    }
    // The fake library's test hooks (absent from a real driver).
    fn fake_fail_task(&self, s: usize, task: u64, code: i32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "npudFakeFailTask", fn(usize, u64, i32) -> CuResult, s, task, code)
    }
    fn fake_stall(&self, device: i32, stalled: u32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "npudFakeStall", fn(i32, u32) -> CuResult, device, stalled)
    }
    fn fake_streams_in_use(&self, device: i32, n: &mut u32) -> Result<CuResult, LoadError> {
        call!(self.lib(), "npudFakeStreamsInUse", fn(i32, *mut u32) -> CuResult, device, n)
    }
}

impl Cuda for Lib {
    fn lib(&self) -> &Lib {
        self
    }
}

/// NVML's C ABI (`libnvidia-ml.so.1`; NVIDIA's NVML API reference, `nvml.h`): the calls npud
/// makes, one method each, returning `nvmlReturn_t`. Handles are opaque usizes.
pub trait Nvml {
    fn nvml(&self) -> &Lib;

    fn nvml_init(&self) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlInit_v2", fn() -> u32,)
    }
    fn nvml_shutdown(&self) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlShutdown", fn() -> u32,)
    }
    fn nvml_device_count(&self, n: &mut u32) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetCount_v2", fn(*mut u32) -> u32, n)
    }
    fn nvml_handle_by_index(&self, index: u32, handle: &mut usize) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetHandleByIndex_v2", fn(u32, *mut usize) -> u32, index, handle)
    }
    /// nvmlDeviceGetUUID (`name` false) or nvmlDeviceGetName (`name` true) into `buf`.
    fn nvml_text(&self, handle: usize, name: bool, buf: &mut [u8; 96]) -> Result<u32, LoadError> {
        let (ptr, len) = (buf.as_mut_ptr().cast::<c_char>(), buf.len() as u32);
        match name {
            false => call!(self.nvml(), "nvmlDeviceGetUUID", fn(usize, *mut c_char, u32) -> u32, handle, ptr, len),
            true => call!(self.nvml(), "nvmlDeviceGetName", fn(usize, *mut c_char, u32) -> u32, handle, ptr, len),
        }
    }
    fn nvml_minor(&self, handle: usize, minor: &mut u32) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetMinorNumber", fn(usize, *mut u32) -> u32, handle, minor)
    }
    fn nvml_compute_mode(&self, handle: usize, mode: &mut u32) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetComputeMode", fn(usize, *mut u32) -> u32, handle, mode)
    }
    fn nvml_mig_mode(&self, handle: usize, current: &mut u32, pending: &mut u32) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetMigMode", fn(usize, *mut u32, *mut u32) -> u32, handle, current, pending)
    }
    fn nvml_max_mig(&self, handle: usize, count: &mut u32) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetMaxMigDeviceCount", fn(usize, *mut u32) -> u32, handle, count)
    }
    fn nvml_mig_handle(&self, handle: usize, index: u32, mig: &mut usize) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceGetMigDeviceHandleByIndex", fn(usize, u32, *mut usize) -> u32, handle, index, mig)
    }
    fn nvml_event_set_create(&self, set: &mut usize) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlEventSetCreate", fn(*mut usize) -> u32, set)
    }
    fn nvml_register_events(&self, handle: usize, types: u64, set: usize) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlDeviceRegisterEvents", fn(usize, u64, usize) -> u32, handle, types, set)
    }
    fn nvml_event_wait(&self, set: usize, data: &mut NvmlEventData, timeout_ms: u32) -> Result<u32, LoadError> {
        call!(self.nvml(), "nvmlEventSetWait_v2", fn(usize, *mut NvmlEventData, u32) -> u32, set, data, timeout_ms)
    }
}

/// `nvmlEventData_t` (`nvml.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct NvmlEventData {
    pub device: usize,
    pub event_type: u64,
    pub event_data: u64,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

impl Nvml for Lib {
    fn nvml(&self) -> &Lib {
        self
    }
}

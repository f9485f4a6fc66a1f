//! Layer 1 of the AscendCL binding: the C ABI of libascendcl.so (shared/reference/acl.md).
//! Loading, lazy symbols and the callback trampoline are `dl`'s; this file adds the
//! signatures and AscendCL's process-wide exception callback. The only `unsafe` is there.
#![allow(unsafe_code)]

use super::super::dl::call;
pub use super::super::dl::{Lib, LoadError, Thunk, UserData, callback_trampoline, current_thread_id};
use std::ffi::{c_char, c_void};

pub use npud_proto::codes::acl::AclError;
pub type Callback = unsafe extern "C" fn(user_data: *mut c_void);
pub type ExceptionCallback = unsafe extern "C" fn(info: *mut c_void);

/// The AscendCL calls npud makes, one safe method each.
pub trait Acl {
    fn lib(&self) -> &Lib;

    fn init(&self) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclInit", fn(*const c_char) -> AclError, std::ptr::null())
    }
    fn get_device_count(&self, count: &mut u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtGetDeviceCount", fn(*mut u32) -> AclError, count)
    }
    fn set_device(&self, device: i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSetDevice", fn(i32) -> AclError, device)
    }
    fn create_context(&self, ctx: &mut usize, device: i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtCreateContext", fn(*mut usize, i32) -> AclError, ctx, device)
    }
    fn set_current_context(&self, ctx: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSetCurrentContext", fn(usize) -> AclError, ctx)
    }
    fn create_stream_with_config(&self, s: &mut usize, priority: u32, flags: u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtCreateStreamWithConfig", fn(*mut usize, u32, u32) -> AclError, s, priority, flags)
    }
    fn create_stream(&self, s: &mut usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtCreateStream", fn(*mut usize) -> AclError, s)
    }
    fn destroy_stream(&self, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtDestroyStream", fn(usize) -> AclError, s)
    }
    fn destroy_stream_force(&self, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtDestroyStreamForce", fn(usize) -> AclError, s)
    }
    fn synchronize_stream_with_timeout(&self, s: usize, ms: i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSynchronizeStreamWithTimeout", fn(usize, i32) -> AclError, s, ms)
    }
    fn stream_query(&self, s: usize, status: &mut u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtStreamQuery", fn(usize, *mut u32) -> AclError, s, status)
    }
    fn stream_wait_event(&self, s: usize, e: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtStreamWaitEvent", fn(usize, usize) -> AclError, s, e)
    }
    fn stream_get_id(&self, s: usize, id: &mut i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtStreamGetId", fn(usize, *mut i32) -> AclError, s, id)
    }
    fn get_stream_available_num(&self, n: &mut u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtGetStreamAvailableNum", fn(*mut u32) -> AclError, n)
    }
    fn set_stream_failure_mode(&self, s: usize, mode: u64) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSetStreamFailureMode", fn(usize, u64) -> AclError, s, mode)
    }
    fn create_event_with_flag(&self, e: &mut usize, flags: u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtCreateEventWithFlag", fn(*mut usize, u32) -> AclError, e, flags)
    }
    fn destroy_event(&self, e: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtDestroyEvent", fn(usize) -> AclError, e)
    }
    fn record_event(&self, e: usize, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtRecordEvent", fn(usize, usize) -> AclError, e, s)
    }
    fn reset_event(&self, e: usize, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtResetEvent", fn(usize, usize) -> AclError, e, s)
    }
    fn query_event_status(&self, e: usize, status: &mut u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtQueryEventStatus", fn(usize, *mut u32) -> AclError, e, status)
    }
    fn synchronize_event_with_timeout(&self, e: usize, ms: i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSynchronizeEventWithTimeout", fn(usize, i32) -> AclError, e, ms)
    }
    fn event_elapsed_time(&self, ms: &mut f32, start: usize, end: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtEventElapsedTime", fn(*mut f32, usize, usize) -> AclError, ms, start, end)
    }
    fn subscribe_report(&self, thread: u64, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSubscribeReport", fn(u64, usize) -> AclError, thread, s)
    }
    fn unsubscribe_report(&self, thread: u64, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtUnSubscribeReport", fn(u64, usize) -> AclError, thread, s)
    }
    fn launch_callback(&self, f: Callback, user_data: usize, block: u32, s: usize) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtLaunchCallback", fn(Callback, usize, u32, usize) -> AclError, f, user_data, block, s)
    }
    fn process_report(&self, ms: i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtProcessReport", fn(i32) -> AclError, ms)
    }
    fn set_exception_info_callback(&self, f: ExceptionCallback) -> Result<AclError, LoadError> {
        call!(self.lib(), "aclrtSetExceptionInfoCallback", fn(ExceptionCallback) -> AclError, f)
    }
    /// The five exception-info getters, each returning a u32 (0xFFFFFFFF for NULL).
    fn exception_field(&self, getter: &'static str, info: usize) -> Result<u32, LoadError> {
        let addr = self.lib().symbol(getter)?;
        // SAFETY: the getters take `const aclrtExceptionInfo *` and return uint32_t; `info`
        // is the pointer the runtime passed to our exception callback, valid during it.
        let f: unsafe extern "C" fn(usize) -> u32 =
            unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(usize) -> u32>(addr) };
        // SAFETY: as above.
        Ok(unsafe { f(info) })
    }
    /// The SoC's name (`aclrtGetSocName`, e.g. "Ascend910B3"); None when the library lacks
    /// the call or answers NULL.
    fn soc_name(&self) -> Option<String> {
        if !self.lib().has("aclrtGetSocName") {
            return None;
        }
        let name = call!(self.lib(), "aclrtGetSocName", fn() -> *const c_char,).ok()?;
        if name.is_null() {
            return None;
        }
        // SAFETY: a non-NULL answer is a NUL-terminated string the library keeps alive for
        // the process's lifetime; it is copied before anything else is called.
        Some(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
    }
    /// The physical id of the device this process calls `user`: aclrtGetPhyDevIdByUserDevId
    /// where the library has it, else aclrtGetPhyDevIdByLogicDevId, whose argument the
    /// vendor notes is in fact the user id. None when it has neither or refuses.
    fn physical_id(&self, user: i32) -> Option<u32> {
        let mut phy = -1i32;
        let rc = if self.lib().has("aclrtGetPhyDevIdByUserDevId") {
            call!(self.lib(), "aclrtGetPhyDevIdByUserDevId", fn(i32, *mut i32) -> AclError, user, &mut phy)
        } else if self.lib().has("aclrtGetPhyDevIdByLogicDevId") {
            call!(self.lib(), "aclrtGetPhyDevIdByLogicDevId", fn(i32, *mut i32) -> AclError, user, &mut phy)
        } else {
            return None;
        };
        (rc.ok()? == 0).then(|| u32::try_from(phy).ok()).flatten()
    }
    // The fake library's test hooks (absent from real AscendCL).
    /// The fake driver's node for physical device `physical`; None from real AscendCL.
    fn fake_device_node(&self, physical: u32) -> Option<std::path::PathBuf> {
        if !self.lib().has("npudFakeDeviceNode") {
            return None;
        }
        let mut buf = [0u8; 512];
        let n = call!(
            self.lib(),
            "npudFakeDeviceNode",
            fn(i32, *mut u8, usize) -> i32,
            i32::try_from(physical).ok()?,
            buf.as_mut_ptr(),
            buf.len()
        )
        .ok()?;
        let n = usize::try_from(n).ok().filter(|n| *n < buf.len())?;
        Some(std::path::PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&buf[..n])))
    }
    fn fake_launch_delay(&self, s: usize, us: u64, task: &mut u64) -> Result<AclError, LoadError> {
        call!(self.lib(), "npudFakeLaunchDelay", fn(usize, u64, *mut u64) -> AclError, s, us, task)
    }
    fn fake_fail_task(&self, s: usize, task: u64, code: i32) -> Result<AclError, LoadError> {
        call!(self.lib(), "npudFakeFailTask", fn(usize, u64, i32) -> AclError, s, task, code)
    }
    fn fake_fail_next_creations(&self, device: i32, n: u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "npudFakeFailNextCreations", fn(i32, u32) -> AclError, device, n)
    }
    fn fake_stall(&self, device: i32, stalled: u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "npudFakeStall", fn(i32, u32) -> AclError, device, stalled)
    }
    fn fake_streams_in_use(&self, device: i32, n: &mut u32) -> Result<AclError, LoadError> {
        call!(self.lib(), "npudFakeStreamsInUse", fn(i32, *mut u32) -> AclError, device, n)
    }
}

impl Acl for Lib {
    fn lib(&self) -> &Lib {
        self
    }
}

type ExceptionHandler = Box<dyn Fn(usize) + Send + Sync>;
static EXCEPTION_HANDLER: std::sync::OnceLock<ExceptionHandler> = std::sync::OnceLock::new();

/// Installs the process's exception handler (AscendCL has one callback per process).
pub fn set_exception_handler(handler: ExceptionHandler) -> bool {
    EXCEPTION_HANDLER.set(handler).is_ok()
}

/// The C entry point of exception callbacks: hands the info pointer to the handler.
pub unsafe extern "C" fn exception_trampoline(info: *mut c_void) {
    if let Some(h) = EXCEPTION_HANDLER.get() {
        // A panic must not unwind into C.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(info as usize)));
    }
}

/// DCMI's C ABI (`libdcmi.so`; `dcmi_interface_api.h` in mind-cluster's
/// `component/ascend-common/devmanager/dcmi`): the calls npud makes, returning DCMI's int.
pub trait Dcmi {
    fn dcmi(&self) -> &Lib;

    fn dcmi_init(&self) -> Result<i32, LoadError> {
        call!(self.dcmi(), "dcmi_init", fn() -> i32,)
    }
    fn dcmi_card_of_physical(&self, card: &mut i32, device: &mut i32, physical: u32) -> Result<i32, LoadError> {
        call!(
            self.dcmi(),
            "dcmi_get_card_id_device_id_from_phyid",
            fn(*mut i32, *mut i32, u32) -> i32,
            card,
            device,
            physical
        )
    }
    /// dcmi_get_device_errorcode_v2: the codes into `list`, how many the chip holds into `count`.
    fn dcmi_error_codes(
        &self,
        card: i32,
        device: i32,
        count: &mut i32,
        list: &mut [u32; 128],
    ) -> Result<i32, LoadError> {
        let (ptr, len) = (list.as_mut_ptr(), list.len() as u32);
        call!(
            self.dcmi(),
            "dcmi_get_device_errorcode_v2",
            fn(i32, i32, *mut i32, *mut u32, u32) -> i32,
            card,
            device,
            count,
            ptr,
            len
        )
    }
}

impl Dcmi for Lib {
    fn dcmi(&self) -> &Lib {
        self
    }
}

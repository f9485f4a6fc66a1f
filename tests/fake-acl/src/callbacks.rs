//! Callbacks the AscendCL way: launched on a stream, delivered to the thread that
//! subscribed it when that thread calls aclrtProcessReport; and exception callbacks, run
//! on a thread of this library, with their info read through the getters.

use crate::state;
use crate::*;
use std::ffi::c_void;

/// What exception callbacks receive; read through the getters only.
#[repr(C)]
pub struct AclrtExceptionInfo {
    pub task_id: u32,
    pub stream_id: u32,
    pub thread_id: u32,
    pub device_id: u32,
    pub error_code: u32,
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSubscribeReport(thread_id: u64, stream: Handle) -> AclError {
    with_rt(|r| r.subscribe(thread_id, r.resolve(stream)?, RT_STREAM_SUBSCRIBE))
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtUnSubscribeReport(thread_id: u64, stream: Handle) -> AclError {
    with_rt(|r| r.unsubscribe(thread_id, r.resolve(stream)?))
}

pub type AclrtCallback = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

#[unsafe(no_mangle)]
pub extern "C" fn aclrtLaunchCallback(
    func: AclrtCallback,
    user_data: *mut c_void,
    block_type: u32,
    stream: Handle,
) -> AclError {
    let Some(func) = func else { return INVALID_PARAM };
    if block_type > 1 {
        return INVALID_PARAM;
    }
    with_rt(|r| r.launch_callback(func, user_data as usize, block_type == 1, r.resolve(stream)?, RT_STREAM_NO_CB_REG))
}

/// Runs the callbacks due to the calling thread (the one that subscribed the streams).
#[unsafe(no_mangle)]
pub extern "C" fn aclrtProcessReport(timeout_ms: i32) -> AclError {
    if timeout_ms == 0 || timeout_ms < -1 {
        return INVALID_PARAM;
    }
    with_rt(|r| r.process_report(state::thread_id(), timeout_ms, RT_THREAD_SUBSCRIBE, RT_REPORT_TIMEOUT))
}

pub type AclrtExceptionInfoCallback = Option<unsafe extern "C" fn(info: *mut AclrtExceptionInfo)>;

#[unsafe(no_mangle)]
pub extern "C" fn aclrtSetExceptionInfoCallback(func: AclrtExceptionInfoCallback) -> AclError {
    with_rt(|r| {
        r.set_exception_callback(func);
        Ok(())
    })
}

macro_rules! getter {
    ($name:ident, $field:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(info: *const AclrtExceptionInfo) -> u32 {
            if info.is_null() {
                return u32::MAX;
            }
            // SAFETY: a non-null pointer this library handed to the exception callback.
            unsafe { (*info).$field }
        }
    };
}
getter!(aclrtGetTaskIdFromExceptionInfo, task_id);
getter!(aclrtGetStreamIdFromExceptionInfo, stream_id);
getter!(aclrtGetThreadIdFromExceptionInfo, thread_id);
getter!(aclrtGetDeviceIdFromExceptionInfo, device_id);
getter!(aclrtGetErrorCodeFromExceptionInfo, error_code);

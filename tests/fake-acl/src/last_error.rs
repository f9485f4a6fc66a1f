//! The calling thread's last runtime error: aclrtGetLastError and aclrtPeekAtLastError; and
//! aclrtGetErrorVerbose, the detail of a device fault.
//!
//! The open runtime's pages: aclrtGetLastError "obtains the runtime error code of the
//! current thread, and clears it; until a new error occurs in the thread, it then returns
//! ACL_SUCCESS"; aclrtPeekAtLastError reads it without clearing. Only the thread level
//! (`ACL_RT_THREAD_LEVEL`, 0) is supported; another level is 100000 (`aclrtGetLastErrorImpl`
//! checks `level == ACL_RT_THREAD_LEVEL`). What sets it: every failure of the runtime
//! layer (its `rt*` calls return through `GetRtExtErrCodeAndSetGlobalErr`), so the runtime's
//! codes, 107xxx, 207xxx and 507xxx; a call AscendCL refuses before reaching the runtime
//! (a NULL argument, 100000; a call before aclInit, 100001; 200001) leaves it as it was. A
//! call that succeeds leaves it too.

use crate::{AclError, INVALID_PARAM};
use std::cell::Cell;

thread_local! {
    static LAST: Cell<AclError> = const { Cell::new(0) };
}

/// `code` as the call's answer, recorded as the thread's last error where it is the
/// runtime's.
pub(crate) fn failed(code: AclError) -> AclError {
    if matches!(code / 1000, 107 | 207 | 507) {
        let _ = LAST.try_with(|l| l.set(code));
    }
    code
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtPeekAtLastError(level: i32) -> AclError {
    if level != 0 {
        return INVALID_PARAM;
    }
    LAST.try_with(Cell::get).unwrap_or(0)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetLastError(level: i32) -> AclError {
    if level != 0 {
        return INVALID_PARAM;
    }
    LAST.try_with(|l| l.replace(0)).unwrap_or(0)
}

/// aclrtGetErrorVerbose(deviceId, errorInfo): the detail of the device's last fault (the
/// Exception handling pages: to be called after a fault is reported, before the tasks are
/// aborted). The simulated devices have memory, L2, link and AI Core faults none of, so
/// the answer is ACL_RT_NO_ERROR: `tryRepair` 0, `hasDetail` 0, `errorType` 0, the fields
/// the open runtime's `aclrtGetErrorVerboseImpl` fills. A NULL `errorInfo` is 100000; a
/// device the process cannot use is the runtime's answer to it, as aclrtSetDevice's.
///
/// # Safety
/// `info` points to an `aclrtErrorInfo`: `tryRepair` and `hasDetail` bytes, two reserved,
/// `errorType` (an int) at byte 4, then the detail union (its first int at byte 8).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetErrorVerbose(device: i32, info: *mut u8) -> AclError {
    if info.is_null() {
        return INVALID_PARAM;
    }
    let Some(r) = crate::state::rt() else { return crate::UNINITIALIZE };
    if let Err(e) = r.device(device) {
        return failed(e);
    }
    // SAFETY: the caller's aclrtErrorInfo, checked non-null: the first 12 bytes are the
    // flags, the error type and the detail's first field.
    unsafe { info.write_bytes(0, 12) };
    0
}

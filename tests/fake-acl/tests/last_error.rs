//! aclrtGetLastError and aclrtPeekAtLastError: the runtime's failures are the calling
//! thread's last error until read; AscendCL's own refusals, successes and other threads'
//! failures leave it as it was.
#![allow(clippy::unwrap_used)]

use ascendcl::*;
use std::ptr;

/// aclInit and device 0 once for this process: its tests share the runtime.
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| assert_eq!(aclInit(ptr::null()), ACL_SUCCESS));
    assert_eq!(aclrtSetDevice(0), ACL_SUCCESS);
}

#[test]
fn the_last_runtime_error_is_the_threads_until_read() {
    init();
    assert_eq!((aclrtPeekAtLastError(0), aclrtGetLastError(0)), (0, 0), "nothing failed yet");
    // A runtime failure: a stream's sync bounded below -1 (107000).
    let mut s = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { aclrtCreateStream(&mut s) }, ACL_SUCCESS);
    assert_eq!(aclrtSynchronizeStreamWithTimeout(s, -2), 107000);
    // AscendCL's refusal of a NULL out-pointer (100000) and a success leave it.
    // SAFETY: NULL is what is being refused.
    assert_eq!(unsafe { aclrtCreateStream(ptr::null_mut()) }, 100000);
    assert_eq!(aclrtSynchronizeStream(s), ACL_SUCCESS);
    // Another thread's failure is its own.
    let other = std::thread::spawn(|| {
        // SAFETY: a valid out-pointer.
        let rc = unsafe { aclrtGetCurrentContext(&mut ptr::null_mut()) };
        (rc, aclrtGetLastError(0))
    });
    assert_eq!(other.join().unwrap(), (107002, 107002), "a thread with no context");
    assert_eq!(aclrtPeekAtLastError(1), 100000, "only the thread level");
    assert_eq!(aclrtPeekAtLastError(0), 107000, "peeking leaves it");
    assert_eq!(aclrtGetLastError(0), 107000);
    assert_eq!(aclrtGetLastError(0), 0, "reading cleared it");
    assert_eq!(aclrtDestroyStream(s), ACL_SUCCESS);
}

/// aclrtGetErrorVerbose on a device with no fault: ACL_RT_NO_ERROR, nothing to repair, no
/// detail; a NULL out-pointer is AscendCL's refusal and a device the process cannot use
/// the runtime's, which becomes the thread's last error.
#[test]
fn a_device_without_a_fault_has_no_error_to_detail() {
    init();
    // aclrtErrorInfo: tryRepair, hasDetail, 2 reserved, errorType, then the detail.
    let mut info = [0xffu8; 8 + 8 + 20 * 16];
    // SAFETY: a buffer larger than an aclrtErrorInfo.
    assert_eq!(unsafe { aclrtGetErrorVerbose(0, info.as_mut_ptr()) }, ACL_SUCCESS);
    assert_eq!(&info[..2], &[0, 0], "nothing to repair, no detail");
    assert_eq!(&info[4..8], &[0, 0, 0, 0], "ACL_RT_NO_ERROR");
    // SAFETY: NULL is what is being refused.
    assert_eq!(unsafe { aclrtGetErrorVerbose(0, ptr::null_mut()) }, 100000);
    // SAFETY: a buffer larger than an aclrtErrorInfo.
    let missing = unsafe { aclrtGetErrorVerbose(99, info.as_mut_ptr()) };
    assert_eq!(missing, aclrtSetDevice(99), "as the runtime answers for a device it has not");
    assert_eq!(aclrtGetLastError(0), missing);
}

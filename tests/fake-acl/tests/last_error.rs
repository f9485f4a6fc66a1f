//! aclrtGetLastError and aclrtPeekAtLastError: the runtime's failures are the calling
//! thread's last error until read; AscendCL's own refusals, successes and other threads'
//! failures leave it as it was.
#![allow(clippy::unwrap_used)]

use ascendcl::*;
use std::ptr;

#[test]
fn the_last_runtime_error_is_the_threads_until_read() {
    assert_eq!(aclInit(ptr::null()), ACL_SUCCESS);
    assert_eq!(aclrtSetDevice(0), ACL_SUCCESS);
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

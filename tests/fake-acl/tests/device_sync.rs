//! aclrtSynchronizeDeviceWithTimeout: the timeout bounds the whole wait, however many
//! streams have work, as the runtime applies it to the device.
#![allow(clippy::unwrap_used)]

use ascendcl::*;
use std::ptr;

#[test]
fn a_device_sync_timeout_covers_every_stream_at_once() {
    assert_eq!(aclInit(ptr::null()), ACL_SUCCESS);
    assert_eq!(aclrtSetDevice(0), ACL_SUCCESS);
    // Three streams running side by side, busy for 1, 2 and 3 seconds of device time.
    let mut streams = [ptr::null_mut(); 3];
    for (i, s) in streams.iter_mut().enumerate() {
        // SAFETY: a valid out-pointer and a stream this test made.
        unsafe {
            assert_eq!(aclrtCreateStream(s), ACL_SUCCESS);
            let mut task = 0u64;
            assert_eq!(npudFakeLaunchDelay(*s, (i as u64 + 1) * 1_000_000, &mut task), ACL_SUCCESS);
        }
    }
    // Waited stream by stream with 1.5 s each, all three would finish (1 s, then 1 s
    // more, then 1 s more); with 1.5 s in all the third cannot have finished.
    assert_eq!(aclrtSynchronizeDeviceWithTimeout(1500), 507046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT");
    assert_eq!(aclrtSynchronizeDeviceWithTimeout(-1), ACL_SUCCESS, "the work itself goes on");
    assert_eq!(aclrtSynchronizeDeviceWithTimeout(-2), 107000, "below -1 is invalid");
    for s in streams {
        assert_eq!(aclrtDestroyStream(s), ACL_SUCCESS);
    }
}

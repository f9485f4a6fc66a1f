//! A process that forks while its devices are busy (Python's multiprocessing "fork" start
//! method, after a framework ran work): the child must be able to use the runtime. fork(2)
//! copies only the forking thread, so a lock a device's timer thread held at that moment
//! would stay locked in the child for ever; the runtime takes its threads' locks around
//! the fork (`npu_sim::fork`).
#![allow(clippy::unwrap_used)]

use ascendcl::*;
use std::ptr;

/// Forks this many times while the device's timer thread finishes a task every few
/// microseconds: without the fork handlers, a child found the device lock held in most
/// runs of this test (one in about a thousand plain forks right after aclInit).
const FORKS: usize = 300;

#[test]
fn a_child_forked_while_the_device_is_busy_can_create_streams() {
    assert_eq!(aclInit(ptr::null()), ACL_SUCCESS);
    assert_eq!(aclrtSetDevice(0), ACL_SUCCESS);
    let mut streams = [ptr::null_mut(); 8];
    for s in &mut streams {
        // SAFETY: a valid out-pointer and a stream this test made.
        unsafe {
            assert_eq!(aclrtCreateStream(s), ACL_SUCCESS);
            let mut task = 0u64;
            for _ in 0..20_000 {
                assert_eq!(npudFakeLaunchDelay(*s, 5, &mut task), ACL_SUCCESS);
            }
        }
    }
    for i in 0..FORKS {
        // SAFETY: the child calls the runtime and leaves with _exit, never returning into
        // the test harness; alarm ends a child that blocks.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            let mut s = ptr::null_mut();
            // SAFETY: the child's own calls, with an out-pointer to a local.
            unsafe {
                libc::alarm(20);
                let rc = aclrtCreateStream(&mut s);
                libc::_exit(if rc == ACL_SUCCESS { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked, with an out-pointer to a local.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "fork {i}: the child {}",
            match libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
                true => "blocked on a lock the parent's timer thread held".to_string(),
                false => format!("ended with status {status:#x}"),
            }
        );
    }
    for s in streams {
        assert_eq!(aclrtSynchronizeStream(s), ACL_SUCCESS);
        assert_eq!(aclrtDestroyStream(s), ACL_SUCCESS);
    }
}

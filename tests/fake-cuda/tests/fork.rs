//! A process that forks while its GPU is busy: the child is answered as an H100's driver
//! answers one (CUDA_ERROR_NOT_INITIALIZED for every call, cuInit too; docs/hardware.md),
//! at once rather than hanging, and the parent's work goes on.
#![allow(clippy::unwrap_used)]

use cuda::*;
use std::ffi::c_void;

/// The spin kernel the fake runs as a delay of its u64 argument in nanoseconds.
const SPIN: &[u8] = b".visible .entry npud_spin(.param .u64 ns) { ret; }\0";

#[test]
fn a_child_forked_while_the_gpu_is_busy_is_refused_at_once_and_the_parent_goes_on() {
    assert_eq!(cuInit(0), 0);
    let (mut ctx, mut module, mut spin) = (0usize, 0usize, 0usize);
    let mut streams = [0usize; 8];
    // SAFETY: valid out-pointers, a NUL-terminated PTX image and kernel name, and the
    // kernel's one parameter passed as CUDA passes it (a pointer to a u64).
    unsafe {
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), 0);
        assert_eq!(cuCtxSetCurrent(ctx), 0);
        assert_eq!(cuModuleLoadData(&mut module, SPIN.as_ptr().cast()), 0);
        assert_eq!(cuModuleGetFunction(&mut spin, module, c"npud_spin".as_ptr()), 0);
        for s in &mut streams {
            assert_eq!(cuStreamCreate(s, 0), 0);
            let mut ns = 5_000u64;
            let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
            for _ in 0..20_000 {
                let launched = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, *s, params.as_mut_ptr(), std::ptr::null_mut());
                assert_eq!(launched, 0);
            }
        }
    }
    for i in 0..100 {
        // SAFETY: the child calls the driver and leaves with _exit, never returning into
        // the test harness; alarm ends a child that blocks.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            let (mut s, mut current, mut dev, mut primary) = (0usize, 0usize, 0i32, 0usize);
            // SAFETY: the child's own calls, with out-pointers to locals.
            unsafe {
                libc::alarm(20);
                let refused = [
                    cuStreamCreate(&mut s, 0),
                    cuInit(0),
                    cuCtxGetCurrent(&mut current),
                    cuDeviceGet(&mut dev, 0),
                    cuDevicePrimaryCtxRetain(&mut primary, 0),
                ];
                libc::_exit(if refused == [3; 5] { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked, with an out-pointer to a local.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "fork {i}: the child ended with {status:#x}"
        );
    }
    for s in streams {
        assert_eq!(cuStreamSynchronize(s), 0);
        assert_eq!(cuStreamDestroy_v2(s), 0);
    }
}

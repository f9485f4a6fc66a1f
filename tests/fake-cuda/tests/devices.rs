//! Events and streams of two devices: cuEventRecord refuses a stream of another context
//! with CUDA_ERROR_INVALID_HANDLE, cuStreamWaitEvent synchronises across devices.
#![allow(clippy::unwrap_used)]

use cuda::*;

fn on(device: i32) -> usize {
    let mut ctx = 0usize;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, device) }, 0);
    assert_eq!(cuCtxSetCurrent(ctx), 0);
    ctx
}

#[test]
fn a_record_stays_on_its_device_and_a_wait_crosses_devices() {
    // SAFETY: the only test of this binary, before any thread reads the environment.
    unsafe { std::env::set_var("NPU_SIM_DEVICES", "2") };
    assert_eq!(cuInit(0), 0);
    let (mut s0, mut s1, mut e1) = (0usize, 0usize, 0usize);
    on(1);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuStreamCreate(&mut s1, 0), 0);
        assert_eq!(cuEventCreate(&mut e1, 0), 0);
    }
    on(0);
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { cuStreamCreate(&mut s0, 0) }, 0);
    assert_eq!(cuEventRecord(e1, s0), 400, "another context's stream: CUDA_ERROR_INVALID_HANDLE");
    assert_eq!(cuStreamWaitEvent(s0, e1, 0), 0, "never recorded: nothing to wait for");
    assert_eq!(cuStreamQuery(s0), 0);
    on(1);
    assert_eq!(cuEventRecord(e1, s1), 0);
    assert_eq!(cuStreamWaitEvent(s0, e1, 0), 0, "a wait across devices");
    assert_eq!(cuStreamSynchronize(s0), 0);
    assert_eq!(cuEventQuery(e1), 0, "device 0's stream finished after device 1's event");
}

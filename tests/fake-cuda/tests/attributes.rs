//! cuDeviceGetAttribute and cuEventElapsedTime_v2 through the exported functions, on a
//! process that sees physical device 1 as its device 0 (CUDA_VISIBLE_DEVICES=1).
#![allow(clippy::unwrap_used)]

use cuda::*;
use std::ffi::CStr;

fn attribute(attr: i32, dev: i32) -> (u32, i32) {
    let mut v = -1;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { cuDeviceGetAttribute(&mut v, attr, dev) };
    (rc, v)
}

#[test]
fn attributes_name_the_device_the_process_sees_and_elapsed_time_v2_matches_v1() {
    // SAFETY: the only test of this binary, before any thread reads the environment.
    unsafe {
        std::env::set_var("NPU_SIM_DEVICES", "2");
        std::env::set_var("CUDA_VISIBLE_DEVICES", "1");
    }
    assert_eq!(attribute(75, 0).0, 3, "before cuInit: CUDA_ERROR_NOT_INITIALIZED");
    assert_eq!(cuInit(0), 0);
    assert_eq!(attribute(75, 0), (0, 8));
    assert_eq!(attribute(76, 0), (0, 0));
    assert_eq!(attribute(16, 0), (0, 108));
    assert_eq!(attribute(78, 0), (0, 1));

    let mut text = [0 as std::ffi::c_char; 32];
    // SAFETY: 32 writable bytes.
    assert_eq!(unsafe { cuDeviceGetPCIBusId(text.as_mut_ptr(), 32, 0) }, 0);
    // SAFETY: the fake wrote a NUL-terminated string.
    let bus_id = unsafe { CStr::from_ptr(text.as_ptr()) }.to_str().unwrap().to_owned();
    let bus = format!("{:02x}", attribute(33, 0).1);
    assert_eq!(&bus_id[5..7], bus, "the bus of {bus_id}");

    assert_eq!(attribute(1000, 0).0, 1, "past the enumeration: CUDA_ERROR_INVALID_VALUE");
    assert_eq!(attribute(0, 0).0, 1);
    assert_eq!(attribute(75, 1).0, 101, "an ordinal the process does not see: CUDA_ERROR_INVALID_DEVICE");
    // SAFETY: a null out-pointer is what is tested.
    assert_eq!(unsafe { cuDeviceGetAttribute(std::ptr::null_mut(), 75, 0) }, 1);

    let mut ctx = 0usize;
    let (mut s, mut a, mut b) = (0usize, 0usize, 0usize);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), 0);
        assert_eq!(cuCtxSetCurrent(ctx), 0);
        assert_eq!(cuStreamCreate(&mut s, 0), 0);
        assert_eq!(cuEventCreate(&mut a, 0), 0);
        assert_eq!(cuEventCreate(&mut b, 0), 0);
    }
    let (mut v1, mut v2) = (-1.0f32, -1.0f32);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuEventElapsedTime_v2(&mut v2, a, b), 400, "never recorded: CUDA_ERROR_INVALID_HANDLE");
    }
    assert_eq!(cuEventRecord(a, s), 0);
    assert_eq!(cuEventRecord(b, s), 0);
    assert_eq!(cuStreamSynchronize(s), 0);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuEventElapsedTime(&mut v1, a, b), 0);
        assert_eq!(cuEventElapsedTime_v2(&mut v2, a, b), 0);
    }
    assert!(v1 >= 0.0 && v1 == v2, "v1 {v1} ms, v2 {v2} ms");
}

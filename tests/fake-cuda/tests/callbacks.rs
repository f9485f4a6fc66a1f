//! What a stream callback may do: the seed's cuStreamAddCallback, "Callbacks must not make
//! any CUDA API calls. Attempting to use a CUDA API will result in
//! CUDA_ERROR_NOT_PERMITTED." The fake follows the documentation for every call. An H100
//! on driver 580 refused cuCtxGetDevice and cuStreamCreate there with NOT_PERMITTED, as
//! documented, but answered a cuStreamQuery of the callback's own stream with NOT_READY
//! (docs/hardware.md); tests/native/cuda_callbacks.c, which also runs on a GPU, checks a
//! call both refuse, and this test the documented refusal of the query too.
#![allow(clippy::unwrap_used)]

use cuda::*;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

static INSIDE: AtomicU32 = AtomicU32::new(99);

unsafe extern "C" fn query_inside(stream: usize, _status: CuResult, _data: *mut c_void) {
    INSIDE.store(cuStreamQuery(stream), Ordering::SeqCst);
}

#[test]
fn a_cuda_call_inside_a_stream_callback_is_not_permitted() {
    assert_eq!(cuInit(0), 0);
    let (mut ctx, mut s) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), 0);
        assert_eq!(cuCtxSetCurrent(ctx), 0);
        assert_eq!(cuStreamCreate(&mut s, 0), 0);
    }
    assert_eq!(cuStreamAddCallback(s, Some(query_inside), std::ptr::null_mut(), 0), 0);
    assert_eq!(cuStreamSynchronize(s), 0);
    assert_eq!(INSIDE.load(Ordering::SeqCst), 800, "CUDA_ERROR_NOT_PERMITTED inside the callback");
    assert_eq!(cuStreamQuery(s), 0, "and permitted again outside it");
    assert_eq!(cuStreamDestroy_v2(s), 0);
}

//! Layer 2: CUresult codes become `BackendError`s with the driver's code kept beside the
//! kind npud acts on (shared/reference/cuda.md).

use super::ffi::LoadError;
use crate::backend::{BackendError, BackendResult, ErrorKind};
use npud_proto::codes::cuda::*;

/// CUresult -> BackendError.
pub(super) fn check(rc: Result<u32, LoadError>) -> BackendResult<()> {
    let rc = rc?;
    if rc == SUCCESS {
        return Ok(());
    }
    let kind = match rc {
        INVALID_VALUE | INVALID_DEVICE | INVALID_CONTEXT => ErrorKind::InvalidArgument,
        INVALID_HANDLE => ErrorKind::InvalidHandle,
        OUT_OF_MEMORY => ErrorKind::StreamBudget,
        NOT_READY => ErrorKind::EventNotComplete,
        ILLEGAL_ADDRESS | LAUNCH_FAILED => ErrorKind::TaskFailed,
        NOT_SUPPORTED | STUB_LIBRARY => ErrorKind::Unsupported,
        TIMEOUT => ErrorKind::Timeout,
        _ => ErrorKind::Other,
    };
    Err(BackendError { kind, native_code: i64::from(rc), message: format!("the CUDA driver returned {rc}") })
}

pub(super) fn unsupported(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::Unsupported,
        native_code: i64::from(NOT_SUPPORTED),
        message: format!("{what} is not available with the CUDA driver"),
    }
}

pub(super) fn no_device(device: u32) -> BackendError {
    BackendError {
        kind: ErrorKind::InvalidArgument,
        native_code: i64::from(INVALID_DEVICE),
        message: format!("no device {device}"),
    }
}

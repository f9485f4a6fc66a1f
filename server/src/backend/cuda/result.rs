//! Layer 2: CUresult codes become `BackendError`s with the driver's code kept beside the
//! kind npud acts on (shared/reference/cuda.md).

use super::ffi::LoadError;
use crate::backend::{BackendError, BackendResult, ErrorKind};

pub(super) const NOT_READY: u32 = 600;
pub(super) const INVALID_HANDLE: u32 = 400;
pub(super) const TIMEOUT: i64 = 909;

pub(super) fn load_error(e: LoadError) -> BackendError {
    BackendError { kind: ErrorKind::Unsupported, native_code: 0, message: e.to_string() }
}

/// CUresult -> BackendError.
pub(super) fn check(rc: Result<u32, LoadError>) -> BackendResult<()> {
    let rc = rc.map_err(load_error)?;
    if rc == 0 {
        return Ok(());
    }
    let kind = match rc {
        1 | 101 | 201 => ErrorKind::InvalidArgument,
        400 => ErrorKind::InvalidHandle,
        2 => ErrorKind::StreamBudget,
        600 => ErrorKind::EventNotComplete,
        700 | 719 => ErrorKind::TaskFailed,
        801 | 34 => ErrorKind::Unsupported,
        909 => ErrorKind::Timeout,
        _ => ErrorKind::Other,
    };
    Err(BackendError { kind, native_code: i64::from(rc), message: format!("the CUDA driver returned {rc}") })
}

pub(super) fn unsupported(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::Unsupported,
        native_code: 801,
        message: format!("{what} is not available with the CUDA driver"),
    }
}

pub(super) fn no_device(device: u32) -> BackendError {
    BackendError { kind: ErrorKind::InvalidArgument, native_code: 101, message: format!("no device {device}") }
}

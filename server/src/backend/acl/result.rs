//! Layer 2: aclError codes become `BackendError`s with the vendor's code kept beside the
//! kind npud acts on. The codes are AscendCL's (shared/reference/acl.md).

use super::ffi::LoadError;
use crate::backend::{BackendError, BackendResult, ErrorKind};

pub(super) const SYNC_TIMEOUT: i64 = 507046;
pub(super) const EVENT_SYNC_TIMEOUT: i64 = 507047;
pub(super) const REPORT_TIMEOUT: i32 = 507012;

pub(super) fn load_error(e: LoadError) -> BackendError {
    BackendError { kind: ErrorKind::Unsupported, native_code: 0, message: e.to_string() }
}

/// aclError -> BackendError.
pub(super) fn check(rc: Result<i32, LoadError>) -> BackendResult<()> {
    let rc = rc.map_err(load_error)?;
    if rc == 0 {
        return Ok(());
    }
    let kind = match rc {
        100000 | 107000 | 107001 | 107002 | 200002 => ErrorKind::InvalidArgument,
        107017 | 200005 => ErrorKind::InvalidHandle,
        207005 | 207008 => ErrorKind::StreamBudget,
        207007 => ErrorKind::EventBudget,
        507006 => ErrorKind::EventNotComplete,
        507046 | 507047 => ErrorKind::Timeout,
        200001 | 200006 | 207000 => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    };
    Err(BackendError { kind, native_code: i64::from(rc), message: format!("AscendCL returned {rc}") })
}

pub(super) fn unsupported(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::Unsupported,
        native_code: 200001,
        message: format!("{what} is not available with this AscendCL library"),
    }
}

pub(super) fn forbid(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::EventFlagsForbid,
        native_code: 100000,
        message: format!("an event created without ACL_EVENT_SYNC cannot be {what}"),
    }
}

pub(super) fn event_error(kind: ErrorKind, message: &str) -> BackendError {
    BackendError { kind, native_code: 107000, message: message.into() }
}

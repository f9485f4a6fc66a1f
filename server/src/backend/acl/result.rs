//! Layer 2: aclError codes become `BackendError`s with the vendor's code kept beside the
//! kind npud acts on. The codes are AscendCL's (shared/reference/acl.md).

use super::ffi::LoadError;
use crate::backend::{BackendError, BackendResult, ErrorKind};
use npud_proto::codes::acl::*;

/// aclError -> BackendError.
pub(super) fn check(rc: Result<i32, LoadError>) -> BackendResult<()> {
    let rc = rc?;
    if rc == SUCCESS {
        return Ok(());
    }
    let kind = match rc {
        INVALID_PARAM | RT_PARAM_INVALID | RT_INVALID_DEVICEID | RT_CONTEXT_NULL | INVALID_DEVICE => {
            ErrorKind::InvalidArgument
        }
        RT_INVALID_HANDLE | INVALID_RESOURCE_HANDLE => ErrorKind::InvalidHandle,
        RT_RESOURCE_ALLOC_FAIL | RT_NO_STREAM_RESOURCE => ErrorKind::StreamBudget,
        RT_NO_EVENT_RESOURCE => ErrorKind::EventBudget,
        RT_EVENT_NOT_COMPLETE => ErrorKind::EventNotComplete,
        RT_STREAM_SYNC_TIMEOUT | RT_EVENT_SYNC_TIMEOUT => ErrorKind::Timeout,
        API_NOT_SUPPORT | FEATURE_UNSUPPORTED | RT_FEATURE_NOT_SUPPORT => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    };
    Err(BackendError { kind, native_code: i64::from(rc), message: format!("AscendCL returned {rc}") })
}

pub(super) fn unsupported(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::Unsupported,
        native_code: i64::from(API_NOT_SUPPORT),
        message: format!("{what} is not available with this AscendCL library"),
    }
}

pub(super) fn forbid(what: &str) -> BackendError {
    BackendError {
        kind: ErrorKind::EventFlagsForbid,
        native_code: i64::from(INVALID_PARAM),
        message: format!("an event created without ACL_EVENT_SYNC cannot be {what}"),
    }
}

pub(super) fn event_error(kind: ErrorKind, message: &str) -> BackendError {
    BackendError { kind, native_code: i64::from(RT_PARAM_INVALID), message: message.into() }
}

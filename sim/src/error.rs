//! Errors of the simulated runtime, carrying the aclError code a real device would return.

/// aclError codes the simulator produces (see shared/reference/acl.md).
pub mod codes {
    pub const INVALID_PARAM: i32 = 100000;
    pub const RT_PARAM_INVALID: i32 = 107000;
    pub const RT_INVALID_DEVICEID: i32 = 107001;
    pub const RT_STREAM_SUBSCRIBE: i32 = 107011;
    pub const RT_STREAM_NO_CB_REG: i32 = 107015;
    pub const RT_INVALID_HANDLE: i32 = 107017;
    pub const RT_FEATURE_NOT_SUPPORT: i32 = 207000;
    pub const RT_RESOURCE_ALLOC_FAIL: i32 = 207005;
    pub const RT_NO_EVENT_RESOURCE: i32 = 207007;
    pub const RT_NO_STREAM_RESOURCE: i32 = 207008;
    pub const RT_INTERNAL_ERROR: i32 = 507000;
    pub const RT_EVENT_NOT_COMPLETE: i32 = 507006;
    pub const RT_AICORE_EXCEPTION: i32 = 507015;
    pub const RT_STREAM_SYNC_TIMEOUT: i32 = 507046;
    pub const RT_EVENT_SYNC_TIMEOUT: i32 = 507047;
}

/// Why a simulated call failed, in terms a caller can branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimErrorKind {
    InvalidArgument,
    InvalidHandle,
    StreamBudget,
    EventBudget,
    EventNotRecorded,
    EventNotComplete,
    EventNotTimed,
    EventFlagsForbid,
    TaskFailed,
    FailureModeAlreadySet,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (aclError {code})")]
pub struct SimError {
    pub kind: SimErrorKind,
    pub code: i32,
    pub message: String,
}

impl SimError {
    pub fn new(kind: SimErrorKind, code: i32, message: impl Into<String>) -> Self {
        Self { kind, code, message: message.into() }
    }
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(SimErrorKind::InvalidArgument, codes::INVALID_PARAM, message)
    }
    pub(crate) fn handle(what: &str, id: u64) -> Self {
        Self::new(SimErrorKind::InvalidHandle, codes::RT_INVALID_HANDLE, format!("invalid {what} handle {id}"))
    }
}

pub type SimResult<T> = Result<T, SimError>;

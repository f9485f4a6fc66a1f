//! Errors of the simulated runtime, carrying the aclError code a real device would return.

/// aclError codes the simulator produces: the project's one table (shared/reference/acl.md).
pub use npud_proto::codes::acl as codes;

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

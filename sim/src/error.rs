//! Errors of the simulated runtime, carrying the aclError code a real device would return.

/// aclError codes the simulator produces: the project's one table (shared/reference/acl.md).
pub use npud_proto::codes::acl as codes;

/// Why a runtime call failed, in terms a caller can branch on: the simulator's, and
/// through `npud::backend::ErrorKind` every backend's (one vocabulary, not a copy per layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
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
    /// A wait ran out (vendor runtimes; the simulator's waits are the daemon's).
    Timeout,
    /// The runtime does not offer the call.
    Unsupported,
    /// Anything else the runtime reported.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (aclError {code})")]
pub struct SimError {
    pub kind: ErrorKind,
    pub code: i32,
    pub message: String,
}

impl SimError {
    pub fn new(kind: ErrorKind, code: i32, message: impl Into<String>) -> Self {
        Self { kind, code, message: message.into() }
    }
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, codes::INVALID_PARAM, message)
    }
    pub(crate) fn handle(what: &str, id: u64) -> Self {
        Self::new(ErrorKind::InvalidHandle, codes::RT_INVALID_HANDLE, format!("invalid {what} handle {id}"))
    }
}

pub type SimResult<T> = Result<T, SimError>;

//! The daemon's one error type. Domain code builds these; `api::status` is the only place
//! that turns them into gRPC statuses.

pub use npud_proto::v1::ErrorReason as Reason;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct NpudError {
    pub reason: Reason,
    pub message: String,
    /// The vendor's code and the backend that produced it.
    pub native: Option<(&'static str, i64)>,
    /// Numbers that explain the decision (capacity, in_use, quota, ...).
    pub figures: Vec<(&'static str, i64)>,
}

pub type NpudResult<T> = Result<T, NpudError>;

impl NpudError {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into(), native: None, figures: Vec::new() }
    }

    pub fn with_native(mut self, backend: &'static str, code: i64) -> Self {
        self.native = Some((backend, code));
        self
    }

    pub fn with_figures(mut self, figures: Vec<(&'static str, i64)>) -> Self {
        self.figures = figures;
        self
    }

    pub fn invalid(reason: Reason, message: impl Into<String>) -> Self {
        Self::new(reason, message)
    }

    /// The one message for a handle that is unknown *or* foreign: they must look alike.
    pub fn unknown_handle(handle: u64) -> Self {
        Self::new(Reason::UnknownHandle, format!("no such handle {handle}"))
    }

    pub fn unknown_session() -> Self {
        Self::new(Reason::UnknownSession, "no such session (it was closed or its lease lapsed)")
    }
}

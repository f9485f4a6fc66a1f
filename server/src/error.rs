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

/// Most bytes of a caller's own input an error message repeats.
pub const QUOTE_LIMIT: usize = 64;

/// `input` as an error message may show it: its first [`QUOTE_LIMIT`] bytes (whole
/// characters), escaped and quoted, then how long it really was. An error that repeated
/// a caller's 10 KB name would itself be too large for a client's metadata limit, and
/// unescaped control characters would reach logs and terminals.
pub fn quoted(input: &str) -> String {
    let mut end = input.len().min(QUOTE_LIMIT);
    while !input.is_char_boundary(end) {
        end -= 1;
    }
    let shown: String = input[..end].escape_debug().collect();
    match end < input.len() {
        true => format!("\"{shown}\"… ({} bytes)", input.len()),
        false => format!("\"{shown}\""),
    }
}

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

/// A backend's failure as npud reports it: the reason a client acts on, with the vendor's
/// own code kept beside it.
pub fn backend_error(backend: &'static str, e: crate::backend::BackendError) -> NpudError {
    let reason = match e.kind {
        crate::backend::ErrorKind::InvalidArgument => Reason::InvalidArgumentOther,
        crate::backend::ErrorKind::InvalidHandle => Reason::UnknownHandle,
        crate::backend::ErrorKind::StreamBudget => Reason::BudgetExhausted,
        crate::backend::ErrorKind::EventBudget => Reason::EventBudgetExhausted,
        crate::backend::ErrorKind::EventNotRecorded => Reason::EventNotRecorded,
        crate::backend::ErrorKind::EventNotComplete => Reason::EventNotComplete,
        crate::backend::ErrorKind::EventNotTimed => Reason::EventNotTimed,
        crate::backend::ErrorKind::EventFlagsForbid => Reason::EventFlagsForbid,
        crate::backend::ErrorKind::TaskFailed => Reason::StreamFailed,
        crate::backend::ErrorKind::Timeout => Reason::SyncTimeout,
        crate::backend::ErrorKind::FailureModeAlreadySet => Reason::FailureModeAlreadySet,
        crate::backend::ErrorKind::Unsupported => Reason::UnsupportedByBackend,
        crate::backend::ErrorKind::Other => Reason::BackendError,
    };
    NpudError::new(reason, e.message).with_native(backend, e.native_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_is_short_escaped_and_says_how_long_the_input_was() {
        assert_eq!(quoted("job-7"), "\"job-7\"");
        assert_eq!(quoted("a\nb\u{1b}"), "\"a\\nb\\u{1b}\"");
        let long = "é".repeat(5000);
        let q = quoted(&long);
        assert!(q.starts_with("\"éé") && q.ends_with("… (10000 bytes)"), "{q}");
        assert!(q.len() < QUOTE_LIMIT + 32, "{} bytes", q.len());
    }
}

//! Client errors: the gRPC status plus npud's structured detail, decoded once.

use npud_proto::v1::{ErrorDetail, ErrorReason};
use prost::Message;
use std::collections::HashMap;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("cannot reach npud at {target}: {message}")]
    Connect { target: String, message: String },
    #[error("{message}")]
    Rpc {
        code: tonic::Code,
        message: String,
        reason: ErrorReason,
        /// The vendor's code (aclError / CUresult), 0 when npud decided on its own.
        native_code: i64,
        figures: HashMap<String, i64>,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Rpc { code, .. } => Some(*code),
            Error::Connect { .. } => None,
        }
    }

    pub fn reason(&self) -> Option<ErrorReason> {
        match self {
            Error::Rpc { reason, .. } => Some(*reason),
            Error::Connect { .. } => None,
        }
    }

    pub fn native_code(&self) -> i64 {
        match self {
            Error::Rpc { native_code, .. } => *native_code,
            Error::Connect { .. } => 0,
        }
    }

    pub fn figure(&self, key: &str) -> Option<i64> {
        match self {
            Error::Rpc { figures, .. } => figures.get(key).copied(),
            Error::Connect { .. } => None,
        }
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        // A failed connection or TLS handshake surfaces at the first call as a bare
        // "transport error": report it as what it is, with its causes.
        // TLS 1.3 finishes the client's side of the handshake before the server rejects a
        // certificate, so a refused connection can also show up as a client-side Cancelled
        // (npud itself never answers Cancelled).
        let transport = s.code() == tonic::Code::Unknown && s.message() == "transport error";
        if transport || s.code() == tonic::Code::Cancelled {
            let mut message = format!("the connection failed ({})", s.message());
            let mut cause = std::error::Error::source(&s);
            while let Some(c) = cause {
                message.push_str(": ");
                message.push_str(&c.to_string());
                cause = c.source();
            }
            return Error::Connect { target: "npud".into(), message };
        }
        let detail = ErrorDetail::decode(s.details()).unwrap_or_default();
        Error::Rpc {
            code: s.code(),
            message: s.message().to_string(),
            reason: ErrorReason::try_from(detail.reason).unwrap_or(ErrorReason::Unspecified),
            native_code: detail.native_code,
            figures: detail.figures,
        }
    }
}

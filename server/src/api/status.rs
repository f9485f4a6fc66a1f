//! The one place where domain errors become gRPC statuses.

use crate::error::{NpudError, Reason};
use npud_proto::v1::ErrorDetail;
use prost::Message;
use tonic::{Code, Status};

pub fn code_of(reason: Reason) -> Code {
    use Reason::*;
    match reason {
        InvalidCount | InvalidPriority | InvalidFlags | InvalidDevice | InvalidTimeout | InvalidName
        | PayloadTooLarge | InvalidHandleKind | InvalidArgumentOther => Code::InvalidArgument,
        UnknownHandle | UnknownSession | UnknownTenant => Code::NotFound,
        BudgetExhausted
        | QuotaExceeded
        | GrantWaitExpired
        | EventBudgetExhausted
        | TooManySessions
        | RateLimited
        | HardwareCreationFailed
        | TooManyPendingRequests
        | TooManyCallbacks => Code::ResourceExhausted,
        SyncTimeout => Code::DeadlineExceeded,
        StaleEpoch
        | EventNotRecorded
        | EventNotComplete
        | EventNotTimed
        | StreamNotSubscribed
        | StreamAlreadySubscribed
        | EventFlagsForbid
        | StreamFailed
        | DeviceMismatch
        | SessionClosed
        | FailureModeAlreadySet => Code::FailedPrecondition,
        NoIdentity => Code::Unauthenticated,
        NotAdmin | TenantRefused => Code::PermissionDenied,
        Draining | DeviceUnhealthy => Code::Unavailable,
        UnsupportedByBackend => Code::Unimplemented,
        BackendError | Unspecified => Code::Internal,
    }
}

impl From<NpudError> for Status {
    fn from(e: NpudError) -> Status {
        crate::metrics::global().failure(e.reason.as_str_name(), e.native.map(|(_, c)| c));
        let detail = ErrorDetail {
            reason: e.reason as i32,
            native_code: e.native.map_or(0, |(_, c)| c),
            backend: e.native.map_or(String::new(), |(b, _)| b.to_string()),
            figures: e.figures.iter().map(|(k, v)| ((*k).to_string(), *v)).collect(),
        };
        let mut message = e.message;
        if let Some((backend, code)) = e.native {
            message.push_str(&format!(" [{backend} {code}]"));
        }
        Status::with_details(code_of(e.reason), message, detail.encode_to_vec().into())
    }
}

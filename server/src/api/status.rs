//! The one place where domain errors become gRPC statuses.

use crate::error::{NpudError, Reason};
use crate::observe::metrics::Metrics;
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
        | TooManyCallbacks
        | TooManyReportStreams
        | TooManyBlockingCalls
        | TooManyReportBytes
        | TooManyCallsInFlight => Code::ResourceExhausted,
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
        | FailureModeAlreadySet
        | DeviceNotOwned => Code::FailedPrecondition,
        NoIdentity => Code::Unauthenticated,
        NotAdmin | TenantRefused => Code::PermissionDenied,
        Draining | DeviceUnhealthy => Code::Unavailable,
        UnsupportedByBackend => Code::Unimplemented,
        BackendError | Unspecified => Code::Internal,
    }
}

impl From<NpudError> for Status {
    fn from(e: NpudError) -> Status {
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

/// tonic answers a request whose bytes are not the message it expects with INTERNAL and
/// no detail (a server fault, to a client reading codes). It is the caller's error: this
/// turns such an answer into INVALID_ARGUMENT with npud's ErrorDetail, keeping tonic's
/// description. Applied to every response; only trailers-only decode failures change.
pub fn decode_failure_is_invalid_argument<B: Default>(
    mut res: tonic::codegen::http::Response<B>,
) -> tonic::codegen::http::Response<B> {
    // tonic reads the status back from the headers, percent-decoding grpc-message.
    let Some(status) = Status::from_header_map(res.headers()) else { return res };
    if !is_decode_failure(&status) {
        return res;
    }
    let fresh: tonic::codegen::http::Response<B> = caller_sent_garbage(&status).into_http();
    *res.headers_mut() = fresh.headers().clone();
    res
}

/// Whether tonic made `status` because the bytes it read were not the expected message.
pub fn is_decode_failure(status: &Status) -> bool {
    status.code() == Code::Internal && status.message().starts_with("failed to decode Protobuf message")
}

/// The caller's answer for a message tonic could not decode: INVALID_ARGUMENT with npud's
/// ErrorDetail. Used for trailers-only answers (above) and for the messages of a client
/// stream, which tonic hands to the handler as an error mid-stream.
pub fn caller_sent_garbage(status: &Status) -> Status {
    Status::from(NpudError::new(
        Reason::InvalidArgumentOther,
        format!("the request is not a valid message of its method: {}", status.message()),
    ))
}

/// Counts a failed call by the reason and native code its answer carries, as the client
/// reads them. Errors are counted here, where every handler's answer passes, rather than
/// where each is made; only trailers-only answers are read (a unary call's error), so a
/// successful call costs one header lookup.
pub fn count_failure<B>(metrics: &Metrics, res: &tonic::codegen::http::Response<B>) {
    let Some(status) = Status::from_header_map(res.headers()) else { return };
    if status.code() == Code::Ok {
        return;
    }
    match ErrorDetail::decode(status.details()) {
        Ok(d) if d.reason != 0 => {
            let reason = Reason::try_from(d.reason).unwrap_or(Reason::Unspecified);
            metrics.failure(reason.as_str_name(), (d.native_code != 0).then_some(d.native_code));
        }
        _ => metrics.failure(Reason::Unspecified.as_str_name(), None),
    }
}

/// Answers a request the Unix-socket rewriter marked as carrying oversized metadata (see
/// [`crate::tenancy::authority::MAX_HEADER_LIST`]) with a gRPC error that says so, before any
/// service sees it.
#[derive(Clone)]
pub struct RefuseOversizedMetadata<S> {
    inner: S,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct RefuseOversizedMetadataLayer;

impl<S> tower::Layer<S> for RefuseOversizedMetadataLayer {
    type Service = RefuseOversizedMetadata<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RefuseOversizedMetadata { inner }
    }
}

type BoxFuture<T, E> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S, ReqBody, ResBody> tower::Service<tonic::codegen::http::Request<ReqBody>> for RefuseOversizedMetadata<S>
where
    S: tower::Service<tonic::codegen::http::Request<ReqBody>, Response = tonic::codegen::http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: tonic::codegen::http::Request<ReqBody>) -> Self::Future {
        let size = req
            .headers()
            .get(crate::tenancy::authority::OVERSIZED_METADATA)
            .and_then(|v| v.to_str().ok().map(str::to_string));
        match size {
            Some(size) => {
                let status = Status::from(NpudError::new(
                    Reason::PayloadTooLarge,
                    format!(
                        "the request's metadata is {size} bytes; at most {} are accepted",
                        crate::tenancy::authority::MAX_HEADER_LIST
                    ),
                ));
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
            None => Box::pin(self.inner.call(req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_failure_becomes_invalid_argument_with_a_detail_and_others_pass() {
        let decode =
            Status::internal("failed to decode Protobuf message: invalid wire type: Varint (expected LengthDelimited)");
        let res = decode_failure_is_invalid_argument::<tonic::body::Body>(decode.into_http());
        let back = Status::from_header_map(res.headers()).expect("a status");
        assert_eq!(back.code(), Code::InvalidArgument);
        assert!(back.message().contains("invalid wire type"), "{}", back.message());
        let detail = ErrorDetail::decode(back.details()).expect("ErrorDetail");
        assert_eq!(detail.reason, Reason::InvalidArgumentOther as i32);
        for other in [Status::internal("backend exploded"), Status::not_found("no such stream")] {
            let (code, message) = (other.code(), other.message().to_string());
            let res = decode_failure_is_invalid_argument::<tonic::body::Body>(other.into_http());
            let back = Status::from_header_map(res.headers()).expect("a status");
            assert_eq!((back.code(), back.message()), (code, message.as_str()));
        }
    }
}

"""The typed exception of npud.core and the aclError mapping of npud.acl."""

from __future__ import annotations

import grpc

from npud.v1 import errors_pb2

Reason = errors_pb2.ErrorReason

# aclError codes (shared/reference/acl.md) the shim returns where the daemon gave none.
ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_RT_PARAM_INVALID = 107000
ACL_ERROR_RT_INVALID_DEVICEID = 107001
ACL_ERROR_RT_CONTEXT_NULL = 107002
ACL_ERROR_RT_THREAD_SUBSCRIBE = 107012
ACL_ERROR_RT_INVALID_HANDLE = 107017
ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000
ACL_ERROR_RT_NO_EVENT_RESOURCE = 207007
ACL_ERROR_RT_NO_STREAM_RESOURCE = 207008
ACL_ERROR_RT_INTERNAL_ERROR = 507000
ACL_ERROR_RT_REPORT_TIMEOUT = 507012


class NpudError(RuntimeError):
    """A failed npud call: the gRPC code, npud's stable reason and the vendor's code.
    A RuntimeError, as cuda.core's failures are."""

    def __init__(self, code: "grpc.StatusCode | None", message: str, reason: int = 0, native_code: int = 0, figures=None):
        # `code` is None for failures decided locally, before any call reached npud.
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.native_code = native_code
        self.figures = dict(figures or {})

    @property
    def reason_name(self) -> str:
        return Reason.Name(self.reason) if self.reason in Reason.values() else str(self.reason)

    def __str__(self) -> str:
        where = self.code.name if self.code is not None else "local"
        # 0 means the vendor gave no code (npud decided alone): not a code to show.
        native = f", native {self.native_code}" if self.native_code else ""
        return f"{self.message} ({where}, {self.reason_name}{native})"

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> "NpudError":
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        message = err.details() if hasattr(err, "details") else str(err)
        detail = errors_pb2.ErrorDetail()
        for key, value in (err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else ():
            if key == "grpc-status-details-bin":
                _decode_status_details(value, detail)
        return cls(code, message or "", detail.reason, detail.native_code, detail.figures)

    def acl_code(self) -> int:
        """The aclError a vendor runtime would return in the same situation."""
        if self.native_code:
            return int(self.native_code)
        r = self.reason
        if r in (Reason.BUDGET_EXHAUSTED, Reason.QUOTA_EXCEEDED, Reason.GRANT_WAIT_EXPIRED, Reason.HARDWARE_CREATION_FAILED):
            return ACL_ERROR_RT_NO_STREAM_RESOURCE
        if r == Reason.EVENT_BUDGET_EXHAUSTED:
            return ACL_ERROR_RT_NO_EVENT_RESOURCE
        if r in (Reason.UNKNOWN_HANDLE, Reason.STALE_EPOCH, Reason.INVALID_HANDLE_KIND):
            return ACL_ERROR_RT_INVALID_HANDLE
        if r == Reason.INVALID_DEVICE:
            return ACL_ERROR_RT_INVALID_DEVICEID
        if r in (Reason.UNKNOWN_SESSION, Reason.SESSION_CLOSED):
            return ACL_ERROR_UNINITIALIZE
        if self.code == grpc.StatusCode.INVALID_ARGUMENT:
            return ACL_ERROR_INVALID_PARAM
        if self.code == grpc.StatusCode.UNAVAILABLE:
            return ACL_ERROR_UNINITIALIZE
        return ACL_ERROR_RT_INTERNAL_ERROR


def _decode_status_details(value: bytes, detail: errors_pb2.ErrorDetail) -> None:
    """tonic sends `details` raw in grpc-status-details-bin: it is our ErrorDetail."""
    try:
        detail.ParseFromString(value)
    except Exception:  # a malformed trailer must not hide the real error
        detail.Clear()

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    INVALID_COUNT: _ClassVar[ErrorReason]
    INVALID_PRIORITY: _ClassVar[ErrorReason]
    INVALID_FLAGS: _ClassVar[ErrorReason]
    INVALID_DEVICE: _ClassVar[ErrorReason]
    INVALID_TIMEOUT: _ClassVar[ErrorReason]
    INVALID_NAME: _ClassVar[ErrorReason]
    PAYLOAD_TOO_LARGE: _ClassVar[ErrorReason]
    INVALID_HANDLE_KIND: _ClassVar[ErrorReason]
    INVALID_ARGUMENT_OTHER: _ClassVar[ErrorReason]
    UNKNOWN_HANDLE: _ClassVar[ErrorReason]
    UNKNOWN_SESSION: _ClassVar[ErrorReason]
    UNKNOWN_TENANT: _ClassVar[ErrorReason]
    BUDGET_EXHAUSTED: _ClassVar[ErrorReason]
    QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    GRANT_WAIT_EXPIRED: _ClassVar[ErrorReason]
    EVENT_BUDGET_EXHAUSTED: _ClassVar[ErrorReason]
    TOO_MANY_SESSIONS: _ClassVar[ErrorReason]
    RATE_LIMITED: _ClassVar[ErrorReason]
    HARDWARE_CREATION_FAILED: _ClassVar[ErrorReason]
    TOO_MANY_PENDING_REQUESTS: _ClassVar[ErrorReason]
    TOO_MANY_CALLBACKS: _ClassVar[ErrorReason]
    TOO_MANY_REPORT_STREAMS: _ClassVar[ErrorReason]
    TOO_MANY_BLOCKING_CALLS: _ClassVar[ErrorReason]
    TOO_MANY_REPORT_BYTES: _ClassVar[ErrorReason]
    TOO_MANY_CALLS_IN_FLIGHT: _ClassVar[ErrorReason]
    SYNC_TIMEOUT: _ClassVar[ErrorReason]
    STALE_EPOCH: _ClassVar[ErrorReason]
    EVENT_NOT_RECORDED: _ClassVar[ErrorReason]
    EVENT_NOT_COMPLETE: _ClassVar[ErrorReason]
    EVENT_NOT_TIMED: _ClassVar[ErrorReason]
    STREAM_NOT_SUBSCRIBED: _ClassVar[ErrorReason]
    STREAM_ALREADY_SUBSCRIBED: _ClassVar[ErrorReason]
    EVENT_FLAGS_FORBID: _ClassVar[ErrorReason]
    STREAM_FAILED: _ClassVar[ErrorReason]
    DEVICE_MISMATCH: _ClassVar[ErrorReason]
    SESSION_CLOSED: _ClassVar[ErrorReason]
    FAILURE_MODE_ALREADY_SET: _ClassVar[ErrorReason]
    DEVICE_NOT_OWNED: _ClassVar[ErrorReason]
    NO_IDENTITY: _ClassVar[ErrorReason]
    NOT_ADMIN: _ClassVar[ErrorReason]
    TENANT_REFUSED: _ClassVar[ErrorReason]
    DRAINING: _ClassVar[ErrorReason]
    DEVICE_UNHEALTHY: _ClassVar[ErrorReason]
    UNSUPPORTED_BY_BACKEND: _ClassVar[ErrorReason]
    BACKEND_ERROR: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
INVALID_COUNT: ErrorReason
INVALID_PRIORITY: ErrorReason
INVALID_FLAGS: ErrorReason
INVALID_DEVICE: ErrorReason
INVALID_TIMEOUT: ErrorReason
INVALID_NAME: ErrorReason
PAYLOAD_TOO_LARGE: ErrorReason
INVALID_HANDLE_KIND: ErrorReason
INVALID_ARGUMENT_OTHER: ErrorReason
UNKNOWN_HANDLE: ErrorReason
UNKNOWN_SESSION: ErrorReason
UNKNOWN_TENANT: ErrorReason
BUDGET_EXHAUSTED: ErrorReason
QUOTA_EXCEEDED: ErrorReason
GRANT_WAIT_EXPIRED: ErrorReason
EVENT_BUDGET_EXHAUSTED: ErrorReason
TOO_MANY_SESSIONS: ErrorReason
RATE_LIMITED: ErrorReason
HARDWARE_CREATION_FAILED: ErrorReason
TOO_MANY_PENDING_REQUESTS: ErrorReason
TOO_MANY_CALLBACKS: ErrorReason
TOO_MANY_REPORT_STREAMS: ErrorReason
TOO_MANY_BLOCKING_CALLS: ErrorReason
TOO_MANY_REPORT_BYTES: ErrorReason
TOO_MANY_CALLS_IN_FLIGHT: ErrorReason
SYNC_TIMEOUT: ErrorReason
STALE_EPOCH: ErrorReason
EVENT_NOT_RECORDED: ErrorReason
EVENT_NOT_COMPLETE: ErrorReason
EVENT_NOT_TIMED: ErrorReason
STREAM_NOT_SUBSCRIBED: ErrorReason
STREAM_ALREADY_SUBSCRIBED: ErrorReason
EVENT_FLAGS_FORBID: ErrorReason
STREAM_FAILED: ErrorReason
DEVICE_MISMATCH: ErrorReason
SESSION_CLOSED: ErrorReason
FAILURE_MODE_ALREADY_SET: ErrorReason
DEVICE_NOT_OWNED: ErrorReason
NO_IDENTITY: ErrorReason
NOT_ADMIN: ErrorReason
TENANT_REFUSED: ErrorReason
DRAINING: ErrorReason
DEVICE_UNHEALTHY: ErrorReason
UNSUPPORTED_BY_BACKEND: ErrorReason
BACKEND_ERROR: ErrorReason

class ErrorDetail(_message.Message):
    __slots__ = ("reason", "native_code", "backend", "figures")
    class FiguresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    REASON_FIELD_NUMBER: _ClassVar[int]
    NATIVE_CODE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    FIGURES_FIELD_NUMBER: _ClassVar[int]
    reason: ErrorReason
    native_code: int
    backend: str
    figures: _containers.ScalarMap[str, int]
    def __init__(self, reason: _Optional[_Union[ErrorReason, str]] = ..., native_code: _Optional[int] = ..., backend: _Optional[str] = ..., figures: _Optional[_Mapping[str, int]] = ...) -> None: ...

from npud.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubscribeRequest(_message.Message):
    __slots__ = ("thread_id", "stream")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    thread_id: int
    stream: int
    def __init__(self, thread_id: _Optional[int] = ..., stream: _Optional[int] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnsubscribeRequest(_message.Message):
    __slots__ = ("thread_id", "stream")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    thread_id: int
    stream: int
    def __init__(self, thread_id: _Optional[int] = ..., stream: _Optional[int] = ...) -> None: ...

class UnsubscribeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LaunchCallbackRequest(_message.Message):
    __slots__ = ("stream", "user_data", "block_type")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TYPE_FIELD_NUMBER: _ClassVar[int]
    stream: int
    user_data: bytes
    block_type: _common_pb2.CallbackBlockType
    def __init__(self, stream: _Optional[int] = ..., user_data: _Optional[bytes] = ..., block_type: _Optional[_Union[_common_pb2.CallbackBlockType, str]] = ...) -> None: ...

class LaunchCallbackResponse(_message.Message):
    __slots__ = ("callback_id",)
    CALLBACK_ID_FIELD_NUMBER: _ClassVar[int]
    callback_id: int
    def __init__(self, callback_id: _Optional[int] = ...) -> None: ...

class CallbackReport(_message.Message):
    __slots__ = ("callback_id", "stream", "thread_id", "user_data", "block_type", "status")
    CALLBACK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    callback_id: int
    stream: int
    thread_id: int
    user_data: bytes
    block_type: _common_pb2.CallbackBlockType
    status: int
    def __init__(self, callback_id: _Optional[int] = ..., stream: _Optional[int] = ..., thread_id: _Optional[int] = ..., user_data: _Optional[bytes] = ..., block_type: _Optional[_Union[_common_pb2.CallbackBlockType, str]] = ..., status: _Optional[int] = ...) -> None: ...

class ExceptionReport(_message.Message):
    __slots__ = ("task_id", "stream", "device", "thread_id", "error_code", "message")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: int
    stream: int
    device: int
    thread_id: int
    error_code: int
    message: str
    def __init__(self, task_id: _Optional[int] = ..., stream: _Optional[int] = ..., device: _Optional[int] = ..., thread_id: _Optional[int] = ..., error_code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Report(_message.Message):
    __slots__ = ("sequence", "callback", "exception")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    callback: CallbackReport
    exception: ExceptionReport
    def __init__(self, sequence: _Optional[int] = ..., callback: _Optional[_Union[CallbackReport, _Mapping]] = ..., exception: _Optional[_Union[ExceptionReport, _Mapping]] = ...) -> None: ...

class ReportsRequest(_message.Message):
    __slots__ = ("after_sequence",)
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    def __init__(self, after_sequence: _Optional[int] = ...) -> None: ...

class ProcessReportRequest(_message.Message):
    __slots__ = ("thread_id", "timeout_ms", "max_reports")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPORTS_FIELD_NUMBER: _ClassVar[int]
    thread_id: int
    timeout_ms: int
    max_reports: int
    def __init__(self, thread_id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., max_reports: _Optional[int] = ...) -> None: ...

class ProcessReportResponse(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[Report]
    def __init__(self, reports: _Optional[_Iterable[_Union[Report, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("callback_id",)
    CALLBACK_ID_FIELD_NUMBER: _ClassVar[int]
    callback_id: int
    def __init__(self, callback_id: _Optional[int] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetExceptionReportsRequest(_message.Message):
    __slots__ = ("enabled",)
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    def __init__(self, enabled: _Optional[bool] = ...) -> None: ...

class SetExceptionReportsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

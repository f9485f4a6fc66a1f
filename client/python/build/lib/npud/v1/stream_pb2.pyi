from npud.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateStreamsRequest(_message.Message):
    __slots__ = ("device", "count", "priority", "flags", "wait_ms")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    priority: int
    flags: int
    wait_ms: int
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., priority: _Optional[int] = ..., flags: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("handle", "device", "priority", "flags", "pending_tasks", "failed", "failure_mode", "reused")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MODE_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    handle: int
    device: int
    priority: int
    flags: int
    pending_tasks: int
    failed: bool
    failure_mode: _common_pb2.FailureMode
    reused: bool
    def __init__(self, handle: _Optional[int] = ..., device: _Optional[int] = ..., priority: _Optional[int] = ..., flags: _Optional[int] = ..., pending_tasks: _Optional[int] = ..., failed: _Optional[bool] = ..., failure_mode: _Optional[_Union[_common_pb2.FailureMode, str]] = ..., reused: _Optional[bool] = ...) -> None: ...

class CreateStreamsResponse(_message.Message):
    __slots__ = ("streams", "waited_ms")
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    waited_ms: int
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ..., waited_ms: _Optional[int] = ...) -> None: ...

class DestroyStreamsRequest(_message.Message):
    __slots__ = ("handles",)
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    handles: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, handles: _Optional[_Iterable[int]] = ...) -> None: ...

class DestroyStreamsResponse(_message.Message):
    __slots__ = ("destroyed",)
    DESTROYED_FIELD_NUMBER: _ClassVar[int]
    destroyed: int
    def __init__(self, destroyed: _Optional[int] = ...) -> None: ...

class ListStreamsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListStreamsResponse(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ...) -> None: ...

class GetStreamRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    def __init__(self, handle: _Optional[int] = ...) -> None: ...

class QueryStreamRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    def __init__(self, handle: _Optional[int] = ...) -> None: ...

class QueryStreamResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.WorkState
    def __init__(self, state: _Optional[_Union[_common_pb2.WorkState, str]] = ...) -> None: ...

class SynchronizeStreamRequest(_message.Message):
    __slots__ = ("handle", "timeout_ms")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    handle: int
    timeout_ms: int
    def __init__(self, handle: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class SynchronizeStreamResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamWaitEventRequest(_message.Message):
    __slots__ = ("stream", "event")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    stream: int
    event: int
    def __init__(self, stream: _Optional[int] = ..., event: _Optional[int] = ...) -> None: ...

class StreamWaitEventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EnqueueDelayRequest(_message.Message):
    __slots__ = ("stream", "duration_us")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DURATION_US_FIELD_NUMBER: _ClassVar[int]
    stream: int
    duration_us: int
    def __init__(self, stream: _Optional[int] = ..., duration_us: _Optional[int] = ...) -> None: ...

class EnqueueDelayResponse(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: int
    def __init__(self, task_id: _Optional[int] = ...) -> None: ...

class SetFailureModeRequest(_message.Message):
    __slots__ = ("stream", "mode")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    stream: int
    mode: _common_pb2.FailureMode
    def __init__(self, stream: _Optional[int] = ..., mode: _Optional[_Union[_common_pb2.FailureMode, str]] = ...) -> None: ...

class SetFailureModeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

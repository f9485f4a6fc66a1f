from npud.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEventRequest(_message.Message):
    __slots__ = ("device", "flags", "disable_timing", "blocking_sync")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_TIMING_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_SYNC_FIELD_NUMBER: _ClassVar[int]
    device: int
    flags: int
    disable_timing: bool
    blocking_sync: bool
    def __init__(self, device: _Optional[int] = ..., flags: _Optional[int] = ..., disable_timing: _Optional[bool] = ..., blocking_sync: _Optional[bool] = ...) -> None: ...

class EventInfo(_message.Message):
    __slots__ = ("handle", "device", "flags", "timing", "state")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    device: int
    flags: int
    timing: bool
    state: _common_pb2.EventState
    def __init__(self, handle: _Optional[int] = ..., device: _Optional[int] = ..., flags: _Optional[int] = ..., timing: _Optional[bool] = ..., state: _Optional[_Union[_common_pb2.EventState, str]] = ...) -> None: ...

class DestroyEventRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    def __init__(self, handle: _Optional[int] = ...) -> None: ...

class DestroyEventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RecordEventRequest(_message.Message):
    __slots__ = ("event", "stream")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    event: int
    stream: int
    def __init__(self, event: _Optional[int] = ..., stream: _Optional[int] = ...) -> None: ...

class RecordEventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetEventRequest(_message.Message):
    __slots__ = ("event", "stream")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    event: int
    stream: int
    def __init__(self, event: _Optional[int] = ..., stream: _Optional[int] = ...) -> None: ...

class ResetEventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryEventRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    def __init__(self, handle: _Optional[int] = ...) -> None: ...

class QueryEventResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.EventState
    def __init__(self, state: _Optional[_Union[_common_pb2.EventState, str]] = ...) -> None: ...

class SynchronizeEventRequest(_message.Message):
    __slots__ = ("handle", "timeout_ms")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    handle: int
    timeout_ms: int
    def __init__(self, handle: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class SynchronizeEventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ElapsedTimeRequest(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ElapsedTimeResponse(_message.Message):
    __slots__ = ("milliseconds",)
    MILLISECONDS_FIELD_NUMBER: _ClassVar[int]
    milliseconds: float
    def __init__(self, milliseconds: _Optional[float] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[EventInfo]
    def __init__(self, events: _Optional[_Iterable[_Union[EventInfo, _Mapping]]] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenSessionRequest(_message.Message):
    __slots__ = ("name", "lease_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    lease_ms: int
    def __init__(self, name: _Optional[str] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session", "lease_ms", "attached", "tenant", "epoch")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    session: int
    lease_ms: int
    attached: bool
    tenant: str
    epoch: int
    def __init__(self, session: _Optional[int] = ..., lease_ms: _Optional[int] = ..., attached: _Optional[bool] = ..., tenant: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class RenewSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: int
    def __init__(self, session: _Optional[int] = ...) -> None: ...

class RenewSessionResponse(_message.Message):
    __slots__ = ("lease_ms",)
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    lease_ms: int
    def __init__(self, lease_ms: _Optional[int] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session", "name")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    session: int
    name: str
    def __init__(self, session: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("streams_released", "events_released")
    STREAMS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    streams_released: int
    events_released: int
    def __init__(self, streams_released: _Optional[int] = ..., events_released: _Optional[int] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionInfo(_message.Message):
    __slots__ = ("session", "name", "tenant", "streams", "events", "lease_remaining_ms", "report_stream_open")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_REMAINING_MS_FIELD_NUMBER: _ClassVar[int]
    REPORT_STREAM_OPEN_FIELD_NUMBER: _ClassVar[int]
    session: int
    name: str
    tenant: str
    streams: int
    events: int
    lease_remaining_ms: int
    report_stream_open: bool
    def __init__(self, session: _Optional[int] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., streams: _Optional[int] = ..., events: _Optional[int] = ..., lease_remaining_ms: _Optional[int] = ..., report_stream_open: _Optional[bool] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInfo]
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInfo, _Mapping]]] = ...) -> None: ...

from npud.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BudgetCall(_message.Message):
    __slots__ = ("hello", "acquire", "release", "declare", "share", "created", "acquire_events", "release_events", "captured")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    DECLARE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_EVENTS_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_FIELD_NUMBER: _ClassVar[int]
    hello: BudgetHello
    acquire: AcquireBudgetRequest
    release: ReleaseBudgetRequest
    declare: DeclareBudgetRequest
    share: BudgetShareRequest
    created: CreatedBudgetRequest
    acquire_events: AcquireEventsRequest
    release_events: ReleaseEventsRequest
    captured: CapturedBudgetRequest
    def __init__(self, hello: _Optional[_Union[BudgetHello, _Mapping]] = ..., acquire: _Optional[_Union[AcquireBudgetRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseBudgetRequest, _Mapping]] = ..., declare: _Optional[_Union[DeclareBudgetRequest, _Mapping]] = ..., share: _Optional[_Union[BudgetShareRequest, _Mapping]] = ..., created: _Optional[_Union[CreatedBudgetRequest, _Mapping]] = ..., acquire_events: _Optional[_Union[AcquireEventsRequest, _Mapping]] = ..., release_events: _Optional[_Union[ReleaseEventsRequest, _Mapping]] = ..., captured: _Optional[_Union[CapturedBudgetRequest, _Mapping]] = ...) -> None: ...

class BudgetReply(_message.Message):
    __slots__ = ("welcome", "acquired", "released", "declared", "share", "error", "created", "events_acquired", "events_released", "captured")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    DECLARED_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_FIELD_NUMBER: _ClassVar[int]
    welcome: BudgetWelcome
    acquired: AcquireBudgetResponse
    released: ReleaseBudgetResponse
    declared: DeclareBudgetResponse
    share: BudgetShare
    error: BudgetError
    created: CreatedBudgetResponse
    events_acquired: AcquireEventsResponse
    events_released: ReleaseEventsResponse
    captured: CapturedBudgetResponse
    def __init__(self, welcome: _Optional[_Union[BudgetWelcome, _Mapping]] = ..., acquired: _Optional[_Union[AcquireBudgetResponse, _Mapping]] = ..., released: _Optional[_Union[ReleaseBudgetResponse, _Mapping]] = ..., declared: _Optional[_Union[DeclareBudgetResponse, _Mapping]] = ..., share: _Optional[_Union[BudgetShare, _Mapping]] = ..., error: _Optional[_Union[BudgetError, _Mapping]] = ..., created: _Optional[_Union[CreatedBudgetResponse, _Mapping]] = ..., events_acquired: _Optional[_Union[AcquireEventsResponse, _Mapping]] = ..., events_released: _Optional[_Union[ReleaseEventsResponse, _Mapping]] = ..., captured: _Optional[_Union[CapturedBudgetResponse, _Mapping]] = ...) -> None: ...

class BudgetHello(_message.Message):
    __slots__ = ("program", "allocation", "reports_created")
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    REPORTS_CREATED_FIELD_NUMBER: _ClassVar[int]
    program: str
    allocation: str
    reports_created: bool
    def __init__(self, program: _Optional[str] = ..., allocation: _Optional[str] = ..., reports_created: _Optional[bool] = ...) -> None: ...

class BudgetWelcome(_message.Message):
    __slots__ = ("tenant", "epoch", "declare_grace_ms", "process_streams", "max_streams", "highest_priority", "bookings", "shared", "capture_headroom", "client_slots", "cushion")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DECLARE_GRACE_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    BOOKINGS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_HEADROOM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CUSHION_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    epoch: int
    declare_grace_ms: int
    process_streams: int
    max_streams: int
    highest_priority: int
    bookings: _containers.RepeatedCompositeFieldContainer[DeviceBooking]
    shared: bool
    capture_headroom: int
    client_slots: bool
    cushion: int
    def __init__(self, tenant: _Optional[str] = ..., epoch: _Optional[int] = ..., declare_grace_ms: _Optional[int] = ..., process_streams: _Optional[int] = ..., max_streams: _Optional[int] = ..., highest_priority: _Optional[int] = ..., bookings: _Optional[_Iterable[_Union[DeviceBooking, _Mapping]]] = ..., shared: _Optional[bool] = ..., capture_headroom: _Optional[int] = ..., client_slots: _Optional[bool] = ..., cushion: _Optional[int] = ...) -> None: ...

class DeviceBooking(_message.Message):
    __slots__ = ("device", "identity", "streams", "placed", "floating")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    FLOATING_FIELD_NUMBER: _ClassVar[int]
    device: int
    identity: DeviceIdentity
    streams: int
    placed: int
    floating: int
    def __init__(self, device: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., streams: _Optional[int] = ..., placed: _Optional[int] = ..., floating: _Optional[int] = ...) -> None: ...

class AcquireBudgetRequest(_message.Message):
    __slots__ = ("device", "count", "wait_ms", "identity", "created", "capture", "at_least", "visible_devices", "client_slot")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_DEVICES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SLOT_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    wait_ms: int
    identity: DeviceIdentity
    created: int
    capture: bool
    at_least: int
    visible_devices: int
    client_slot: bool
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., wait_ms: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., created: _Optional[int] = ..., capture: _Optional[bool] = ..., at_least: _Optional[int] = ..., visible_devices: _Optional[int] = ..., client_slot: _Optional[bool] = ...) -> None: ...

class AcquireBudgetResponse(_message.Message):
    __slots__ = ("waited_ms", "share", "unpaced", "granted")
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    UNPACED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    waited_ms: int
    share: BudgetShare
    unpaced: bool
    granted: int
    def __init__(self, waited_ms: _Optional[int] = ..., share: _Optional[_Union[BudgetShare, _Mapping]] = ..., unpaced: _Optional[bool] = ..., granted: _Optional[int] = ...) -> None: ...

class ReleaseBudgetRequest(_message.Message):
    __slots__ = ("device", "count", "identity", "created", "client_slot")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SLOT_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    identity: DeviceIdentity
    created: int
    client_slot: bool
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., created: _Optional[int] = ..., client_slot: _Optional[bool] = ...) -> None: ...

class ReleaseBudgetResponse(_message.Message):
    __slots__ = ("share",)
    SHARE_FIELD_NUMBER: _ClassVar[int]
    share: BudgetShare
    def __init__(self, share: _Optional[_Union[BudgetShare, _Mapping]] = ...) -> None: ...

class DeclareBudgetRequest(_message.Message):
    __slots__ = ("device", "count", "events", "identity")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    events: int
    identity: DeviceIdentity
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., events: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ...) -> None: ...

class DeclareBudgetResponse(_message.Message):
    __slots__ = ("accepted", "share", "events_accepted")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    share: BudgetShare
    events_accepted: int
    def __init__(self, accepted: _Optional[int] = ..., share: _Optional[_Union[BudgetShare, _Mapping]] = ..., events_accepted: _Optional[int] = ...) -> None: ...

class AcquireEventsRequest(_message.Message):
    __slots__ = ("device", "count", "identity")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    identity: DeviceIdentity
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ...) -> None: ...

class AcquireEventsResponse(_message.Message):
    __slots__ = ("share",)
    SHARE_FIELD_NUMBER: _ClassVar[int]
    share: BudgetShare
    def __init__(self, share: _Optional[_Union[BudgetShare, _Mapping]] = ...) -> None: ...

class ReleaseEventsRequest(_message.Message):
    __slots__ = ("device", "count", "identity")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    identity: DeviceIdentity
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ...) -> None: ...

class ReleaseEventsResponse(_message.Message):
    __slots__ = ("share",)
    SHARE_FIELD_NUMBER: _ClassVar[int]
    share: BudgetShare
    def __init__(self, share: _Optional[_Union[BudgetShare, _Mapping]] = ...) -> None: ...

class CreatedBudgetRequest(_message.Message):
    __slots__ = ("device", "identity", "created")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    device: int
    identity: DeviceIdentity
    created: int
    def __init__(self, device: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., created: _Optional[int] = ...) -> None: ...

class CreatedBudgetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CapturedBudgetRequest(_message.Message):
    __slots__ = ("device", "count", "identity", "created")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    device: int
    count: int
    identity: DeviceIdentity
    created: int
    def __init__(self, device: _Optional[int] = ..., count: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., created: _Optional[int] = ...) -> None: ...

class CapturedBudgetResponse(_message.Message):
    __slots__ = ("accepted", "share")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    share: BudgetShare
    def __init__(self, accepted: _Optional[int] = ..., share: _Optional[_Union[BudgetShare, _Mapping]] = ...) -> None: ...

class BudgetShareRequest(_message.Message):
    __slots__ = ("device", "identity")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    device: int
    identity: DeviceIdentity
    def __init__(self, device: _Optional[int] = ..., identity: _Optional[_Union[DeviceIdentity, _Mapping]] = ...) -> None: ...

class DeviceIdentity(_message.Message):
    __slots__ = ("physical_id", "uuid")
    PHYSICAL_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    physical_id: int
    uuid: str
    def __init__(self, physical_id: _Optional[int] = ..., uuid: _Optional[str] = ...) -> None: ...

class BudgetShare(_message.Message):
    __slots__ = ("device", "capacity", "device_free", "available", "tenant_holds", "holds", "max_streams", "event_capacity", "events_available", "event_holds", "untracked", "fault")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FREE_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    TENANT_HOLDS_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    EVENT_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    EVENTS_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_HOLDS_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    device: int
    capacity: int
    device_free: int
    available: int
    tenant_holds: int
    holds: int
    max_streams: int
    event_capacity: int
    events_available: int
    event_holds: int
    untracked: int
    fault: str
    def __init__(self, device: _Optional[int] = ..., capacity: _Optional[int] = ..., device_free: _Optional[int] = ..., available: _Optional[int] = ..., tenant_holds: _Optional[int] = ..., holds: _Optional[int] = ..., max_streams: _Optional[int] = ..., event_capacity: _Optional[int] = ..., events_available: _Optional[int] = ..., event_holds: _Optional[int] = ..., untracked: _Optional[int] = ..., fault: _Optional[str] = ...) -> None: ...

class BudgetError(_message.Message):
    __slots__ = ("message", "detail", "code")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    message: str
    detail: _errors_pb2.ErrorDetail
    code: int
    def __init__(self, message: _Optional[str] = ..., detail: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ..., code: _Optional[int] = ...) -> None: ...

class NativeHolder(_message.Message):
    __slots__ = ("pid", "tenant", "program", "container", "device", "streams", "events", "created")
    PID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    tenant: str
    program: str
    container: str
    device: int
    streams: int
    events: int
    created: int
    def __init__(self, pid: _Optional[int] = ..., tenant: _Optional[str] = ..., program: _Optional[str] = ..., container: _Optional[str] = ..., device: _Optional[int] = ..., streams: _Optional[int] = ..., events: _Optional[int] = ..., created: _Optional[int] = ...) -> None: ...

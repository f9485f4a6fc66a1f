from npud.v1 import device_pb2 as _device_pb2
from npud.v1 import budget_pb2 as _budget_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Quota(_message.Message):
    __slots__ = ("max_streams", "reserved_streams", "max_events", "weight", "highest_priority")
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    max_streams: int
    reserved_streams: int
    max_events: int
    weight: int
    highest_priority: int
    def __init__(self, max_streams: _Optional[int] = ..., reserved_streams: _Optional[int] = ..., max_events: _Optional[int] = ..., weight: _Optional[int] = ..., highest_priority: _Optional[int] = ...) -> None: ...

class TenantUsage(_message.Message):
    __slots__ = ("tenant", "device", "streams", "events", "waiting_requests", "waiting_streams", "quota", "sessions", "allocated_streams", "left_untracked", "untracked_bound", "capture_debt_bound")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_STREAMS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_STREAMS_FIELD_NUMBER: _ClassVar[int]
    LEFT_UNTRACKED_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_BOUND_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_DEBT_BOUND_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    device: int
    streams: int
    events: int
    waiting_requests: int
    waiting_streams: int
    quota: Quota
    sessions: int
    allocated_streams: int
    left_untracked: int
    untracked_bound: int
    capture_debt_bound: int
    def __init__(self, tenant: _Optional[str] = ..., device: _Optional[int] = ..., streams: _Optional[int] = ..., events: _Optional[int] = ..., waiting_requests: _Optional[int] = ..., waiting_streams: _Optional[int] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., sessions: _Optional[int] = ..., allocated_streams: _Optional[int] = ..., left_untracked: _Optional[int] = ..., untracked_bound: _Optional[int] = ..., capture_debt_bound: _Optional[int] = ...) -> None: ...

class AllocationBooking(_message.Message):
    __slots__ = ("namespace", "pod", "container", "tenant", "device", "booked", "reserved", "in_use", "waiting", "allocated", "mode")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    BOOKED_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    IN_USE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    pod: str
    container: str
    tenant: str
    device: int
    booked: int
    reserved: int
    in_use: int
    waiting: int
    allocated: int
    mode: str
    def __init__(self, namespace: _Optional[str] = ..., pod: _Optional[str] = ..., container: _Optional[str] = ..., tenant: _Optional[str] = ..., device: _Optional[int] = ..., booked: _Optional[int] = ..., reserved: _Optional[int] = ..., in_use: _Optional[int] = ..., waiting: _Optional[int] = ..., allocated: _Optional[int] = ..., mode: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("devices", "tenants", "policy", "epoch", "pool_hits", "hardware_creations", "sessions", "streams", "events", "callbacks_in_flight", "invariant_violations", "native_holders", "allocations")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    POOL_HITS_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_CREATIONS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    CALLBACKS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    INVARIANT_VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    NATIVE_HOLDERS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[_device_pb2.Device]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantUsage]
    policy: str
    epoch: int
    pool_hits: int
    hardware_creations: int
    sessions: int
    streams: int
    events: int
    callbacks_in_flight: int
    invariant_violations: int
    native_holders: _containers.RepeatedCompositeFieldContainer[_budget_pb2.NativeHolder]
    allocations: _containers.RepeatedCompositeFieldContainer[AllocationBooking]
    def __init__(self, devices: _Optional[_Iterable[_Union[_device_pb2.Device, _Mapping]]] = ..., tenants: _Optional[_Iterable[_Union[TenantUsage, _Mapping]]] = ..., policy: _Optional[str] = ..., epoch: _Optional[int] = ..., pool_hits: _Optional[int] = ..., hardware_creations: _Optional[int] = ..., sessions: _Optional[int] = ..., streams: _Optional[int] = ..., events: _Optional[int] = ..., callbacks_in_flight: _Optional[int] = ..., invariant_violations: _Optional[int] = ..., native_holders: _Optional[_Iterable[_Union[_budget_pb2.NativeHolder, _Mapping]]] = ..., allocations: _Optional[_Iterable[_Union[AllocationBooking, _Mapping]]] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TenantInfo(_message.Message):
    __slots__ = ("name", "quota", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    quota: Quota
    source: str
    def __init__(self, name: _Optional[str] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., source: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[TenantInfo]
    def __init__(self, tenants: _Optional[_Iterable[_Union[TenantInfo, _Mapping]]] = ...) -> None: ...

class SetQuotaRequest(_message.Message):
    __slots__ = ("tenant", "max_streams", "reserved_streams", "max_events", "weight", "highest_priority")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MAX_STREAMS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_STREAMS_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    max_streams: int
    reserved_streams: int
    max_events: int
    weight: int
    highest_priority: int
    def __init__(self, tenant: _Optional[str] = ..., max_streams: _Optional[int] = ..., reserved_streams: _Optional[int] = ..., max_events: _Optional[int] = ..., weight: _Optional[int] = ..., highest_priority: _Optional[int] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("shutdown",)
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    shutdown: bool
    def __init__(self, shutdown: _Optional[bool] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: int
    def __init__(self, sessions: _Optional[int] = ...) -> None: ...

class EvictSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: int
    def __init__(self, session: _Optional[int] = ...) -> None: ...

class EvictSessionResponse(_message.Message):
    __slots__ = ("streams_released", "events_released")
    STREAMS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_RELEASED_FIELD_NUMBER: _ClassVar[int]
    streams_released: int
    events_released: int
    def __init__(self, streams_released: _Optional[int] = ..., events_released: _Optional[int] = ...) -> None: ...

class InjectFaultRequest(_message.Message):
    __slots__ = ("device", "fail_next_creations", "fail_task", "stall", "resume", "panic")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    FAIL_NEXT_CREATIONS_FIELD_NUMBER: _ClassVar[int]
    FAIL_TASK_FIELD_NUMBER: _ClassVar[int]
    STALL_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    PANIC_FIELD_NUMBER: _ClassVar[int]
    device: int
    fail_next_creations: int
    fail_task: FailTask
    stall: bool
    resume: bool
    panic: bool
    def __init__(self, device: _Optional[int] = ..., fail_next_creations: _Optional[int] = ..., fail_task: _Optional[_Union[FailTask, _Mapping]] = ..., stall: _Optional[bool] = ..., resume: _Optional[bool] = ..., panic: _Optional[bool] = ...) -> None: ...

class FailTask(_message.Message):
    __slots__ = ("stream", "task", "code")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    stream: int
    task: int
    code: int
    def __init__(self, stream: _Optional[int] = ..., task: _Optional[int] = ..., code: _Optional[int] = ...) -> None: ...

class InjectFaultResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

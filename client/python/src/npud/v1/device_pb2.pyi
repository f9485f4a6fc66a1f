from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListDevicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Device(_message.Message):
    __slots__ = ("id", "name", "backend", "profile", "hardware_limit", "capacity", "reserved", "in_use", "pooled", "available", "event_limit", "events_in_use", "priority_highest", "priority_lowest", "healthy", "queued_requests", "hardware_in_use", "draining", "physical_id", "uuid", "pci_bus_id", "untracked", "fault")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    IN_USE_FIELD_NUMBER: _ClassVar[int]
    POOLED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_IN_USE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_HIGHEST_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_LOWEST_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_IN_USE_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    backend: str
    profile: str
    hardware_limit: int
    capacity: int
    reserved: int
    in_use: int
    pooled: int
    available: int
    event_limit: int
    events_in_use: int
    priority_highest: int
    priority_lowest: int
    healthy: bool
    queued_requests: int
    hardware_in_use: int
    draining: int
    physical_id: int
    uuid: str
    pci_bus_id: str
    untracked: int
    fault: str
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., backend: _Optional[str] = ..., profile: _Optional[str] = ..., hardware_limit: _Optional[int] = ..., capacity: _Optional[int] = ..., reserved: _Optional[int] = ..., in_use: _Optional[int] = ..., pooled: _Optional[int] = ..., available: _Optional[int] = ..., event_limit: _Optional[int] = ..., events_in_use: _Optional[int] = ..., priority_highest: _Optional[int] = ..., priority_lowest: _Optional[int] = ..., healthy: _Optional[bool] = ..., queued_requests: _Optional[int] = ..., hardware_in_use: _Optional[int] = ..., draining: _Optional[int] = ..., physical_id: _Optional[int] = ..., uuid: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., untracked: _Optional[int] = ..., fault: _Optional[str] = ...) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ...) -> None: ...

class SynchronizeDeviceRequest(_message.Message):
    __slots__ = ("device", "timeout_ms")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    device: int
    timeout_ms: int
    def __init__(self, device: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class SynchronizeDeviceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

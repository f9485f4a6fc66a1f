from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class StreamFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAM_FLAG_NONE: _ClassVar[StreamFlag]
    STREAM_FLAG_FAST_LAUNCH: _ClassVar[StreamFlag]
    STREAM_FLAG_FAST_SYNC: _ClassVar[StreamFlag]
    STREAM_FLAG_PERSISTENT: _ClassVar[StreamFlag]
    STREAM_FLAG_HUGE: _ClassVar[StreamFlag]
    STREAM_FLAG_CPU_SCHEDULE: _ClassVar[StreamFlag]
    STREAM_FLAG_DEVICE_USE_ONLY: _ClassVar[StreamFlag]
    STREAM_FLAG_NON_BLOCKING: _ClassVar[StreamFlag]

class EventFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_FLAG_NONE: _ClassVar[EventFlag]
    EVENT_FLAG_SYNC: _ClassVar[EventFlag]
    EVENT_FLAG_CAPTURE_STREAM_PROGRESS: _ClassVar[EventFlag]
    EVENT_FLAG_TIME_LINE: _ClassVar[EventFlag]
    EVENT_FLAG_DEVICE_USE_ONLY: _ClassVar[EventFlag]
    EVENT_FLAG_EXTERNAL: _ClassVar[EventFlag]
    EVENT_FLAG_IPC: _ClassVar[EventFlag]

class WorkState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORK_STATE_UNSPECIFIED: _ClassVar[WorkState]
    WORK_STATE_COMPLETE: _ClassVar[WorkState]
    WORK_STATE_NOT_READY: _ClassVar[WorkState]

class EventState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_STATE_UNSPECIFIED: _ClassVar[EventState]
    EVENT_STATE_NOT_RECORDED: _ClassVar[EventState]
    EVENT_STATE_PENDING: _ClassVar[EventState]
    EVENT_STATE_COMPLETE: _ClassVar[EventState]

class CallbackBlockType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALLBACK_NO_BLOCK: _ClassVar[CallbackBlockType]
    CALLBACK_BLOCK: _ClassVar[CallbackBlockType]

class FailureMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_MODE_CONTINUE: _ClassVar[FailureMode]
    FAILURE_MODE_STOP: _ClassVar[FailureMode]
STREAM_FLAG_NONE: StreamFlag
STREAM_FLAG_FAST_LAUNCH: StreamFlag
STREAM_FLAG_FAST_SYNC: StreamFlag
STREAM_FLAG_PERSISTENT: StreamFlag
STREAM_FLAG_HUGE: StreamFlag
STREAM_FLAG_CPU_SCHEDULE: StreamFlag
STREAM_FLAG_DEVICE_USE_ONLY: StreamFlag
STREAM_FLAG_NON_BLOCKING: StreamFlag
EVENT_FLAG_NONE: EventFlag
EVENT_FLAG_SYNC: EventFlag
EVENT_FLAG_CAPTURE_STREAM_PROGRESS: EventFlag
EVENT_FLAG_TIME_LINE: EventFlag
EVENT_FLAG_DEVICE_USE_ONLY: EventFlag
EVENT_FLAG_EXTERNAL: EventFlag
EVENT_FLAG_IPC: EventFlag
WORK_STATE_UNSPECIFIED: WorkState
WORK_STATE_COMPLETE: WorkState
WORK_STATE_NOT_READY: WorkState
EVENT_STATE_UNSPECIFIED: EventState
EVENT_STATE_NOT_RECORDED: EventState
EVENT_STATE_PENDING: EventState
EVENT_STATE_COMPLETE: EventState
CALLBACK_NO_BLOCK: CallbackBlockType
CALLBACK_BLOCK: CallbackBlockType
FAILURE_MODE_CONTINUE: FailureMode
FAILURE_MODE_STOP: FailureMode

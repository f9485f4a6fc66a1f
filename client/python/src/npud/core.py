"""A cuda.core-like API over npud: Device, Stream, Event.

Handles are daemon handles (ints), not device pointers: raw pointers mean nothing across
a process boundary. Errors raise `npud.NpudError` with the reason and the native code.
"""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass
from typing import Optional, TypeVar, Union

from npud import _session
from npud.errors import NpudError
from npud.v1 import common_pb2, device_pb2, event_pb2, stream_pb2

__all__ = ["Device", "Stream", "Event", "StreamOptions", "EventOptions", "NpudError"]

STREAM_FLAG_NON_BLOCKING = common_pb2.STREAM_FLAG_NON_BLOCKING

_current = threading.local()


@dataclass(frozen=True)
class StreamOptions:
    nonblocking: bool = True
    # None takes the device default (0, the most urgent on ACL devices).
    priority: Optional[int] = None
    # How long to wait for stream budget, in seconds (npud extension).
    wait: float = 10.0


@dataclass(frozen=True)
class EventOptions:
    enable_timing: bool = False
    busy_waited_sync: bool = False


class Device:
    """A device of the daemon, through this process's session."""

    def __init__(self, device_id: Optional[int] = None):
        if device_id is None:
            device_id = getattr(_current, "device_id", 0)
        self.device_id = int(device_id)
        self._session = _session.default_session()

    def __repr__(self) -> str:
        return f"<Device {self.device_id}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Device) and other.device_id == self.device_id

    def __hash__(self) -> int:
        return hash(self.device_id)

    def _info(self) -> device_pb2.Device:
        s = self._session
        for d in s.call(s.devices.List, device_pb2.ListDevicesRequest()).devices:
            if d.id == self.device_id:
                return d
        raise NpudError(None, f"no device {self.device_id}", native_code=107001)

    @property
    def name(self) -> str:
        return self._info().name

    @property
    def stream_budget(self) -> dict:
        """npud extension: the device's stream ledger."""
        d = self._info()
        return {"capacity": d.capacity, "in_use": d.in_use, "pooled": d.pooled, "available": d.available}

    def set_current(self) -> None:
        self._info()
        _current.device_id = self.device_id

    def create_stream(self, options: Optional[StreamOptions] = None) -> "Stream":
        options = options or StreamOptions()
        flags = STREAM_FLAG_NON_BLOCKING if options.nonblocking else 0
        req = stream_pb2.CreateStreamsRequest(
            device=self.device_id,
            count=1,
            priority=0 if options.priority is None else int(options.priority),
            flags=flags,
            wait_ms=int(max(options.wait, 0) * 1000),
        )
        s = self._session
        info = s.call(s.streams.Create, req).streams[0]
        return Stream(self, info)

    def create_event(self, options: Optional[EventOptions] = None) -> "Event":
        options = options or EventOptions()
        req = event_pb2.CreateEventRequest(
            device=self.device_id, disable_timing=not options.enable_timing, blocking_sync=not options.busy_waited_sync
        )
        s = self._session
        return Event(self, s.call(s.events.Create, req))

    def sync(self) -> None:
        """Waits for this process's tenant's work on the device (never another tenant's)."""
        s = self._session
        s.call(s.devices.Synchronize, device_pb2.SynchronizeDeviceRequest(device=self.device_id))


_Self = TypeVar("_Self", bound="_Owned")


class _Owned(abc.ABC):
    """A daemon object this process created on a device: destroyed once, by `close()` or
    at the end of a `with` block."""

    def __init__(self, device: Device, info):
        self._device = device
        self._session = device._session
        self._info = info
        self._closed = False

    @property
    def handle(self) -> int:
        return self._info.handle

    @property
    def device(self) -> Device:
        return self._device

    @abc.abstractmethod
    def _destroy(self) -> None:
        """Asks the daemon to destroy the object (called at most once)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._destroy()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Stream(_Owned):
    """A queue of work on a device. Close it, or use it as a context manager."""

    def __repr__(self) -> str:
        return f"<Stream {self.handle} on device {self.device.device_id}>"

    @property
    def priority(self) -> int:
        return self._info.priority

    @property
    def is_nonblocking(self) -> bool:
        return bool(self._info.flags & STREAM_FLAG_NON_BLOCKING)

    def record(self, event: Optional["Event"] = None, options: Optional[EventOptions] = None) -> "Event":
        """Records an event on the stream (a new one unless `event` is given)."""
        if event is None:
            event = self._device.create_event(options)
        s = self._session
        s.call(s.events.Record, event_pb2.RecordEventRequest(event=event.handle, stream=self.handle))
        return event

    def wait(self, event_or_stream: Union["Event", "Stream"]) -> None:
        """Later work waits for the event (or for the other stream's current work)."""
        if isinstance(event_or_stream, Stream):
            marker = event_or_stream.record(options=EventOptions())
            try:
                self.wait(marker)
            finally:
                marker.close()
            return
        s = self._session
        s.call(s.streams.WaitEvent, stream_pb2.StreamWaitEventRequest(stream=self.handle, event=event_or_stream.handle))

    def sync(self) -> None:
        s = self._session
        s.call(s.streams.Synchronize, stream_pb2.SynchronizeStreamRequest(handle=self.handle))

    @property
    def is_done(self) -> bool:
        s = self._session
        r = s.call(s.streams.Query, stream_pb2.QueryStreamRequest(handle=self.handle))
        return r.state == common_pb2.WORK_STATE_COMPLETE

    def delay(self, milliseconds: float) -> int:
        """npud extension: timed work on the stream. Returns the task number."""
        s = self._session
        req = stream_pb2.EnqueueDelayRequest(stream=self.handle, duration_us=int(milliseconds * 1000))
        return s.call(s.streams.EnqueueDelay, req).task_id

    def _destroy(self) -> None:
        s = self._session
        s.call(s.streams.Destroy, stream_pb2.DestroyStreamsRequest(handles=[self.handle]))


class Event(_Owned):
    """A point in a stream's work. `end - start` gives elapsed milliseconds."""

    def __repr__(self) -> str:
        return f"<Event {self.handle}>"

    @property
    def is_timing_disabled(self) -> bool:
        return not self._info.timing

    @property
    def is_done(self) -> bool:
        """True unless the most recent record is still pending (never recorded: done)."""
        s = self._session
        r = s.call(s.events.Query, event_pb2.QueryEventRequest(handle=self.handle))
        return r.state != common_pb2.EVENT_STATE_PENDING

    def sync(self) -> None:
        s = self._session
        s.call(s.events.Synchronize, event_pb2.SynchronizeEventRequest(handle=self.handle))

    def __sub__(self, other: "Event") -> float:
        s = self._session
        return s.call(s.events.ElapsedTime, event_pb2.ElapsedTimeRequest(start=other.handle, end=self.handle)).milliseconds

    def _destroy(self) -> None:
        s = self._session
        s.call(s.events.Destroy, event_pb2.DestroyEventRequest(handle=self.handle))

"""A cuda.core-like API over npud: Device, Stream, Event, Context.

It behaves as cuda.core documents: streams and events are made through a Device (or
`Stream.record`), never constructed directly; they compare and hash by handle; a dropped
object is released by the garbage collector; `Event.__sub__` explains itself with
cuda.core's messages; errors subclass RuntimeError. Handles are daemon handles (ints),
not device pointers: raw pointers mean nothing across a process boundary. Priorities are
the backend's: on CUDA devices lower numbers are more urgent, on ACL devices 0 is.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass, fields
from typing import Optional, Tuple, Union

from npud import _session
from npud.errors import NpudError
from npud.v1 import common_pb2, device_pb2, errors_pb2, event_pb2, stream_pb2

__all__ = [
    "Device",
    "Context",
    "Stream",
    "Event",
    "StreamOptions",
    "EventOptions",
    "NpudError",
    "LEGACY_DEFAULT_STREAM",
    "PER_THREAD_DEFAULT_STREAM",
    "default_stream",
]

STREAM_FLAG_NON_BLOCKING = common_pb2.STREAM_FLAG_NON_BLOCKING

_current = threading.local()


@dataclass(frozen=True)
class StreamOptions:
    nonblocking: bool = True
    # None: the device's lowest priority, as cuda.core defaults (7 on ACL devices, 0 on
    # CUDA, where lower numbers are more urgent on both).
    priority: Optional[int] = None
    # How long to wait for stream budget, in seconds (npud extension).
    wait: float = 10.0


@dataclass(frozen=True, init=False)
class EventOptions:
    """cuda.core 1.x's names. cuda.core before 1.0 spelled the first two `enable_timing`
    and `busy_waited_sync` (True meant blocking synchronisation there too); both spellings
    are accepted so code written for either runs."""

    timing_enabled: bool = False
    # True asks for blocking synchronisation (CU_EVENT_BLOCKING_SYNC), as in cuda.core.
    blocking_sync: bool = False
    ipc_enabled: bool = False

    _aliases = {"enable_timing": "timing_enabled", "busy_waited_sync": "blocking_sync"}

    def __init__(
        self,
        timing_enabled: Optional[bool] = None,
        blocking_sync: Optional[bool] = None,
        ipc_enabled: Optional[bool] = False,
        *,
        enable_timing: Optional[bool] = None,
        busy_waited_sync: Optional[bool] = None,
    ):
        pairs = (("timing_enabled", timing_enabled, enable_timing), ("blocking_sync", blocking_sync, busy_waited_sync))
        for name, new, old in pairs:
            if new is not None and old is not None and bool(new) != bool(old):
                raise TypeError(f"EventOptions: {name} and its old spelling disagree")
        object.__setattr__(self, "timing_enabled", bool(timing_enabled if timing_enabled is not None else enable_timing))
        object.__setattr__(self, "blocking_sync", bool(blocking_sync if blocking_sync is not None else busy_waited_sync))
        object.__setattr__(self, "ipc_enabled", bool(ipc_enabled))


def _options(cls, options, what: str):
    """cuda.core accepts an options object, a dict of its fields, or None."""
    if options is None:
        return cls()
    if isinstance(options, cls):
        return options
    if isinstance(options, dict):
        known = {f.name for f in fields(cls)} | set(getattr(cls, "_aliases", ()))
        unknown = set(options) - known
        if unknown:
            raise TypeError(f"{what}: unknown fields {sorted(unknown)}")
        return cls(**options)
    raise TypeError(f"{what} must be provided as an object of type {cls.__name__} or as a dict, got {type(options)}")


_counts: dict = {}


def _device_count() -> int:
    """How many devices the daemon serves, asked once per session (a later session may be
    another daemon with other devices)."""
    s = _session.default_session()
    key = (id(s), s.id)
    if key not in _counts:
        _counts.clear()
        _counts[key] = len(s.call(s.devices.List, device_pb2.ListDevicesRequest()).devices)
    return _counts[key]


class Device:
    """A device of the daemon, through this process's session. `Device(n)` is one object
    per device id, as in cuda.core."""

    _instances: dict = {}
    _instances_lock = threading.Lock()

    def __new__(cls, device_id: Union["Device", int, None] = None):
        if isinstance(device_id, Device):
            return device_id
        if device_id is None:
            device_id = getattr(_current, "device_id", 0)
        device_id = int(device_id)
        if device_id < 0:
            raise ValueError(f"device_id must be >= 0, got {device_id}")
        # As cuda.core: a device the daemon does not have is refused here, not at first use.
        total = _device_count()
        if device_id >= total:
            raise ValueError(f"device_id must be within [0, {total}), got {device_id}")
        with cls._instances_lock:
            dev = cls._instances.get(device_id)
            if dev is None:
                dev = super().__new__(cls)
                dev.device_id = device_id
                cls._instances[device_id] = dev
            return dev

    @property
    def _session(self) -> _session.Session:
        return _session.default_session()

    def __repr__(self) -> str:
        return f"<Device {self.device_id}>"

    def __int__(self) -> int:
        return self.device_id

    def _info(self) -> device_pb2.Device:
        s = self._session
        for d in s.call(s.devices.List, device_pb2.ListDevicesRequest()).devices:
            if d.id == self.device_id:
                return d
        raise NpudError(None, f"no device {self.device_id}", native_code=107001)

    @property
    def name(self) -> str:
        return self._info().name

    def _priority_range(self) -> Tuple[int, int]:
        """(lowest, highest) priority. Cached per session: a later session may be another
        daemon with other devices."""
        key = (id(self._session), self._session.id)
        cached = getattr(self, "_range", None)
        if cached is None or cached[0] != key:
            info = self._info()
            cached = self._range = (key, (info.priority_lowest, info.priority_highest))
        return cached[1]

    def _lowest_priority(self) -> int:
        return self._priority_range()[0]

    def _checked_priority(self, priority) -> int:
        """cuda.core refuses a priority outside the device's range with ValueError (the
        driver and the daemon's RPC would clamp it)."""
        priority = int(priority)
        lo, hi = sorted(self._priority_range())
        if not lo <= priority <= hi:
            raise ValueError(f"priority={priority} is out of range [{lo}, {hi}]")
        return priority

    @property
    def stream_budget(self) -> dict:
        """npud extension: the device's stream ledger."""
        d = self._info()
        return {"capacity": d.capacity, "in_use": d.in_use, "pooled": d.pooled, "available": d.available}

    @property
    def context(self) -> "Context":
        return Context._of(self)

    @property
    def default_stream(self) -> "Stream":
        return default_stream()

    def set_current(self) -> None:
        self._info()
        _current.device_id = self.device_id

    def create_stream(self, obj=None, options=None) -> "Stream":
        """A new stream, or (with `obj`) a Stream for an object that exposes
        `__cuda_stream__` (which is then not owned: closing it destroys nothing)."""
        if options is None and isinstance(obj, (StreamOptions, dict)):
            obj, options = None, obj  # options passed positionally: unambiguous, so accepted
        if obj is not None and options is not None:
            raise ValueError("obj and options cannot be both specified")
        if obj is not None:
            return Stream._from_protocol(obj)
        options = _options(StreamOptions, options, "Stream options")
        flags = STREAM_FLAG_NON_BLOCKING if options.nonblocking else 0
        priority = self._lowest_priority() if options.priority is None else self._checked_priority(options.priority)
        req = stream_pb2.CreateStreamsRequest(
            device=self.device_id,
            count=1,
            priority=priority,
            flags=flags,
            wait_ms=int(max(options.wait, 0) * 1000),
        )
        s = self._session
        info = s.call(s.streams.Create, req).streams[0]
        return Stream._make(self, info, owned=True)

    def create_event(self, options=None) -> "Event":
        options = _options(EventOptions, options, "Event options")
        if options.ipc_enabled:
            raise TypeError("npud events cannot be shared between processes (ipc_enabled)")
        req = event_pb2.CreateEventRequest(
            device=self.device_id, disable_timing=not options.timing_enabled, blocking_sync=options.blocking_sync
        )
        s = self._session
        return Event._make(self, s.call(s.events.Create, req), blocking_sync=options.blocking_sync)

    def sync(self) -> None:
        """Waits for this process's work on the device (never another process's)."""
        s = self._session
        s.call(s.devices.Synchronize, device_pb2.SynchronizeDeviceRequest(device=self.device_id))


class Context:
    """A device's context as this process sees it (npud keeps one per device per session)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Context objects cannot be instantiated directly. Please use Device or Stream APIs.")

    @classmethod
    def _of(cls, device: Device) -> "Context":
        ctx = cls.__new__(cls)
        ctx._device = device
        return ctx

    @property
    def device(self) -> Device:
        return self._device

    @property
    def handle(self) -> int:
        return self._device.device_id

    @property
    def _handle(self) -> int:
        """What cuda.core keeps its CUcontext in (its own tests read it): here, the handle."""
        return self.handle

    def __eq__(self, other) -> bool:
        if not isinstance(other, Context):
            return NotImplemented
        return other._device is self._device

    def __hash__(self) -> int:
        return hash((Context, self._device.device_id))

    def __repr__(self) -> str:
        return f"<Context of device {self._device.device_id}>"


def _release_later(kind: str, handle: int) -> None:
    """A weakref finalizer: hands the object to the session's reaper (never a gRPC call
    from inside the garbage collector)."""
    s = _session.current_default_session()
    if s is not None:
        s.release_later(kind, handle)


class _Owned:
    """A daemon object on a device. Owned objects are destroyed once: by `close()`, at the
    end of a `with` block, or when the program drops the last reference."""

    _kind = ""

    def _setup(self, device: Device, info, owned: bool) -> None:
        self._device = device
        self._info_ = info
        self._closed = False
        self._finalizer = None
        if owned:
            self._finalizer = weakref.finalize(self, _release_later, self._kind, info.handle)
            # At exit, closing the session reclaims everything in one call.
            self._finalizer.atexit = False

    @property
    def _info(self):
        """The daemon's description; using a closed object raises, as cuda.core's does."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__.lstrip('_')} has been closed")
        return self._info_

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def handle(self) -> int:
        return self._info.handle

    @property
    def device(self) -> Device:
        return self._device

    @property
    def context(self) -> Context:
        return Context._of(self._device)

    @property
    def _session(self) -> _session.Session:
        return self._device._session

    def _destroy(self) -> None:
        """Asks the daemon to destroy the object (called at most once)."""
        raise NotImplementedError

    def close(self) -> None:
        """Destroys the object if this process owns it; a borrowed one is only let go.
        Closing twice is harmless; any other use afterwards raises RuntimeError."""
        if self._closed:
            return
        if self._finalizer is not None and self._finalizer.detach() is not None:
            self._destroy()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __eq__(self, other) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return int(self._info_.handle) == int(other._info_.handle)

    def __hash__(self) -> int:
        return hash((type(self), int(self._info_.handle)))


class Stream(_Owned):
    """A queue of work on a device. Made by `Device.create_stream`, `Stream.from_handle`
    or as a default stream; dropped streams are released."""

    _kind = "stream"

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "Stream objects cannot be instantiated directly. "
            "Please use Device APIs (create_stream) or other Stream APIs (from_handle)."
        )

    @classmethod
    def _make(cls, device: Device, info, owned: bool) -> "Stream":
        s = cls.__new__(cls)
        s._setup(device, info, owned)
        return s

    @staticmethod
    def from_handle(handle: int) -> "Stream":
        """A Stream for an existing npud stream handle of this tenant; not owned: its
        lifetime stays with whoever made it. As in CUDA, 0 (the NULL stream) and 1
        (CU_STREAM_LEGACY) are the legacy default stream and 2 (CU_STREAM_PER_THREAD) the
        per-thread one; npud never hands out handles that small. As cuda.core's, the
        result keeps the handle it was given: `Stream.from_handle(0).handle` is 0 (and so
        not equal to LEGACY_DEFAULT_STREAM, whose handle is 1), while its work goes to
        the legacy default stream."""
        handle = int(handle)
        if handle == 0:
            return _NULL_STREAM
        if handle == 1:
            return LEGACY_DEFAULT_STREAM
        if handle == 2:
            return PER_THREAD_DEFAULT_STREAM
        s = _session.default_session()
        info = s.call(s.streams.Get, stream_pb2.GetStreamRequest(handle=handle))
        return Stream._make(Device(info.device), info, owned=False)

    @staticmethod
    def _from_protocol(obj) -> "Stream":
        attr = getattr(obj, "__cuda_stream__", None)
        if attr is None:
            raise TypeError(f"{type(obj)} object does not have a '__cuda_stream__' attribute")
        info = attr() if callable(attr) else attr
        try:
            size = len(info)
        except Exception as e:
            raise RuntimeError(f"obj.__cuda_stream__ must return a sequence with 2 elements, got {type(info)}") from e
        if size != 2:
            raise RuntimeError(f"obj.__cuda_stream__ must return a sequence with 2 elements, got {size} elements")
        if info[0] != 0:
            raise RuntimeError(
                f"The first element of the sequence returned by obj.__cuda_stream__ must be 0, got {info[0]!r}"
            )
        return Stream.from_handle(int(info[1]))

    def __cuda_stream__(self) -> Tuple[int, int]:
        return (0, self.handle)

    @property
    def _wire(self) -> int:
        """The handle npud knows the stream by (a default stream's `handle` is CUDA's
        constant for it instead)."""
        return self._info.handle

    def __repr__(self) -> str:
        return f"<Stream handle={self._info_.handle} device={self.device.device_id}{' closed' if self._closed else ''}>"

    @property
    def priority(self) -> int:
        return self._info.priority

    @property
    def is_nonblocking(self) -> bool:
        return bool(self._info.flags & STREAM_FLAG_NON_BLOCKING)

    def record(self, event: Optional["Event"] = None, options=None) -> "Event":
        """Records an event on the stream (a new one unless `event` is given)."""
        if event is None:
            event = self.device.create_event(options)
        elif not isinstance(event, Event):
            raise TypeError(f"event must be an Event, got {type(event)}")
        s = self._session
        s.call(s.events.Record, event_pb2.RecordEventRequest(event=event.handle, stream=self._wire))
        return event

    def wait(self, event_or_stream: Union["Event", "Stream"]) -> None:
        """Later work waits for the event (or for the other stream's current work)."""
        if isinstance(event_or_stream, Event):
            s = self._session
            req = stream_pb2.StreamWaitEventRequest(stream=self._wire, event=event_or_stream.handle)
            s.call(s.streams.WaitEvent, req)
            return
        if isinstance(event_or_stream, Stream):
            other = event_or_stream
        else:
            try:
                other = Stream._from_protocol(event_or_stream)
            except Exception as e:
                raise ValueError(
                    f"only an Event, Stream, or object supporting __cuda_stream__ can be waited, got {type(event_or_stream)}"
                ) from e
        marker = other.record(options=EventOptions())
        try:
            self.wait(marker)
        finally:
            marker.close()

    def sync(self) -> None:
        s = self._session
        s.call(s.streams.Synchronize, stream_pb2.SynchronizeStreamRequest(handle=self._wire))

    @property
    def is_done(self) -> bool:
        s = self._session
        r = s.call(s.streams.Query, stream_pb2.QueryStreamRequest(handle=self._wire))
        return r.state == common_pb2.WORK_STATE_COMPLETE

    def delay(self, milliseconds: float) -> int:
        """npud extension: timed work on the stream. Returns the task number."""
        s = self._session
        req = stream_pb2.EnqueueDelayRequest(stream=self._wire, duration_us=int(milliseconds * 1000))
        return s.call(s.streams.EnqueueDelay, req).task_id

    def _destroy(self) -> None:
        s = self._session
        s.call(s.streams.Destroy, stream_pb2.DestroyStreamsRequest(handles=[self._wire]))


class _DefaultStream(Stream):
    """LEGACY_DEFAULT_STREAM or PER_THREAD_DEFAULT_STREAM: work goes to a stream npud
    makes once per device (per thread too, for the per-thread one) in this process's
    session; closing it does nothing."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("default streams are module constants: use LEGACY_DEFAULT_STREAM or Device().default_stream")

    @classmethod
    def _builtin(cls, name: str, per_thread: bool, cuda_handle: int, same_as=None) -> "_DefaultStream":
        """`cuda_handle` is CUDA's constant for the stream; `same_as`, another default
        stream whose work this one shares (the NULL stream is the legacy one)."""
        s = cls.__new__(cls)
        s._name, s._per_thread, s._cuda_handle = name, per_thread, cuda_handle
        s._streams, s._lock = ({}, threading.Lock()) if same_as is None else (same_as._streams, same_as._lock)
        s._finalizer, s._closed = None, False
        return s

    @property
    def handle(self) -> int:
        return self._cuda_handle

    def _resolve(self) -> Stream:
        dev = Device()
        sess = dev._session
        key = (id(sess), sess.id, dev.device_id, threading.get_ident() if self._per_thread else 0)
        with self._lock:
            stream = self._streams.get(key)
            if stream is None:
                # Owned by the session: npud reclaims it when the session closes.
                stream = dev.create_stream(options=StreamOptions(nonblocking=False))
                stream._finalizer.detach()
                self._streams[key] = stream
            return stream

    @property
    def _info(self):
        return self._resolve()._info

    @property
    def _device(self) -> Device:
        return self._resolve().device

    def close(self) -> None:
        pass

    def __eq__(self, other) -> bool:
        return other is self

    def __hash__(self) -> int:
        return hash((_DefaultStream, self._name))

    def __repr__(self) -> str:
        return f"<{self._name}>"


# CUDA's handles for them: CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, and the NULL stream (0),
# which is the legacy default stream by another name.
LEGACY_DEFAULT_STREAM = _DefaultStream._builtin("LEGACY_DEFAULT_STREAM", per_thread=False, cuda_handle=1)
PER_THREAD_DEFAULT_STREAM = _DefaultStream._builtin("PER_THREAD_DEFAULT_STREAM", per_thread=True, cuda_handle=2)
_NULL_STREAM = _DefaultStream._builtin("NULL stream", per_thread=False, cuda_handle=0, same_as=LEGACY_DEFAULT_STREAM)


def default_stream() -> Stream:
    """The default stream: per-thread when CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM is set
    to a nonzero number, else the legacy one (as cuda.core decides)."""
    try:
        per_thread = int(os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0"))
    except ValueError:
        per_thread = 0
    return PER_THREAD_DEFAULT_STREAM if per_thread else LEGACY_DEFAULT_STREAM


# cuda.core's explanations for a failed `end - start`, by npud's reason.
_ELAPSED_EXPLANATIONS = {
    errors_pb2.EVENT_NOT_TIMED: (
        "Both Events must be created with timing enabled in order to subtract them; "
        "use EventOptions(timing_enabled=True) when creating both events."
    ),
    errors_pb2.EVENT_NOT_RECORDED: (
        "Both Events must be recorded before they can be subtracted; "
        "use Stream.record() to record both events to a stream."
    ),
    errors_pb2.EVENT_NOT_COMPLETE: (
        "One or both events have not completed; "
        "use Event.sync(), Stream.sync(), or Device.sync() to wait for the events to complete "
        "before subtracting them."
    ),
}


class Event(_Owned):
    """A point in a stream's work. `end - start` gives elapsed milliseconds."""

    _kind = "event"

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Event objects cannot be instantiated directly. Please use Stream APIs (record).")

    @classmethod
    def _make(cls, device: Device, info, blocking_sync: bool) -> "Event":
        e = cls.__new__(cls)
        e._setup(device, info, owned=True)
        e._blocking_sync = blocking_sync
        return e

    def __repr__(self) -> str:
        return f"<Event handle={self._info_.handle}{' closed' if self._closed else ''}>"

    @property
    def is_timing_enabled(self) -> bool:
        return bool(self._info.timing)

    @property
    def is_blocking_sync(self) -> bool:
        return self._blocking_sync

    # cuda.core before 1.0 named these two the other way round.
    @property
    def is_timing_disabled(self) -> bool:
        return not self.is_timing_enabled

    @property
    def is_sync_busy_waited(self) -> bool:
        return self.is_blocking_sync

    @property
    def is_ipc_enabled(self) -> bool:
        return False

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
        if not isinstance(other, Event):
            return NotImplemented
        s = self._session
        try:
            req = event_pb2.ElapsedTimeRequest(start=other.handle, end=self.handle)
            return s.call(s.events.ElapsedTime, req).milliseconds
        except NpudError as e:
            explanation = _ELAPSED_EXPLANATIONS.get(e.reason)
            if explanation is None:
                raise
            raise NpudError(e.code, explanation, e.reason, e.native_code, e.figures) from e

    def __rsub__(self, other):
        return NotImplemented

    def _destroy(self) -> None:
        s = self._session
        s.call(s.events.Destroy, event_pb2.DestroyEventRequest(handle=self.handle))

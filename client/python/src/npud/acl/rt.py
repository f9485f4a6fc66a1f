"""acl.rt: devices, contexts, streams, events, synchronisation, callbacks."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, List, Optional, Tuple

from npud.acl._state import STATE
from npud.errors import (
    ACL_ERROR_INVALID_PARAM,
    ACL_ERROR_RT_CONTEXT_NULL,
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
    ACL_ERROR_RT_INVALID_HANDLE,
    ACL_ERROR_UNINITIALIZE,
    ACL_ERROR_RT_INVALID_DEVICEID,
    ACL_ERROR_RT_PARAM_INVALID,
    ACL_ERROR_RT_REPORT_TIMEOUT,
    ACL_SUCCESS,
    NpudError,
)
from npud.v1 import common_pb2, device_pb2, event_pb2, report_pb2, stream_pb2

# aclrtStreamStatus, aclrtEventStatus, aclrtEventRecordedStatus, aclrtCallbackBlockType
ACL_STREAM_STATUS_COMPLETE, ACL_STREAM_STATUS_NOT_READY = 0, 1
ACL_EVENT_STATUS_COMPLETE, ACL_EVENT_STATUS_NOT_READY = 0, 1
ACL_EVENT_RECORDED_STATUS_NOT_READY, ACL_EVENT_RECORDED_STATUS_COMPLETE = 0, 1
ACL_EVENT_WAIT_STATUS_COMPLETE, ACL_EVENT_WAIT_STATUS_NOT_READY = 0, 1
ACL_CALLBACK_NO_BLOCK, ACL_CALLBACK_BLOCK = 0, 1
ACL_HOST = 1

# How long stream creation may wait for budget before it reports 207008.
STREAM_WAIT_MS = int(os.environ.get("NPUD_ACL_WAIT_MS", "10000"))


def _status(fn: Callable[..., Optional[int]]) -> Callable[..., int]:
    """An aclError-returning call, as pyACL's are: the body raises NpudError on failure
    (its aclError is returned), returns a code of its own from an argument check, or
    returns nothing (ACL_SUCCESS)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> int:
        try:
            code = fn(*args, **kwargs)
        except NpudError as e:
            STATE.note_error(e)
            return e.acl_code()
        return ACL_SUCCESS if code is None else code

    return call


def _returns(failed: Any) -> Callable[[Callable[..., Any]], Callable[..., Tuple[Any, int]]]:
    """A `(value, aclError)`-returning call, as pyACL's getters are: the body returns the
    value or raises NpudError, in which case the value is `failed`."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Tuple[Any, int]]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Tuple[Any, int]:
            try:
                return fn(*args, **kwargs), ACL_SUCCESS
            except NpudError as e:
                STATE.note_error(e)
                return failed, e.acl_code()

        return call

    return wrap


def _fail(code: int, message: str) -> NpudError:
    return NpudError(None, message, native_code=code)


def _event(event: int) -> int:
    """An event argument: a NULL (0) event is ACL_ERROR_INVALID_PARAM, as in AscendCL."""
    if not event:
        raise _fail(ACL_ERROR_INVALID_PARAM, "event is NULL")
    return int(event)


def _device() -> int:
    device = STATE.current_device()
    if device is None:
        raise _fail(ACL_ERROR_RT_CONTEXT_NULL, "no current device: call acl.rt.set_device first")
    return device


def _stream(stream: int) -> int:
    """Stream 0 is the session's default stream on the current device, made on first use."""
    if stream:
        return int(stream)
    device = _device()
    with STATE.lock:
        handle = STATE.default_streams.get(device)
    if handle is None:
        s = STATE.require()
        made = s.call(s.streams.Create, stream_pb2.CreateStreamsRequest(device=device, count=1, wait_ms=STREAM_WAIT_MS))
        handle = made.streams[0].handle
        with STATE.lock:
            handle = STATE.default_streams.setdefault(device, handle)
    return handle


# --- devices and contexts ---------------------------------------------------------


@_returns(0)
def get_device_count() -> Tuple[int, int]:
    s = STATE.require()
    return len(s.call(s.devices.List, device_pb2.ListDevicesRequest()).devices)


def set_device(device_id: int) -> int:
    count, ret = get_device_count()
    if ret != ACL_SUCCESS:
        return ret
    if not 0 <= int(device_id) < count:
        return ACL_ERROR_RT_INVALID_DEVICEID
    STATE.set_current_device(int(device_id))
    return ACL_SUCCESS


@_status
def reset_device(device_id: int) -> int:
    """Releases what this process made on the device through the shim."""
    s = STATE.require()
    with STATE.lock:
        streams = [h for h, d in STATE.stream_device.items() if d == device_id]
        events = [h for h, d in STATE.event_device.items() if d == device_id]
        default = STATE.default_streams.pop(device_id, None)
        for h in streams:
            STATE.stream_device.pop(h, None)
        for h in events:
            STATE.event_device.pop(h, None)
            STATE.ex_events.discard(h)
    handles = streams + ([default] if default else [])
    if handles:
        s.call(s.streams.Destroy, stream_pb2.DestroyStreamsRequest(handles=handles))
    for h in events:
        s.call(s.events.Destroy, event_pb2.DestroyEventRequest(handle=h))


def create_context(device_id: int) -> Tuple[int, int]:
    ret = set_device(device_id)
    if ret != ACL_SUCCESS:
        return 0, ret
    with STATE.lock:
        ctx = next(STATE.context_ids)
        STATE.contexts[ctx] = int(device_id)
    return ctx, ACL_SUCCESS


def destroy_context(context: int) -> int:
    with STATE.lock:
        return ACL_SUCCESS if STATE.contexts.pop(int(context), None) is not None else ACL_ERROR_INVALID_PARAM


def set_context(context: int) -> int:
    with STATE.lock:
        device = STATE.contexts.get(int(context))
    if device is None:
        return ACL_ERROR_INVALID_PARAM
    STATE.local.context = int(context)
    STATE.set_current_device(device)
    return ACL_SUCCESS


def get_context() -> Tuple[int, int]:
    ctx = getattr(STATE.local, "context", 0)
    return (ctx, ACL_SUCCESS) if ctx else (0, ACL_ERROR_RT_CONTEXT_NULL)


def get_run_mode() -> Tuple[int, int]:
    return ACL_HOST, ACL_SUCCESS


# --- streams ----------------------------------------------------------------------


def create_stream() -> Tuple[int, int]:
    return create_stream_with_config(0, 0)


@_returns(0)
def create_stream_with_config(priority: int, flag: int) -> Tuple[int, int]:
    s = STATE.require()
    device = _device()
    req = stream_pb2.CreateStreamsRequest(device=device, count=1, priority=int(priority), flags=int(flag), wait_ms=STREAM_WAIT_MS)
    handle = s.call(s.streams.Create, req).streams[0].handle
    with STATE.lock:
        STATE.stream_device[handle] = device
    return handle


def destroy_stream(stream: int) -> int:
    """aclrtDestroyStream: returns once the stream's tasks are done (a failed task does not
    keep it alive), then the stream goes away."""
    return _destroy_stream(stream, wait=True)


def destroy_stream_force(stream: int) -> int:
    """aclrtDestroyStreamForce: returns at once; the stream's remaining work still runs."""
    return _destroy_stream(stream, wait=False)


@_status
def _destroy_stream(stream: int, wait: bool) -> int:
    if not stream:
        return ACL_ERROR_INVALID_PARAM
    s = STATE.require()
    if wait:
        try:
            s.call(s.streams.Synchronize, stream_pb2.SynchronizeStreamRequest(handle=int(stream)))
        except NpudError as e:
            if e.acl_code() in (ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_UNINITIALIZE):
                raise  # no such stream: the destroy below would say the same
    s.call(s.streams.Destroy, stream_pb2.DestroyStreamsRequest(handles=[int(stream)]))
    with STATE.lock:
        STATE.stream_device.pop(int(stream), None)


def synchronize_stream(stream: int) -> int:
    return synchronize_stream_with_timeout(stream, -1)


@_status
def synchronize_stream_with_timeout(stream: int, timeout: int) -> int:
    if timeout < -1:
        return ACL_ERROR_RT_PARAM_INVALID
    s = STATE.require()
    ms = 0 if timeout == -1 else max(int(timeout), 1)
    s.call(s.streams.Synchronize, stream_pb2.SynchronizeStreamRequest(handle=_stream(stream), timeout_ms=ms))


@_returns(ACL_STREAM_STATUS_NOT_READY)
def stream_query(stream: int) -> Tuple[int, int]:
    s = STATE.require()
    r = s.call(s.streams.Query, stream_pb2.QueryStreamRequest(handle=_stream(stream)))
    return ACL_STREAM_STATUS_COMPLETE if r.state == common_pb2.WORK_STATE_COMPLETE else ACL_STREAM_STATUS_NOT_READY


@_status
def stream_wait_event(stream: int, event: int) -> int:
    s = STATE.require()
    s.call(s.streams.WaitEvent, stream_pb2.StreamWaitEventRequest(stream=_stream(stream), event=_event(event)))


@_returns(0)
def get_stream_available_num() -> Tuple[int, int]:
    s = STATE.require()
    device = _device()
    devices = s.call(s.devices.List, device_pb2.ListDevicesRequest()).devices
    return next(d.available for d in devices if d.id == device)


@_status
def set_stream_failure_mode(stream: int, mode: int) -> int:
    if mode not in (0, 1):
        return ACL_ERROR_INVALID_PARAM
    s = STATE.require()
    s.call(s.streams.SetFailureMode, stream_pb2.SetFailureModeRequest(stream=_stream(stream), mode=int(mode)))


# --- events -----------------------------------------------------------------------


def create_event() -> Tuple[int, int]:
    return create_event_with_flag(0)


def create_event_with_flag(flag: int) -> Tuple[int, int]:
    return _create_event(flag, ex=False)


def create_event_ex_with_flag(flag: int) -> Tuple[int, int]:
    """aclrtCreateEventExWithFlag: an event of the larger table; reset_event, query_event
    and query_event_wait_status refuse it, as the vendor documents."""
    return _create_event(flag, ex=True)


@_returns(0)
def _create_event(flag: int, ex: bool) -> Tuple[int, int]:
    s = STATE.require()
    device = _device()
    handle = s.call(s.events.Create, event_pb2.CreateEventRequest(device=device, flags=int(flag))).handle
    with STATE.lock:
        STATE.event_device[handle] = device
        if ex:
            STATE.ex_events.add(handle)
    return handle


def _not_for_ex(event: int, call: str) -> None:
    with STATE.lock:
        ex = int(event) in STATE.ex_events
    if ex:
        raise _fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, f"{call} does not take events made with create_event_ex_with_flag")


@_status
def destroy_event(event: int) -> int:
    if not event:
        return ACL_ERROR_INVALID_PARAM
    s = STATE.require()
    s.call(s.events.Destroy, event_pb2.DestroyEventRequest(handle=int(event)))
    with STATE.lock:
        STATE.event_device.pop(int(event), None)
        STATE.ex_events.discard(int(event))


@_status
def record_event(event: int, stream: int) -> int:
    s = STATE.require()
    s.call(s.events.Record, event_pb2.RecordEventRequest(event=_event(event), stream=_stream(stream)))


@_status
def reset_event(event: int, stream: int) -> int:
    _not_for_ex(event, "reset_event")
    s = STATE.require()
    s.call(s.events.Reset, event_pb2.ResetEventRequest(event=_event(event), stream=_stream(stream)))


def _event_state(event: int) -> int:
    s = STATE.require()
    return s.call(s.events.Query, event_pb2.QueryEventRequest(handle=_event(event))).state


@_returns(ACL_EVENT_STATUS_NOT_READY)
def query_event(event: int) -> Tuple[int, int]:
    """Deprecated aclrtQueryEvent: COMPLETE unless the latest record is still pending."""
    _not_for_ex(event, "query_event")
    return ACL_EVENT_STATUS_NOT_READY if _event_state(event) == common_pb2.EVENT_STATE_PENDING else ACL_EVENT_STATUS_COMPLETE


@_returns(ACL_EVENT_WAIT_STATUS_NOT_READY)
def query_event_wait_status(event: int) -> Tuple[int, int]:
    """aclrtQueryEventWaitStatus: whether the stream waits on the event (stream_wait_event)
    are done. A wait ends when the stream reaches the event's latest record (a wait on a
    never-recorded event ends at once), so they are done unless that record is pending."""
    _not_for_ex(event, "query_event_wait_status")
    pending = _event_state(event) == common_pb2.EVENT_STATE_PENDING
    return ACL_EVENT_WAIT_STATUS_NOT_READY if pending else ACL_EVENT_WAIT_STATUS_COMPLETE


@_returns(0)
def get_event_avail_num() -> Tuple[int, int]:
    """aclrtGetEventAvailNum: events the current device's table has left."""
    s = STATE.require()
    device = _device()
    for d in s.call(s.devices.List, device_pb2.ListDevicesRequest()).devices:
        if d.id == device:
            return max(d.event_limit - d.events_in_use, 0)
    raise _fail(ACL_ERROR_RT_INVALID_DEVICEID, f"no device {device}")


@_returns(ACL_EVENT_RECORDED_STATUS_NOT_READY)
def query_event_status(event: int) -> Tuple[int, int]:
    """aclrtQueryEventStatus: COMPLETE only once a record has been reached."""
    complete = _event_state(event) == common_pb2.EVENT_STATE_COMPLETE
    return ACL_EVENT_RECORDED_STATUS_COMPLETE if complete else ACL_EVENT_RECORDED_STATUS_NOT_READY


def synchronize_event(event: int) -> int:
    return synchronize_event_with_timeout(event, -1)


@_status
def synchronize_event_with_timeout(event: int, timeout: int) -> int:
    if timeout < -1:
        return ACL_ERROR_RT_PARAM_INVALID
    s = STATE.require()
    ms = 0 if timeout == -1 else max(int(timeout), 1)
    s.call(s.events.Synchronize, event_pb2.SynchronizeEventRequest(handle=_event(event), timeout_ms=ms))


@_returns(0.0)
def event_elapsed_time(start: int, end: int) -> Tuple[float, int]:
    s = STATE.require()
    return s.call(s.events.ElapsedTime, event_pb2.ElapsedTimeRequest(start=_event(start), end=_event(end))).milliseconds


def synchronize_device() -> int:
    return synchronize_device_with_timeout(-1)


@_status
def synchronize_device_with_timeout(timeout: int) -> int:
    """Waits for this tenant's work on the current device (never another tenant's)."""
    if timeout < -1:
        return ACL_ERROR_RT_PARAM_INVALID
    s = STATE.require()
    ms = 0 if timeout == -1 else max(int(timeout), 1)
    s.call(s.devices.Synchronize, device_pb2.SynchronizeDeviceRequest(device=_device(), timeout_ms=ms))


# --- callbacks and exception reports -----------------------------------------------


@_status
def subscribe_report(thread_id: int, stream: int) -> int:
    s = STATE.require()
    s.call(s.reports.Subscribe, report_pb2.SubscribeRequest(thread_id=int(thread_id), stream=_stream(stream)))


@_status
def unsubscribe_report(thread_id: int, stream: int) -> int:
    s = STATE.require()
    s.call(s.reports.Unsubscribe, report_pb2.UnsubscribeRequest(thread_id=int(thread_id), stream=_stream(stream)))


def launch_callback(fn: Callable[[Any], None], user_data_list: Any, block_type: int, stream: int) -> int:
    """Enqueues `fn(user_data_list)`; it runs in the thread that calls process_report."""
    if block_type not in (ACL_CALLBACK_NO_BLOCK, ACL_CALLBACK_BLOCK) or not callable(fn):
        return ACL_ERROR_INVALID_PARAM
    with STATE.lock:
        token = next(STATE.callback_ids)
        STATE.callbacks[token] = (fn, user_data_list)

    ret = _launch(stream, token, block_type)
    if ret != ACL_SUCCESS:
        with STATE.lock:
            STATE.callbacks.pop(token, None)
    return ret


@_status
def _launch(stream: int, token: int, block_type: int) -> None:
    s = STATE.require()
    req = report_pb2.LaunchCallbackRequest(stream=_stream(stream), user_data=token.to_bytes(8, "little"), block_type=int(block_type))
    s.call(s.reports.LaunchCallback, req)


def process_report(timeout: int) -> int:
    """Runs the callbacks due to this thread, waiting up to `timeout` ms (-1: for ever)."""
    if timeout == 0 or timeout < -1:
        return ACL_ERROR_INVALID_PARAM
    try:
        s = STATE.require()
    except NpudError as e:
        STATE.note_error(e)
        return e.acl_code()
    thread_id = threading.get_ident()
    forever = timeout == -1
    while True:
        chunk = 1000 if forever else int(timeout)
        req = report_pb2.ProcessReportRequest(thread_id=thread_id, timeout_ms=chunk, max_reports=64)
        try:
            reports = s.call(s.reports.Process, req, timeout=chunk / 1000.0 + 30).reports
        except NpudError as e:
            STATE.note_error(e)
            return e.acl_code()
        if reports:
            break
        if not forever:
            return ACL_ERROR_RT_REPORT_TIMEOUT
    for r in reports:
        if r.WhichOneof("kind") == "callback":
            _run_callback(s, r.callback)
        elif r.WhichOneof("kind") == "exception":
            _run_exception(r.sequence, r.exception)
    return ACL_SUCCESS


def _run_callback(s, cb) -> None:
    token = int.from_bytes(cb.user_data[:8], "little") if len(cb.user_data) >= 8 else 0
    with STATE.lock:
        entry = STATE.callbacks.pop(token, None)
    try:
        if entry is not None:
            fn, data = entry
            fn(data)
    finally:
        if cb.block_type == common_pb2.CALLBACK_BLOCK:
            try:
                s.call(s.reports.Ack, report_pb2.AckRequest(callback_id=cb.callback_id))
            except NpudError:
                pass  # the deadline already failed it, or the session is closing


class ExceptionInfo:
    """What an exception callback receives (read it through the getters)."""

    __slots__ = ("task_id", "stream_id", "thread_id", "device_id", "error_code")

    def __init__(self, task_id: int, stream_id: int, thread_id: int, device_id: int, error_code: int):
        self.task_id, self.stream_id, self.thread_id = task_id, stream_id, thread_id
        self.device_id, self.error_code = device_id, error_code

    def __repr__(self) -> str:
        return f"ExceptionInfo(task={self.task_id}, stream={self.stream_id}, device={self.device_id}, code={self.error_code})"


def _run_exception(sequence: int, e) -> None:
    """Runs the exception callback once per report: the push listener and process_report
    can both receive the same report (same sequence number), and the vendor calls the
    callback once per exception."""
    with STATE.lock:
        if sequence in STATE.exceptions_seen:
            return
        STATE.exceptions_seen[sequence] = None
        while len(STATE.exceptions_seen) > 4096:
            STATE.exceptions_seen.pop(next(iter(STATE.exceptions_seen)))
    fn = STATE.exception_callback
    if fn is not None:
        fn(ExceptionInfo(e.task_id, e.stream, e.thread_id, e.device, e.error_code))


def _listen_for_exceptions(s) -> None:
    try:
        for r in s.reports.Reports(report_pb2.ReportsRequest(), metadata=s.metadata):
            if r.WhichOneof("kind") == "exception":
                _run_exception(r.sequence, r.exception)
    except Exception:  # the stream ends when the session closes
        return


def set_exception_info_callback(fn: Callable[[Any], None]) -> int:
    """Exceptions of this session's streams are passed to `fn(info)` on a listener thread."""
    if fn is not None and not callable(fn):
        return ACL_ERROR_INVALID_PARAM
    try:
        s = STATE.require()
    except NpudError as e:
        STATE.note_error(e)
        return e.acl_code()
    STATE.exception_callback = fn
    if fn is not None and (STATE.exception_thread is None or not STATE.exception_thread.is_alive()):
        STATE.exception_thread = threading.Thread(target=_listen_for_exceptions, args=(s,), name="npud-exceptions", daemon=True)
        STATE.exception_thread.start()
    return ACL_SUCCESS


_NULL = 0xFFFFFFFF


def get_task_id_from_exception_info(info: ExceptionInfo) -> int:
    return _NULL if info is None else info.task_id


def get_stream_id_from_exception_info(info: ExceptionInfo) -> int:
    return _NULL if info is None else info.stream_id


def get_thread_id_from_exception_info(info: ExceptionInfo) -> int:
    return _NULL if info is None else info.thread_id


def get_device_id_from_exception_info(info: ExceptionInfo) -> int:
    return _NULL if info is None else info.device_id


def get_error_code_from_exception_info(info: ExceptionInfo) -> int:
    return _NULL if info is None else info.error_code


__all__: List[str] = [n for n in dir() if not n.startswith("_")]

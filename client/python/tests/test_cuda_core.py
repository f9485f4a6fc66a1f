"""npud.core as cuda.core's users know it: construction rules, handles, equality, the
__cuda_stream__ protocol, default streams, event options and errors, and release of
what a program drops."""

import gc
import time

import pytest

from npud import NpudError, core
from npud.core import (
    LEGACY_DEFAULT_STREAM,
    PER_THREAD_DEFAULT_STREAM,
    Context,
    Device,
    Event,
    EventOptions,
    Stream,
)


def eventually(check, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_objects_are_made_through_apis_not_constructed(daemon):
    with pytest.raises(RuntimeError, match="Stream objects cannot be instantiated directly"):
        Stream()
    with pytest.raises(RuntimeError, match="Event objects cannot be instantiated directly"):
        Event()
    with pytest.raises(RuntimeError, match="cannot be instantiated directly"):
        Context()
    assert Device(0) is Device(0), "one Device object per id"
    assert issubclass(NpudError, RuntimeError)


def test_from_handle_and_the_stream_protocol_name_the_same_stream(daemon):
    dev = Device(0)
    s = dev.create_stream()
    again = Stream.from_handle(s.handle)
    assert again == s and hash(again) == hash(s) and again is not s
    assert {s, again} == {s}
    assert again.device is dev and again.context == s.context == dev.context
    assert s.__cuda_stream__() == (0, s.handle)

    class Foreign:
        def __cuda_stream__(self):
            return (0, s.handle)

    wrapped = dev.create_stream(obj=Foreign())
    assert wrapped == s
    wrapped.close()  # borrowed: closing it destroys nothing
    again.close()
    s.delay(1)
    s.sync()
    other = dev.create_stream()
    other.wait(Foreign())  # an object with __cuda_stream__ can be waited on
    with pytest.raises(ValueError, match="only an Event, Stream, or object supporting __cuda_stream__"):
        other.wait("not a stream")
    with pytest.raises(ValueError, match="cannot be both specified"):
        dev.create_stream(obj=Foreign(), options=core.StreamOptions())
    s.close()
    other.close()


def test_the_default_stream_is_the_legacy_one_unless_per_thread_is_asked_for(daemon, monkeypatch):
    dev = Device(0)
    assert dev.default_stream is LEGACY_DEFAULT_STREAM
    before = dev.stream_budget["in_use"]
    ev = LEGACY_DEFAULT_STREAM.record(options={"enable_timing": True})
    LEGACY_DEFAULT_STREAM.sync()
    assert ev.is_done
    assert LEGACY_DEFAULT_STREAM.device is dev
    LEGACY_DEFAULT_STREAM.close()  # a no-op, as for cuda.core's built-in streams
    LEGACY_DEFAULT_STREAM.sync()
    assert dev.stream_budget["in_use"] == before + 1, "one stream serves the device's default"
    monkeypatch.setenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    assert dev.default_stream is PER_THREAD_DEFAULT_STREAM
    assert PER_THREAD_DEFAULT_STREAM != LEGACY_DEFAULT_STREAM
    ev.close()


def test_a_stream_defaults_to_the_devices_lowest_priority(daemon):
    dev = Device(0)
    with dev.create_stream() as s:
        assert s.priority == dev._info().priority_lowest == 7, "atlas: 0 is the most urgent, 7 the least"
    with dev.create_stream(core.StreamOptions(priority=0)) as urgent:
        assert urgent.priority == 0


def test_event_options_read_as_cuda_core_reads_them(daemon):
    dev = Device(0)
    busy = dev.create_event(EventOptions(busy_waited_sync=True))
    assert busy.is_sync_busy_waited and busy.is_timing_disabled
    timed = dev.create_event({"enable_timing": True})
    assert not timed.is_sync_busy_waited and not timed.is_timing_disabled
    with pytest.raises(TypeError):
        dev.create_event({"colour": "blue"})
    assert busy != timed and busy == busy and len({busy, timed}) == 2


def test_subtracting_events_explains_itself_with_cuda_cores_messages(daemon):
    dev = Device(0)
    s = dev.create_stream()
    timed = EventOptions(enable_timing=True)
    a, b = dev.create_event(timed), dev.create_event(timed)
    with pytest.raises(RuntimeError, match="Both Events must be recorded before they can be subtracted"):
        _ = b - a
    s.record(a)
    s.delay(300)
    s.record(b)
    with pytest.raises(RuntimeError, match="One or both events have not completed"):
        _ = b - a
    b.sync()
    assert 290 <= b - a <= 310
    c, d = s.record(), s.record()
    s.sync()
    with pytest.raises(RuntimeError, match="Both Events must be created with timing enabled"):
        _ = d - c
    s.close()


def test_streams_and_events_a_program_drops_are_released_within_a_second(daemon):
    dev = Device(0)
    base = dev.stream_budget["in_use"]
    s = dev.create_stream()
    e = s.record()
    assert dev.stream_budget["in_use"] == base + 1
    events_before = dev._info().events_in_use
    del s, e
    gc.collect()
    assert eventually(lambda: dev.stream_budget["in_use"] == base, timeout=1.0), "the dropped stream is released"
    assert eventually(lambda: dev._info().events_in_use == events_before - 1, timeout=1.0), "and the event"

"""npud.core as cuda.core's users know it: construction rules, handles, equality, the
__cuda_stream__ protocol, default streams, event options and errors, and release of
what a program drops."""

import gc

import pytest
from conftest import eventually

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
    ev = LEGACY_DEFAULT_STREAM.record(options={"timing_enabled": True})
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
    info = dev._info()
    with dev.create_stream() as s:
        assert s.priority == info.priority_lowest
        if info.backend == "sim":
            assert s.priority == 7, "atlas: 0 is the most urgent, 7 the least"
    with dev.create_stream(core.StreamOptions(priority=info.priority_highest)) as urgent:
        assert urgent.priority == info.priority_highest


def test_event_options_read_as_cuda_core_reads_them(daemon):
    """cuda.core 1.x's names (read off cuda-core 1.2.0 on a GPU, docs/hardware.md), and
    the names cuda.core used before 1.0 for code written against it."""
    dev = Device(0)
    blocking = dev.create_event(EventOptions(blocking_sync=True))
    assert blocking.is_blocking_sync and not blocking.is_timing_enabled
    timed = dev.create_event({"timing_enabled": True})
    assert not timed.is_blocking_sync and timed.is_timing_enabled
    fresh = dev.create_event()
    assert fresh.is_done, "an event never recorded reads as done, as cuda.core's does"
    assert not fresh.is_timing_enabled and not fresh.is_blocking_sync and not fresh.is_ipc_enabled
    old = dev.create_event(EventOptions(busy_waited_sync=True, enable_timing=True))
    assert old.is_sync_busy_waited and not old.is_timing_disabled and old.is_blocking_sync and old.is_timing_enabled
    assert dev.create_event({"enable_timing": True}).is_timing_enabled
    with pytest.raises(TypeError):
        dev.create_event({"colour": "blue"})
    with pytest.raises(TypeError, match="disagree"):
        EventOptions(timing_enabled=True, enable_timing=False)
    assert blocking != timed and blocking == blocking and len({blocking, timed}) == 2


def test_a_closed_object_says_so_as_cuda_cores_does(daemon):
    dev = Device(0)
    s = dev.create_stream()
    e = s.record()
    assert not s.is_closed and not e.is_closed
    s.close()
    e.close()
    assert s.is_closed and e.is_closed
    with pytest.raises(RuntimeError, match="^Stream has been closed$"):
        s.sync()
    with pytest.raises(RuntimeError, match="^Stream has been closed$"):
        _ = s.priority
    with pytest.raises(RuntimeError, match="^Event has been closed$"):
        e.sync()
    s.close()  # closing twice is harmless
    assert "closed" in repr(s)


def test_a_priority_outside_the_range_is_a_value_error_as_in_cuda_core(daemon):
    dev = Device(0)
    info = dev._info()
    lo, hi = sorted((info.priority_lowest, info.priority_highest))
    before = dev.stream_budget["in_use"]
    with pytest.raises(ValueError, match=rf"^priority={hi + 1} is out of range \[{lo}, {hi}\]$"):
        dev.create_stream(options=core.StreamOptions(priority=hi + 1))
    assert dev.stream_budget["in_use"] == before, "nothing was created"


def test_subtracting_events_explains_itself_with_cuda_cores_messages(daemon):
    dev = Device(0)
    s = dev.create_stream()
    timed = EventOptions(timing_enabled=True)
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


def test_handle_0_is_the_legacy_default_stream_and_a_context_has_a_handle(daemon):
    # As cuda.core's own test suite asks: the NULL stream, CU_STREAM_LEGACY and
    # CU_STREAM_PER_THREAD name the default streams, not npud handles. As cuda.core
    # (1.2.0 on an H100) does, a stream keeps the handle it was made from: the NULL
    # stream's is 0, the legacy default stream's CU_STREAM_LEGACY (1).
    assert Stream.from_handle(1) is LEGACY_DEFAULT_STREAM
    assert Stream.from_handle(2) is PER_THREAD_DEFAULT_STREAM
    assert (int(LEGACY_DEFAULT_STREAM.handle), int(PER_THREAD_DEFAULT_STREAM.handle)) == (1, 2)
    s = Stream.from_handle(0)
    assert int(s.handle) == 0 and s.__cuda_stream__() == (0, 0)
    assert s == Stream.from_handle(0) and s != LEGACY_DEFAULT_STREAM
    s.delay(1)
    s.sync()
    assert s.device is Device(0)
    # Its work goes to the same daemon stream as the legacy default stream's.
    assert s._wire == LEGACY_DEFAULT_STREAM._wire
    assert Stream.from_handle(LEGACY_DEFAULT_STREAM.handle) is LEGACY_DEFAULT_STREAM
    stream = Device(0).create_stream()
    assert stream.context is not None and stream.context._handle is not None
    assert stream.context._handle == stream.context.handle
    stream.close()

"""The cuda.core-like API over npud."""

import grpc
import pytest

from npud import NpudError
from npud.core import Device, EventOptions, Stream, StreamOptions
from npud.v1 import errors_pb2


def test_two_stream_ordering_in_core_style(daemon):
    dev = Device(0)
    dev.set_current()
    with dev.create_stream() as producer, dev.create_stream(StreamOptions(nonblocking=True, priority=2)) as consumer:
        assert producer.is_nonblocking and consumer.priority == 2
        timed = EventOptions(timing_enabled=True)
        producer.delay(200)
        start = producer.record(options=timed)
        producer.delay(25)
        end = producer.record(options=timed)
        consumer.wait(end)
        assert not consumer.is_done
        consumer.sync()
        assert end.is_done
        assert abs((end - start) - 25.0) < 0.05
        consumer.wait(producer)  # waiting on a stream waits for its current work
        consumer.sync()
        dev.sync()
    assert dev.stream_budget["in_use"] == 0


def test_untimed_events_refuse_elapsed_time_with_a_typed_error(daemon):
    dev = Device(0)
    s = dev.create_stream()
    a, b = s.record(), s.record()
    s.sync()
    with pytest.raises(NpudError) as info:
        _ = b - a
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.reason == errors_pb2.EVENT_NOT_TIMED
    s.close()


def test_errors_carry_reason_and_native_code(daemon):
    dev = Device(0)
    s = dev.create_stream()
    s.delay(500)
    never = dev.create_event()
    assert never.is_done, "a never-recorded event is done"
    held = [dev.create_stream(StreamOptions(wait=0)) for _ in range(dev.stream_budget["available"])]
    with pytest.raises(NpudError) as info:
        dev.create_stream(StreamOptions(wait=0.2))
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert info.value.reason == errors_pb2.GRANT_WAIT_EXPIRED
    assert info.value.figures["capacity"] == 510
    assert len(held) == 509


def test_close_destroys_once_and_the_handle_is_gone(daemon):
    dev = Device(0)
    with dev.create_stream() as s, dev.create_event() as e:
        s.record(e)
        handle = s.handle
    e.close()  # a second close is a no-op, not a daemon error
    s.close()
    with pytest.raises(NpudError) as info:
        Stream.from_handle(handle)
    assert info.value.reason == errors_pb2.UNKNOWN_HANDLE, "the daemon destroyed it"
    assert dev.stream_budget["in_use"] == 0


def test_a_device_the_daemon_does_not_have_is_refused_at_construction(daemon):
    """As cuda.core's Device: ValueError naming the range, at Device(n), not at first use;
    and Device(a_device) is that device."""
    with pytest.raises(ValueError, match=r"device_id must be within \[0, 1\), got 5"):
        Device(5)
    dev = Device(0)
    assert Device(dev) is dev is Device(0)


def test_an_error_shows_a_vendor_code_only_when_there_is_one(daemon):
    from npud.core import Stream

    with pytest.raises(NpudError) as info:
        Stream.from_handle(12345).sync()
    assert str(info.value) == "no such handle 12345 (NOT_FOUND, UNKNOWN_HANDLE)"
    dev = Device(0)
    untimed = dev.create_stream().record(options=EventOptions(timing_enabled=False))
    with pytest.raises(NpudError) as info:
        untimed - untimed
    assert info.value.native_code != 0, "the backend gave its code"
    assert str(info.value).endswith(f"(FAILED_PRECONDITION, EVENT_NOT_TIMED, native {info.value.native_code})")

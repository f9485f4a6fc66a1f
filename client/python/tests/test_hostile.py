"""Hostile input through a plain grpcio channel, as a stranger's client sends it: every
refusal is the caller's error, specific, and small enough for grpcio to read."""

import grpc

from npud.errors import NpudError
from npud.v1 import errors_pb2, session_pb2, session_pb2_grpc


def unix_channel(d):
    return grpc.insecure_channel("unix:" + str(d.socket))


def test_garbage_on_the_budget_stream_is_invalid_argument(daemon):
    """A client stream's message that does not decode is the caller's error, as on every
    unary method (tonic alone answers INTERNAL mid-stream)."""
    raw = unix_channel(daemon).stream_stream(
        "/npud.v1.BudgetService/Budget", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    replies = raw(iter([b"\x08\x07"]), timeout=10)
    try:
        for _ in replies:
            raise AssertionError("garbage was answered")
        raise AssertionError("the stream ended without an error")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.details()
        assert NpudError.from_rpc(e).reason == errors_pb2.INVALID_ARGUMENT_OTHER


def test_a_refusal_quotes_at_most_64_bytes_of_the_callers_input(daemon):
    """A 10 KB session name used to be quoted whole: an answer over grpcio's 8 KiB metadata
    limit, which the client read as RESOURCE_EXHAUSTED."""
    stub = session_pb2_grpc.SessionServiceStub(unix_channel(daemon))
    name = "\x1b[2J" + "n" * 10_000
    try:
        stub.Open(session_pb2.OpenSessionRequest(name=name), timeout=10)
        raise AssertionError("a 10 KB name was accepted")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details()[:200])
        err = NpudError.from_rpc(e)
        assert err.reason == errors_pb2.INVALID_NAME
        assert "\x1b" not in e.details(), "control characters are escaped"
        assert len(e.details()) < 256 and "10004 bytes" in e.details(), e.details()


def test_files_the_environment_names_are_read_with_a_bound(daemon, monkeypatch):
    """NPUD_ALLOCATION naming something that never ends is not read for ever: the token is
    dropped and the session opens without one."""
    from npud.core import Device

    monkeypatch.setenv("NPUD_ALLOCATION", "/dev/zero")
    dev = Device(0)
    dev.set_current()
    with dev.create_stream():
        assert dev.stream_budget["in_use"] == 1

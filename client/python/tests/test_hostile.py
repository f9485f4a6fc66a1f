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


# A plain grpcio client that takes budget and then hands its connection to a child (a fork
# with grpcio's fork handlers off, so the child keeps a copy of the socket) and exits.
HANDOFF = r"""
import os, queue, sys
import grpc
from npud.v1 import budget_pb2, budget_pb2_grpc

calls = queue.Queue()
def requests():
    while (call := calls.get()) is not None:
        yield call

channel = grpc.insecure_channel("unix:" + sys.argv[1])
replies = budget_pb2_grpc.BudgetServiceStub(channel).Budget(requests())
calls.put(budget_pb2.BudgetCall(hello=budget_pb2.BudgetHello(program="handoff")))
assert next(replies).WhichOneof("reply") == "welcome"
calls.put(budget_pb2.BudgetCall(acquire=budget_pb2.AcquireBudgetRequest(device=0, count=40, wait_ms=10_000)))
assert next(replies).WhichOneof("reply") == "acquired"
child = os.fork()
if child == 0:
    sys.stdin.read()  # holds the copy of the connection until the test closes stdin
    os._exit(0)
print(os.getpid(), child, flush=True)
os._exit(0)
"""


def test_a_budget_stream_ends_when_its_process_exits_though_a_child_keeps_the_connection(daemon):
    """What a process was granted goes back when it exits, as the device frees what it
    held, even while another process keeps its connection (and so its stream) open."""
    import os
    import subprocess
    import sys

    from conftest import eventually
    from npud.v1 import admin_pb2, admin_pb2_grpc

    env = dict(os.environ, GRPC_ENABLE_FORK_SUPPORT="0")
    proc = subprocess.Popen(
        [sys.executable, "-c", HANDOFF, str(daemon.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        parent, child = map(int, proc.stdout.readline().split())
        assert proc.wait(timeout=30) == 0 and proc.pid == parent
        assert os.path.exists(f"/proc/{child}"), "the child lives on, holding the connection"
        admin = admin_pb2_grpc.AdminServiceStub(unix_channel(daemon))

        def holders():
            return [(h.pid, h.streams) for h in admin.Status(admin_pb2.StatusRequest(), timeout=10).native_holders]

        assert eventually(lambda: holders() == [], timeout=15), holders()
        assert os.path.exists(f"/proc/{child}"), "npud did not wait for the child"
    finally:
        proc.stdin.close()  # the child sees its input end and exits
        if proc.poll() is None:
            proc.kill()

"""npud extensions to the pyACL surface. Not vendor API: code that uses these runs only
against npud."""

from __future__ import annotations

from npud.acl import rt
from npud.acl._state import STATE
from npud.errors import ACL_ERROR_INVALID_PARAM
from npud.v1 import stream_pb2


@rt._status
def delay(stream: int, microseconds: int) -> int:
    """Puts timed work on a stream (1 µs .. 60 s), so tests can measure ordering."""
    if not 0 < int(microseconds) <= 60_000_000:
        return ACL_ERROR_INVALID_PARAM
    s = STATE.require()
    s.call(s.streams.EnqueueDelay, stream_pb2.EnqueueDelayRequest(stream=rt._stream(stream), duration_us=int(microseconds)))

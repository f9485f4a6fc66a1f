"""The same small program through NVIDIA's cuda.core and through npud.core on one GPU, to
compare what a cuda.core user sees (scripts/gpu-check.sh; NPUD_SOCKET names the daemon).
Prints one line per property, cuda.core's value then npud.core's, and "same" or "DIFFERENT".
Exit 1 if any differs."""

import sys


def outcome(f):
    """What a call gives: its value, or what an `except` clause written for cuda.core sees
    of its exception: the built-in class it is caught as, and its message (npud's errors
    add the gRPC status after the message; `.message` is the message alone)."""
    try:
        return f()
    except Exception as e:  # noqa: BLE001 - the comparison is the point
        caught = next(c for c in (ValueError, TypeError, RuntimeError, Exception) if isinstance(e, c))
        return f"{caught.__name__}: {getattr(e, 'message', str(e))}"


def probe(core) -> dict:
    dev = core.Device(0)
    dev.set_current()
    s = dev.create_stream()
    blocking = dev.create_stream(options=core.StreamOptions(nonblocking=False))
    ev = s.record()
    s.sync()
    timed = core.EventOptions(timing_enabled=True)
    a, b = s.record(options=timed), s.record(options=timed)
    fresh = dev.create_event(core.EventOptions(blocking_sync=True))
    out = {
        "default stream priority": s.priority,
        "default stream is_nonblocking": s.is_nonblocking,
        "blocking option honoured": not blocking.is_nonblocking,
        "recorded event is_done after sync": ev.is_done,
        "event default is_timing_enabled": ev.is_timing_enabled,
        "fresh event is_done": fresh.is_done,
        "blocking_sync option honoured": fresh.is_blocking_sync,
        "untimed subtraction": outcome(lambda: ev - ev),
        "timed subtraction is a float": outcome(lambda: (b.sync(), type(b - a).__name__)[1]),
        "stream equals itself": s == s,
        "two streams differ": s != blocking,
        "__cuda_stream__ version": s.__cuda_stream__()[0],
        "out-of-range priority": outcome(lambda: dev.create_stream(options=core.StreamOptions(priority=-100))),
        # An external handle 0 is CUDA's legacy default stream; cuda.core's own tests read a
        # stream's context through its `_handle`.
        "from_handle(0) handle": outcome(lambda: int(core.Stream.from_handle(0).handle)),
        "LEGACY_DEFAULT_STREAM handle": outcome(lambda: int(core.LEGACY_DEFAULT_STREAM.handle)),
        "from_handle(0) == LEGACY_DEFAULT_STREAM": outcome(lambda: core.Stream.from_handle(0) == core.LEGACY_DEFAULT_STREAM),
        "stream context has a _handle": outcome(lambda: s.context._handle is not None),
    }
    blocking.close()
    s.close()
    out["closed stream is_closed"] = s.is_closed
    out["closed stream sync"] = outcome(s.sync)
    return out


def main() -> int:
    try:
        from cuda.core import experimental as vendor  # cuda.core < 0.5
    except ImportError:
        import cuda.core as vendor
    from npud import core as ours

    theirs, mine = probe(vendor), probe(ours)
    differ = 0
    for key in theirs:
        same = theirs[key] == mine[key]
        differ += not same
        print(f"{key}: cuda.core {theirs[key]!r}, npud.core {mine[key]!r}: {'same' if same else 'DIFFERENT'}")
    print("ok" if differ == 0 else f"fail {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

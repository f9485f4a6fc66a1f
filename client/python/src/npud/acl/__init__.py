"""pyACL over npud: `from npud import acl` instead of `import acl`.

Same calls, same return conventions (`(value, ret)` tuples, int handles, stream 0 is the
default stream) and the same aclError codes as the vendor module. Callbacks run in the
thread that calls `acl.rt.process_report`, as with pyACL. `acl.ext` holds npud's own
extensions (clearly not vendor API).
"""

from npud import _session
from npud.acl import ext, rt, util
from npud.acl._state import STATE
from npud.errors import ACL_ERROR_REPEAT_INITIALIZE, ACL_SUCCESS, NpudError

__all__ = ["init", "finalize", "get_recent_err_msg", "rt", "util", "ext"]


def init(config_path=None) -> int:
    """aclInit: connects to npud and opens this process's session."""
    with STATE.lock:
        if STATE.session is not None and not STATE.session.closed:
            return ACL_ERROR_REPEAT_INITIALIZE
        try:
            STATE.session = _session.default_session()
        except NpudError as e:
            STATE.note_error(e)
            return e.acl_code()
    return ACL_SUCCESS


def get_recent_err_msg():
    """aclGetRecentErrMsg: the messages of this thread's failed calls since it last
    asked, the newest first, and forgets them; None when there are none."""
    return STATE.take_errors()


def finalize() -> int:
    """aclFinalize: closes the session; the daemon reclaims everything it held."""
    with STATE.lock:
        session, STATE.session = STATE.session, None
        STATE.default_streams.clear()
        STATE.stream_device.clear()
        STATE.event_device.clear()
        STATE.ex_events.clear()
        STATE.exceptions_seen.clear()
        STATE.callbacks.clear()
        STATE.contexts.clear()
        STATE.exception_callback = None
    if session is not None:
        _session.close_default_session()
    return ACL_SUCCESS

"""acl.util: the thread helpers pyACL programs use to run process_report."""

from __future__ import annotations

import threading
from typing import Any, Callable, Tuple

from npud.acl._state import STATE
from npud.errors import ACL_ERROR_INVALID_PARAM, ACL_SUCCESS


def start_thread(func: Callable[[Any], None], args_list: Any) -> Tuple[int, int]:
    """Starts `func(args_list)` on a new thread; returns its id for subscribe_report."""
    if not callable(func):
        return 0, ACL_ERROR_INVALID_PARAM
    t = threading.Thread(target=func, args=(args_list,), name="acl-report", daemon=True)
    t.start()
    tid = t.ident or 0
    with STATE.lock:
        STATE.threads[tid] = t
    return tid, ACL_SUCCESS


def stop_thread(thread_id: int) -> int:
    """Joins a thread started by start_thread (its function must return on its own)."""
    with STATE.lock:
        t = STATE.threads.pop(int(thread_id), None)
    if t is None:
        return ACL_ERROR_INVALID_PARAM
    t.join()
    return ACL_SUCCESS

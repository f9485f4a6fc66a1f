"""State shared by the pyACL shim: the session, per-thread current device, contexts,
default streams, and the Python callbacks waiting to be run."""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from npud import _session
from npud.errors import ACL_ERROR_UNINITIALIZE, NpudError


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.session: Optional[_session.Session] = None
        self.local = threading.local()
        self.last_device: Optional[int] = None
        self.contexts: Dict[int, int] = {}
        self.context_ids = itertools.count(0x7C000001)
        self.default_streams: Dict[int, int] = {}
        self.stream_device: Dict[int, int] = {}
        self.event_device: Dict[int, int] = {}
        # Events made with create_event_ex_with_flag, which reset_event, query_event and
        # query_event_wait_status refuse (the seed's constraint).
        self.ex_events: set = set()
        self.callbacks: Dict[int, Tuple[Callable[[Any], None], Any]] = {}
        self.callback_ids = itertools.count(1)
        self.exception_callback: Optional[Callable[[Any], None]] = None
        # Sequence numbers of exception reports already handed to the callback (insertion
        # ordered, bounded), so one exception reaches it once.
        self.exceptions_seen: Dict[int, None] = {}
        self.exception_thread: Optional[threading.Thread] = None
        self.threads: Dict[int, threading.Thread] = {}

    def require(self) -> _session.Session:
        if self.session is None or self.session.closed:
            raise NpudError(None, "acl.init() has not been called", native_code=ACL_ERROR_UNINITIALIZE)
        return self.session

    def current_device(self) -> Optional[int]:
        return getattr(self.local, "device", self.last_device)

    def set_current_device(self, device: int) -> None:
        self.local.device = device
        self.last_device = device

    def note_error(self, e: NpudError) -> None:
        """Keeps a failed call's message for acl.get_recent_err_msg in the calling thread
        (the newest first, at most RECENT_ERRORS of them)."""
        recent = getattr(self.local, "errors", None)
        if recent is None:
            recent = self.local.errors = []
        recent.insert(0, str(e))
        del recent[RECENT_ERRORS:]

    def take_errors(self) -> Optional[str]:
        """The calling thread's kept messages, newest first, and forgets them."""
        recent = getattr(self.local, "errors", None)
        self.local.errors = []
        return "\n".join(recent) if recent else None


# Failed calls whose messages one thread keeps until it asks for them.
RECENT_ERRORS = 16


STATE = State()

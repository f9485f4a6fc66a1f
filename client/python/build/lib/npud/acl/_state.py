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


STATE = State()

"""One session per process: the channel, the session id every call carries, a background
thread that renews the lease, and a close at exit."""

from __future__ import annotations

import atexit
import os
import pathlib
import threading
from typing import Optional

import grpc

from npud.errors import NpudError, Reason
from npud.v1 import (
    admin_pb2_grpc,
    device_pb2_grpc,
    event_pb2,
    event_pb2_grpc,
    report_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
    stream_pb2,
    stream_pb2_grpc,
)

SESSION_KEY = "npud-session"
# Messages as large as the daemon accepts (callback user data is at most 64 KiB).
_OPTIONS = [("grpc.max_receive_message_length", 8 << 20), ("grpc.max_send_message_length", 8 << 20)]
# A renewal answer that means the session no longer exists (lapsed: NOT_FOUND; from an
# earlier daemon: FAILED_PRECONDITION).
_SESSION_LOST = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


def default_target() -> str:
    """`NPUD_ENDPOINT` (host:port), else `NPUD_SOCKET`, else npud's socket rule."""
    endpoint = os.environ.get("NPUD_ENDPOINT")
    if endpoint:
        return endpoint.removeprefix("http://").removeprefix("https://")
    socket = os.environ.get("NPUD_SOCKET")
    if not socket:
        if os.geteuid() == 0:
            socket = "/run/npud/npud.sock"
        elif os.environ.get("XDG_RUNTIME_DIR"):
            socket = str(pathlib.Path(os.environ["XDG_RUNTIME_DIR"]) / "npud.sock")
        else:
            socket = f"/tmp/npud-{os.geteuid()}/npud.sock"
    return "unix:" + socket


def _token_metadata() -> tuple:
    """`authorization: Bearer $NPUD_TOKEN`, for daemons that authenticate by token."""
    token = os.environ.get("NPUD_TOKEN")
    return (("authorization", f"Bearer {token}"),) if token else ()


def _allocation_metadata() -> tuple:
    """On Kubernetes, the allocation token mounted into the container (`$NPUD_ALLOCATION`),
    presented when a session opens: it binds the container to its allocation."""
    try:
        allocation = (_read("NPUD_ALLOCATION") or b"").decode().strip()
    except (OSError, UnicodeDecodeError):
        allocation = ""
    return (("npud-allocation", allocation),) if allocation else ()


_MAX_FILE = 1 << 20


def _read(var: str) -> Optional[bytes]:
    """The file `$var` names, refused past 1 MiB: the path may name something that never
    ends (/dev/zero), which would otherwise be read for ever."""
    path = os.environ.get(var)
    if not path:
        return None
    with pathlib.Path(path).open("rb") as f:
        data = f.read(_MAX_FILE + 1)
    if len(data) > _MAX_FILE:
        raise OSError(f"{path} is larger than {_MAX_FILE} bytes")
    return data


def _tls_credentials() -> "Optional[grpc.ChannelCredentials]":
    """TLS for TCP: `NPUD_ENDPOINT=https://...` or any of `NPUD_TLS_CA` (roots to trust),
    `NPUD_TLS_CERT` + `NPUD_TLS_KEY` (client certificate for mTLS)."""
    wanted = os.environ.get("NPUD_ENDPOINT", "").startswith("https://") or any(
        os.environ.get(v) for v in ("NPUD_TLS_CA", "NPUD_TLS_CERT", "NPUD_TLS_KEY")
    )
    if not wanted:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read("NPUD_TLS_CA"), private_key=_read("NPUD_TLS_KEY"), certificate_chain=_read("NPUD_TLS_CERT")
    )


class Session:
    """A connection to npud with an open session."""

    def __init__(self, target: Optional[str] = None, name: str = "", lease_ms: int = 0, renew: bool = True):
        self.target = target or default_target()
        options = list(_OPTIONS)
        credentials = _tls_credentials() if not self.target.startswith("unix:") else None
        if credentials is not None:
            self.channel = grpc.secure_channel(self.target, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(self.target, options=options)
        self.sessions = session_pb2_grpc.SessionServiceStub(self.channel)
        self.devices = device_pb2_grpc.DeviceServiceStub(self.channel)
        self.streams = stream_pb2_grpc.StreamServiceStub(self.channel)
        self.events = event_pb2_grpc.EventServiceStub(self.channel)
        self.reports = report_pb2_grpc.ReportServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self._token_metadata = _token_metadata()
        self._open_metadata = self._token_metadata + _allocation_metadata()
        try:
            opened = self.sessions.Open(
                session_pb2.OpenSessionRequest(name=name, lease_ms=lease_ms), metadata=self._open_metadata, timeout=30
            )
        except grpc.RpcError as e:
            self.channel.close()
            raise NpudError.from_rpc(e) from None
        self._name, self._requested_lease_ms = name, lease_ms
        self.id = opened.session
        self.tenant = opened.tenant
        self.lease_ms = opened.lease_ms
        self.reopened = 0
        self.metadata = ((SESSION_KEY, str(self.id)),) + self._token_metadata
        self._closed = threading.Event()
        # Objects the garbage collector dropped, destroyed by a reaper thread (see
        # release_later).
        self._reap: list = []
        self._reap_ready = threading.Condition()
        self._reaper: Optional[threading.Thread] = None
        self._renews = renew
        self._reopening = threading.Lock()
        if renew:
            threading.Thread(target=self._renew, name="npud-lease", daemon=True).start()
        atexit.register(self.close)

    def call(self, method, request, timeout: Optional[float] = None):
        """Calls `method` with the session attached; raises NpudError on failure.

        When the daemon answers that the session is gone (its lease lapsed while this
        process was stalled, or the daemon restarted), a renewing session opens a new one
        and makes the call once more, as the renewer would at its next tick. What the
        lost session held stays lost: its handles answer NOT_FOUND or STALE_EPOCH."""
        used = self.id
        try:
            return method(request, metadata=self.metadata, timeout=timeout)
        except grpc.RpcError as e:
            err = NpudError.from_rpc(e)
        if not self._healed(err, used):
            raise err
        try:
            return method(request, metadata=self.metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise NpudError.from_rpc(e) from None

    def _healed(self, err: NpudError, used: int) -> bool:
        """True when `err` (from a call made with session `used`) meant the session is
        lost and a new one is now current."""
        if not self._renews or self._closed.is_set():
            return False
        if err.reason not in (Reason.UNKNOWN_SESSION, Reason.STALE_EPOCH):
            return False
        if err.reason == Reason.STALE_EPOCH and self.id == used:
            # STALE_EPOCH may be about a handle while the session is fine: ask about it.
            try:
                self.sessions.Renew(
                    session_pb2.RenewSessionRequest(session=used), metadata=self._token_metadata, timeout=10
                )
                return False
            except grpc.RpcError as e:
                if e.code() not in _SESSION_LOST:
                    return False
        return self._reopen(used)

    def _renew(self) -> None:
        """Renews the lease; if the session was lost (the daemon restarted, or the lease
        lapsed) opens a new one, so a long-lived process recovers by itself."""
        period = max(self.lease_ms / 3000.0, 0.05)
        while not self._closed.wait(period):
            try:
                self.sessions.Renew(
                    session_pb2.RenewSessionRequest(session=self.id), metadata=self._token_metadata, timeout=max(period, 1.0)
                )
            except grpc.RpcError as e:
                if e.code() in _SESSION_LOST:
                    self._reopen(self.id)

    def _reopen(self, lost: int) -> bool:
        """Opens a new session in place of `lost` unless another thread already did; True
        when a session other than `lost` is current afterwards."""
        with self._reopening:
            if self.id != lost:
                return True
            try:
                opened = self.sessions.Open(
                    session_pb2.OpenSessionRequest(name=self._name, lease_ms=self._requested_lease_ms),
                    metadata=self._open_metadata,
                    timeout=10,
                )
            except grpc.RpcError:
                return False  # the daemon is not back yet: try again at the next renewal
            self.id = opened.session
            self.metadata = ((SESSION_KEY, str(self.id)),) + self._token_metadata
            self.reopened += 1
            return True

    def release_later(self, kind: str, handle: int) -> None:
        """Destroys a stream or event the program dropped, off the garbage collector's
        path (a finalizer must not make a network call): a reaper thread does it at once."""
        if self._closed.is_set():
            return  # closing the session reclaims everything anyway
        with self._reap_ready:
            self._reap.append((kind, int(handle)))
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap_loop, name="npud-reaper", daemon=True)
                self._reaper.start()
            self._reap_ready.notify()

    def _reap_loop(self) -> None:
        while not self._closed.is_set():
            with self._reap_ready:
                while not self._reap and not self._closed.is_set():
                    self._reap_ready.wait(1.0)
                batch, self._reap = self._reap, []
            # One call per object: one that is already gone must not keep the others.
            calls = [
                (self.events.Destroy, event_pb2.DestroyEventRequest(handle=h))
                if kind == "event"
                else (self.streams.Destroy, stream_pb2.DestroyStreamsRequest(handles=[h]))
                for kind, h in batch
            ]
            for method, request in calls:
                if self._closed.is_set():
                    return  # closing the session reclaimed them
                try:
                    self.call(method, request)
                except (NpudError, ValueError):
                    pass  # already gone, or the channel closed under us: nothing is left to free

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """Closes the session: the daemon synchronises and reclaims what it holds."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._reap_ready:
            self._reap_ready.notify_all()
        try:
            self.sessions.Close(session_pb2.CloseSessionRequest(session=self.id), metadata=self.metadata, timeout=30)
        except grpc.RpcError:
            pass  # the lease will lapse on its own
        finally:
            self.channel.close()
            atexit.unregister(self.close)


_lock = threading.Lock()
_default: Optional[Session] = None


def default_session() -> Session:
    """The process's session, opened on first use."""
    global _default
    with _lock:
        if _default is None or _default.closed:
            _default = Session()
        return _default


def current_default_session() -> Optional[Session]:
    """The process's session if one is open; never opens one."""
    s = _default
    return s if s is not None and not s.closed else None


def close_default_session() -> None:
    global _default
    with _lock:
        if _default is not None:
            _default.close()
            _default = None

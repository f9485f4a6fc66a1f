"""Starts the real npud binary on a temporary socket for the Python tests."""

import os
import pathlib
import socket
import subprocess
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def eventually(check, timeout=5.0):
    """Whether `check()` holds within `timeout` seconds, asked every 20 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def npud_binary() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("NPUD_BIN", REPO / "target" / "debug" / "npud"))
    if not path.exists():
        pytest.fail(f"{path} is missing: run `cargo build --workspace --bins` first")
    return path


class Daemon:
    def __init__(self, *args: str, config: str = ""):
        self.dir = tempfile.TemporaryDirectory()
        self.socket = pathlib.Path(self.dir.name) / "npud.sock"
        config_path = pathlib.Path(self.dir.name) / "npud.toml"
        config_path.write_text(config)
        self.log = open(pathlib.Path(self.dir.name) / "npud.log", "w+")
        # npud sends READY=1 to NOTIFY_SOCKET once every listener is bound: wait for that
        # rather than polling the socket, so no test dials a listener that is not there yet.
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(pathlib.Path(self.dir.name) / "notify.sock"))
        notify.settimeout(0.05)
        env = dict(os.environ, NOTIFY_SOCKET=notify.getsockname())
        self.proc = subprocess.Popen(
            [str(npud_binary()), "--socket", str(self.socket), "--config", str(config_path), *args],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=env,
        )
        deadline = time.monotonic() + 60
        with notify:
            while True:
                try:
                    if b"READY=1" in notify.recv(512).split(b"\n"):
                        break
                except socket.timeout:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"npud did not start:\n{self.log.read()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.dir.cleanup()


def backend_args() -> tuple[str, ...]:
    """The simulator, or a real GPU's driver when NPUD_TEST_CUDA_LIBRARY names one
    (scripts/gpu-check.sh)."""
    real = os.environ.get("NPUD_TEST_CUDA_LIBRARY")
    if real:
        return ("--backend", "cuda", "--cuda-library", real)
    return ("--sim-profile", "atlas-200i-a2")


@pytest.fixture
def daemon(monkeypatch):
    """A fresh daemon per test, found by the client through NPUD_SOCKET."""
    d = Daemon(*backend_args(), config="[sim]\nlanes = 4\n[limits]\ncallback_deadline = \"2s\"\n")
    monkeypatch.setenv("NPUD_SOCKET", str(d.socket))
    monkeypatch.setenv("NPUD_ACL_WAIT_MS", "300")
    from npud.acl import rt

    monkeypatch.setattr(rt, "STREAM_WAIT_MS", 300)
    yield d
    from npud import _session, acl

    acl.finalize()
    _session.close_default_session()
    d.stop()

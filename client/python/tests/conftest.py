"""Starts the real npud binary on a temporary socket for the Python tests."""

import os
import pathlib
import socket
import subprocess
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


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
        self.proc = subprocess.Popen(
            [str(npud_binary()), "--socket", str(self.socket), "--config", str(config_path), *args],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.socket))
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"npud did not start:\n{self.log.read()}")
                time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.dir.cleanup()


@pytest.fixture
def daemon(monkeypatch):
    """A fresh daemon per test, found by the client through NPUD_SOCKET."""
    d = Daemon("--sim-profile", "atlas-200i-a2", config="[sim]\nlanes = 4\n[limits]\ncallback_deadline = \"2s\"\n")
    monkeypatch.setenv("NPUD_SOCKET", str(d.socket))
    monkeypatch.setenv("NPUD_ACL_WAIT_MS", "300")
    from npud.acl import rt

    monkeypatch.setattr(rt, "STREAM_WAIT_MS", 300)
    yield d
    from npud import _session, acl

    acl.finalize()
    _session.close_default_session()
    d.stop()

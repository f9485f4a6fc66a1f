"""NVIDIA's own cuda.core (the package, not npud.core) on the fake CUDA driver: a program
written with it and nothing of npud runs natively, and under `npuctl run` npud books what
the driver holds for it, the same count, until it exits. The driver's count is read from
the fake's shared budget, as the Rust end-to-end tests read it.

The program keeps to cuda.core's driver-API paths (devices, streams, events, a stream's
sync): what cuda.core does through the CUDA runtime (`Device.sync`, `Device.pci_bus_id`)
needs the driver's private export tables, which no fake driver has (the hardware check,
scripts/gpu-check.sh, runs those on a GPU)."""

import fcntl
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import REPO, Daemon, eventually

STREAMS = 12

PROGRAM = """
import sys
from cuda.core import Device, StreamOptions

dev = Device(0)
dev.set_current()
# Every device property cuda.core offers (each a cuDeviceGetAttribute): how many fail.
props = dev.properties
failed = 0
for name in (n for n in dir(type(props)) if not n.startswith("_")):
    try:
        getattr(props, name)
    except Exception:
        failed += 1
streams = [dev.create_stream(options=StreamOptions(nonblocking=True)) for _ in range(int(sys.argv[1]))]
done = streams[0].record()
streams[-1].wait(done)
streams[-1].sync()
print("ok", len(streams), dev.compute_capability.major, failed, flush=True)
sys.stdin.read()
for s in streams:
    s.close()
print("done", flush=True)
"""


def target_dir() -> pathlib.Path:
    npud = os.environ.get("NPUD_BIN")
    return pathlib.Path(npud).parent if npud else REPO / "target" / "debug"


def driver_holds(budget: pathlib.Path, pid: int) -> int:
    """Streams the fake driver counts for `pid` (lines `pid device streams ns`, ns the pid
    namespace, read under the driver's lock; this test's processes share its namespace)."""
    try:
        with open(budget) as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            text = f.read()
    except FileNotFoundError:
        return 0
    rows = (line.split() for line in text.splitlines())
    return sum(int(r[2]) for r in rows if len(r) in (3, 4) and int(r[0]) == pid)


def npud_holder(npuctl, env, pid: int):
    """npud's row for `pid` among its interposed processes, or None."""
    out = subprocess.run([str(npuctl), "-o", "json", "status"], env=env, capture_output=True, text=True, check=True)
    return next((h for h in json.loads(out.stdout).get("native_holders", []) if h["pid"] == pid), None)


@pytest.fixture
def cuda_env(tmp_path, monkeypatch):
    """The fake driver where cuda.bindings looks for it (`libcuda.so.1` on the library
    path), on a budget shared by every process, and npud's cuda backend on it."""
    import cuda.core  # noqa: F401  (a test dependency: missing, the test fails here)

    fake = target_dir() / "libcuda.so"
    assert fake.exists(), f"{fake} is missing: run `cargo build --workspace` first"
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libcuda.so.1").symlink_to(fake)
    budget = tmp_path / "budget"
    monkeypatch.setenv("NPU_SIM_SHARED", str(budget))
    d = Daemon("--backend", "cuda", "--cuda-library", str(libdir / "libcuda.so.1"))
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), NPUD_SOCKET=str(d.socket))
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    yield env, budget, script
    d.stop()


def start(argv, env):
    p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    if line[:1] != ["ok"]:
        p.kill()
        raise AssertionError(f"the program said {line}: {p.stderr.read()[-2000:]}")
    return p, line


def finish(p):
    out, err = p.communicate(input="", timeout=60)
    assert p.returncode == 0 and out.split() == ["done"], (p.returncode, out, err[-2000:])


def test_a_cuda_core_program_runs_on_the_fake_driver(cuda_env):
    env, budget, script = cuda_env
    p, line = start([sys.executable, str(script), str(STREAMS)], env)
    assert line == ["ok", str(STREAMS), "8", "0"], f"streams, compute capability, properties that failed: {line}"
    assert driver_holds(budget, p.pid) == STREAMS
    finish(p)
    assert driver_holds(budget, p.pid) == 0


def test_under_npuctl_run_npud_books_what_the_driver_holds(cuda_env):
    env, budget, script = cuda_env
    npuctl = target_dir() / "npuctl"
    p, _ = start([str(npuctl), "run", "--streams", "16", "--", sys.executable, str(script), str(STREAMS)], env)
    # npuctl run execs the program: the pid is the program's.
    holder = npud_holder(npuctl, env, p.pid)
    assert holder is not None, "npud does not know the program"
    assert driver_holds(budget, p.pid) == STREAMS
    assert eventually(lambda: npud_holder(npuctl, env, p.pid)["created"] == driver_holds(budget, p.pid), 20), holder
    assert npud_holder(npuctl, env, p.pid)["streams"] >= STREAMS, "npud's grant covers what was made"
    finish(p)
    assert driver_holds(budget, p.pid) == 0
    assert eventually(lambda: npud_holder(npuctl, env, p.pid) is None, 20), "npud still books the program"

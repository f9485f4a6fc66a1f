"""The committed generated stubs match proto/."""

import pathlib
import subprocess
import sys

TOOLS = pathlib.Path(__file__).resolve().parents[1] / "tools"


def test_generated_stubs_are_current():
    r = subprocess.run([sys.executable, str(TOOLS / "gen_stubs.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_package_builds_from_the_repository_with_type_hints_and_no_rust(tmp_path):
    """pip builds the wheel with nothing but Python (no cargo on PATH), and it carries
    py.typed and the stubs, so type checkers see the API."""
    import os
    import zipfile

    import shutil

    # A copy, so setuptools' build/ and egg-info never land in the source tree.
    root = tmp_path / "src-copy"
    shutil.copytree(
        pathlib.Path(__file__).resolve().parents[1],
        root,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"),
    )
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin"
    env["CARGO"] = "/nonexistent/cargo"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(root)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("npud-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "npud/py.typed" in names
    assert "npud/v1/stream_pb2.pyi" in names and "npud/core.py" in names

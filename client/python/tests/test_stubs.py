"""The committed generated stubs match proto/."""

import pathlib
import subprocess
import sys

TOOLS = pathlib.Path(__file__).resolve().parents[1] / "tools"


def test_generated_stubs_are_current():
    r = subprocess.run([sys.executable, str(TOOLS / "gen_stubs.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

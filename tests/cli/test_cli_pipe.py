"""``diffract fields | head``: a reader that stops early ends the command quietly (no
BrokenPipeError, no "Exception ignored" at exit, exit status 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"


def test_a_closed_pipe_ends_the_listing_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails
    env = {**os.environ, "PYTHONPATH": str(PYTHON_DIR)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "diffract.cli", "fields"],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "BrokenPipe" not in err and "Broken pipe" not in err and "Traceback" not in err
    assert err == ""

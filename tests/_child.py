"""Run a peer (WeightWatcher) in a child process: its logging, warnings and global state stay
out of the test process, and a crash there is a clear failure here."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def json_from_child(script: str, payload: Any, timeout: float = 300) -> Any:
    """Run ``script`` in a fresh interpreter with ``payload`` as JSON on stdin; return the
    JSON on its last line of output (earlier lines are the peer's own prints)."""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])

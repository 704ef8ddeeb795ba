"""Issue 18, point 13: a writer SIGKILLed while running with executor="processes" leaves no
worker processes behind (the workers watch their parent and exit when it is gone)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent(
    """
    import os, sys, time
    from diffract.run.executors import make_executor
    opened = make_executor("processes").open(2)
    pids = {opened.submit(os.getpid).result() for _ in range(20)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(600)
    """
)


def _session(sid: int) -> list[int]:
    """Live processes of the session ``sid`` (the killed writer's workers, its resource
    tracker)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not reaped yet) is gone for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_workers_exit_when_the_writer_is_killed():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        line = child.stdout.readline()
        workers = [int(p) for p in line.split()]
        assert workers, "no worker started"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            any(_alive(p) for p in workers) or _session(child.pid)
        ):
            time.sleep(0.1)
        left = [p for p in workers if _alive(p)]
        assert not left, f"worker processes {left} outlived their SIGKILLed parent"
        assert not _session(child.pid), "the resource tracker outlived the writer"
    finally:
        # clean up whatever is left (the child's own process group only)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)

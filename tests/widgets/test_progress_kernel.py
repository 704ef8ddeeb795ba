"""In a real Jupyter kernel: the progress widget's state reaches the front end while a
one-chunk ``apply`` runs, both when the run blocks the kernel's main thread (the widget of a
plain ``compute.apply``) and when it runs in a worker thread (``run_with_progress``). The
test reads the kernel's IOPub channel as a browser would: widget state updates (comm
messages) with the slices and the kernel in progress must arrive before the chunk ends."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SETUP = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
import numpy as np, diffract
from _ui_helpers import mlp
from diffract import Session
from diffract.widgets import run_with_progress

@diffract.kernel(outputs="kernel_slow_norm", min_ndim=2, replace=True)
def kernel_slow_norm(weights):
    time.sleep(0.4)
    return float(np.linalg.norm(weights))

session = Session("ram")
session.models.add(mlp(0, layers=8), "m")
"""


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import start_new_kernel

    path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + path  # this venv's python3
    try:
        km, kc = start_new_kernel(kernel_name="python3")
    finally:
        os.environ["PATH"] = path
    try:
        reply = kc.execute_interactive(SETUP, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _updates(kc, code: str, until) -> list[tuple[float, dict]]:
    """Run ``code``; the widget state updates the kernel sends, with their arrival times,
    until ``until(state)`` says the run ended (the cell itself may return at once)."""
    msg_id = kc.execute(code)
    out, deadline, idle = [], time.monotonic() + 120, False
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Exception:  # queue.Empty: nothing for a second
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "error":
            raise AssertionError(content["traceback"])
        if kind == "status" and msg["parent_header"].get("msg_id") == msg_id:
            idle = content["execution_state"] == "idle"
        if kind in ("comm_open", "comm_msg"):
            state = content.get("data", {}).get("state", {})
            if state:
                out.append((time.monotonic(), state))
                if until(state):
                    break
    assert idle or until(out[-1][1]), "the run did not end in time"
    return out


def _inside_chunk(updates) -> list[dict]:
    """The updates sent before the chunk was committed (chunks_done reached 1)."""
    inside = []
    for _, state in updates:
        if state.get("chunks_done") == 1 or state.get("status") == "done":
            break
        inside.append(state)
    return inside


@pytest.mark.parametrize(
    "code",
    [
        'report = session.compute.apply("kernel_slow_norm")',  # blocks the main thread
        'run = run_with_progress(session, "kernel_slow_norm", display=True)',  # a worker thread
    ],
    ids=["blocking", "worker-thread"],
)
def test_widget_updates_reach_the_front_end_inside_the_chunk(kernel, code):
    kernel.execute_interactive('session.compute.erase("kernel_slow_norm")', timeout=60)
    updates = _updates(kernel, code, lambda st: st.get("status") in ("done", "error"))
    inside = _inside_chunk(updates)
    slices = sorted({st["slices_done"] for st in inside if "slices_done" in st})
    params = {st["param"] for st in inside if st.get("param")}
    details = {st["detail"] for st in inside if st.get("detail")}
    values = sorted({st["values_done"] for st in inside if "values_done" in st})
    # the 8 slices of the one chunk are seen one after another before it is committed
    assert len([n for n in slices if 0 < n < 8]) >= 5, slices
    assert len([n for n in values if 0 < n < 8]) >= 5, values  # the one counter moves too
    assert any(p.startswith("m:layers.") for p in params), params  # the slice in progress
    assert any("/8 slices · step " in d for d in details), details  # the kernel, in details
    assert any(st.get("eta") is not None for st in inside)
    # the bar moves inside the chunk, never back
    fractions = [st["fraction"] for st in inside if "fraction" in st]
    assert fractions == sorted(fractions) and len([f for f in fractions if 0 < f < 1]) >= 5
    # and they came spread over the run, not in a burst at its end
    times = [t for t, st in updates if "slices_done" in st and 0 < st["slices_done"] < 8]
    assert times[-1] - times[0] > 1.5
    assert updates[-1][1].get("status") == "done" or any(
        st.get("status") == "done" for _, st in updates
    )

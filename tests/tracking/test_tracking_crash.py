"""Crash safety: SIGKILL the training process while the tracker's worker is inside an
analysis; reopening the store shows every committed step, and the partial step is detected
(weights stored, no committed mark), left out by the readers (the evolution panel, the
sidebar's summary) and finished or dropped by the next tracker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from diffract import Session
from diffract.kernels import default_registry, make_kernel
from diffract.server import StoreReader
from diffract.tracking import committed_ids, committed_steps, run_steps
from diffract.widgets import FieldPanel

CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from diffract import Session
    from diffract.kernels import default_registry, make_kernel

    def slow_norm(weights):
        '''||W||_F, slowly: the parent kills the process while this runs.'''
        print("in-kernel", flush=True)
        time.sleep(0.3)
        return float(np.linalg.norm(weights))

    reg = default_registry().copy()
    reg.register(make_kernel(slow_norm, outputs="slow_norm"))
    session = Session(profile="local", path=sys.argv[1], registry=reg)
    rng = np.random.default_rng(0)
    w = {"fc1.weight": rng.normal(size=(64, 32)), "fc2.weight": rng.normal(size=(10, 64))}
    tracker = session.track(
        "run", ["slow_norm"], every=5, max_pending=2,
        on_step=lambda step, mid: print("committed", step, flush=True),
    )
    for i in range(100000):
        w["fc1.weight"] *= 0.999
        tracker.step(w, step=i)
        time.sleep(0.01)
    """
)


def _norm(weights: np.ndarray) -> float:
    return float(np.linalg.norm(weights))


def _kill_mid_analysis(tmp_path) -> set[int]:
    """Run the child until it committed 3 steps and is inside the kernel again; kill -9."""
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reported: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("committed"):
                reported.add(int(line.split()[1]))
            elif line.startswith("in-kernel") and len(reported) >= 3:
                os.kill(proc.pid, signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "the child did not commit 3 steps in time"
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    return reported


def _registry():
    reg = default_registry().copy()

    def slow_norm(weights):
        """||W||_F (the same field as the child's, without the sleep)."""
        return _norm(weights)

    reg.register(make_kernel(slow_norm, outputs="slow_norm"))
    return reg


def _check_committed(session, steps) -> None:
    """Every committed step has every slice's value, equal to the norm of its weights."""
    table = session.results.export_table("slow_norm", export_format="pandas")
    for step in steps:
        mid = f"run-s{step:09d}"
        rows = table[table.model_id == mid]
        assert len(rows) == 2 and rows["slow_norm"].notna().all(), mid
        for _, row in rows.iterrows():
            want = _norm(session.models.weights(row["name"], model_id=mid))
            assert row["slow_norm"] == pytest.approx(want)


def _check_readers(session, path, steps) -> None:
    """The evolution panel and the sidebar's summary show the committed steps, not the partial."""
    panel = FieldPanel(session, "slow_norm", kind="evolution", run="run", live=False)
    assert list(panel.figure.layout.xaxis.ticktext) == [str(step) for step in steps]
    listed = [m["model_id"] for m in StoreReader.get(path.resolve()).summary()["models"]]
    assert listed == committed_ids(session, "run")


@pytest.mark.slow
@pytest.mark.parametrize("incomplete", ["drop", "finish"])
def test_sigkill_mid_analysis_keeps_committed_steps_and_no_partial_one(tmp_path, incomplete):
    reported = _kill_mid_analysis(tmp_path)
    with Session(profile="local", path=tmp_path / "store", registry=_registry()) as s:
        found = run_steps(s, "run")
        assert reported <= set(found.committed)  # every step reported committed survived
        assert found.incomplete  # the one being analyzed when the process died
        assert all(step % 5 == 0 for step in found.stored)
        _check_committed(s, found.committed)
        _check_readers(s, tmp_path / "store", sorted(found.committed))
        tracker = s.track("run", ["slow_norm"], every=5, incomplete=incomplete)
        tracker.flush()
        after = run_steps(s, "run")
        assert not after.incomplete  # no partial step once a tracker resumed the run
        if incomplete == "drop":
            assert tracker.status.dropped == len(found.incomplete)
            assert set(after.committed) == set(found.committed)
        else:
            assert tracker.status.finished == len(found.incomplete)
            assert set(after.committed) == found.stored
        assert tracker.next_step == max(after.stored) + 1  # the step axis continues
        tracker.step({"fc1.weight": np.ones((4, 4)), "fc2.weight": np.eye(4)}, step=1000)
        tracker.close()
        assert committed_steps(s, "run")[-1] == 1000
        _check_committed(s, committed_steps(s, "run")[:-1])

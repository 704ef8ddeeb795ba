"""Progress that counts what the user asked for (issue 29, point 3): on a long run of slow
kernels over many slices, the widget's counters agree with each other and with the work the
kernels themselves count at every event, the bar never goes back and stays within 10% of
the share of the work done, the time left is a range (none before enough is measured) that
holds the real time left, and a cancelled run reads cancelled with what was kept: its bar
stops where the work stopped and its static snapshot (saved notebooks, nbconvert) shows the
final state, not "running"."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import diffract
from diffract import Session
from diffract.widgets import ProgressWidget, run_with_progress

STEP = 0.02  # seconds per kernel call
SLICES = 40
DONE = {"calls": 0}
LOCK = threading.Lock()


def _count() -> None:
    time.sleep(STEP)
    with LOCK:
        DONE["calls"] += 1


@diffract.kernel(outputs="w29_slow_a", min_ndim=2, replace=True)
def w29_slow_a(weights):
    _count()
    return float(np.abs(weights).sum())


@diffract.kernel(outputs="w29_slow_b", min_ndim=2, replace=True)
def w29_slow_b(weights):
    _count()
    return float(np.abs(weights).max())


def _session() -> Session:
    rng = np.random.default_rng(0)
    s = Session("ram")
    s.models.add({f"layers.{i}.weight": rng.normal(size=(8, 6)) for i in range(SLICES)}, "m")
    DONE["calls"] = 0
    return s


def test_a_long_run_counts_agree_and_the_bar_follows_the_work():
    s = _session()
    w = ProgressWidget(["w29_slow_a", "w29_slow_b"])
    total = 2 * SLICES
    seen = []

    def feed(ev):
        w.callback(ev)
        seen.append(
            {
                "t": time.perf_counter(),
                "work": DONE["calls"] / total,  # what the kernels did, counted by themselves
                "fraction": w.fraction,
                "values": (w.values_done, w.values_total),
                "slices": (w.slices_stored, w.slices_done, w.slices_total),
                "steps": w.kernel_calls,
                "eta": (w.eta_low, w.eta, w.eta_high),
                "counter": w.counter_text(),
            }
        )

    report = s.compute.apply("w29_slow_a", "w29_slow_b", progress=feed)
    end = time.perf_counter()
    w.finish(report)
    assert report.ok and report.computed == total and len(seen) > total
    fractions = [e["fraction"] for e in seen]
    assert fractions == sorted(fractions)  # monotone
    for e in seen:
        assert abs(e["fraction"] - e["work"]) <= 0.10, e
        done, planned = e["values"]
        # one counter: the requested values made are the kernel calls made (one requested
        # output each), out of fields x slices asked for
        assert planned == total and done == e["steps"] == round(e["work"] * total)
        assert e["counter"] == f"{done} of {total} requested values"
        stored, complete, n = e["slices"]
        assert 0 <= stored <= complete <= n == SLICES
    # the time left: no number before 5% of the work, then a range around the estimate
    # that holds the time really left (loose by half a second for commits and scheduling)
    early = [e for e in seen if e["work"] < 0.05]
    assert early and all(e["eta"][0] is None and e["eta"][2] is None for e in early)
    ranged = [e for e in seen if e["eta"][0] is not None and 0.25 <= e["work"] < 0.95]
    assert len(ranged) > 10
    for e in ranged:
        lo, mid, hi = e["eta"]
        assert lo <= mid <= hi
    held = [e for e in ranged if e["eta"][0] - 0.5 <= end - e["t"] <= e["eta"][2] + 0.5]
    assert len(held) >= 0.8 * len(ranged), [(e["eta"], end - e["t"]) for e in ranged]
    # the end: full bar, every value counted, a final snapshot without "running"
    assert w.status == "done" and w.fraction == 1.0 and w.values_done == w.values_total == total
    snap = w.snapshot_html()
    assert "running" not in snap and "80 of 80 requested values" in snap
    assert "w29_slow_a, w29_slow_b on 40 slices" in snap and "width:100.0%" in snap


def test_a_cancelled_run_reads_cancelled_with_what_was_kept(monkeypatch):
    s = _session()
    shown = []

    class Handle:  # what IPython's display(..., display_id=True) returns
        def update(self, data, metadata=None, raw=False):
            shown.append(data["text/html"])

    def display(data, metadata=None, raw=False, display_id=None):
        if not raw:  # an object: IPython hands it to its _ipython_display_
            return data._ipython_display_()
        assert display_id is True  # a handle to update
        shown.append(data["text/html"])
        return Handle()

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", display)
    run = run_with_progress(s, "w29_slow_a", "w29_slow_b", display=True)
    w = run.widget
    deadline = time.monotonic() + 30
    while DONE["calls"] < 30 and time.monotonic() < deadline:
        time.sleep(0.005)
    run.cancel()
    report = run.wait(60)
    assert report.cancelled and w.status == "cancelled"
    kept = report.computed
    assert 0 < kept < 2 * SLICES
    # what was kept, not a full bar: the bar stops where the work stopped
    assert w.values_done == kept and w.values_total == 2 * SLICES
    assert w.fraction < 1.0 and abs(w.fraction - kept / (2 * SLICES)) <= 0.10
    assert w.outcome.startswith(f"cancelled: kept {kept} computed value(s)")
    assert f"{report.skipped} not computed (run again to finish)" in w.outcome
    assert w.eta is None and w.eta_low is None and w.field == w.param == ""
    # the displayed output was replaced by the final state (what a saved notebook keeps)
    assert len(shown) == 2 and "running" in shown[0]
    final = shown[-1]
    assert "cancelled: finished values kept" in final and "running" not in final
    assert f"{kept} of {2 * SLICES} requested values" in final
    assert "width:100.0%" not in final and "#9e9e9e" in final  # grey, not a full orange bar
    # the values kept are stored, the rest is computed by the next run
    again = s.compute.apply("w29_slow_a", "w29_slow_b", progress=False)
    assert again.ok and again.reused == kept and again.computed == 2 * SLICES - kept


def test_without_kernel_steps_the_range_waits_for_slices_and_widens():
    from diffract.run.report import ProgressEvent

    w = ProgressWidget(["f"])
    w.callback(ProgressEvent("start", 0, 40, 0, 40, None, None, 0.0, None, 0))
    w.callback(ProgressEvent("chunk", 1, 40, 1, 40, "f", "m:a", 1.0, None, 0))
    assert w.eta is not None and w.eta_low is None  # 1 of 40 slices: no range yet
    w.callback(ProgressEvent("chunk", 4, 40, 4, 40, "f", "m:b", 4.0, None, 0))
    assert w.eta_low == pytest.approx(0.7 * w.eta) and w.eta_high == pytest.approx(1.5 * w.eta)
    assert w.fraction == pytest.approx(0.1) and w.counter_text() == "4 of 40 slices"


def test_a_run_that_ends_while_its_widget_is_being_shown_leaves_the_final_state(monkeypatch):
    # the race seen under load: the run's thread finished between the cell's display (a
    # "running" snapshot) and the handle being kept for finish() to update, so the saved
    # output read "running" for a finished run. Here the run ends inside display() itself.
    w = ProgressWidget(["f"])
    w.status = "running"
    shown = []

    class Handle:
        def update(self, data, metadata=None, raw=False):
            shown.append(data["text/html"])

    def display(data, metadata=None, raw=False, display_id=None):
        shown.append(data["text/html"])
        w.finish(None)  # the run's thread, in the window before the handle is kept
        return Handle()

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", display)
    w._ipython_display_()
    assert w.status == "done"
    assert len(shown) == 2 and "data-status='running'" in shown[0]
    assert "data-status='done'" in shown[-1]
    # a widget shown after its run ended is final at once: nothing kept to update
    shown.clear()
    w._ipython_display_()
    assert len(shown) == 1 and "data-status='done'" in shown[0] and not w._handles

"""Cancel inside a chunk (threads and process pools): the slice in progress finishes, only
complete values are stored, transient intermediates leave nothing half made, a cancel set
before the run computes nothing."""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from diffract import Session
from diffract.kernels import default_registry, make_kernel
from diffract.run.chunks import run_kernels
from diffract.run.report import KernelFailureWarning

#: slow kernels touch a file in this folder when they finish a slice (process pool tests)
MARKER_ENV = "DIFFRACT_TEST_RUNTIME_MARKERS"


SLOW = 0.25


def slow_sum(weights):
    time.sleep(SLOW)
    folder = os.environ.get(MARKER_ENV)
    if folder:
        Path(folder, f"{os.getpid()}-{time.monotonic_ns()}").touch()
    return float(np.asarray(weights, dtype=np.float64).sum())


def _apply(scope, *fields, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        return scope.compute.apply(*fields, progress=False, **kw)


def _model(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return {f"l{i:02d}.weight": rng.normal(size=(6, 4)).astype(np.float32) for i in range(n)}


def _sums(s, field):
    """name -> stored value of ``field`` (None where it is not stored)."""
    out = {}
    for sl in s.models.slices():
        try:
            out[sl.name] = s.results.get(field, sl.uid)
        except Exception:
            out[sl.name] = None
    return out


def _counting_registry(cancel_after, event, delay=0.02, transient_a=False):
    """``a_val`` (per slice, sets ``event`` on its ``cancel_after``-th call) and ``b_val``
    computed from it."""
    calls = {"a": 0}
    lock = threading.Lock()

    def a_val(weights):
        time.sleep(delay)
        with lock:
            calls["a"] += 1
            if calls["a"] == cancel_after:
                event.set()
        return float(np.asarray(weights, dtype=np.float64).sum())

    def b_val(a_val):
        return 2.0 * a_val

    reg = default_registry().copy()
    reg.register(make_kernel(a_val, outputs="a_val", transient=("a_val",) if transient_a else ()))
    reg.register(make_kernel(b_val, outputs="b_val"))
    return reg, calls


def test_cancel_stops_a_one_chunk_run_after_the_slice_in_progress():
    cancel = threading.Event()
    reg, calls = _counting_registry(3, cancel, delay=0.1)
    s = Session(profile="ram", registry=reg)
    w = _model(12)
    s.models.add(w, "m")
    report = _apply(s, "a_val", cancel=cancel)
    assert report.cancelled and report.chunks == 1
    assert report.computed == 3 and report.skipped == 9
    assert calls["a"] == 3  # the kernel ran on no slice after the one in progress
    assert "9 value(s) skipped" in str(report)
    got = {k: v for k, v in _sums(s, "a_val").items() if v is not None}
    assert got == {n: pytest.approx(float(w[n].astype(np.float64).sum())) for n in sorted(w)[:3]}
    # a second run computes only the rest
    again = _apply(s, "a_val")
    assert again.ok and again.reused == 3 and again.computed == 9


def test_cancel_between_kernels_stores_only_complete_values():
    cancel = threading.Event()
    reg, _ = _counting_registry(12, cancel)  # set by the last a_val call: b_val never runs
    s = Session(profile="ram", registry=reg)
    w = _model(12)
    s.models.add(w, "m")
    report = _apply(s, "a_val", "b_val", cancel=cancel)
    assert report.cancelled and report.computed == 12 and report.skipped == 12
    assert all(v is not None for v in _sums(s, "a_val").values())
    assert all(v is None for v in _sums(s, "b_val").values())
    again = _apply(s, "a_val", "b_val")
    assert again.ok and again.computed == 12 and again.reused == 12
    b = _sums(s, "b_val")
    assert b == {n: pytest.approx(2 * float(w[n].astype(np.float64).sum())) for n in w}


def test_cancel_with_a_transient_intermediate_stores_nothing_half_made():
    cancel = threading.Event()
    reg, _ = _counting_registry(4, cancel, transient_a=True)
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(12), "m")
    report = _apply(s, "b_val", cancel=cancel)
    assert report.cancelled and report.computed == 0 and report.skipped == 12
    assert s.results.fields() == []


def test_cancel_with_thread_workers():
    cancel = threading.Event()
    reg, calls = _counting_registry(3, cancel, delay=0.1)
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(12), "m")
    report = _apply(s, "a_val", cancel=cancel, workers=2)
    assert report.cancelled
    assert 3 <= report.computed <= 4 and report.computed + report.skipped == 12
    assert report.computed == calls["a"]


def test_cancel_set_before_the_run_computes_nothing():
    cancel = threading.Event()
    cancel.set()
    reg, calls = _counting_registry(99, threading.Event())
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(5), "m")
    report = _apply(s, "a_val", "b_val", cancel=cancel)
    assert report.cancelled and report.computed == 0 and report.skipped == 10
    assert calls["a"] == 0


def test_run_kernels_stops_when_asked_and_leaves_the_rest_out():
    reg, _ = _counting_registry(99, threading.Event(), delay=0)
    s = Session(profile="ram", registry=reg)
    s.models.add(_model(4), "m")
    chunk = s.models.slices()
    kernels = [reg.kernel("a_val"), reg.kernel("b_val")]
    values = {sl.uid: {"weights": np.ones((6, 4))} for sl in chunk}
    plan_of = {sl.uid: {"a_val", "b_val"} for sl in chunk}
    opts_of = {"a_val": {}, "b_val": {}}
    asked = iter([False, False, True])  # before a_val, before slice 0, before slice 1
    calls = run_kernels(chunk, kernels, plan_of, values, opts_of, cancelled=lambda: next(asked))
    assert calls == {"a_val": 1}
    assert values[chunk[0].uid]["a_val"] == 24.0
    assert all("a_val" not in values[sl.uid] for sl in chunk[1:])
    assert all("b_val" not in v for v in values.values())


def test_cancel_with_a_process_pool_stops_the_running_chunks(tmp_path, monkeypatch):
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv(MARKER_ENV, str(markers))
    reg = default_registry().copy()
    reg.register(make_kernel(slow_sum, outputs="slow_sum"))
    s = Session(profile="ram", registry=reg)
    w = _model(16)  # two chunks of 8 slices, 2 s each
    s.models.add(w, "m")
    cancel = threading.Event()
    done_at_cancel = []

    def watch():  # cancel once a worker has finished its first slice
        deadline = time.monotonic() + 60
        while not any(markers.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        done_at_cancel.append(len(list(markers.iterdir())))
        cancel.set()

    threading.Thread(target=watch, daemon=True).start()
    report = _apply(s, "slow_sum", cancel=cancel, executor="processes", workers=2)
    assert report.cancelled
    # slices the workers finished after the cancel: at most the one in progress in each of
    # the 2 workers (and one each started while the cancel was being set), not whole chunks
    done_after = len(list(markers.iterdir())) - done_at_cancel[0]
    assert done_after <= 2 * 2, (done_at_cancel, done_after)
    assert 1 <= report.computed < 16 and report.computed + report.skipped == 16
    got = {k: v for k, v in _sums(s, "slow_sum").items() if v is not None}
    assert len(got) == report.computed
    for name, v in got.items():
        assert v == pytest.approx(float(w[name].astype(np.float64).sum()))

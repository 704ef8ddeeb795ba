"""Streamed kernels (``vectorized=True, streamed=True``): one call per chunk, each slice
recorded as its result comes, largest slices first; a cancel between results drops the
rest; a result that raises sends the slices left to one call each. The built-in spectrum
kernel streams from its thread pool and gives BLAS its thread count back afterwards."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import diffract
from _ui_helpers import mlp
from diffract import KernelDefinitionError, Session

CALLS: list[int] = []


@diffract.kernel(outputs="streamed_max", min_ndim=2, replace=True, vectorized=True, streamed=True)
def streamed_max(weights):
    CALLS.append(len(weights))
    for w in weights:
        time.sleep(0.05)
        yield float(np.abs(w).max())


@diffract.kernel(outputs="streamed_picky", min_ndim=2, replace=True, vectorized=True, streamed=True)
def streamed_picky(weights):
    CALLS.append(len(weights))
    for w in weights:
        if w.shape[0] == 7:  # this one slice fails; the others still get values
            raise ValueError("seven rows")
        yield float(w.sum())


def _model():
    # sizes differ, so "largest first" is visible in the order of the events
    return {f"l{i}": np.random.default_rng(i).standard_normal((4 + 2 * i, 8)) for i in range(5)}


def test_one_call_per_chunk_each_slice_as_it_comes_largest_first():
    CALLS.clear()
    s = Session("ram")
    s.models.add(_model(), "m")
    events = []
    report = s.compute.apply("streamed_max", progress=events.append)
    assert report.computed == 5 and CALLS == [5]
    done = [ev for ev in events if ev.stage == "kernel" and ev.kernel == "streamed_max"]
    # a start and an end event per slice (not one pair per call), counting up
    assert [ev.kernel_done for ev in done[1::2]] == [1, 2, 3, 4, 5]
    assert [ev.param for ev in done[0::2]] == [ev.param for ev in done[1::2]]
    assert done[0].param == "m:l4"  # the largest slice starts first
    for name, w in _model().items():
        assert s.results.get("streamed_max", name, "m") == pytest.approx(np.abs(w).max())


def test_a_result_that_raises_isolates_its_slice():
    CALLS.clear()
    s = Session("ram")
    w = {"a": np.ones((7, 3)), "b": np.ones((9, 3)), "c": np.ones((5, 3))}
    s.models.add(w, "m")
    report = s.compute.apply("streamed_picky", progress=False)
    assert CALLS[0] == 3 and len(CALLS) > 1  # one streamed call, then one call per slice left
    assert report.computed == 2 and len(report.failures) == 1
    assert "seven rows" in str(report.failures[0])
    assert s.results.get("streamed_picky", "b", "m") == 27.0
    assert s.results.get("streamed_picky", "c", "m") == 15.0


def test_cancel_between_results_drops_the_rest():
    s = Session("ram")
    s.models.add(mlp(0, layers=12), "m")
    seen = threading.Event()

    def on_event(ev):
        if ev.stage == "kernel" and ev.kernel == "streamed_max" and ev.kernel_done == 2:
            seen.set()
            s.compute.cancel()

    report = s.compute.apply("streamed_max", progress=on_event)
    assert seen.is_set()
    assert 2 <= report.computed < 12 and report.skipped > 0


def test_streamed_needs_vectorized():
    def f(weights):
        return weights

    with pytest.raises(KernelDefinitionError, match="streamed=True needs vectorized=True"):
        diffract.kernels.make_kernel(f, streamed=True)


def blas() -> list[int]:
    """Thread counts of the loaded BLAS libraries (OpenMP ones, e.g. torch's, are not
    limited by the spectrum). scipy.linalg is loaded first: the spectrum's float32 checks
    import it, and its own OpenBLAS would otherwise appear between two calls (the test
    failed when run alone)."""
    import scipy.linalg  # noqa: F401
    import threadpoolctl

    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_the_spectrum_streams_and_blas_gets_its_threads_back():
    before = blas()
    s = Session("ram")
    s.models.add(mlp(0, layers=8, width=48), "m")
    events = []
    s.compute.apply("stable_rank", progress=events.append, spectrum_threads=2)
    spectrum = [ev for ev in events if ev.stage == "kernel" and ev.kernel == "weights_spectrum"]
    assert [ev.kernel_done for ev in spectrum[1::2]] == list(range(1, 9))
    assert blas() == before
    for i in range(8):
        w = s.models.weights(f"layers.{i}.weight", "m").astype(np.float64)
        sv = np.linalg.svd(w, compute_uv=False)
        assert s.results.get("stable_rank", f"layers.{i}.weight", "m") == pytest.approx(
            float(np.sum(sv**2) / sv[0] ** 2), rel=1e-6
        )


def test_overlapping_streams_released_out_of_order_restore_blas():
    """Two streams at once (a tracker's run and the user's): the limit is held while either
    needs it and the original thread counts come back only when both are done."""
    from diffract.kernels import _linalg

    counts = blas
    before = counts()
    mats = [np.random.default_rng(i).standard_normal((64, 64)) for i in range(4)]
    first = _linalg.stream_parallel(np.linalg.svd, mats, 2)
    second = _linalg.stream_parallel(np.linalg.svd, mats, 2)
    assert all(n == 1 for n in counts())
    list(first)  # the first started is released first
    assert all(n == 1 for n in counts())  # the second still runs with one thread each
    list(second)
    assert counts() == before

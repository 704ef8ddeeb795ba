"""The one BLAS limiter (``diffract._vocab.threads.BLAS_LIMIT``): counted holds, so a run whose
thread workers finish inside another holder's limit leaves it in force; the workers of a chunk
run with one BLAS thread; a forked child starts with no holds."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from _ui_helpers import mlp
from diffract import Session
from diffract._vocab.threads import BLAS_LIMIT, BlasLimit
from diffract.kernels import default_registry, make_kernel


def blas() -> list[int]:
    import scipy.linalg  # noqa: F401  (its own BLAS, loaded before counting)

    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def two_blas_threads():
    """BLAS at two threads for the test (OMP_NUM_THREADS=1 would hide a limit)."""
    blas()
    with threadpool_limits(limits=2, user_api="blas"):
        assert any(n == 2 for n in blas()), blas()
        yield blas()


def test_holds_are_counted_and_the_last_release_restores(two_blas_threads):
    limit = BlasLimit()
    limit.hold()
    with limit:
        assert all(n == 1 for n in blas()) and limit.holds == 2
    assert all(n == 1 for n in blas())  # the first holder still needs it
    limit.release()
    assert blas() == two_blas_threads and limit.holds == 0
    with pytest.raises(RuntimeError, match="released more often than held"):
        limit.release()


def test_a_hold_taken_during_a_chunk_outlives_the_chunk(two_blas_threads):
    """Another holder (a tracker's run, a spectrum stream) starts while a chunk's workers run
    and ends after it: the chunk's end must not restore BLAS under it, and its own end must
    restore the threads found before either (an uncounted limiter does both wrong)."""
    seen: list[list[int]] = []
    first = threading.Lock()  # two workers start at once: only one of them takes the hold

    def threads_seen(weights):
        """The BLAS thread counts while the kernel runs (on a chunk's worker thread)."""
        if first.acquire(blocking=False):
            BLAS_LIMIT.hold()  # the other holder starts mid-run
        seen.append(blas())
        return float(np.asarray(weights).sum())

    reg = default_registry().copy()
    reg.register(make_kernel(threads_seen, outputs="threads_seen"))
    s = Session(profile="ram", registry=reg, workers=2)
    s.models.add(mlp(0), model_id="m")
    try:
        report = s.compute.apply("threads_seen", progress=False)
        assert report.ok and report.computed == len(mlp(0))
        assert seen and all(set(c) == {1} for c in seen)  # the workers: one thread each
        assert all(n == 1 for n in blas())  # the chunk's end left the other hold in force
    finally:
        BLAS_LIMIT.release()
    assert blas() == two_blas_threads
    s.close()


def _holds_in_child(queue) -> None:
    queue.put(BLAS_LIMIT.holds)


def test_a_forked_child_starts_without_the_parents_holds():
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    with BLAS_LIMIT:
        assert BLAS_LIMIT.holds >= 1
        p = ctx.Process(target=_holds_in_child, args=(queue,))
        p.start()
        held_in_child = queue.get(timeout=60)
        p.join(60)
    assert held_in_child == 0 and p.exitcode == 0

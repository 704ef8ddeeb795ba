"""The spectrum's helpers around the eigensolvers: the kept thread pool of ``run_parallel``
(order, errors in their slot, BLAS limited inside, no deadlock when nested) and the
NaN / Inf check on the Gram diagonal that replaced the full scan of the weights."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from diffract.kernels import _linalg


def blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_results_in_order_and_errors_in_their_slot():
    def f(x):
        if x == 3:
            raise RuntimeError("three")
        return x * x

    out = _linalg.run_parallel(f, list(range(6)), 2)
    assert [o for i, o in enumerate(out) if i != 3] == [0, 1, 4, 16, 25]
    assert isinstance(out[3], RuntimeError) and str(out[3]) == "three"


def test_pool_is_kept_and_blas_limited_inside():
    before = blas_threads()
    seen = _linalg.run_parallel(lambda _: blas_threads(), [0, 1, 2], 2)
    assert all(set(s) == {1} for s in seen)
    assert blas_threads() == before  # restored
    first = _linalg._pool(2)
    _linalg.run_parallel(abs, [-1, -2], 2)
    assert _linalg._pool(2) is first


def test_nested_call_runs_in_turn():
    def inner(x):
        return _linalg.run_parallel(lambda y: x + y, [10, 20], 2)

    assert _linalg.run_parallel(inner, [1, 2, 3], 2) == [[11, 21], [12, 22], [13, 23]]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_one_bad_entry_is_named(bad, precision):
    w = np.random.default_rng(0).standard_normal((50, 40)).astype(np.float32)
    w[17, 33] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        _linalg.matrix_svals(w, precision)
    with pytest.raises(ValueError, match="NaN or infinite"):
        _linalg.slice_svals(np.stack([w, w], axis=-1), precision)

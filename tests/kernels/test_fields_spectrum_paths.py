"""The spectrum's precision paths: when the float32 path is taken it is exact to
``recheck_rtol`` on every singular value; ill-conditioned (trained-like) and rank-deficient
matrices skip the float32 eigensolver and go to float64 / the SVD; the calibrated float32
error model bounds the measured errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from diffract.kernels import _linalg


def prescribed(s, n, seed=0):
    rng = np.random.default_rng(seed)
    m = len(s)
    u, _ = np.linalg.qr(rng.standard_normal((n, m)))
    v, _ = np.linalg.qr(rng.standard_normal((m, m)))
    return (u * np.asarray(s, dtype=np.float64)) @ v.T


def _count_eigh(monkeypatch):
    calls = []
    orig = _linalg._eigvalsh

    def spy(g, overwrite=False):
        calls.append(g.dtype)
        return orig(g, overwrite)

    monkeypatch.setattr(_linalg, "_eigvalsh", spy)
    return calls


@pytest.mark.parametrize("shape", [(640, 64), (64, 640), (300, 200)])
def test_float32_path_taken_and_exact_when_well_conditioned(fs, shape):
    m = min(shape)
    s = np.linspace(1.0, 1.3, m)[::-1]
    w = prescribed(s, max(shape), seed=3).astype(np.float32)
    if shape[0] < shape[1]:
        w = np.ascontiguousarray(w.T)
    r = fs.run_fields(
        {"w": w}, ["weights_svals", "spectrum_path", "matrix_rank", "min_weights_sval"]
    )["w"]
    assert r["spectrum_path"] == "float32"
    want = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(r["weights_svals"], want[::-1], rtol=1e-5)  # ascending
    assert r["matrix_rank"] == m
    assert abs(r["min_weights_sval"] - want[-1]) <= 1e-5 * want[-1]


def test_ill_conditioned_skips_float32_eigensolver(monkeypatch):
    s = np.geomspace(10.0, 0.01, 96)  # condition number of the Gram 1e6
    w = prescribed(s, 200).astype(np.float32)
    calls = _count_eigh(monkeypatch)
    svals, path = _linalg.matrix_svals(w, "float32")
    assert path == "float64"
    assert calls == [np.dtype(np.float64)]  # no wasted float32 eigensolver
    want = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(svals, want, rtol=1e-9)


@pytest.mark.parametrize("shape", [(2000, 50), (300, 200), (200, 300)])
def test_gram_product_made_once_whatever_the_path(monkeypatch, shape):
    rng = np.random.default_rng(0)
    m = min(shape)
    w = (rng.standard_normal(shape) * np.geomspace(1, 1e-3, shape[1])).astype(np.float32)
    grams = []
    orig = _linalg._gram
    monkeypatch.setattr(_linalg, "_gram", lambda a: grams.append(a.dtype) or orig(a))
    calls = _count_eigh(monkeypatch)
    svals, path = _linalg.matrix_svals(w, "float32")
    assert path == "float64" and calls == [np.dtype(np.float64)]
    assert grams == [np.dtype(np.float64)]
    want = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    assert svals.shape == (m,)
    np.testing.assert_allclose(svals, want, rtol=1e-9)


def test_rank_type_fields_recheck_rank_deficient(fs):
    rng = np.random.default_rng(5)
    b = rng.standard_normal((120, 30)).astype(np.float32)
    w = np.concatenate([b, b], axis=1)  # duplicated columns: rank 30 exactly, also in float32
    r = fs.run_fields({"w": w}, ["matrix_rank", "rank_loss", "spectrum_path", "weak_rank_loss"])[
        "w"
    ]
    assert r["spectrum_path"] == "svd"
    assert r["matrix_rank"] == np.linalg.matrix_rank(w.astype(np.float64)) == 30
    assert r["rank_loss"] == 30 and r["weak_rank_loss"] == 30


def test_no_float32_spectrum_for_large_matrices():
    # the float32 eigenvalue error grows like sqrt(M): at rtol 1e-5 on singular values no
    # condition number qualifies beyond M ~ 1750, and only ~2 at GPT-2's M = 768
    assert _linalg.float32_max_condition(2048, 1e-5) == 0.0
    assert 1.0 < _linalg.float32_max_condition(768, 1e-5) < 3.0
    assert _linalg.float32_max_condition(64, 1e-5) > 10.0


@pytest.mark.parametrize("gram", ["float32 product", "float64 product rounded"])
@pytest.mark.parametrize("m,n", [(64, 100), (256, 400), (384, 1536), (768, 1240)])
def test_float32_error_model_bounds_measured_errors(m, n, gram):
    """The bound holds for the float32 eigensolver on a float32 Gram product and on the
    rounding of the float64 one (what the float32 path runs)."""
    rng = np.random.default_rng(m + n)
    a = (rng.standard_normal((n, m)) * 0.02).astype(np.float32)
    a64 = a.astype(np.float64)
    g64 = a64.T @ a64
    g32 = a.T @ a if gram == "float32 product" else g64.astype(np.float32)
    l32 = sla.eigh(g32, eigvals_only=True, driver="evd").astype(np.float64)
    l64 = sla.eigh(g64, eigvals_only=True, driver="evd")
    assert np.all(np.abs(l32 - l64) <= _linalg.float32_error_bound(l32, m))


def test_float32_path_never_worse_than_rtol():
    """Where the float32 path is accepted the singular values meet recheck_rtol (the old
    eps32 * lambda_max <= rtol * lambda_min rule let 2e-5 through at M = 1024)."""
    rng = np.random.default_rng(0)
    for m, n in [(64, 90), (128, 400), (1024, 1700)]:
        w = (rng.standard_normal((n, m)) * 0.02).astype(np.float32)
        s, path = _linalg.matrix_svals(w, "float32", 1e-5)
        want = np.linalg.svd(w.astype(np.float64), compute_uv=False)
        assert np.max(np.abs(s - want) / want) <= 1e-5, (m, n, path)

"""Weights near the ends of float64's range (issue 28, point 17): the singular values and
the norms of W * 1e-300 and W * 1e300 are those of W (numpy.linalg) times the scale, not 0
or a NaN error; fields whose values themselves leave float64's range (the ESD c s^2) fail
with that cause named; ordinary matrices take the unscaled path bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _engine_fields import assert_failed
from diffract.kernels import _linalg

RNG = np.random.default_rng(12)
W = RNG.standard_normal((40, 24))
S = np.linalg.svd(W, compute_uv=False)  # descending
CONV = RNG.standard_normal((6, 5, 3, 3))

FIELDS = [
    "weights_svals",
    "spectral_norm",
    "l2_norm",
    "frob_norm",
    "nuclear_norm",
    "stable_rank",
    "matrix_rank",
    "effective_rank",
    "weights_l2_norm",
    "max_weights_sval",
    "min_weights_sval",
    "layer_log_norm",
    "layer_log_spectral_norm",
    "weights_std",
]


@pytest.mark.parametrize("scale", [1e-300, 1e300, 1e-200, 1e200])
def test_spectral_norms_at_extreme_scales(fs, scale):
    r = fs.run_fields({"w": W * scale}, FIELDS)["w"]
    np.testing.assert_allclose(r["weights_svals"], np.sort(S) * scale, rtol=1e-5)
    assert math.isclose(r["spectral_norm"], S[0] * scale, rel_tol=1e-6)
    assert r["l2_norm"] == r["max_weights_sval"] == r["spectral_norm"]
    assert math.isclose(r["min_weights_sval"], S[-1] * scale, rel_tol=1e-5)
    assert math.isclose(r["frob_norm"], np.linalg.norm(W) * scale, rel_tol=1e-6)
    assert math.isclose(r["weights_l2_norm"], np.linalg.norm(W) * scale, rel_tol=1e-12)
    assert math.isclose(r["nuclear_norm"], S.sum() * scale, rel_tol=1e-6)
    assert math.isclose(r["stable_rank"], np.sum(S**2) / S[0] ** 2, rel_tol=1e-6)
    assert r["matrix_rank"] == np.linalg.matrix_rank(W) == 24
    p = S / S.sum()
    assert math.isclose(r["effective_rank"], math.exp(-np.sum(p * np.log(p))), rel_tol=1e-6)
    assert math.isclose(r["weights_std"], np.std(W) * scale, rel_tol=1e-12)
    want = 2 * (math.log10(np.linalg.norm(W)) + math.log10(scale))
    assert math.isclose(r["layer_log_norm"], want, rel_tol=1e-9)


@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_conv_kernel_positions_at_extreme_scales(fs, scale):
    got = fs.field(CONV * scale, "weights_svals")
    want = np.linalg.svd(_linalg.kernel_matrices(CONV), compute_uv=False).ravel() * scale
    np.testing.assert_allclose(got, np.sort(want), rtol=1e-5)


@pytest.mark.parametrize(
    "scale,cause", [(1e-300, "underflow to 0 in float64"), (1e300, "overflow float64")]
)
def test_esd_out_of_range_names_the_cause(fs, scale, cause):
    r = fs.run_fields({"w": W * scale}, ["esd", "esd_max", "hard_rank"])["w"]
    for f in ("esd", "esd_max", "hard_rank"):
        assert_failed(r[f], "ValueError", match=cause)
        assert "all-zero" not in r[f].error and "NaN" not in r[f].error


def test_non_finite_weights_still_named():
    w = W.copy()
    w[2, 3] = np.inf
    with pytest.raises(ValueError, match="NaN or infinite"):
        _linalg.matrix_svals(w)


def test_ordinary_matrices_take_the_unscaled_path_bit_for_bit():
    for w in (W, W * 1e-100, W * 1e100, np.zeros((5, 4))):
        assert _linalg.gram_exponent(np.asarray(w, dtype=np.float64)) == 0
    for prec in ("float32", "float64"):
        a, pa = _linalg.matrix_svals(W, prec)
        b, pb = _linalg._matrix_svals(np.ascontiguousarray(W), prec, 1e-5)
        assert pa == pb
        np.testing.assert_array_equal(a, b)
    # a scaled matrix is decomposed at 2^-e W, exactly: the same bits times 2^e
    e = _linalg.gram_exponent(W * 2.0**600)
    assert e == int(np.frexp(np.max(np.abs(W)))[1]) + 600
    s_big, _ = _linalg.matrix_svals(W * 2.0**600, "float64")
    s_ref, _ = _linalg.matrix_svals(W * 2.0 ** (600 - e), "float64")
    np.testing.assert_array_equal(s_big, np.ldexp(s_ref, e))


@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_device_path_scales_too(scale):
    from diffract.kernels.device import gram_svals

    got = gram_svals(_linalg.kernel_matrices(CONV * scale), "torch:cpu")
    want = np.linalg.svd(_linalg.kernel_matrices(CONV), compute_uv=False) * scale
    np.testing.assert_allclose(got, want, rtol=1e-9)

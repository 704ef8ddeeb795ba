"""Property tests (Hypothesis): invariance to transposition and orthogonal rotations, and
scaling laws of the spectral fields."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

INVARIANT = [
    "weights_svals",
    "frob_norm",
    "spectral_norm",
    "nuclear_norm",
    "stable_rank",
    "hard_rank",
    "effective_rank",
    "matrix_entropy",
    "pl_alpha",
    "pl_ks",
    "pl_num_spikes",
    "esd",
    "greater_dim",
    "lower_dim",
    "weights_std",
]
# mp_esd_max is left out: Diffract's MP fit re-estimates the bulk from the ESD of a seeded
# permutation of the entries, and the same permutation of W and of W^T differ
SET = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def matrices(draw):
    n = draw(st.integers(24, 60))
    m = draw(st.integers(24, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # heavy-tailed spectrum so the fits are well defined
    k = min(n, m)
    u = np.linalg.qr(rng.standard_normal((n, k)))[0]
    v = np.linalg.qr(rng.standard_normal((m, k)))[0]
    s = (1.0 - rng.random(k)) ** (-1.0 / 2.0) * draw(st.floats(0.01, 100.0))
    return (u * s) @ v.T


def _close(a, b, rtol):
    if isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12 * float(np.max(np.abs(a))))
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=rtol), (a, b)
    else:
        assert a == b, (a, b)


@SET
@given(matrices())
def test_transpose_invariance(fs, w):
    r = fs.run_fields({"a": w, "b": w.T.copy()}, INVARIANT, precision="float64")
    a, b = r["a"], r["b"]
    for f in INVARIANT:
        _close(a[f], b[f], 1e-7)


@SET
@given(matrices(), st.integers(0, 1000))
def test_orthogonal_rotation_invariance(fs, w, seed):
    rng = np.random.default_rng(seed)
    q1 = np.linalg.qr(rng.standard_normal((w.shape[0],) * 2))[0]
    q2 = np.linalg.qr(rng.standard_normal((w.shape[1],) * 2))[0]
    fields = [f for f in INVARIANT if f != "weights_std"]
    r = fs.run_fields({"a": w, "b": q1 @ w @ q2}, fields, precision="float64")
    a, b = r["a"], r["b"]
    for f in fields:
        _close(a[f], b[f], 1e-6)


@SET
@given(matrices(), st.floats(0.05, 20.0))
def test_scaling_laws(fs, w, c):
    fields = [
        "frob_norm",
        "spectral_norm",
        "nuclear_norm",
        "esd",
        "pl_esd_xmin",
        "stable_rank",
        "pl_alpha",
        "pl_ks",
        "hard_rank",
        "matrix_entropy",
        "effective_rank",
        "pl_alpha_weighted",
        "layer_log_norm",
        "pl_log_alpha_norm",
    ]
    # fit_evals_thresh is an absolute cut (WeightWatcher's EVALS_THRESH) and so not scale-free
    r = fs.run_fields({"a": w, "b": c * w}, fields, precision="float64", fit_evals_thresh=0.0)
    a, b = r["a"], r["b"]
    for f in ("frob_norm", "spectral_norm", "nuclear_norm"):
        assert math.isclose(b[f], c * a[f], rel_tol=1e-9)
    np.testing.assert_allclose(b["esd"], c * c * a["esd"], rtol=1e-7, atol=1e-12 * b["esd"][-1])
    for f in ("stable_rank", "pl_alpha", "pl_ks", "matrix_entropy", "effective_rank"):
        assert math.isclose(b[f], a[f], rel_tol=1e-6), f
    assert b["hard_rank"] == a["hard_rank"]
    assert math.isclose(b["pl_esd_xmin"], c * c * a["pl_esd_xmin"], rel_tol=1e-7)
    # alpha * log10(lambda_max) shifts by alpha * log10(c^2)
    assert math.isclose(
        b["pl_alpha_weighted"],
        a["pl_alpha_weighted"] + a["pl_alpha"] * math.log10(c * c),
        rel_tol=1e-6,
        abs_tol=1e-8,
    )
    assert math.isclose(
        b["layer_log_norm"], a["layer_log_norm"] + 2 * math.log10(c), rel_tol=1e-9, abs_tol=1e-9
    )
    assert math.isclose(
        b["pl_log_alpha_norm"],
        a["pl_log_alpha_norm"] + a["pl_alpha"] * math.log10(c * c),
        rel_tol=1e-6,
        abs_tol=1e-8,
    )


@SET
@given(matrices())
def test_float32_path_close_to_float64(fs, w):
    w32 = w.astype(np.float32)
    fields = ["weights_svals", "pl_alpha", "pl_ks", "stable_rank", "spectrum_path"]
    a = fs.run_fields({"w": w32}, fields, precision="float32")["w"]
    b = fs.run_fields({"w": w32}, fields, precision="float64")["w"]
    np.testing.assert_allclose(a["weights_svals"], b["weights_svals"], rtol=1e-5)
    if a["spectrum_path"] == "float32":
        assert math.isclose(a["pl_alpha"], b["pl_alpha"], rel_tol=1e-4)


@SET
@given(
    st.integers(2, 6), st.integers(2, 6), st.integers(1, 3), st.integers(1, 3), st.integers(0, 99)
)
def test_conv_pools_kernel_positions(fs, o, i, kh, kw, seed):
    w = np.random.default_rng(seed).standard_normal((o, i, kh, kw))
    r = fs.run_fields({"c": w}, ["weights_svals", "num_evals", "frob_norm"], precision="float64")[
        "c"
    ]
    want = np.concatenate(
        [np.linalg.svd(w[:, :, a, b], compute_uv=False) for a in range(kh) for b in range(kw)]
    )
    np.testing.assert_allclose(r["weights_svals"], np.sort(want), rtol=1e-7, atol=1e-12)
    assert r["num_evals"] == min(o, i) * kh * kw == r["weights_svals"].size
    assert math.isclose(r["frob_norm"], float(np.linalg.norm(w)), rel_tol=1e-9)

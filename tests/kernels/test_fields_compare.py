"""Across-model fields against a reference model, and the per-model aggregates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from _engine_fields import assert_failed


def _models(seed=0):
    rng = np.random.default_rng(seed)
    base = {
        "a": rng.standard_normal((30, 12)),
        "c": rng.standard_normal((6, 4, 3, 3)),
        "b": rng.standard_normal(7),
    }
    tuned = {k: v + 0.05 * rng.standard_normal(v.shape) for k, v in base.items()}
    return base, tuned


def test_checkpoint_comparison_fields(fs):
    base, tuned = _models()
    per = fs.run(
        {"base": base, "tuned": tuned, "same": {k: v.copy() for k, v in base.items()}},
        [
            "delta_frob_norm",
            "relative_change",
            "weights_cosine",
            "pl_alpha_drift",
            "spectral_norm_drift",
            "esd_w1_drift",
            "pl_alpha",
            "spectral_norm",
            "esd",
        ],
        reference="base",
        precision="float64",
    ).values
    t, b = per["tuned"]["a"], per["base"]["a"]
    d = tuned["a"] - base["a"]
    assert math.isclose(t["delta_frob_norm"], np.linalg.norm(d), rel_tol=1e-12)
    assert math.isclose(
        t["relative_change"], np.linalg.norm(d) / np.linalg.norm(base["a"]), rel_tol=1e-12
    )
    cos = np.sum(tuned["a"] * base["a"]) / (np.linalg.norm(tuned["a"]) * np.linalg.norm(base["a"]))
    assert math.isclose(t["weights_cosine"], cos, rel_tol=1e-12)
    assert math.isclose(
        t["pl_alpha_drift"], t["pl_alpha"] - b["pl_alpha"], rel_tol=1e-12, abs_tol=1e-15
    )
    assert math.isclose(
        t["spectral_norm_drift"], t["spectral_norm"] / b["spectral_norm"] - 1, rel_tol=1e-12
    )
    assert math.isclose(
        t["esd_w1_drift"], stats.wasserstein_distance(t["esd"], b["esd"]), rel_tol=1e-12
    )
    # 1-D slices have weight deltas too
    assert math.isclose(
        per["tuned"]["b"]["delta_frob_norm"], np.linalg.norm(tuned["b"] - base["b"])
    )
    # against an identical copy (a model is not compared with itself)
    assert per["same"]["a"]["delta_frob_norm"] == 0.0 and math.isclose(
        per["same"]["a"]["weights_cosine"], 1.0
    )


def test_singular_vector_overlaps(fs):
    base, tuned = _models(1)
    fields = [
        "l_overlap",
        "r_overlap",
        "l_agreement",
        "r_agreement",
        "max_l_agreement",
        "max_r_agreement",
        "avg_l_agreement",
        "avg_r_agreement",
        "avg_max_l_agreement",
        "avg_max_r_agreement",
    ]
    same = {k: v.copy() for k, v in base.items()}
    per = fs.run(
        {"base": base, "tuned": tuned, "same": same}, fields, reference="base"
    ).values  # (the overlaps run a float64 SVD: they take no precision option)
    t = per["tuned"]["a"]
    # singular vectors in ascending singular-value order (Diffract's): numpy's reversed
    ub = np.linalg.svd(base["a"], full_matrices=False)[0][:, ::-1]
    ut = np.linalg.svd(tuned["a"], full_matrices=False)[0][:, ::-1]
    # rows: the reference's vectors (Diffract's first model of the pair), columns: the model's
    ov = np.abs(ub.T @ ut)
    np.testing.assert_allclose(t["l_overlap"], ov, atol=1e-10)
    np.testing.assert_allclose(t["l_agreement"], np.diag(ov), atol=1e-10)
    np.testing.assert_allclose(t["max_l_agreement"], ov.max(axis=1), atol=1e-10)
    assert math.isclose(t["avg_l_agreement"], np.diag(ov).mean(), rel_tol=1e-9)
    assert math.isclose(t["avg_max_l_agreement"], ov.max(axis=1).mean(), rel_tol=1e-9)
    assert t["r_overlap"].shape == (12, 12) and t["r_agreement"].shape == (12,)
    assert t["max_r_agreement"].shape == (12,)
    assert 0 < t["avg_r_agreement"] <= t["avg_max_r_agreement"] <= 1 + 1e-12
    # an identical copy: identity overlaps
    s = per["same"]["a"]
    np.testing.assert_allclose(s["l_agreement"], 1.0, atol=1e-10)
    assert math.isclose(s["avg_max_r_agreement"], 1.0, rel_tol=1e-10)
    # conv: per kernel position
    assert per["tuned"]["c"]["l_overlap"].shape == (9, 4, 4)


def test_shape_mismatch_fails_with_reason(fs):
    base, tuned = _models()
    tuned["a"] = tuned["a"][:, :10]
    run = fs.run({"base": base, "tuned": tuned}, ["delta_frob_norm"], reference="base")
    assert_failed(run.values["tuned"]["a"]["delta_frob_norm"], "ValueError", match="shapes differ")
    # the report names that failure, and no other
    assert [(f.name, f.field) for f in run.report.failures] == [("a", "delta_frob_norm")]


def test_model_level_aggregates(fs):
    base, _ = _models(2)
    fields = [
        "log_norm",
        "log_spectral_norm",
        "log_prod_frob_norm",
        "log_prod_spectral_norm",
        "param_norm",
        "model_pl_alpha_norm",
        "model_tpl_alpha_norm",
        "model_pl_alpha",
        "model_pl_alpha_weighted",
        "model_stable_rank",
        "model_mp_soft_rank",
        "frob_norm",
        "spectral_norm",
        "pl_alpha",
        "pl_log_alpha_norm",
        "tpl_log_alpha_norm",
        "pl_alpha_weighted",
        "stable_rank",
        "mp_soft_rank",
        "weights_l2_norm",
    ]
    r = fs.run_fields(base, fields, precision="float64")
    mats = ["a", "c"]
    agg = r[None]
    fn = [r[k]["frob_norm"] for k in mats]
    sn = [r[k]["spectral_norm"] for k in mats]
    assert math.isclose(agg["log_norm"], np.mean([2 * math.log10(x) for x in fn]), rel_tol=1e-12)
    assert math.isclose(
        agg["log_spectral_norm"], np.mean([2 * math.log10(x) for x in sn]), rel_tol=1e-12
    )
    assert math.isclose(agg["log_prod_frob_norm"], sum(math.log10(x) for x in fn), rel_tol=1e-12)
    assert math.isclose(
        agg["log_prod_spectral_norm"], sum(math.log10(x) for x in sn), rel_tol=1e-12
    )
    # Diffract's param_norm: the sum of the squared norms of the matrices (the bias "b" out)
    entries = np.concatenate([v.ravel() for v in base.values() if v.ndim >= 2])
    assert math.isclose(agg["param_norm"], np.dot(entries, entries), rel_tol=1e-12)
    for m, f in [
        ("model_pl_alpha_norm", "pl_log_alpha_norm"),
        ("model_tpl_alpha_norm", "tpl_log_alpha_norm"),
        ("model_pl_alpha", "pl_alpha"),
        ("model_pl_alpha_weighted", "pl_alpha_weighted"),
        ("model_stable_rank", "stable_rank"),
        ("model_mp_soft_rank", "mp_soft_rank"),
    ]:
        assert math.isclose(agg[m], np.mean([r[k][f] for k in mats]), rel_tol=1e-12), m


def test_model_level_skips_failed_slices():
    from diffract.kernels.model import model_pl_alpha

    assert model_pl_alpha([2.0, None, float("nan"), 4.0]) == 3.0
    with pytest.raises(ValueError, match="no slice"):
        model_pl_alpha([None])

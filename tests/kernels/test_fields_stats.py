"""Distribution statistics of the entries, and shape fields."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from _engine_fields import assert_failed

FIELDS = [
    "weights_mean",
    "weights_std",
    "weights_skew",
    "weights_kurtosis",
    "weights_sparsity",
    "weights_outlier_fraction",
    "weights_max_abs",
    "weights_min",
    "weights_max",
    "weights_l2_norm",
    "num_params",
]


def test_statistics_match_scipy(fs):
    rng = np.random.default_rng(0)
    w = rng.standard_t(4, size=(50, 40)).astype(np.float32)
    w[0, :10] = 0
    r = fs.run_fields({"w": w}, FIELDS)["w"]
    x = w.astype(np.float64).ravel()
    assert math.isclose(r["weights_mean"], x.mean(), rel_tol=1e-12)
    assert math.isclose(r["weights_std"], x.std(), rel_tol=1e-12)
    assert math.isclose(r["weights_skew"], stats.skew(x), rel_tol=1e-9)
    assert math.isclose(r["weights_kurtosis"], stats.kurtosis(x), rel_tol=1e-9)
    assert math.isclose(r["weights_sparsity"], np.mean(x == 0))
    assert math.isclose(r["weights_outlier_fraction"], np.mean(np.abs(x - x.mean()) > 3 * x.std()))
    assert (
        r["weights_max_abs"] == np.abs(x).max()
        and r["weights_min"] == x.min()
        and r["weights_max"] == x.max()
    )
    assert math.isclose(r["weights_l2_norm"], np.linalg.norm(x), rel_tol=1e-12)
    assert r["num_params"] == 2000


def test_statistics_options_and_gaussian_values(fs):
    x = np.random.default_rng(1).standard_normal(200000)
    r = fs.run_fields({"b": x}, FIELDS, sparsity_atol=0.5, outlier_sigmas=2.0)["b"]
    assert abs(r["weights_skew"]) < 0.02 and abs(r["weights_kurtosis"]) < 0.05
    assert abs(r["weights_sparsity"] - (stats.norm.cdf(0.5) - stats.norm.cdf(-0.5))) < 0.005
    assert abs(r["weights_outlier_fraction"] - 2 * stats.norm.sf(2.0)) < 0.003


def test_constant_slice(fs):
    r = fs.run_fields(
        {"c": np.full((4, 4), 2.0)},
        ["weights_skew", "weights_kurtosis", "weights_outlier_fraction"],
    )["c"]
    assert_failed(r["weights_skew"], "ValueError")
    assert_failed(r["weights_kurtosis"], "ValueError")
    assert r["weights_outlier_fraction"] == 0.0


@pytest.mark.parametrize(
    "shape,dims",
    [((7, 3), (7, 3, 1)), ((3, 7), (7, 3, 1)), ((5, 8, 3, 3), (8, 5, 9)), ((8, 5, 4), (8, 5, 4))],
)
def test_shape_fields(fs, shape, dims):
    r = fs.run_fields(
        {"w": np.ones(shape)},
        ["greater_dim", "lower_dim", "receptive_field", "aspect_ratio", "num_evals"],
    )["w"]
    assert (r["greater_dim"], r["lower_dim"], r["receptive_field"]) == dims
    assert r["aspect_ratio"] == dims[0] / dims[1] and r["num_evals"] == dims[1] * dims[2]

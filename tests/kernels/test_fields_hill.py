"""The Hill-estimator fields (``hill_alpha``, ``hill_esd_xmin``, ``hill_k``, ``hill_ks``,
``alpha_mid``, ``alpha_peak``, ``alpha_peak_esd_xmin``, ``alpha_peak_ks``) in closed form
(a geometric spectrum), on Pareto samples of known exponent, against a loop written from
AlphaPruning's published estimator, and through a session against numpy.linalg; and the
maps from alpha to sparsity ratios (AlphaPruning) and learning-rate factors (TempBalance)
on constructed alpha vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diffract import Session
from diffract.kernels.hill import (
    alpha_lr_factors,
    alpha_mid,
    alpha_peak_fit,
    alpha_sparsity_ratios,
    hill_alpha_of,
    hill_fit,
)


def test_hill_of_a_geometric_spectrum_is_closed_form():
    # lambda_j = r^j: sum_{m<k} ln(r^m) = ln r k (k - 1) / 2, so alpha = 1 + 2 / ((k - 1) ln r)
    r, n = 1.1, 100
    esd = r ** np.arange(n)
    alpha, xmin, k, ks = hill_fit(esd, 1.0)
    assert k == 50 and xmin == pytest.approx(r**50)
    assert alpha == pytest.approx(1 + 2 / (49 * math.log(r)), rel=1e-12)
    assert alpha_mid(esd, 1.0) == alpha
    alpha4, _, k4, _ = hill_fit(esd, 1.0, hill_xmin_pos=4)
    assert k4 == 75 and alpha4 == pytest.approx(1 + 2 / (74 * math.log(r)), rel=1e-12)
    # scale-free: the same alpha in any ESD scale, xmin in that scale
    scaled = hill_fit(esd * 7.0, 1 / 7.0)
    assert scaled[0] == pytest.approx(alpha, rel=1e-12) and scaled[1] == pytest.approx(7 * xmin)
    # KS distance of the fitted tail, from its definition
    tail = esd[50:] / esd[50]
    d = np.max(np.abs(1 - tail ** (1 - alpha) - np.arange(50) / 50))
    assert ks == pytest.approx(d, rel=1e-12)


@pytest.mark.parametrize("a", [2.0, 3.5])
def test_hill_and_alpha_peak_recover_a_pareto_exponent(a):
    rng = np.random.default_rng(7)
    n = 40_000
    x = rng.uniform(size=n) ** (-1 / (a - 1))  # density ~ x^-a on x >= 1
    alpha, _, k, _ = hill_alpha_of(x)
    sigma = (a - 1) / math.sqrt(k)  # the Hill estimator's standard error
    assert abs(alpha - a) < 4 * sigma
    peak, xmin, _ = alpha_peak_fit(x, 1.0)
    assert xmin <= 1.5 * x.min()  # the log-density of a Pareto peaks at its minimum
    assert abs(peak - a) < 0.1


def _alpha_peak_reference(eigs, bins=100):
    """AlphaPruning's ``net_esd_estimator(fix_fingers="xmin_peak")`` as published
    (lib/esd_utils.py), in plain loops over its float64 eigenvalues."""
    nz = sorted(eigs)
    n_all = len(nz)
    logs = [math.log10(e) for e in nz]
    lo_e, hi_e = logs[0], logs[-1]
    width = (hi_e - lo_e) / bins
    counts = [0] * bins
    for v in logs:
        counts[min(int((v - lo_e) / width), bins - 1)] += 1
    xmin2 = 10 ** (lo_e + width * counts.index(max(counts)))
    xmin_min, xmin_max = math.log10(0.95 * xmin2), 1.5 * xmin2
    alphas, ds = [0.0] * (n_all - 1), [1.0] * (n_all - 1)
    for i, xmin in enumerate(nz[:-1]):
        if xmin < xmin_min:
            continue
        if xmin > xmin_max:
            break
        n = n_all - i
        alpha = 1 + n / (sum(math.log(e) for e in nz[i:]) - n * math.log(xmin))
        alphas[i] = alpha
        if alpha > 1:
            ds[i] = max(abs(1 - (nz[i + j] / xmin) ** (1 - alpha) - j / n) for j in range(n))
    best = ds.index(min(ds))
    return alphas[best], nz[best], ds[best]


def test_alpha_peak_is_alphapruning_estimator():
    rng = np.random.default_rng(3)
    w = rng.standard_t(3, size=(300, 200))
    eigs = np.linalg.svd(w, compute_uv=False) ** 2  # their scale: s^2
    want = _alpha_peak_reference(list(eigs))
    got = alpha_peak_fit(eigs / 300, 300.0)  # our default ESD: s^2 / N, esd_ww_ratio N
    assert got[0] == pytest.approx(want[0], rel=1e-9)
    assert got[1] * 300 == pytest.approx(want[1], rel=1e-9)
    assert got[2] == pytest.approx(want[2], rel=1e-9)


def test_zero_eigenvalues_are_filtered_or_named():
    esd = np.concatenate([np.zeros(60), 1.1 ** np.arange(40)])
    with pytest.raises(ValueError, match="hill_filter_zeros"):
        hill_fit(esd, 1.0)
    with pytest.raises(ValueError, match="hill_filter_zeros"):
        alpha_peak_fit(esd, 1.0)
    alpha, _, k, _ = hill_fit(esd, 1.0, hill_filter_zeros=True)
    assert k == 20 and alpha == pytest.approx(1 + 2 / (19 * math.log(1.1)), rel=1e-12)


def test_fields_through_a_session_match_numpy_linalg():
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((120, 80)) @ np.diag(np.linspace(0.2, 3, 80) ** 2)).astype(np.float32)
    lam = np.sort(np.linalg.eigvalsh(w.astype(np.float64).T @ w)) / 120  # s^2 / N
    i = 40
    k = 80 - i
    want = 1 + k / np.sum(np.log(lam[i:] / lam[i]))
    with Session(profile="ram") as s:
        s.models.add({"w": w}, "m")
        fields = ["hill_alpha", "hill_esd_xmin", "hill_k", "hill_ks", "alpha_mid"]
        s.compute.apply(*fields, "alpha_peak", progress=False)
        got = {f: s.results.get(f, "w", "m") for f in fields}
        assert got["hill_alpha"] == pytest.approx(want, rel=1e-6)
        assert got["alpha_mid"] == pytest.approx(want, rel=1e-6)
        assert got["hill_esd_xmin"] == pytest.approx(lam[i], rel=1e-6)
        assert got["hill_k"] == k
        assert 0 < got["hill_ks"] < 1
        peak = _alpha_peak_reference(list(lam * 120))
        assert s.results.get("alpha_peak", "w", "m") == pytest.approx(peak[0], rel=1e-5)
        assert s.results.get("alpha_peak_esd_xmin", "w", "m") * 120 == pytest.approx(
            peak[1], rel=1e-5
        )
        assert s.results.get("alpha_peak_ks", "w", "m") == pytest.approx(peak[2], rel=1e-4)


def test_sparsity_ratios_are_alphapruning_linear_map():
    alphas = [2.0, 3.0, 4.0, 5.0, 6.0]
    # r = 0.7 .. 1.3 (eps 0.3), mean 1, so s_i = S r_i: [S - S eps, S + S eps], mean S
    got = alpha_sparsity_ratios(alphas, 0.5, 0.3)
    np.testing.assert_allclose(got, [0.35, 0.425, 0.5, 0.575, 0.65], rtol=1e-12)
    # unequal sizes: the parameter-weighted mean is S, the ratios stay proportional to r
    params = np.array([1, 2, 3, 4, 5]) * 1000
    got = alpha_sparsity_ratios(alphas, 0.6, 0.2, params=params)
    assert np.sum(got * params) / params.sum() == pytest.approx(0.6, rel=1e-12)
    r = np.array([0.8, 0.9, 1.0, 1.1, 1.2])
    np.testing.assert_allclose(got / got[2], r / r[2], rtol=1e-12)
    # block-wise: alpha averaged per block first
    got = alpha_sparsity_ratios([2, 4, 6, 8], 0.5, 0.3, groups=[0, 0, 1, 1])
    np.testing.assert_allclose(got, [0.35, 0.35, 0.65, 0.65], rtol=1e-12)
    np.testing.assert_allclose(alpha_sparsity_ratios([3, 3], 0.4, 0.2), [0.4, 0.4])
    with pytest.raises(ValueError, match="sparsity"):
        alpha_sparsity_ratios(alphas, 1.5, 0.3)
    with pytest.raises(ValueError, match="params"):
        alpha_sparsity_ratios(alphas, 0.5, 0.3, params=[1, 2])


def test_lr_factors_are_tempbalance_linear_map():
    alphas = np.array([2.0, 5.0, 3.5, 2.75])
    got = alpha_lr_factors(alphas)
    # TempBalance's tb_linear_map: np.interp of alpha onto [0.5, 1.5]
    np.testing.assert_allclose(got, np.interp(alphas, [2.0, 5.0], [0.5, 1.5]), rtol=1e-12)
    np.testing.assert_allclose(got, [0.5, 1.5, 1.0, 0.75], rtol=1e-12)
    np.testing.assert_allclose(alpha_lr_factors(alphas, 0.8, 1.2)[:2], [0.8, 1.2])
    with pytest.raises(ValueError, match="finite"):
        alpha_lr_factors([2.0, float("nan")])

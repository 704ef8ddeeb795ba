"""The pruned power-law fit: ``ww_powerlaw_best`` picks the candidate the full xmin scan
picks (first minimum of D) with the same alpha, D and sigma, bit for bit, and the scan
itself equals the per-candidate definition written out naively."""

from __future__ import annotations

import numpy as np
import pytest

from diffract.kernels._linalg import ww_powerlaw_best, ww_powerlaw_scan


def _samples(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2 * n, n))
    out = [
        rng.pareto(rng.uniform(0.5, 4.0), n) + 1.0,  # power laws of every exponent
        np.linalg.eigvalsh(a.T @ a / (2 * n)),  # Marchenko-Pastur bulk, no tail
        np.concatenate([rng.uniform(0.5, 1.5, n - 10), rng.pareto(1.5, 10) + 3.0]),  # spikes
        np.round(rng.pareto(2.0, n) + 1.0, 2),  # many ties
        rng.lognormal(0.0, 1.0, n),
        np.full(n, 2.0),  # no candidate with alpha > 1: every D is 1, the first wins
    ]
    return [np.sort(x[x > 0]) for x in out]


@pytest.mark.parametrize("n", [20, 21, 64, 384, 777])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_is_the_full_scans_choice(seed, n):
    for x in _samples(seed, n):
        r = ww_powerlaw_scan(x)
        i = int(np.argmin(r["Ds"]))
        got = ww_powerlaw_best(x)
        assert got[0] == i
        np.testing.assert_array_equal(got[1:], [r["alphas"][i], r["Ds"][i], r["sigmas"][i]])


def test_scan_equals_the_definition():
    x = np.sort(np.random.default_rng(3).pareto(2.0, 60) + 1.0)
    r = ww_powerlaw_scan(x)
    n = x.size
    for i in range(n - 1):
        m = n - i
        alpha = 1.0 + m / np.sum(np.log(x[i:] / x[i]))
        cdf = 1.0 - (x[i:] / x[i]) ** (1.0 - alpha)
        d = np.max(np.abs(cdf - np.arange(m) / m))
        assert r["alphas"][i] == pytest.approx(alpha, rel=1e-12)
        assert r["Ds"][i] == pytest.approx(d, rel=1e-10, abs=1e-13)
        assert r["sigmas"][i] == pytest.approx((alpha - 1.0) / np.sqrt(m), rel=1e-12)

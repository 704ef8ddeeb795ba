"""The log-sum-exp behind pl_log_alpha_norm: numpy operations in scipy.special.logsumexp's
order, so the values are scipy's bit for bit (scipy's own call cost 8x more per slice)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from diffract import Session
from diffract.kernels.fits import _logsumexp


def test_bit_identical_to_scipy():
    rng = np.random.default_rng(0)
    for i in range(2000):
        t = rng.standard_normal(int(rng.integers(1, 800))) * float(rng.choice([0.1, 1, 10, 300]))
        if i % 7 == 0:  # ties at the maximum are taken out of the sum together
            t[:3] = t.max()
        assert _logsumexp(t) == float(logsumexp(t))


@pytest.mark.parametrize("t", [[np.inf, 1.0], [-np.inf, -np.inf], [np.nan, 1.0], [5.0], [2.0, 2.0]])
def test_edge_values_as_scipy(t):
    a = np.array(t)
    np.testing.assert_equal(_logsumexp(a), float(logsumexp(a)))


def test_pl_log_alpha_norm_is_log10_of_the_alpha_norm():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((300, 120)).astype(np.float32)
    s = Session("ram")
    s.models.add({"w": w}, "m")
    s.compute.apply("pl_log_alpha_norm", "pl_alpha", "esd")
    lam = np.asarray(s.results.get("esd", "w", "m"))
    alpha = s.results.get("pl_alpha", "w", "m")
    expected = np.log10(np.sum(lam[lam > 0] ** alpha))
    assert s.results.get("pl_log_alpha_norm", "w", "m") == pytest.approx(expected, rel=1e-12)

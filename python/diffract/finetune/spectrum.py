"""Signal and noise in an update's spectrum: the Marchenko-Pastur law of a random matrix of the
update's shape, its noise level estimated from the median singular value (Gavish & Donoho),
the MP edge, and how well the rest of the spectrum fits the law.

A random m x n matrix with i.i.d. entries of variance sigma^2 has its singular values inside
``sigma * (sqrt(m) + sqrt(n))`` (the Marchenko-Pastur bulk edge, Marchenko & Pastur 1967);
singular values above it are directions the update put there on purpose (signal), those below
are indistinguishable from noise. sigma is unknown: as Gavish & Donoho (2014, "The optimal hard
threshold for singular values is 4/sqrt(3)", IEEE Trans. Inf. Theory 60(8), eq. (7) and
section III-E) it is estimated from the median singular value, which a few large (signal)
singular values barely move: ``sigma = s_med / sqrt(N * mu_beta)`` with ``N = max(m, n)``,
``beta = min(m, n) / N`` and ``mu_beta`` the median of the MP law of ratio beta.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

_GRID = 4001


@lru_cache(maxsize=256)
def _mp_table(beta: float) -> tuple[np.ndarray, np.ndarray]:
    """The MP law of ratio ``beta`` (eigenvalues of ``Z Z^T / N``, unit variance) tabulated:
    ``(x, cdf)`` on its support, by the substitution x = a + (b - a)(1 - cos t) / 2 that makes
    the density's square roots smooth."""
    a, b = (1 - math.sqrt(beta)) ** 2, (1 + math.sqrt(beta)) ** 2
    t = np.linspace(0.0, math.pi, _GRID)
    x = a + (b - a) * (1 - np.cos(t)) / 2
    half = (b - a) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        dens = half * half * np.sin(t) ** 2 / (2 * math.pi * beta * x)  # f(x) dx/dt
    dens[~np.isfinite(dens)] = 0.0
    cdf = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(t))])
    return x, cdf / cdf[-1]


def mp_cdf(x: np.ndarray | float, beta: float) -> np.ndarray:
    """The Marchenko-Pastur CDF of ratio ``beta`` (0 < beta <= 1) at ``x`` (eigenvalues of
    ``Z Z^T / N`` for an m x N matrix Z of unit-variance entries, beta = m / N)."""
    xs, cdf = _mp_table(float(beta))
    return np.interp(np.asarray(x, dtype=float), xs, cdf, left=0.0, right=1.0)


def mp_quantile(q: float, beta: float) -> float:
    """The ``q``-quantile of the Marchenko-Pastur law of ratio ``beta``."""
    xs, cdf = _mp_table(float(beta))
    return float(np.interp(q, cdf, xs))


def mp_median(beta: float) -> float:
    """``mu_beta``, the median of the Marchenko-Pastur law of ratio ``beta`` (Gavish & Donoho's
    ``mu_beta``; about 0.6528 at beta = 1)."""
    return mp_quantile(0.5, beta)


def noise_sigma(s: np.ndarray, shape: tuple[int, int], spikes: int = 0) -> float:
    """The entrywise noise level of a matrix of ``shape`` with singular values ``s``, from their
    median (Gavish & Donoho 2014, eq. (7)): ``s_med / sqrt(N * mu_beta)``.

    With ``spikes`` > 0 the ``spikes`` largest values are left out and the median of the rest
    is matched to the MP quantile ``(k - spikes) / (2k)`` (the rest are, by interlacing, about
    the lowest ``k - spikes`` noise values): the signal no longer pulls the estimate up.
    """
    m, n = sorted(shape)
    k = len(s)
    rest = np.sort(np.asarray(s, dtype=float))[: k - spikes]
    if len(rest) == 0:
        return 0.0
    q = mp_quantile((k - spikes) / (2 * k), m / n)
    return float(np.median(rest) / math.sqrt(n * q)) if q > 0 else 0.0


#: the 99% quantile of the Tracy-Widom law TW1 (Johnstone 2001, table 1: 2.02)
TW1_99 = 2.02


def mp_edge(sigma: float, shape: tuple[int, int], margin: float = TW1_99) -> float:
    """The largest singular value of an i.i.d. noise matrix of ``shape`` and entry std
    ``sigma``: the MP bulk edge ``sigma * (sqrt(m) + sqrt(n))`` plus ``margin`` standard
    deviations of its finite-size Tracy-Widom fluctuation (Johnstone 2001, "On the
    distribution of the largest eigenvalue in principal components analysis", Ann. Stat.
    29(2), Theorem 1.1: centring ``(sqrt(m - 1) + sqrt(n))^2`` and scale
    ``(sqrt(m - 1) + sqrt(n)) (1 / sqrt(m - 1) + 1 / sqrt(n))^(1/3)`` for the largest eigenvalue
    of ``Z Z^T``). ``margin=0`` gives the plain edge; 2.02 lets a pure-noise update pass as
    noise 99 times in 100."""
    m, n = sorted(shape)
    a, b = math.sqrt(max(m - 1, 1)), math.sqrt(n)
    centre = (a + b) ** 2
    scale = (a + b) * (1 / a + 1 / b) ** (1 / 3)
    return float(sigma * math.sqrt(centre + margin * scale))


def bulk_ks(s: np.ndarray, sigma: float, shape: tuple[int, int], spikes: int = 0) -> float:
    """Kolmogorov-Smirnov distance between the singular values ``s`` (the bulk: the ``spikes``
    above the edge left out) and the MP law of noise ``sigma`` for ``shape``, conditioned on
    its lowest ``len(s) / (len(s) + spikes)`` share: small when the bulk is noise."""
    m, n = sorted(shape)
    if sigma <= 0 or len(s) == 0:
        return float("nan")
    x = np.sort(np.asarray(s, dtype=float) ** 2 / (sigma * sigma * n))
    f = np.minimum(mp_cdf(x, m / n) * (len(x) + spikes) / len(x), 1.0)
    k = len(x)
    hi = np.arange(1, k + 1) / k - f
    lo = f - np.arange(0, k) / k
    return float(max(hi.max(), lo.max()))

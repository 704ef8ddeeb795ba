"""WeightWatcher's Marchenko-Pastur fit (``analyze(mp_fit=True)``, and with
``randomize=True`` the same fit of the randomized ESD: correlation traps).

Ours (:mod:`diffract.kernels.rmt`) takes the MP bulk from the entry variance; WeightWatcher
*fits* the MP scale sigma to the ESD's density. Both are kept: the ``mp_fit_*`` fields are
WeightWatcher's, step by step (``weightwatcher.mp_fit`` and ``RMT_Util.fit_density_with_range``,
0.7.7):

1. rescale the eigenvalues to mean 1: x_i = lambda_i * n / sum(lambda) (``W_scale`` =
   sqrt(n / sum(lambda)); scale-free, so any ``esd_scale`` gives the same fit);
2. estimate the density of x (of sqrt(x) when Q = 1) with a linear-kernel KDE of bandwidth
   0.1 on 1000 points of [0, max + 0.5], keeping the points where it is above 0.01;
3. sigma minimizes sum (rho_MP(x; Q, sigma) - kde(x))^2 over those points (the quarter-circle
   law when Q = 1), by a grid search over [0.05 s0, 2 s0) in steps of 0.01 s0,
   s0 = sqrt(max(x)) / (1 + 1/sqrt(Q)), then Nelder-Mead from the best grid point
   (``scipy.optimize.brute``); a sigma whose bulk edge lambda+ lies left of the KDE's peak or
   right of the grid, or whose lower edge lies right of the peak, costs 1000 per point;
4. bulk_max = (sigma (1 + 1/sqrt(Q)))^2, bulk_min = (sigma (1 - 1/sqrt(Q)))^2,
   TW = Q^(-1/2) bulk_max^(2/3) M^(-2/3); spikes: #{x_i > bulk_max + sqrt(TW)};
   mp_softrank = bulk_max / max(x); the edges are reported back in ESD units (divided by
   W_scale^2).
"""

from __future__ import annotations

import math

import numpy as np

from diffract.kernels.norms import finite_values, nonempty
from diffract.kernels.spec import define

#: WeightWatcher's KDE bandwidth, density floor and grid size
BANDWIDTH = 0.1
DENSITY_FLOOR = 0.01
GRID_POINTS = 1000


def _kde(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Linear-kernel KDE, (1 / (n h)) sum_i max(0, 1 - |x - v_i| / h), at ``grid``."""
    out = np.empty(grid.size)
    for start in range(0, grid.size, 64):
        g = grid[start : start + 64, None]
        u = np.abs(g - values[None, :]) / BANDWIDTH
        out[start : start + 64] = np.clip(1.0 - u, 0.0, None).sum(axis=1)
    return out / (values.size * BANDWIDTH)


def _mp_density(x, q, sigma):
    y = 1.0 / q
    b = (sigma * (1 + math.sqrt(1 / q))) ** 2
    a = (sigma * (1 - math.sqrt(1 / q))) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        val = np.nan_to_num((1 / (2 * np.pi * sigma * sigma * x * y)) * np.sqrt((b - x) * (x - a)))
    return val, a, b


def _qc_density(x, sigma):
    with np.errstate(invalid="ignore"):
        return np.nan_to_num((1 / (np.pi * sigma * sigma)) * np.sqrt(4 - x**2))


def _residual_fn(to_fit: np.ndarray, q: float):
    """The cost of a sigma (WeightWatcher's ``resid_mp``), with the KDE computed once."""
    grid = np.linspace(0, np.max(to_fit) + 0.5, GRID_POINTS)
    dens = _kde(to_fit, grid)
    n_bad = int(np.count_nonzero(dens < DENSITY_FLOOR))
    good = dens > DENSITY_FLOOR
    xde, yde = grid[good], dens[good]
    peak_x = xde[np.where(yde == max(yde))][0]

    def cost(p):
        sigma = float(np.ravel(p)[0])
        if q == 1:
            resid = _qc_density(xde, sigma) - yde
        else:
            ymp, a, b = _mp_density(xde, q, sigma)
            if (b < peak_x) | (b > max(xde)) | (a > peak_x):
                resid = np.zeros(len(yde)) + 1000
            else:
                resid = ymp - yde
        resid = np.concatenate((resid, np.zeros(n_bad)))
        return np.sum(resid**2)

    return cost


def ww_mp_fit(lam: np.ndarray, q: float, m: int) -> tuple[float, int, float, float, float, float]:
    """WeightWatcher's MP fit of the eigenvalues ``lam`` (see the module docstring).

    Args:
        lam: the eigenvalues (any scale).
        q: the aspect ratio N / M.
        m: the smaller dimension M.

    Returns:
        ``(sigma_mp, num_spikes, mp_softrank, bulk_max, bulk_min, W_scale)``, the edges in
        the units of ``lam``.

    Raises:
        ValueError: an all-zero or non-finite spectrum.
    """
    from scipy import optimize

    lam = np.asarray(lam, dtype=np.float64)
    total = float(np.sum(lam))
    if not np.all(np.isfinite(lam)) or total <= 0:
        raise ValueError("the MP fit needs a finite spectrum that is not all zero")
    w_scale = math.sqrt(lam.size) / math.sqrt(total)
    x = (w_scale * w_scale) * lam
    s0 = math.sqrt(np.max(x) / (1 + 1 / math.sqrt(q)) ** 2)
    to_fit = np.sqrt(x) if q == 1 else x
    ranges = (slice(0.05 * s0, 2.0 * s0, 0.01 * s0),)
    sigma = float(np.ravel(optimize.brute(_residual_fn(to_fit, q), ranges, full_output=True)[0])[0])
    bulk_max = (sigma * (1 + 1 / math.sqrt(q))) ** 2
    bulk_min = (sigma * (1 - 1 / math.sqrt(q))) ** 2
    tw = 1 / math.sqrt(q) * bulk_max ** (2 / 3) * m ** (-2 / 3)
    spikes = int(np.count_nonzero(x > bulk_max + math.sqrt(tw)))
    soft_rank = bulk_max / float(np.max(x))
    unit = w_scale * w_scale  # edges back in the ESD's units
    return sigma, spikes, soft_rank, bulk_max / unit, bulk_min / unit, w_scale


_MP_OUTPUTS = ("sigma", "num_spikes", "soft_rank", "bulk_max", "bulk_min", "w_scale")


@define(outputs=tuple(f"mp_fit_{o}" for o in _MP_OUTPUTS), min_ndim=2, family="rmt")
def mp_fit(esd, aspect_ratio, lower_dim):
    """WeightWatcher's fitted Marchenko-Pastur bulk of the ESD (``analyze(mp_fit=True)``;
    steps in the module docstring): mp_fit_sigma = ``sigma_mp``, mp_fit_num_spikes =
    ``num_spikes``, mp_fit_soft_rank = ``mp_softrank``, mp_fit_bulk_max = ``bulk_max``,
    mp_fit_bulk_min = ``bulk_min`` (both in ESD units: WeightWatcher's with esd_scale="ww",
    else times esd_ww_ratio), mp_fit_w_scale = ``W_scale`` = sqrt(n / sum lambda) (WW's with
    esd_scale="ww", else divided by sqrt(esd_ww_ratio)). Sigma, spikes and soft rank are
    scale-free. Our own MP
    fields (mp_esd_max, mp_num_spikes, mp_soft_rank) take the bulk from the entry variance
    instead. WeightWatcher reports Q and M swapped for some Conv2d layers (see the goldens),
    and then fits with its swapped Q."""
    return ww_mp_fit(esd, float(aspect_ratio), int(lower_dim))


@define(outputs=tuple(f"rand_mp_fit_{o}" for o in _MP_OUTPUTS), min_ndim=2, family="rmt")
def rand_mp_fit(esd_rand_pool, aspect_ratio, lower_dim):
    """The same fit of the randomized ESD (``esd_rand_pool``: the entries of W permuted,
    options ``seed``, ``rand_shuffle``, ``rand_replicas``): WeightWatcher ``rand_sigma_mp``,
    ``rand_num_spikes``, ``rand_mp_softrank``, ``rand_bulk_max``, ``rand_bulk_min``,
    ``rand_W_scale`` with ``randomize=True, mp_fit=True``. ``conventions="weightwatcher"``
    follows WeightWatcher's recipe (each kernel-position matrix shuffled separately; 5
    replicas pooled when fewer than 100 singular values are kept in all: M, M * rf for
    Conv2d, or a LoRA update's rank r; each replica keeping those); its permutation is
    unseeded, ours seeded, so these agree in distribution, not value by value."""
    return ww_mp_fit(esd_rand_pool, float(aspect_ratio), int(lower_dim))


@define(outputs="num_traps", family="rmt")
def num_traps(rand_mp_fit_num_spikes):
    """Correlation traps: spikes of the randomized ESD above its fitted MP bulk (+ the TW
    margin), i.e. rand_mp_fit_num_spikes. Permuting the entries destroys correlations, so a
    spike that survives comes from a few large entries of W (a trap), not from learned
    structure. WeightWatcher ``num_traps`` (equal to its ``rand_num_spikes``)."""
    return int(rand_mp_fit_num_spikes)


@define(outputs="model_mp_fit_soft_rank", level="model", family="model")
def model_mp_fit_soft_rank(mp_fit_soft_rank):
    """Mean of mp_fit_soft_rank over slices. WeightWatcher summary ``mp_softrank`` (with
    ``mp_fit=True``)."""
    return float(np.mean(nonempty(finite_values(mp_fit_soft_rank), "mp_fit_soft_rank")))

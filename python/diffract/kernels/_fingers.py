"""Finger handling for the power-law fit (WeightWatcher's ``fix_fingers``, ``xmax``,
``xmin_max``): helpers of :func:`diffract.kernels.fits.power_law_fit`.

A *finger* is a few outlying eigenvalues at the top of the ESD that drag the fitted alpha
up (WeightWatcher issues #102, #227, #229). Two remedies, as in WeightWatcher 0.7.7:

* ``"clip_xmax"`` (``RMT_Util.fit_clipped_powerlaw``): refit with the ``idx = 2, 3, ...,
  max_fingers - 1`` largest eigenvalues removed; the first refit whose alpha is below the
  unclipped alpha by more than ``finger_thresh`` wins (``num_fingers = idx - 1``); the scan
  stops early at a refit with alpha <= 2; then up to three further clips are fitted as a
  check (a fit that cannot be made there fails the whole fit, as in WeightWatcher).
  WeightWatcher replaces ``max_fingers`` by 10 unless it is at least half the number of
  eigenvalues; so do we.
* ``"xmin_peak"``: xmin is searched only from 0.95 times the peak of the log-ESD histogram
  (100 bins) up to ``xmin_max`` (default 1.5 times the peak). WeightWatcher 0.7.7 means
  this but cannot run it: it passes ``(log10(0.95 peak), xmin_max)`` as xmin, which its
  own fit rejects (and the powerlaw package reads as a range starting at the log), so every
  layer gets alpha = -1. Ours is the documented intent, with WeightWatcher's candidates and
  KS distance.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from diffract.kernels._linalg import ww_powerlaw_scan, ww_powerlaw_small

FIX_FINGERS = ("xmin_peak", "clip_xmax")
#: WeightWatcher's DEFAULT_MAX_FINGERS, and its clip_xmax stop rule
DEFAULT_MAX_FINGERS = 10
MIN_ALPHA = 2.0
#: WeightWatcher switches to its small-sample rule below this many fitted eigenvalues
#: (also used by :func:`diffract.kernels.fits.pl_fit`)
SMALL_N_CUTOFF = 20


class Fit(NamedTuple):
    """One power-law fit of a sorted sample: the chosen candidate and the sample's largest
    value (``xmax``)."""

    alpha: float
    xmin: float
    d: float
    sigma: float
    xmax: float


def ww_fit(x: np.ndarray, lo: float | None = None, hi: float | None = None) -> Fit:
    """WeightWatcher's fit (pl_package "ww") of sorted ``x``; xmin candidates restricted to
    ``lo <= x_i <= hi`` when those are given.

    Raises:
        ValueError: fewer than 2 values, or no candidate in the range.
    """
    if x.size < 2:
        raise ValueError(f"power-law fit needs at least 2 eigenvalues, got {x.size}")
    if x.size < SMALL_N_CUTOFF:
        _, alphas, ds, sigmas = ww_powerlaw_small(x)
    else:
        r = ww_powerlaw_scan(x)
        alphas, ds, sigmas = r["alphas"], r["Ds"], r["sigmas"]
    cand = x[:-1]
    allowed = np.ones(cand.size, dtype=bool)
    if lo is not None:
        allowed &= cand >= lo
    if hi is not None:
        allowed &= cand <= hi
    if not allowed.any():
        raise ValueError(f"no xmin candidate between {lo!r} and {hi!r}")
    i = int(np.argmin(np.where(allowed, ds, np.inf)))
    return Fit(float(alphas[i]), float(x[i]), float(ds[i]), float(sigmas[i]), float(x[-1]))


def clipped_fit(
    x: np.ndarray, n_evals: int, max_fingers: int, finger_thresh: float
) -> tuple[Fit, int, Fit]:
    """``fix_fingers="clip_xmax"`` (see the module docstring) on sorted ``x``.

    Args:
        x: the fitted eigenvalues, ascending.
        n_evals: the number of eigenvalues of the layer (WeightWatcher's max_fingers rule).
        max_fingers: largest clip tried plus one.
        finger_thresh: how much alpha must drop.

    Returns:
        The chosen fit, the number of fingers, and the unclipped fit.
    """
    if max_fingers < 0 or max_fingers < n_evals / 2:
        max_fingers = DEFAULT_MAX_FINGERS
    if max_fingers <= 2:
        raise ValueError(f"clip_xmax needs max_fingers > 2, got {max_fingers}")
    first = ww_fit(x)
    best, fingers = first, 0
    for idx in range(2, max_fingers):
        fit = ww_fit(x[:-idx])
        if fit.alpha + finger_thresh < first.alpha:
            best, fingers = fit, idx - 1
            break
        if fit.alpha <= MIN_ALPHA:
            break
    for idy in range(idx + 1, idx + 4):  # WeightWatcher's check of the next clips
        if abs(ww_fit(x[:-idy]).alpha - fit.alpha) > finger_thresh:
            break
    return best, fingers, first


def peak_range(x: np.ndarray, xmin_max: float | None) -> tuple[float, float]:
    """The xmin search range of ``fix_fingers="xmin_peak"``: ``(0.95 peak, xmin_max or 1.5
    peak)``, peak = 10^(left edge of the fullest of 100 bins of log10 x)."""
    counts, edges = np.histogram(np.log10(x), bins=100)
    peak = float(10.0 ** edges[int(np.argmax(counts))])
    hi = 1.5 * peak if xmin_max is None else float(xmin_max)
    if hi < 0.95 * peak:
        raise ValueError(f"xmin_max={xmin_max} is below 0.95 times the ESD peak ({peak:.6g})")
    return 0.95 * peak, hi

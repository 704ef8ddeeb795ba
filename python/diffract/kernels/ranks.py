"""Ranks, rank loss and matrix entropy."""

from __future__ import annotations

import numpy as np

from diffract.kernels.spec import at_least, define

EPS64 = float(np.finfo(np.float64).eps)
#: WeightWatcher's EPSILON in matrix_entropy (CPU)
ENTROPY_EPSILON = 1e-10


def _rank(s, n, rtol):
    s = np.asarray(s, dtype=np.float64)
    smax = float(np.max(s)) if s.size else 0.0
    tol = smax * n * EPS64 if rtol is None else smax * float(rtol)
    return int(np.count_nonzero(s > tol))


@define(outputs="hard_rank", family="ranks", option_rules={"rtol": at_least(0)})
def hard_rank(esd, rtol=1e-5):
    """Numerical rank from the ESD (Diffract's definition): #{i : lambda_i > rtol *
    lambda_max}, rtol = 1e-5 by default (on eigenvalues: singular values above
    sqrt(1e-5) = 0.32% of s_max). Pooled over kernel positions. For numpy's and
    WeightWatcher's rank see ``matrix_rank``."""
    lam = np.asarray(esd, dtype=np.float64)
    if lam.size == 0:
        return 0
    return int(np.count_nonzero(lam > float(rtol) * float(np.max(lam))))


@define(outputs="matrix_rank", family="ranks", option_rules={"rtol": at_least(0)})
def matrix_rank(weights_svals, greater_dim, rtol=None):
    """Numerical rank: #{i : s_i > tol}, tol = s_max * N * eps64 (numpy.linalg.matrix_rank's
    default) or s_max * rtol when the option ``rtol`` is set. Pooled over kernel positions.

    WeightWatcher: ``matrix_rank`` (identical; the spectrum path falls back to a full SVD when
    the Gram matrix cannot resolve singular values near tol). (diffract-lab 0.1 named this
    ``hard_rank``; ``hard_rank`` is now Diffract's, on the ESD.)"""
    return _rank(weights_svals, greater_dim, rtol)


@define(outputs="rank_loss", family="ranks", option_rules={"rtol": at_least(0)})
def rank_loss(kernel_svals, greater_dim, rtol=None):
    """sum over kernel positions p of (M - rank_p), rank_p with tol = max_i s_{p,i} * N * eps64
    (or * rtol). WeightWatcher: ``rank_loss`` (its calc_rank_loss per matrix, summed)."""
    ks = np.asarray(kernel_svals)
    return int(sum(row.size - _rank(row, greater_dim, rtol) for row in ks))


@define(
    outputs="weak_rank_loss",
    family="ranks",
    option_rules={"weak_rank_tol": at_least(0)},
)
def weak_rank_loss(esd, esd_ww_ratio, slice_info, weak_rank_tol=1e-6, weak_rank_conv2d_norm=False):
    """#{i : lambda_i^WW < weak_rank_tol}, lambda^WW = lambda_i * esd_ww_ratio (WeightWatcher's
    eigenvalue scale, whatever ``esd_scale``). WeightWatcher: ``weak_rank_loss`` (its option
    ``tolerance``, default 1e-6).

    ``weak_rank_conv2d_norm=True`` (set by ``conventions="weightwatcher"``): a kernel-position
    slice (``pool=False``; P positions) is compared as WeightWatcher's ``analyze(pool=False)``
    compares it, after its ``conv2d_norm`` scaled the matrix by sqrt(P / 2), so its eigenvalues
    by P / 2; default False: the slice's own eigenvalues, as for any matrix."""
    lam = np.asarray(esd) * esd_ww_ratio
    position = slice_info.meta.get("kernel_position") if slice_info is not None else None
    if weak_rank_conv2d_norm and position:
        lam = lam * (position["count"] / 2)
    return int(np.count_nonzero(lam < weak_rank_tol))


@define(outputs="matrix_entropy", family="ranks")
def matrix_entropy(esd, matrix_rank):
    """Normalized matrix (spectral) entropy: p_i = lambda_i / sum_j lambda_j + 1e-10,
    H = -sum_i p_i ln p_i / ln(matrix_rank + 1e-10); 1 for a flat spectrum (scale-free).
    WeightWatcher: ``entropy`` (same formula and epsilon). Raises when the rank is <= 1."""
    lam = np.asarray(esd, dtype=np.float64)
    total = lam.sum()
    if total <= 0:
        raise ValueError("matrix entropy is undefined for an all-zero matrix")
    if matrix_rank <= 1:
        raise ValueError(
            f"matrix entropy needs rank >= 2 (normalizes by ln rank), rank is {matrix_rank}"
        )
    p = lam / total + ENTROPY_EPSILON
    return float(-np.sum(p * np.log(p)) / np.log(matrix_rank + ENTROPY_EPSILON))


@define(outputs="effective_rank", family="ranks")
def effective_rank(weights_svals):
    """Effective rank (Roy & Vetterli 2007): exp(-sum_i p_i ln p_i), p_i = s_i / sum_j s_j
    (terms with p_i = 0 omitted). Between 1 and the number of singular values: M for a
    matrix, M * P for a slice pooled over P kernel positions."""
    s = np.asarray(weights_svals, dtype=np.float64)
    total = s.sum()
    if total <= 0:
        raise ValueError("effective rank is undefined for an all-zero matrix")
    p = s[s > 0] / total
    return float(np.exp(-np.sum(p * np.log(p))))


@define(outputs="mp_soft_rank", family="ranks")
def mp_soft_rank(mp_esd_max, esd_max):
    """MP soft rank: lambda_+ / lambda_max, the Marchenko-Pastur bulk edge over the largest
    eigenvalue (Martin & Mahoney). WeightWatcher's ``mp_softrank`` uses its own MP sigma fit
    (mp_fit=True) instead of the entry variance, so it is related but not identical."""
    if esd_max <= 0:
        raise ValueError("MP soft rank is undefined for an all-zero matrix")
    return float(mp_esd_max / esd_max)

"""What LLM methods built on heavy-tailed self-regularization consume: the Hill-estimator
alpha (``PL_Alpha_Hill``) of TempBalance and AlphaDecay, AlphaPruning's ``alpha_mid`` and
``alpha_peak``, and the maps from per-layer alpha to layer-wise sparsity ratios
(AlphaPruning) and learning-rate factors (TempBalance).

References:

* TempBalance: Y. Zhou, T. Pang, K. Liu, C. H. Martin, M. W. Mahoney, Y. Yang,
  "Temperature Balancing, Layer-wise Weight Analysis, and Neural Network Training",
  NeurIPS 2023 (github.com/YefanZhou/TempBalance).
* AlphaPruning: H. Lu, Y. Zhou, S. Liu, Z. Wang, M. W. Mahoney, Y. Yang, "AlphaPruning:
  Using Heavy-Tailed Self Regularization Theory for Improved Layer-wise Pruning of Large
  Language Models", NeurIPS 2024 (github.com/haiquanlu/AlphaPruning, ``lib/esd_utils.py``,
  ``lib/prune.py``).
* AlphaDecay: D. He, A. Jaiswal, S. Tu, L. Shen, G. Yuan, S. Liu, L. Yin, "AlphaDecay:
  Module-wise Weight Decay for Heavy-Tailed Balancing in LLMs", 2025 (the same Hill
  estimator, per module).
* B. M. Hill, "A Simple General Approach to Inference About the Tail of a Distribution",
  Annals of Statistics 3 (1975).

All three papers compute the estimator as their shared ``net_esd_estimator`` does; the
kernels here reproduce it on our ESD. Alpha is scale-free (ratios of eigenvalues), so
``esd_scale`` does not change it; the xmin outputs are in our ESD units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from diffract.kernels.spec import at_least, define

#: the papers' EVALS_THRESH: with ``hill_filter_zeros``, eigenvalues at or below it (in
#: WeightWatcher's / the papers' scale: s^2, s^2 / 2 for Conv2d) are left out
EVALS_THRESH = 1e-5


def _tail_data(esd: Any, esd_ww_ratio: float, hill_filter_zeros: bool) -> np.ndarray:
    """The sorted eigenvalues the papers fit: all of them, or with ``hill_filter_zeros``
    those above EVALS_THRESH in their scale (all of them when none is)."""
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    if not np.all(np.isfinite(lam)):
        raise ValueError("the ESD contains NaN or infinite values")
    if hill_filter_zeros:
        kept = lam[lam * esd_ww_ratio > EVALS_THRESH]
        lam = kept if kept.size else lam  # the papers' rule: nothing left, keep them all
    if lam.size < 2:
        raise ValueError(f"a Hill fit needs at least 2 eigenvalues, got {lam.size}")
    return lam


def _hill_at(lam: np.ndarray, i: int) -> tuple[float, float, int]:
    """Hill alpha and KS distance of the tail lam[i:] with xmin = lam[i]."""
    xmin = lam[i]
    if xmin <= 0:
        raise ValueError(
            f"xmin = lam[{i}] = {xmin:g} is not positive (the matrix is rank-deficient); "
            "hill_filter_zeros=True leaves out the zero eigenvalues"
        )
    tail = lam[i:]
    n = tail.size
    logs = float(np.sum(np.log(tail / xmin)))
    if logs <= 0:
        raise ValueError(f"the tail above xmin = {xmin:g} is flat: no Hill estimate")
    alpha = 1.0 + n / logs
    seq = np.arange(n) / n
    d = float(np.max(np.abs(1.0 - (tail / xmin) ** (1.0 - alpha) - seq)))
    return alpha, d, n


def hill_alpha_of(esd: Any, xmin_pos: float = 2.0) -> tuple[float, float, int, float]:
    """The Hill estimate of ``esd``'s tail exponent with xmin the ``floor(N / xmin_pos)``-th
    smallest eigenvalue (see :func:`hill_fit`).

    Args:
        esd: the eigenvalues (any order, all positive from xmin up).
        xmin_pos: 2 puts xmin at the median (TempBalance, AlphaPruning's ``alpha_mid``).

    Returns:
        alpha, xmin, the number of eigenvalues in the tail (xmin included), KS distance.
    """
    lam = _tail_data(esd, 1.0, False)
    i = int(lam.size / xmin_pos)
    alpha, d, n = _hill_at(lam, min(i, lam.size - 2))
    return alpha, float(lam[min(i, lam.size - 2)]), n, d


@define(
    outputs=("hill_alpha", "hill_esd_xmin", "hill_k", "hill_ks"),
    min_ndim=2,
    family="powerlaw",
    option_rules={"hill_xmin_pos": at_least(1)},
)
def hill_fit(esd, esd_ww_ratio, hill_xmin_pos=2.0, hill_filter_zeros=False):
    """Hill estimator of the ESD's power-law exponent (``PL_Alpha_Hill`` of TempBalance,
    AlphaDecay and AlphaPruning): with the N eigenvalues ascending, i = floor(N /
    ``hill_xmin_pos``), xmin = lambda_i and the k = N - i eigenvalues from xmin up,
    alpha = 1 + k / sum_{j >= i} ln(lambda_j / xmin) (Hill 1975; the continuous power-law
    MLE with xmin fixed). ``hill_xmin_pos`` = 2 (default) puts xmin at the median, k = N/2,
    the choice of TempBalance (``xmin_pos=2``, ``pl_fitting="median"``) and AlphaPruning's
    ``alpha_mid``; their code counts xmin itself in k, as here. hill_ks: KS distance
    max_j |1 - (lambda_j / xmin)^(1 - alpha) - j / k| (their ``D``). ``hill_filter_zeros``
    (their ``filter_zeros``, default False): leave out eigenvalues <= 1e-5 in their scale
    (lambda * esd_ww_ratio: s^2, s^2 / 2 for Conv2d), unless that leaves none. Scale-free:
    hill_esd_xmin is in our ESD units. Values agree with theirs to float32 rounding (they
    compute in float32)."""
    lam = _tail_data(esd, esd_ww_ratio, hill_filter_zeros)
    i = min(int(lam.size / float(hill_xmin_pos)), lam.size - 2)
    alpha, d, k = _hill_at(lam, i)
    return alpha, float(lam[i]), k, d


@define(outputs="alpha_mid", min_ndim=2, family="powerlaw")
def alpha_mid(esd, esd_ww_ratio, hill_filter_zeros=False):
    """AlphaPruning's ``alpha_mid`` (its ``net_esd_estimator(fix_fingers="xmin_mid")``):
    the Hill estimate with xmin at the median eigenvalue, i = floor(N / 2),
    alpha = 1 + k / sum_{j >= i} ln(lambda_j / lambda_i), k = N - i; = hill_alpha at
    ``hill_xmin_pos=2``. ``hill_filter_zeros`` as for hill_alpha."""
    lam = _tail_data(esd, esd_ww_ratio, hill_filter_zeros)
    return _hill_at(lam, min(lam.size // 2, lam.size - 2))[0]


@define(
    outputs=("alpha_peak", "alpha_peak_esd_xmin", "alpha_peak_ks"),
    min_ndim=2,
    family="powerlaw",
    option_rules={"alpha_peak_bins": at_least(1)},
)
def alpha_peak_fit(esd, esd_ww_ratio, hill_filter_zeros=False, alpha_peak_bins=100):
    """AlphaPruning's ``alpha_peak`` (``net_esd_estimator(fix_fingers="xmin_peak")``, the
    metric of its LLaMA results): xmin at the peak of the log-ESD density. The peak p is the
    left edge of the fullest of ``alpha_peak_bins`` (100) equal bins of log10 lambda
    between its min and max, 10^edge; every eigenvalue but the largest with
    log10(0.95 p) <= lambda_i <= 1.5 p (in their scale, lambda * esd_ww_ratio) is a candidate
    xmin with the Hill alpha of its tail, alpha_i = 1 + k_i / sum_{j >= i}
    ln(lambda_j / lambda_i), and KS distance D_i = max_j |1 - (lambda_j / lambda_i)^(1 -
    alpha_i) - j / k_i| (D_i = 1 where alpha_i <= 1); the first minimum of D wins. Their
    lower bound compares an eigenvalue to the log of 0.95 p (WeightWatcher's own
    ``xmin_peak`` has the same slip), which is kept so the values match theirs; in practice
    only the upper bound 1.5 p acts. ``hill_filter_zeros`` as for hill_alpha; zero
    eigenvalues left in make the log-histogram undefined (an error)."""
    lam = _tail_data(esd, esd_ww_ratio, hill_filter_zeros)
    if lam[0] <= 0:
        raise ValueError(
            "alpha_peak: the ESD has zero eigenvalues (a rank-deficient matrix), so its "
            "log-density has no peak; hill_filter_zeros=True leaves them out"
        )
    ratio = float(esd_ww_ratio)
    theirs = lam * ratio
    logs = np.log10(theirs)
    counts, edges = np.histogram(logs, bins=int(alpha_peak_bins), range=(logs[0], logs[-1]))
    peak = 10.0 ** edges[int(np.argmax(counts))]
    lo, hi = math.log10(0.95 * peak), 1.5 * peak
    cand = np.flatnonzero((theirs[:-1] >= lo) & (theirs[:-1] <= hi))
    if cand.size == 0:
        raise ValueError(f"alpha_peak: no xmin candidate up to 1.5 x the ESD peak {peak:g}")
    alphas, ds = np.zeros(cand.size), np.ones(cand.size)
    for j, i in enumerate(cand):
        try:
            a, d, _ = _hill_at(lam, int(i))
        except ValueError:  # a flat tail (ties up to the largest): no estimate there
            continue
        alphas[j] = a
        if a > 1:
            ds[j] = d
    best = int(np.argmin(ds))
    if alphas[best] <= 1:
        raise ValueError("alpha_peak: no candidate xmin gives a normalizable tail (alpha > 1)")
    return float(alphas[best]), float(lam[cand[best]]), float(ds[best])


# --- from per-layer alpha to per-layer settings ----------------------------------------------


def _linear_map(alphas: Any, s1: float, s2: float, groups: Sequence[Any] | None) -> np.ndarray:
    a = np.asarray(alphas, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError("alphas must be a non-empty 1-D sequence of finite numbers")
    if groups is not None:
        labels = list(groups)
        if len(labels) != a.size:
            raise ValueError(f"groups has {len(labels)} labels for {a.size} alphas")
        means = {
            g: float(np.mean([x for x, h in zip(a, labels, strict=True) if h == g])) for g in labels
        }
        a = np.array([means[g] for g in labels])
    lo, hi = float(a.min()), float(a.max())
    if hi == lo:
        return np.full(a.size, (s1 + s2) / 2.0)
    return (a - lo) / (hi - lo) * (s2 - s1) + s1


def alpha_sparsity_ratios(
    alphas: Any,
    sparsity: float,
    epsilon: float,
    *,
    params: Any = None,
    groups: Sequence[Any] | None = None,
) -> np.ndarray:
    """Layer-wise pruning ratios from per-layer alpha, as AlphaPruning allocates them.

    AlphaPruning (Lu et al., NeurIPS 2024) allocates s_i = eta ((q_i - q_min) / (q_max -
    q_min) (s2 - s1) + s1) from a per-matrix metric q (here alpha); its code
    (``ww_sparsity``) takes s1 = 1 - eps, s2 = 1 + eps, r_i = (alpha_i - alpha_min) /
    (alpha_max - alpha_min) (s2 - s1) + s1, then s_i = eta r_i with
    eta = S sum_i p_i / sum_i p_i r_i, so the parameter-weighted mean sparsity is S. Layers with larger alpha (less heavy-tailed, less trained) are pruned
    more. The ratios span S (1 -+ eps) / c, c the weighted mean of r (1 when the alphas are
    spread symmetrically): about [S - S eps, S + S eps].

    Args:
        alphas: one alpha per prunable matrix, in model order.
        sparsity: the target global sparsity S (0 < S < 1).
        epsilon: the spread eps (0 <= eps < 1; AlphaPruning tunes it per model, e.g. 0.3).
        params: the number of weights p_i of each matrix (default: all equal).
        groups: a label per matrix (e.g. its transformer block): alpha is first averaged
            within each group (AlphaPruning's ``mapping_type="block_wise"``).

    Returns:
        The sparsity ratio s_i of each matrix (not clipped to [0, 1], as in AlphaPruning).

    Raises:
        ValueError: bad alphas, sparsity, epsilon, params or groups.
    """
    if not 0 < sparsity < 1:
        raise ValueError(f"sparsity must be in (0, 1), got {sparsity!r}")
    if not 0 <= epsilon < 1:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon!r}")
    r = _linear_map(alphas, 1.0 - epsilon, 1.0 + epsilon, groups)
    p = np.ones(r.size) if params is None else np.asarray(params, dtype=np.float64)
    if p.shape != r.shape or np.any(p <= 0):
        raise ValueError(f"params must hold {r.size} positive counts, one per alpha")
    return r * (sparsity * p.sum() / float(np.sum(p * r)))


def alpha_lr_factors(
    alphas: Any, s1: float = 0.5, s2: float = 1.5, *, groups: Sequence[Any] | None = None
) -> np.ndarray:
    """Per-layer learning-rate factors from per-layer alpha, as TempBalance sets them.

    TempBalance (Zhou et al., NeurIPS 2023; its code's ``assign_func="tb_linear_map"``):
    eta_i = eta_t ((alpha_i - alpha_min) / (alpha_max - alpha_min) (s2 - s1) + s1), with
    (s1, s2) = (0.5, 1.5) its defaults (``lr_min_ratio``, ``lr_max_ratio``): layers with
    larger alpha (under-trained) get a larger learning rate. Multiply the scheduled
    learning rate eta_t by these factors (e.g. one optimizer parameter group per layer).
    AlphaDecay sets module-wise weight decay from the same alpha by such a linear map.

    Args:
        alphas: one alpha per layer.
        s1: the factor of the smallest alpha.
        s2: the factor of the largest alpha.
        groups: a label per layer: alpha averaged within each group first.

    Returns:
        The factors (all (s1 + s2) / 2 when every alpha is equal).

    Raises:
        ValueError: bad alphas or groups, or s1 / s2 not positive.
    """
    if not (s1 > 0 and s2 > 0):
        raise ValueError(f"s1 and s2 must be positive, got {s1!r}, {s2!r}")
    return _linear_map(alphas, float(s1), float(s2), groups)

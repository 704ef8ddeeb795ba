"""How many directions an update uses: its effective rank, its stable rank, and the rule that
calls it low-rank (LoRA-like), full-rank, noise or unchanged.

- Effective rank (Roy & Vetterli 2007, "The effective rank: a measure of effective
  dimensionality", EUSIPCO): ``exp(H(p))`` with ``p_i = s_i / sum(s)`` the singular values
  normalised to sum 1 and H the Shannon entropy; 1 for a rank-1 matrix, ``min(m, n)`` for a
  flat spectrum.
- Stable rank (Rudelson & Vershynin 2007, "Sampling from large matrices", J. ACM 54(4)):
  ``||A||_F^2 / ||A||_2^2``, at most the rank.
- Signal rank: the number of singular values above the Marchenko-Pastur edge
  (:mod:`diffract.finetune.spectrum`), Gavish & Donoho's rank estimate with the MP edge as the
  threshold. Noise inflates the first two; the signal rank is the one that recovers the rank
  of a low-rank update buried in noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: an update is low-rank when its signal rank is at most this fraction of min(m, n): LoRA's
#: ranks (Hu et al. 2021: r = 1..64 on d = 768..12288) are at most ~8% of the smaller dimension
LOW_RANK_FRACTION = 0.1
#: the part below the MP edge is noise when its KS distance to the MP law is at most this: the
#: bulk of an i.i.d. noise update (k >= 100 singular values) stays under 0.03, a smooth
#: full-rank spectrum (linear or power-law decay) is at 0.1 or more
BULK_KS_MAX = 0.05
#: ... or when it holds less than this share of the update's energy (a LoRA update whose only
#: noise is the rounding of the weights: nothing left to fit)
NEGLIGIBLE_BULK = 0.01

KINDS = ("unchanged", "low-rank", "full-rank", "noise")


def effective_rank(s: np.ndarray) -> float:
    """Roy & Vetterli's effective rank ``exp(-sum p_i log p_i)``, ``p = s / sum(s)``."""
    s = np.asarray(s, dtype=float)
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s[s > 0] / total
    return float(math.exp(-(p * np.log(p)).sum()))


def stable_rank(s: np.ndarray) -> float:
    """Rudelson & Vershynin's stable rank ``sum(s^2) / max(s)^2`` (0 for a zero matrix)."""
    s = np.asarray(s, dtype=float)
    top = float(s.max()) if s.size else 0.0
    return float((s * s).sum() / (top * top)) if top > 0 else 0.0


#: machine epsilon per weight dtype (by name): the precision the weights were stored with
_EPS = {"float64": 2.0**-52, "double": 2.0**-52, "bfloat16": 2.0**-7, "float16": 2.0**-10}


def dtype_eps(*dtypes: Any) -> float:
    """The coarsest machine epsilon of ``dtypes`` (names or NumPy dtypes): float32's for an
    unknown or integer dtype, float8's 2^-3 (e4m3) for any ``float8``."""
    out = 0.0
    for d in dtypes:
        name = str(getattr(d, "name", d)).lower().removeprefix("torch.")
        eps = 2.0**-3 if name.startswith("float8") else _EPS.get(name, 2.0**-23)
        out = max(out, eps)
    return out


def numerical_zero(
    s: np.ndarray, shape: tuple[int, int], eps: float = 0.0, rms: float = 0.0
) -> float:
    """Singular values at or below this are zero: NumPy's ``matrix_rank`` tolerance, and the
    largest singular value the rounding of weights of precision ``eps`` and root-mean-square
    ``rms`` can make, ``eps * rms * (sqrt(m) + sqrt(n))`` (rounding errors are at most
    ``eps * |w|`` per entry, so about i.i.d. with std under ``eps * rms``: the MP edge of that)."""
    top = float(np.max(s)) if np.size(s) else 0.0
    m, n = shape
    numeric = top * max(shape) * float(np.finfo(np.float64).eps)
    return max(numeric, eps * rms * (math.sqrt(m) + math.sqrt(n)))


def update_kind(
    *,
    changed: bool,
    signal_rank: int,
    min_dim: int,
    bulk_ks: float,
    signal_share: float,
    low_rank_fraction: float = LOW_RANK_FRACTION,
    bulk_ks_max: float = BULK_KS_MAX,
) -> str:
    """The update's kind (one of :data:`KINDS`) by the documented rule.

    - ``unchanged``: the relative change is at most ``min_change``.
    - ``low-rank``: 1 <= signal rank <= ``low_rank_fraction * min(m, n)`` and the rest of the
      spectrum is noise (its KS distance to the MP law <= ``bulk_ks_max``, or it holds under
      1% of the energy).
    - ``noise``: no singular value above the MP edge and the spectrum fits the MP law.
    - ``full-rank``: anything else (many directions above the edge, or a spectrum that is
      neither a few spikes nor MP noise).
    """
    if not changed:
        return "unchanged"
    bulk_is_noise = (not math.isnan(bulk_ks) and bulk_ks <= bulk_ks_max) or (
        1 - signal_share < NEGLIGIBLE_BULK
    )
    if 1 <= signal_rank <= low_rank_fraction * min_dim and bulk_is_noise:
        return "low-rank"
    if signal_rank == 0 and bulk_is_noise:
        return "noise"
    return "full-rank"

"""Shape of a slice as matrices, and element statistics.

Slices with ``ndim >= 3`` are read in PyTorch layout ``(out, in, *kernel)`` and cut into
``prod(kernel)`` kernel-position matrices of shape ``(out, in)`` (WeightWatcher's Conv2d
treatment, also applied to Conv1d/Conv3d); see :mod:`diffract.kernels._linalg`.
"""

from __future__ import annotations

import numpy as np

from diffract.kernels.spec import define, one_of

#: accepted values of ``lora_evals``: every eigenvalue of a LoRA update, or its top r only
LORA_EVALS = ("all", "rank")


def lora_kept_evals(slice_info, lora_evals: str = "all") -> int | None:
    """How many eigenvalues of the slice's ESD are kept: the adapter rank r for a LoRA update
    slice (meta ``"lora"`` with mode ``"update"``) when ``lora_evals="rank"``, else None (all).

    Args:
        slice_info: the slice (its meta is read).
        lora_evals: one of :data:`LORA_EVALS`.

    Returns:
        r, or None for the whole spectrum.
    """
    if lora_evals not in LORA_EVALS:
        raise ValueError(f"lora_evals must be one of {LORA_EVALS}, got {lora_evals!r}")
    lora = slice_info.meta.get("lora") if slice_info.meta else None
    if lora_evals == "rank" and lora and lora.get("mode", "update") == "update":
        return int(lora["rank"])
    return None


@define(outputs="greater_dim", min_ndim=2, family="shape")
def greater_dim(weights):
    """N = max(rows, cols) of one matrix of the slice: the slice itself when 2-D (Diffract's
    ``greater_dim``, max of the shape), one ``(out, in)`` kernel-position matrix when
    ``ndim >= 3`` (PyTorch layout).

    WeightWatcher: ``N``."""
    return int(max(weights.shape[0], weights.shape[1]))


@define(outputs="lower_dim", min_ndim=2, family="shape")
def lower_dim(weights):
    """M = min(rows, cols) of one matrix of the slice (as ``greater_dim``; Diffract's
    ``lower_dim`` for a 2-D slice).

    WeightWatcher: ``M``."""
    return int(min(weights.shape[0], weights.shape[1]))


@define(outputs="receptive_field", min_ndim=2, family="shape")
def receptive_field(weights):
    """Number of kernel-position matrices P = prod(shape[2:]) (1 for a 2-D slice).

    WeightWatcher: ``rf``."""
    return int(np.prod(weights.shape[2:], dtype=np.int64)) if weights.ndim > 2 else 1


@define(outputs="aspect_ratio", family="shape")
def aspect_ratio(greater_dim, lower_dim):
    """Q = N / M >= 1 (greater over lower dimension). WeightWatcher: ``Q``."""
    return float(greater_dim) / float(lower_dim)


@define(outputs="num_evals", family="shape", option_rules={"lora_evals": one_of(*LORA_EVALS)})
def num_evals(lower_dim, receptive_field, slice_info, lora_evals="all"):
    """Number of ESD eigenvalues: M * P (M per kernel-position matrix); r for a rank-r LoRA
    update with ``lora_evals="rank"`` (WeightWatcher keeps only the top r, its truncated SVD;
    set by ``conventions="weightwatcher"``).

    WeightWatcher: ``num_evals``."""
    kept = lora_kept_evals(slice_info, lora_evals)
    total = int(lower_dim) * int(receptive_field)
    return total if kept is None else min(kept, total)


@define(outputs="num_params", family="stats")
def num_params(weights):
    """Number of entries of the slice: prod(shape)."""
    return int(weights.size)


@define(outputs="weights_mean", min_ndim=1, family="stats")
def weights_mean(weights):
    """Mean of the entries, mean(w), accumulated in float64."""
    return float(np.mean(weights, dtype=np.float64))


@define(outputs="weights_std", min_ndim=1, family="stats")
def weights_std(weights):
    """Population standard deviation of the entries, sqrt(mean((w - mean(w))^2)) (ddof=0),
    accumulated in float64 (divided by max |w| first when the squares would leave float64's
    range, so weights near 1e300 or 1e-300 get their true std, not inf or 0)."""
    w = np.asarray(weights, dtype=np.float64)
    top = float(np.max(np.abs(w))) if w.size else 0.0
    if top == 0.0 or not np.isfinite(top) or 1e-150 < top < 1e150:
        return float(np.std(w))
    return float(top * np.std(w / top))

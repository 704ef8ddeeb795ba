"""Norms (per slice, from the singular values) and their model-level aggregates."""

from __future__ import annotations

import math

import numpy as np

from diffract.kernels.spec import define


def scaled_l2(values) -> float:
    """sqrt(sum v^2) in float64 without overflow or underflow of the squares: the values are
    divided by max |v| first when squaring them would leave float64's range (ordinary
    values are summed as they are, bit for bit)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return 0.0
    top = float(np.max(np.abs(v)))
    if top == 0.0 or not math.isfinite(top) or 1e-150 < top < 1e150 / math.sqrt(v.size):
        return float(np.sqrt(np.dot(v, v)))
    u = v / top
    return float(top * np.sqrt(np.dot(u, u)))


def finite_values(values):
    out = []
    for v in values:
        if v is None:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def nonempty(vals, name):
    if not vals:
        raise ValueError(f"no slice of this model has a finite {name}")
    return vals


@define(outputs="frob_norm", family="norms")
def frob_norm(weights_svals):
    """Frobenius norm ||W||_F = sqrt(sum_i s_i^2) (over all kernel positions = sqrt of the sum
    of squared entries)."""
    return scaled_l2(weights_svals)


@define(outputs="spectral_norm", family="norms")
def spectral_norm(weights_svals):
    """Spectral norm ||W||_2 = s_max (largest over kernel positions).

    WeightWatcher's ``spectral_norm`` column is lambda_max = s_max^2 (times 1/2 for Conv2d),
    i.e. ``esd_max`` with esd_scale="ww"."""
    return float(np.max(weights_svals))


@define(outputs="l2_norm", family="norms")
def l2_norm(max_weights_sval):
    """Operator 2-norm, = max_weights_sval (the published Diffract name of spectral_norm)."""
    return float(max_weights_sval)


@define(outputs="nuclear_norm", family="norms")
def nuclear_norm(weights_svals):
    """Nuclear (trace) norm ||W||_* = sum_i s_i."""
    return float(np.sum(weights_svals))


@define(outputs="stable_rank", family="ranks")
def stable_rank(frob_norm, spectral_norm):
    """Stable rank ||W||_F^2 / ||W||_2^2 = sum_i s_i^2 / s_max^2.

    WeightWatcher: ``stable_rank`` (= norm / spectral_norm), identical."""
    if spectral_norm == 0:
        raise ValueError("stable rank is undefined for an all-zero matrix (spectral norm 0)")
    return float((frob_norm / spectral_norm) ** 2)  # the ratio first: no overflow at 1e300


@define(outputs="layer_log_norm", family="norms")
def layer_log_norm(frob_norm):
    """log10 ||W||_F^2 of the slice (WeightWatcher's per-layer ``log_norm`` for a 2-D weight;
    for Conv2d WW's value is this + log10(1/2), i.e. ``esd_log_norm`` with esd_scale="ww")."""
    if frob_norm <= 0:
        raise ValueError("log norm is undefined for an all-zero matrix")
    return float(2.0 * math.log10(frob_norm))


@define(outputs="layer_log_spectral_norm", family="norms")
def layer_log_spectral_norm(spectral_norm):
    """log10 ||W||_2^2 = log10 s_max^2 (WeightWatcher's per-layer ``log_spectral_norm`` for a
    2-D weight; Conv2d: ``esd_log_max`` with esd_scale="ww")."""
    if spectral_norm <= 0:
        raise ValueError("log spectral norm is undefined for an all-zero matrix")
    return float(2.0 * math.log10(spectral_norm))


@define(outputs="esd_norm", family="norms")
def esd_norm(esd):
    """Trace of the ESD, sum_i lambda_i (= c * ||W||_F^2). WeightWatcher: ``norm`` with
    esd_scale="ww" (WW: sum of its eigenvalues)."""
    return float(np.sum(esd))


@define(outputs="esd_log_norm", family="norms")
def esd_log_norm(esd_norm):
    """log10 sum_i lambda_i. WeightWatcher: ``log_norm`` with esd_scale="ww"."""
    if esd_norm <= 0:
        raise ValueError("log norm is undefined for an all-zero matrix")
    return float(math.log10(esd_norm))


@define(outputs="esd_log_max", family="norms")
def esd_log_max(esd_max):
    """log10 lambda_max. WeightWatcher: ``log_spectral_norm`` with esd_scale="ww"."""
    if esd_max <= 0:
        raise ValueError("log spectral norm is undefined for an all-zero matrix")
    return float(math.log10(esd_max))


# --- per model ------------------------------------------------------------------------------


@define(outputs="log_norm", level="model", family="norms")
def log_norm(layer_log_norm):
    """Mean over the model's slices of log10 ||W||_F^2 (WeightWatcher summary ``log_norm``
    for dense models)."""
    return float(np.mean(nonempty(finite_values(layer_log_norm), "layer_log_norm")))


@define(outputs="log_spectral_norm", level="model", family="norms")
def log_spectral_norm(layer_log_spectral_norm):
    """Mean over the model's slices of log10 ||W||_2^2 (WeightWatcher summary
    ``log_spectral_norm`` for dense models)."""
    return float(
        np.mean(nonempty(finite_values(layer_log_spectral_norm), "layer_log_spectral_norm"))
    )


@define(outputs="log_prod_frob_norm", level="model", family="norms")
def log_prod_frob_norm(frob_norm):
    """log10 prod_l ||W_l||_F = sum_l log10 ||W_l||_F over the model's matrix slices."""
    vals = nonempty([v for v in finite_values(frob_norm) if v > 0], "frob_norm")
    return float(np.sum(np.log10(vals)))


@define(outputs="log_prod_spectral_norm", level="model", family="norms")
def log_prod_spectral_norm(spectral_norm):
    """log10 prod_l ||W_l||_2 = sum_l log10 s_max(W_l) over the model's matrix slices."""
    vals = nonempty([v for v in finite_values(spectral_norm) if v > 0], "spectral_norm")
    return float(np.sum(np.log10(vals)))


@define(outputs="param_norm", level="model", family="norms")
def param_norm(frob_norm):
    """Sum of the squared Frobenius norms of the model's matrix slices (ndim >= 2),
    sum_l ||W_l||_F^2: Diffract's ``param_norm`` (the *square* of the Euclidean norm of those
    weights; 1-D slices such as biases are not in it, as Diffract extracts matrices only)."""
    vals = nonempty(finite_values(frob_norm), "frob_norm")
    return float(sum(v * v for v in vals))

"""Across models: each slice against the slice of the same name in a reference model
(option ``reference`` = its model_id, given at run time): singular-vector overlaps and
agreements, and checkpoint-comparison fields."""

from __future__ import annotations

import math

import numpy as np

from diffract.kernels.spec import define


def _same_shape(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(
            f"{what}: shapes differ between the model ({a.shape}) and the reference ({b.shape})"
        )
    return a, b


def _overlap(u, ref_u):
    """|U_ref^T U|: rows are the reference's vectors (Diffract's first model of a pair)."""
    u, ref_u = _same_shape(u, ref_u, "singular-vector overlap")
    return np.abs(np.swapaxes(ref_u, -1, -2) @ u)


@define(outputs="l_overlap", level="cross", family="compare", transient=("l_overlap",))
def l_overlap(weights_lsvs, ref_weights_lsvs, reference=None):
    """|U_ref^T U|: absolute overlaps of the left singular vectors (k x k; per kernel position
    for ndim >= 3), in ascending singular-value order. Entry (i, j) = |<u_ref_i, u_j>|: rows
    are the reference's vectors, as Diffract's ``l_overlap`` of a pair (first model, second)
    whose first model is our reference (the first id, sorted, when none is given).
    Transient unless asked for by name."""
    return _overlap(weights_lsvs, ref_weights_lsvs)


@define(outputs="r_overlap", level="cross", family="compare", transient=("r_overlap",))
def r_overlap(weights_rsvs, ref_weights_rsvs, reference=None):
    """|V_ref^T V|: absolute overlaps of the right singular vectors (rows: the reference's)."""
    return _overlap(weights_rsvs, ref_weights_rsvs)


@define(outputs="l_agreement", level="cross", family="compare")
def l_agreement(l_overlap, reference=None):
    """Diagonal of l_overlap: |<u_i, u_ref_i>| for each singular index i, in ascending
    singular-value order (Diffract's, as ``weights_lsvs``)."""
    return np.diagonal(np.asarray(l_overlap), axis1=-2, axis2=-1).copy()


@define(outputs="r_agreement", level="cross", family="compare")
def r_agreement(r_overlap, reference=None):
    """Diagonal of r_overlap: |<v_i, v_ref_i>|."""
    return np.diagonal(np.asarray(r_overlap), axis1=-2, axis2=-1).copy()


@define(outputs="max_l_agreement", level="cross", family="compare")
def max_l_agreement(l_overlap, reference=None):
    """Row maxima of l_overlap: the best match of each left singular vector of the reference
    among this model's, max_j |<u_ref_i, u_j>| (Diffract's ``max_l_agreement``)."""
    return np.max(np.asarray(l_overlap), axis=-1)


@define(outputs="max_r_agreement", level="cross", family="compare")
def max_r_agreement(r_overlap, reference=None):
    """Row maxima of r_overlap: max_j |<v_ref_i, v_j>|, as ``max_l_agreement``."""
    return np.max(np.asarray(r_overlap), axis=-1)


@define(outputs="avg_l_agreement", level="cross", family="compare")
def avg_l_agreement(l_agreement, reference=None):
    """Mean over singular indices of l_agreement: (1/k) sum_i |<u_i, u_ref_i>|."""
    return float(np.mean(l_agreement))


@define(outputs="avg_r_agreement", level="cross", family="compare")
def avg_r_agreement(r_agreement, reference=None):
    """Mean over singular indices of r_agreement: (1/k) sum_i |<v_i, v_ref_i>|."""
    return float(np.mean(r_agreement))


@define(outputs="avg_max_l_agreement", level="cross", family="compare")
def avg_max_l_agreement(max_l_agreement, reference=None):
    """Mean of max_l_agreement: (1/k) sum_i max_j |<u_ref_i, u_j>|."""
    return float(np.mean(max_l_agreement))


@define(outputs="avg_max_r_agreement", level="cross", family="compare")
def avg_max_r_agreement(max_r_agreement, reference=None):
    """Mean of max_r_agreement: (1/k) sum_i max_j |<v_ref_i, v_j>|."""
    return float(np.mean(max_r_agreement))


@define(outputs="delta_frob_norm", level="cross", family="compare")
def delta_frob_norm(weights, ref_weights, reference=None):
    """||W - W_ref||_F over all entries (float64)."""
    a, b = _same_shape(weights, ref_weights, "delta_frob_norm")
    d = a.astype(np.float64).ravel() - b.astype(np.float64).ravel()
    return float(math.sqrt(np.dot(d, d)))


@define(outputs="relative_change", level="cross", family="compare")
def relative_change(weights, ref_weights, reference=None):
    """||W - W_ref||_F / ||W_ref||_F. Raises when the reference slice is all zero."""
    a, b = _same_shape(weights, ref_weights, "relative_change")
    b64 = b.astype(np.float64).ravel()
    nb = math.sqrt(np.dot(b64, b64))
    if nb == 0:
        raise ValueError("relative change is undefined: the reference slice is all zero")
    d = a.astype(np.float64).ravel() - b64
    return float(math.sqrt(np.dot(d, d)) / nb)


@define(outputs="weights_cosine", level="cross", family="compare")
def weights_cosine(weights, ref_weights, reference=None):
    """Cosine similarity <W, W_ref> / (||W||_F ||W_ref||_F) of the flattened slices."""
    a, b = _same_shape(weights, ref_weights, "weights_cosine")
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = math.sqrt(np.dot(a64, a64)), math.sqrt(np.dot(b64, b64))
    if na == 0 or nb == 0:
        raise ValueError("cosine similarity is undefined for an all-zero slice")
    return float(np.dot(a64, b64) / (na * nb))


@define(outputs="pl_alpha_drift", level="cross", family="compare")
def pl_alpha_drift(pl_alpha, ref_pl_alpha, reference=None):
    """Spectral drift of alpha: pl_alpha - pl_alpha(reference)."""
    return float(pl_alpha - ref_pl_alpha)


@define(outputs="spectral_norm_drift", level="cross", family="compare")
def spectral_norm_drift(spectral_norm, ref_spectral_norm, reference=None):
    """Relative change of the spectral norm: s_max / s_max(reference) - 1."""
    if ref_spectral_norm == 0:
        raise ValueError("the reference slice has spectral norm 0")
    return float(spectral_norm / ref_spectral_norm - 1.0)


@define(outputs="esd_w1_drift", level="cross", family="compare")
def esd_w1_drift(esd, ref_esd, reference=None):
    """Wasserstein-1 distance between the ESD and the reference slice's ESD (ESD units)."""
    from scipy import stats

    return float(stats.wasserstein_distance(np.asarray(esd), np.asarray(ref_esd)))

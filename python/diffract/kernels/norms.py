"""Norms and the stable rank, from the singular values of the slice as a matrix."""

from __future__ import annotations

import numpy as np

from .._kernel import define


def as_matrix(weights: np.ndarray) -> np.ndarray:
    """The slice as a 2-D matrix: first axis x product of the other axes."""
    if weights.ndim == 2:
        return weights
    return weights.reshape(weights.shape[0], -1)


@define(outputs="weights_svals", min_ndim=2, family="decompositions")
def weights_svals(weights):
    """Singular values s_1 >= ... >= s_M of the slice as a matrix (float64, descending)."""
    w = as_matrix(weights).astype(np.float64, copy=False)
    return np.linalg.svd(w, compute_uv=False)


@define(outputs="frob_norm", family="norms")
def frob_norm(weights_svals):
    """Frobenius norm: sqrt(sum_i s_i^2)."""
    return float(np.sqrt(np.sum(np.square(weights_svals))))


@define(outputs="spectral_norm", family="norms")
def spectral_norm(weights_svals):
    """Spectral norm: the largest singular value s_1."""
    return float(weights_svals[0])


@define(outputs="nuclear_norm", family="norms")
def nuclear_norm(weights_svals):
    """Nuclear norm: sum_i s_i."""
    return float(np.sum(weights_svals))


@define(outputs="stable_rank", family="ranks")
def stable_rank(frob_norm, spectral_norm):
    """Stable rank: ||W||_F^2 / ||W||_2^2."""
    if spectral_norm == 0:
        raise ValueError("stable rank is undefined for an all-zero matrix (spectral norm 0)")
    return float(frob_norm**2 / spectral_norm**2)

"""Shape and element statistics of a slice."""

from __future__ import annotations

import numpy as np

from .._kernel import define


@define(outputs=("greater_dim", "lower_dim"), min_ndim=2, family="shape")
def matrix_dims(weights):
    """N = the larger and M = the smaller dimension of the slice as a matrix
    (first axis x product of the others)."""
    rows = weights.shape[0]
    cols = int(np.prod(weights.shape[1:]))
    return max(rows, cols), min(rows, cols)


@define(outputs="aspect_ratio", family="shape")
def aspect_ratio(greater_dim, lower_dim):
    """Q = N / M >= 1 (greater over lower dimension)."""
    return float(greater_dim) / float(lower_dim)


@define(outputs="num_params", family="stats")
def num_params(weights):
    """Number of entries of the slice."""
    return int(weights.size)


@define(outputs="weights_mean", min_ndim=1, family="stats")
def weights_mean(weights):
    """Mean of the entries, accumulated in float64."""
    return float(np.mean(weights, dtype=np.float64))


@define(outputs="weights_std", min_ndim=1, family="stats")
def weights_std(weights):
    """Population standard deviation of the entries (ddof=0), accumulated in float64."""
    return float(np.std(weights, dtype=np.float64))

"""Distribution statistics of the entries of a slice (any number of dims >= 1)."""

from __future__ import annotations

import numpy as np

from diffract.kernels.spec import at_least, define


def _centered_moments(weights, what=None):
    """The deviations from the mean and the variance m2. With ``what`` (a statistic's name),
    raises for a constant slice, where that statistic is undefined (m2 = 0)."""
    w = np.asarray(weights, dtype=np.float64).ravel()
    mu = w.mean()
    d = w - mu
    m2 = float(np.mean(d * d))
    if m2 == 0 and what is not None:
        raise ValueError(f"{what} is undefined for a constant slice (variance 0)")
    return d, m2


@define(outputs="weights_skew", min_ndim=1, family="stats")
def weights_skew(weights):
    """Skewness (Fisher-Pearson, biased): m3 / m2^(3/2) with m_k = mean((w - mean(w))^k).
    Raises for a constant slice (m2 = 0)."""
    d, m2 = _centered_moments(weights, "skewness")
    return float(np.mean(d**3) / m2**1.5)


@define(outputs="weights_kurtosis", min_ndim=1, family="stats")
def weights_kurtosis(weights):
    """Excess kurtosis (Fisher, biased): m4 / m2^2 - 3 (0 for a Gaussian).
    Raises for a constant slice (m2 = 0)."""
    d, m2 = _centered_moments(weights, "kurtosis")
    return float(np.mean(d**4) / m2**2 - 3.0)


@define(
    outputs="weights_sparsity",
    min_ndim=1,
    family="stats",
    option_rules={"sparsity_atol": at_least(0)},
)
def weights_sparsity(weights, sparsity_atol=0.0):
    """Fraction of entries with |w| <= sparsity_atol (exact zeros by default)."""
    w = np.asarray(weights)
    return float(np.count_nonzero(np.abs(w) <= sparsity_atol) / w.size)


@define(
    outputs="weights_outlier_fraction",
    min_ndim=1,
    family="stats",
    option_rules={"outlier_sigmas": at_least(0)},
)
def weights_outlier_fraction(weights, outlier_sigmas=3.0):
    """Fraction of entries with |w - mean(w)| > outlier_sigmas * std(w) (population std).
    A Gaussian gives 0.0027 at the default 3 sigmas."""
    d, m2 = _centered_moments(weights)
    if m2 == 0:
        return 0.0
    return float(np.count_nonzero(np.abs(d) > outlier_sigmas * np.sqrt(m2)) / d.size)


@define(outputs="weights_max_abs", min_ndim=1, family="stats")
def weights_max_abs(weights):
    """Largest magnitude max |w| (the entrywise max-norm)."""
    return float(np.max(np.abs(weights)))


@define(outputs="weights_min", min_ndim=1, family="stats")
def weights_min(weights):
    """Smallest entry min(w)."""
    return float(np.min(weights))


@define(outputs="weights_max", min_ndim=1, family="stats")
def weights_max(weights):
    """Largest entry max(w)."""
    return float(np.max(weights))


@define(outputs="weights_l2_norm", min_ndim=1, family="stats")
def weights_l2_norm(weights):
    """Euclidean norm of all entries, sqrt(sum w^2) (equals frob_norm for matrices; defined
    for every slice)."""
    from diffract.kernels.norms import scaled_l2

    return scaled_l2(weights)

"""Random-matrix theory: Marchenko-Pastur bulk, Tracy-Widom spike bound, distances between the
ESD and the ESD of the randomly permuted weights."""

from __future__ import annotations

import math

import numpy as np

from diffract.kernels.spec import between, define

#: Chiani (2014) gamma approximation of the Tracy-Widom (beta=1) law:
#: TW1 ~ Gamma(k, theta) - alpha
_TW1_K, _TW1_THETA, _TW1_SHIFT = 46.446, 0.186054, 9.84801


@define(outputs=("mp_esd_max", "mp_esd_min", "mp_bulk_std"), family="rmt")
def marchenko_pastur_fit(weights_std, aspect_ratio, greater_dim, esd_scale_factor):
    """Marchenko-Pastur bulk of an N x M matrix with i.i.d. entries of variance sigma^2 =
    weights_std^2: its ESD (c * s^2) fills [lambda_-, lambda_+] with
    lambda_+- = (c N) sigma^2 (1 +- 1/sqrt(Q))^2, Q = N/M.
    mp_bulk_std = sqrt(c N) * sigma is the MP scale in ESD units (= weights_std for the
    default esd_scale "N"). WeightWatcher's mp_fit instead fits sigma to the ESD (its
    ``sigma_mp``); its randomized ``max_rand_eval`` estimates the same edge as mp_esd_max."""
    q = float(aspect_ratio)
    scale2 = esd_scale_factor * greater_dim * weights_std**2
    r = 1.0 / math.sqrt(q)
    return float(scale2 * (1 + r) ** 2), float(scale2 * (1 - r) ** 2), float(math.sqrt(scale2))


@define(outputs="mp_sval_max", family="rmt")
def mp_sval_max(mp_esd_max, esd_scale_factor):
    """Bulk edge in singular-value units: sqrt(lambda_+ / c) = sigma (sqrt(N) + sqrt(M))."""
    return float(math.sqrt(mp_esd_max / esd_scale_factor))


def _mp_cdf(x, a, b, q):
    """CDF of the MP law on [a, b] (density ~ sqrt((b-x)(x-a)) / x), numerically integrated
    on a Chebyshev grid x = a + (b-a)(1-cos t)/2 (no edge singularities), at points x."""
    t = np.linspace(0.0, math.pi, 8193)
    xs = a + (b - a) * (1 - np.cos(t)) / 2.0
    dx_dt = (b - a) * np.sin(t) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        dens = np.sqrt(np.clip((b - xs) * (xs - a), 0, None)) / xs
    dens = np.where(np.isfinite(dens), dens, 0.0) * dx_dt
    # Q = 1 (a = 0): sqrt(x(b-x))/x * dx/dt stays finite; the t=0 point is a removable 0/0
    cum = np.concatenate(([0.0], np.cumsum((dens[1:] + dens[:-1]) / 2.0 * np.diff(t))))
    cum /= cum[-1]
    return np.interp(x, xs, cum, left=0.0, right=1.0)


@define(outputs="mp_ks", family="rmt")
def mp_ks(esd, mp_esd_min, mp_esd_max, aspect_ratio):
    """Two-sided KS distance between the ESD and the fitted MP law:
    max_i max(|F_MP(lambda_(i)) - (i-1)/n|, |F_MP(lambda_(i)) - i/n|), lambda sorted."""
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    n = lam.size
    f = _mp_cdf(lam, mp_esd_min, mp_esd_max, aspect_ratio)
    k = np.arange(n)
    return float(max(np.max(np.abs(f - k / n)), np.max(np.abs(f - (k + 1) / n))))


@define(outputs="mp_num_spikes", family="rmt")
def mp_num_spikes(esd, mp_esd_max):
    """#{lambda_i > lambda_+}: eigenvalues above the MP bulk edge."""
    return int(np.count_nonzero(np.asarray(esd) > mp_esd_max))


@define(outputs="mp_concentration", family="rmt")
def mp_concentration(mp_num_spikes, esd):
    """Share of eigenvalues above the bulk edge: mp_num_spikes / #lambda."""
    return float(mp_num_spikes / np.asarray(esd).size)


@define(outputs="mp_presence", family="rmt")
def mp_presence(esd, mp_esd_max):
    """(lambda_max - lambda_+) / (lambda_max - lambda_min); negative when no eigenvalue leaves
    the bulk."""
    lam = np.asarray(esd)
    span = float(lam[-1] - lam[0])
    if span <= 0:
        raise ValueError("presence is undefined for a flat spectrum")
    return float((lam[-1] - mp_esd_max) / span)


@define(outputs="tw_esd_bound", family="rmt", option_rules={"p_value_threshold": between(0, 1)})
def tw_esd_bound(greater_dim, lower_dim, mp_bulk_std, p_value_threshold=0.05):
    """Tracy-Widom bound on the largest bulk eigenvalue (Johnstone 2001, real case): with
    n = N, p = M, mu = (sqrt(n-1) + sqrt(p))^2, s = (sqrt(n-1) + sqrt(p)) (1/sqrt(n-1) +
    1/sqrt(p))^(1/3), the largest eigenvalue of a white W^T W / sigma^2 exceeds
    mu + s q only with probability p_value_threshold, q = the (1 - p) quantile of TW1
    (Chiani's gamma approximation Gamma(46.446, 0.186054) - 9.84801). In ESD units:
    bound = mp_bulk_std^2 / N * (mu + s q)."""
    if not 0 < p_value_threshold < 1:
        raise ValueError(f"p_value_threshold must be in (0, 1), got {p_value_threshold}")
    n, p = float(greater_dim), float(lower_dim)
    a = math.sqrt(max(n - 1.0, 1.0)) + math.sqrt(p)
    mu = a * a
    s = a * (1.0 / math.sqrt(max(n - 1.0, 1.0)) + 1.0 / math.sqrt(p)) ** (1.0 / 3.0)
    from scipy import stats

    q = float(stats.gamma.ppf(1.0 - p_value_threshold, _TW1_K, scale=_TW1_THETA)) - _TW1_SHIFT
    return float(mp_bulk_std**2 / n * (mu + s * q))


@define(outputs="tw_num_spikes", family="rmt")
def tw_num_spikes(esd, tw_esd_bound):
    """#{lambda_i > tw_esd_bound}: eigenvalues significantly above the bulk."""
    return int(np.count_nonzero(np.asarray(esd) > tw_esd_bound))


@define(outputs="w1_rand_distance", family="rmt")
def w1_rand_distance(esd, esd_rand):
    """Wasserstein-1 distance between the ESD and the ESD of the permuted weights,
    int |F_esd - F_rand| d lambda (scipy.stats.wasserstein_distance), in ESD units."""
    from scipy import stats

    return float(stats.wasserstein_distance(np.asarray(esd), np.asarray(esd_rand)))


@define(outputs="js_rand_distance", family="rmt")
def js_rand_distance(esd, esd_rand):
    """WeightWatcher's ``rand_distance`` (its ``jensen_shannon_distance``): the Jensen-Shannon
    distance sqrt((KL(p||m) + KL(q||m))/2) (natural log) between the *sorted eigenvalue
    vectors* read as distributions over the index, p = esd, q = esd_rand, m = (p + q) / 2
    formed before normalizing (scipy's entropy normalizes p, q and m each). Scale-free. With
    the whole spectrum sum(esd) = sum(esd_rand) (a permutation keeps ||W||_F^2), so m is the
    mixture of the normalized p and q; a LoRA update's top r (``lora_evals="rank"``) have
    other sums, and m weights them by their sums as WeightWatcher's. (WeightWatcher draws its
    permutation unseeded, so this agrees in distribution.)"""
    p = np.sort(np.asarray(esd, dtype=np.float64))
    q = np.sort(np.asarray(esd_rand, dtype=np.float64))
    if p.size != q.size:
        raise ValueError("esd and esd_rand have different lengths")
    from scipy import stats

    m = (p + q) / 2.0
    div = (stats.entropy(p, m) + stats.entropy(q, m)) / 2.0
    return float(math.sqrt(max(div, 0.0)))


@define(outputs="rand_soft_rank", family="rmt")
def rand_soft_rank(esd_max, esd_rand):
    """max(randomized ESD) / lambda_max, of one replica (``esd_rand``, as WeightWatcher's).
    WeightWatcher: ``ww_softrank``."""
    return float(np.max(esd_rand) / esd_max)


@define(outputs="rand_max_dist", family="rmt")
def rand_max_dist(esd_max, esd_rand):
    """lambda_max - max(randomized ESD) of one replica (``esd_rand``), in ESD units.
    WeightWatcher: ``ww_maxdist`` (times esd_ww_ratio)."""
    return float(esd_max - np.max(esd_rand))

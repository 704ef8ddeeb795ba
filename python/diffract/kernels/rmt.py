"""Random-matrix theory: Marchenko-Pastur bulk, Tracy-Widom spike bound, distances between the
ESD and the ESD of the randomly permuted weights."""

from __future__ import annotations

import functools
import math

import numpy as np

from diffract.kernels.spec import between, define

#: Painleve II integration range and grid: q(s) ~ Ai(s) from s = 8 down to s = -12 (TW1's
#: CDF is below 1e-30 there)
_PII_START, _PII_END = 8.0, -12.0


@functools.cache
def _tw1_log_cdf():
    """log F1(s) of the Tracy-Widom law (beta = 1) as a dense function of s: the Hastings-
    McLeod solution of Painleve II, q'' = s q + 2 q^3 with q ~ Ai(s) for large s, integrated
    downwards together with I(s) = int_s^inf (x - s) q(x)^2 dx (I' = -K), K(s) = int_s^inf
    q^2 (K' = -q^2) and J(s) = int_s^inf q (J' = -q); then log F1 = -(I + J) / 2
    (Tracy & Widom 1996: F1^2 = F2 exp(-J), F2 = exp(-I))."""
    from scipy.integrate import quad, solve_ivp
    from scipy.special import airy

    s0 = _PII_START
    ai, aip, _, _ = airy(s0)
    y0 = [
        ai,
        aip,
        quad(lambda x: (x - s0) * airy(x)[0] ** 2, s0, np.inf)[0],
        quad(lambda x: airy(x)[0] ** 2, s0, np.inf)[0],
        quad(lambda x: airy(x)[0], s0, np.inf)[0],
    ]

    def rhs(s, y):
        q, dq, _i, k, _j = y
        return [dq, s * q + 2 * q**3, -k, -(q * q), -q]

    sol = solve_ivp(
        rhs, (s0, _PII_END), y0, method="DOP853", rtol=1e-12, atol=1e-18, dense_output=True
    )
    if sol.status != 0:
        raise RuntimeError(f"Tracy-Widom: the Painleve II integration failed ({sol.message})")

    def log_cdf(s: float) -> float:
        y = sol.sol(s)
        return float(-(y[2] + y[4]) / 2.0)

    return log_cdf


@functools.lru_cache(maxsize=64)
def tw1_quantile(prob: float) -> float:
    """The ``prob`` quantile of the Tracy-Widom law TW1 (largest eigenvalue of the GOE /
    real Wishart, centred and scaled): the root of F1(s) = prob (see :func:`_tw1_log_cdf`).

    Args:
        prob: a probability in (0, 1), at most 1 - 1e-12.

    Returns:
        s with F1(s) = prob (e.g. 0.9793 for 0.95, 2.0234 for 0.99).
    """
    from scipy.optimize import brentq

    if not 0.0 < prob < 1.0:
        raise ValueError(f"a quantile needs a probability in (0, 1), got {prob}")
    log_cdf, target = _tw1_log_cdf(), math.log(prob)
    lo, hi = _PII_END + 1.0, _PII_START - 0.5
    if not log_cdf(lo) < target < log_cdf(hi):
        raise ValueError(f"the TW1 quantile of {prob} lies outside [{lo}, {hi}]")
    return float(brentq(lambda s: log_cdf(s) - target, lo, hi, xtol=1e-13, rtol=1e-13))


@define(outputs=("mp_esd_max", "mp_esd_min", "mp_bulk_std"), family="rmt")
def marchenko_pastur_fit(
    weights_std, aspect_ratio, greater_dim, lower_dim, esd_scale_factor, esd_rand, esd_max
):
    """Marchenko-Pastur bulk of an N x M matrix (Diffract's definition): with s2 = c N
    sigma^2 (sigma = weights_std; = sigma^2 for the default esd_scale "N"), its ESD fills
    [s2 (1 - 1/sqrt(Q))^2, s2 (1 + 1/sqrt(Q))^2], Q = N/M. When eigenvalues of the
    randomized ESD (``esd_rand``) lie above that upper edge, s2 is re-estimated from the
    randomized bulk: s2 = sum(esd_rand below the edge) / M. Then
    mp_esd_max = min(s2 (1 + 1/sqrt(Q))^2, lambda_max), mp_esd_min = s2 (1 - 1/sqrt(Q))^2,
    mp_bulk_std = sqrt(s2) (= weights_std for esd_scale "N" without the correction).
    WeightWatcher's mp_fit instead fits sigma to the ESD (the ``mp_fit_*`` fields)."""
    q = float(aspect_ratio)
    r = 1.0 / math.sqrt(q)
    s2 = esd_scale_factor * greater_dim * weights_std**2
    edge = s2 * (1 + r) ** 2
    rand = np.asarray(esd_rand, dtype=np.float64)
    if np.any(rand > edge):
        s2 = float(np.sum(rand[rand <= edge])) / float(lower_dim)
        edge = s2 * (1 + r) ** 2
    return float(min(edge, esd_max)), float(s2 * (1 - r) ** 2), float(math.sqrt(s2))


@define(outputs="mp_sval_max", family="rmt")
def mp_sval_max(mp_esd_max, esd_scale_factor):
    """Bulk edge in singular-value units: sqrt(lambda_+ / c) (= sqrt(lambda_+ N) for the
    default esd_scale "N", Diffract's formula)."""
    return float(math.sqrt(mp_esd_max / esd_scale_factor))


def mp_cdf(x, q: float, sigma: float) -> np.ndarray:
    """CDF of the Marchenko-Pastur law of ratio y = 1/q (q = N/M >= 1) and scale sigma^2, in
    closed form. On [a, b] = sigma^2 [(1 - sqrt(y))^2, (1 + sqrt(y))^2] the density is
    proportional to sqrt((z-a)(b-z)) / z, whose antiderivative is
    P(z) = sqrt((z-a)(b-z)) + (a+b)/2 asin((2z-a-b)/(b-a)) - sqrt(ab) asin(((a+b)z - 2ab) /
    (z (b-a))); F = (P(z) - P(a)) / (P(b) - P(a)), 0 below a and 1 above b (no atom at 0
    for y <= 1)."""
    y = 1.0 / float(q)
    s2 = float(sigma) ** 2
    a = s2 * (1 - math.sqrt(y)) ** 2
    b = s2 * (1 + math.sqrt(y)) ** 2
    z = np.atleast_1d(np.asarray(x, dtype=np.float64))
    out = np.where(z >= b, 1.0, 0.0)
    inside = (z > a) & (z < b)
    if np.any(inside):
        zi = z[inside]
        u = np.clip((2 * zi - a - b) / (b - a), -1.0, 1.0)
        v = np.clip(((a + b) * zi - 2 * a * b) / (zi * (b - a)), -1.0, 1.0)
        prim = (
            np.sqrt(np.clip((zi - a) * (b - zi), 0.0, None))
            + (a + b) / 2 * np.arcsin(u)
            - math.sqrt(a * b) * np.arcsin(v)
        )
        lo = (math.sqrt(a * b) - (a + b) / 2) * math.pi / 2  # P(a)
        total = ((a + b) / 2 - math.sqrt(a * b)) * math.pi  # P(b) - P(a)
        out[inside] = (prim - lo) / total
    return np.clip(out, 0.0, 1.0)


@define(outputs="mp_ks", family="rmt")
def mp_ks(esd, mp_esd_min, mp_esd_max, aspect_ratio, mp_bulk_std):
    """Two-sided KS distance between the eigenvalues inside the bulk window
    (mp_esd_min, mp_esd_max) and the MP law of scale mp_bulk_std conditioned on that window
    (Diffract's definition): with F the MP CDF (:func:`mp_cdf`), G = (F - F(min)) /
    (F(max) - F(min)) and the n windowed eigenvalues sorted, max_i max(i/n - G_i,
    G_i - (i-1)/n). 1.0 when no eigenvalue, or no MP mass, lies in the window."""
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    inside = lam[(lam > mp_esd_min) & (lam < mp_esd_max)]
    n = inside.size
    if n == 0 or not mp_bulk_std > 0:
        return 1.0
    f_lo, f_hi = mp_cdf([mp_esd_min, mp_esd_max], aspect_ratio, mp_bulk_std)
    if f_hi - f_lo <= 1e-16:
        return 1.0
    g = (mp_cdf(inside, aspect_ratio, mp_bulk_std) - f_lo) / (f_hi - f_lo)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - g), np.max(g - (i - 1) / n)))


@define(outputs="mp_num_spikes", family="rmt")
def mp_num_spikes(esd, mp_esd_max):
    """#{lambda_i > lambda_+}: eigenvalues above the MP bulk edge, as a float (Diffract's
    type: NaN can be stored)."""
    return float(np.count_nonzero(np.asarray(esd) > mp_esd_max))


@define(outputs="mp_concentration", family="rmt")
def mp_concentration(esd, mp_esd_min, mp_esd_max):
    """Share of the eigenvalues inside the MP bulk: #{mp_esd_min <= lambda_i <= mp_esd_max}
    / #lambda (Diffract's definition)."""
    lam = np.asarray(esd, dtype=np.float64)
    return float(np.count_nonzero((lam >= mp_esd_min) & (lam <= mp_esd_max)) / lam.size)


@define(outputs="mp_presence", family="rmt")
def mp_presence(esd_min, esd_max, mp_esd_min, mp_esd_max):
    """Width of the MP bulk over the width of the spectrum, clipped to [0, 1] (Diffract's
    definition): (lambda_+ - lambda_-) / (lambda_max - lambda_min + 1e-16)."""
    width = (mp_esd_max - mp_esd_min) / (esd_max - esd_min + 1e-16)
    return float(min(max(width, 0.0), 1.0))


@define(outputs="tw_esd_bound", family="rmt", option_rules={"p_value_threshold": between(0, 1)})
def tw_esd_bound(greater_dim, lower_dim, mp_bulk_std, p_value_threshold=0.005):
    """Tracy-Widom bound on the largest bulk eigenvalue (Johnstone 2001, real case): with
    n = N, p = M, a = sqrt(n-1) + sqrt(p), mu = a^2, s = a (1/sqrt(n-1) + 1/sqrt(p))^(1/3),
    the largest eigenvalue of a white W^T W / sigma^2 exceeds mu + s q only with
    probability p_value_threshold (default 0.005, Diffract's), q = the (1 - p) quantile of
    the Tracy-Widom law TW1 (:func:`tw1_quantile`, from its Painleve II representation).
    In ESD units: bound = mp_bulk_std^2 / N * (mu + s q)."""
    if not 0 < p_value_threshold < 1:
        raise ValueError(f"p_value_threshold must be in (0, 1), got {p_value_threshold}")
    n, p = float(greater_dim), float(lower_dim)
    a = math.sqrt(max(n - 1.0, 1.0)) + math.sqrt(p)
    mu = a * a
    s = a * (1.0 / math.sqrt(max(n - 1.0, 1.0)) + 1.0 / math.sqrt(p)) ** (1.0 / 3.0)
    q = tw1_quantile(1.0 - p_value_threshold)
    return float(mp_bulk_std**2 / n * (mu + s * q))


@define(outputs="tw_num_spikes", family="rmt")
def tw_num_spikes(esd, tw_esd_bound):
    """#{lambda_i > tw_esd_bound}: eigenvalues significantly above the bulk, as a float
    (Diffract's type)."""
    return float(np.count_nonzero(np.asarray(esd) > tw_esd_bound))


@define(outputs="w1_rand_distance", family="rmt")
def w1_rand_distance(esd, esd_rand):
    """Wasserstein-1 distance between the ESD and the ESD of the permuted weights divided by
    the mean eigenvalue (Diffract's definition: scale-free, comparable across layers):
    int |F_esd - F_rand| d lambda / mean(lambda) (scipy.stats.wasserstein_distance); 0 for an
    all-zero spectrum."""
    from scipy import stats

    lam = np.asarray(esd, dtype=np.float64)
    mean = float(lam.mean())
    if not mean > 0:
        return 0.0
    return float(stats.wasserstein_distance(lam, np.asarray(esd_rand)) / mean)


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

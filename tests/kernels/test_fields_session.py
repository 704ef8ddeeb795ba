"""End to end through the engine, options set the way users set them: the field library run
by Session on the conv net golden weights reproduces WeightWatcher's values on both
eigenvalue scales (``compute.configure(esd_scale="ww")`` and the default), and cross-model
fields work with ``reference=``. Every value the run did not make is accounted for in its
report: no failures, and the not-applicable count is exactly the 1-D bias slices'."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from diffract import Session

GOLDEN = Path(__file__).parents[1] / "golden"
WEIGHTS = dict(np.load(GOLDEN / "convnet.npz"))
BIASES = sorted(k for k in WEIGHTS if k.endswith(".bias"))
SPECTRAL = [
    "pl_alpha",
    "pl_ks",
    "pl_esd_xmin",
    "pl_num_spikes",
    "matrix_rank",
    "matrix_entropy",
    "stable_rank",
    "esd_log_norm",
    "pl_warning",
    "esd_ww_ratio",
]
FIELDS = [*SPECTRAL, "weights_std"]


@pytest.fixture(scope="module", params=["ww", "default"])
def convnet(request):
    """A session per eigenvalue scale, all fields applied once: (rows by name, report)."""
    with Session(profile="ram") as s:
        if request.param == "ww":
            assert s.compute.configure(esd_scale="ww") == {"esd_scale": "ww"}
        s.models.add(WEIGHTS, model_id="convnet")
        report = s.compute.apply(*FIELDS, progress=False)
        rows = {r["name"]: r for r in s.results.export_table(*FIELDS, export_format="list")}
        yield request.param, rows, report


def test_run_report_accounts_for_every_value(convnet):
    _, rows, report = convnet
    assert report.failures == []
    # not applicable: the spectral fields on the five 1-D bias slices, nothing else
    assert report.not_applicable == len(BIASES) * len(SPECTRAL)
    for name in BIASES:
        assert [f for f in SPECTRAL if rows[name][f] is not None] == [], name
        assert rows[name]["weights_std"] > 0, name  # statistics apply to biases
    for name in sorted(set(WEIGHTS) - set(BIASES)):
        assert [f for f in FIELDS if rows[name][f] is None] == [], name


def test_session_matches_weightwatcher_on_convnet(convnet):
    scale, rows, _ = convnet
    gold = json.loads((GOLDEN / "ww_convnet.json").read_text())
    for name, g in gold.items():
        r = rows[name]
        # eigenvalue-valued columns: WeightWatcher's scale is ours * esd_ww_ratio
        ratio = r["esd_ww_ratio"] if scale == "default" else 1.0
        assert scale == "default" or r["esd_ww_ratio"] == 1.0, name
        assert math.isclose(r["pl_alpha"], g["alpha"], rel_tol=1e-5), name
        assert math.isclose(r["pl_ks"], g["D"], rel_tol=1e-5), name
        assert math.isclose(r["pl_esd_xmin"] * ratio, g["xmin"], rel_tol=1e-5), name
        assert r["pl_num_spikes"] == g["num_pl_spikes"] and r["matrix_rank"] == g["matrix_rank"], (
            name
        )
        assert math.isclose(r["matrix_entropy"], g["entropy"], rel_tol=1e-5), name
        assert math.isclose(r["esd_log_norm"] + math.log10(ratio), g["log_norm"], rel_tol=1e-5), (
            name
        )
        assert r["pl_warning"] == g["warning"], name
    if scale == "default":  # the default scale is not WeightWatcher's on these layers
        assert all(rows[name]["esd_ww_ratio"] != 1.0 for name in gold)


def test_session_cross_model_fields():
    rng = np.random.default_rng(0)
    tuned = {
        k: v + 0.01 * rng.standard_normal(v.shape).astype(np.float32) for k, v in WEIGHTS.items()
    }
    cross = ["delta_frob_norm", "weights_cosine", "avg_l_agreement", "pl_alpha_drift"]
    with Session(profile="ram") as s:
        s.models.add(WEIGHTS, model_id="base")
        s.models.add(tuned, model_id="tuned")
        report = s.compute.apply(*cross, progress=False, reference="base")
        assert report.failures == []
        # the spectral comparisons do not apply to the 1-D biases; the weight deltas do
        assert report.not_applicable == len(BIASES) * 2
        rows = s.results.export_table(*cross, export_format="list", reference="base")
    got = {(r["model_id"], r["name"]): r for r in rows}
    for name in BIASES:
        r = got[("tuned", name)]
        assert r["avg_l_agreement"] is None and r["pl_alpha_drift"] is None, name
        want = float(np.linalg.norm(tuned[name].astype(np.float64) - WEIGHTS[name]))
        assert math.isclose(r["delta_frob_norm"], want, rel_tol=1e-6), name
    r = got[("tuned", "8.weight")]
    want = float(np.linalg.norm(tuned["8.weight"].astype(np.float64) - WEIGHTS["8.weight"]))
    assert math.isclose(r["delta_frob_norm"], want, rel_tol=1e-6)
    assert 0.9 < r["weights_cosine"] <= 1.0
    assert 0 < r["avg_l_agreement"] <= 1.0
    assert isinstance(r["pl_alpha_drift"], float)

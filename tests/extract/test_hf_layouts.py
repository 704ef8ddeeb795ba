"""Hugging Face layouts, offline: a model folder with config.json, and repo ids resolved in a
fake local hub cache (HF_HUB_CACHE), values checked against safetensors' own loader."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from diffract import Session
from diffract._errors import ExtractionError
from diffract.extract import extract

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD = "fedcba9876543210fedcba9876543210fedcba98"


def _tensors(rng, scale=1.0):
    return {
        "model.embed_tokens.weight": (scale * rng.standard_normal((50, 16))).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((16, 16)).astype(np.float32),
        "model.layers.0.self_attn.k_proj.weight": rng.standard_normal((8, 16)).astype(np.float32),
        "model.layers.0.self_attn.v_proj.weight": rng.standard_normal((8, 16)).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((24, 16)).astype(np.float16),
        "model.layers.0.input_layernorm.weight": np.ones(16, np.float32),
        "model.norm.weight": np.ones(16, np.float32),
    }


CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 24,
    "vocab_size": 50,
    "tie_word_embeddings": True,
}


def write_sharded(folder, tensors, config=CONFIG):
    """A Hugging Face model folder: two shards, the index and config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    weight_map = {}
    for fname, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(folder / fname))
        weight_map.update(dict.fromkeys(keys, fname))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def fake_cache(root, repo_id, snapshots, refs):
    """The hub cache layout: blobs/, snapshots/<commit>/ files linking to blobs, refs/."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    for commit, tensors in snapshots.items():
        staging = root / f"staging-{commit}"
        write_sharded(staging, tensors)
        snap = repo / "snapshots" / commit
        snap.mkdir(parents=True)
        for f in sorted(staging.iterdir()):
            blob = repo / "blobs" / f"{commit[:8]}-{f.name}"
            f.rename(blob)
            os.symlink(os.path.relpath(blob, snap), snap / f.name)
        staging.rmdir()
    (repo / "refs").mkdir()
    for ref, commit in refs.items():
        (repo / "refs" / ref).write_text(commit)
    return repo


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.fixture
def cache(tmp_path, monkeypatch, rng):
    root = tmp_path / "hub"
    new, old = _tensors(rng), _tensors(rng, scale=3.0)
    fake_cache(root, "Org/Tiny-LM", {COMMIT: new, OLD: old}, {"main": COMMIT, "v0": OLD})
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.delenv("HF_HOME", raising=False)
    return root, new, old


def _reference(snapshot):
    """Every tensor of a snapshot through safetensors' own loader."""
    out = {}
    for f in sorted(snapshot.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def test_repo_id_resolves_to_the_main_snapshot_and_values_match(cache):
    root, new, _ = cache
    ex = extract("Org/Tiny-LM")
    snap = root / "models--Org--Tiny-LM" / "snapshots" / COMMIT
    assert ex.source == str(snap)
    ref = _reference(snap)
    got = {leaf.name: np.asarray(leaf.array.load()) for leaf in ex.leaves}
    assert set(got) == set(ref) == set(new)
    for name, want in ref.items():
        np.testing.assert_array_equal(got[name], want)
        assert got[name].dtype == want.dtype


def test_revision_by_tag_and_by_commit(cache):
    _, _, old = cache
    for spec in ("Org/Tiny-LM@v0", f"Org/Tiny-LM@{OLD}"):
        ex = extract(spec)
        assert ex.source.endswith(OLD)
        w = {leaf.name: leaf.array.load() for leaf in ex.leaves}["model.embed_tokens.weight"]
        np.testing.assert_array_equal(w, old["model.embed_tokens.weight"])


def test_config_supplies_heads_kv_heads_head_dim_and_the_tied_head(cache):
    ex = extract("Org/Tiny-LM")
    assert ex.config["num_attention_heads"] == 4
    assert ex.config["num_key_value_heads"] == 2
    assert ex.config["head_dim"] == 16 // 4  # derived as transformers does
    assert ex.config["tie_word_embeddings"] is True
    assert "tie_word_embeddings=true" in ex.skipped["lm_head.weight"]
    meta = {leaf.name: leaf.meta for leaf in ex.leaves}
    assert meta["model.layers.0.self_attn.k_proj.weight"]["attention"] == {
        "heads": 4,
        "kv_heads": 2,
        "head_dim": 4,
    }
    assert "attention" not in meta["model.layers.0.mlp.up_proj.weight"]


def test_gpt2_config_names_and_default_kv_heads(tmp_path, rng):
    folder = write_sharded(
        tmp_path / "gpt2",
        {"h.0.attn.c_attn.weight": rng.standard_normal((8, 24)).astype(np.float32)},
        config={"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1},
    )
    ex = extract(str(folder))
    assert ex.config["num_attention_heads"] == 2
    assert ex.config["num_key_value_heads"] == 2  # no GQA: every head has its own K/V
    assert ex.config["head_dim"] == 4
    assert ex.leaves[0].meta["attention"]["heads"] == 2


def test_a_repo_id_not_in_the_cache_says_where_it_looked(cache):
    root, _, _ = cache
    with pytest.raises(ExtractionError, match="never downloads") as err:
        extract("Org/Absent")
    assert str(root / "models--Org--Absent") in str(err.value)
    with pytest.raises(ExtractionError, match="no snapshot for revision 'nope'"):
        extract("Org/Tiny-LM@nope")


def test_hf_home_is_used_when_hf_hub_cache_is_unset(tmp_path, monkeypatch, rng):
    fake_cache(tmp_path / "home" / "hub", "a/b", {COMMIT: _tensors(rng)}, {"main": COMMIT})
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert extract("a/b").source.endswith(COMMIT)


def test_without_huggingface_hub_the_layout_is_read_directly(cache, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    assert extract("Org/Tiny-LM@v0").source.endswith(OLD)


def test_session_adds_a_repo_id_by_reference_and_reads_the_weights_back(cache):
    _, new, _ = cache
    s = Session(profile="ram")
    s.models.add("Org/Tiny-LM", "tiny")
    assert s.models.info("tiny")["weights"] == "referenced"
    w = s.models.weights("model.layers.0.self_attn.q_proj.weight", "tiny")
    np.testing.assert_array_equal(w, new["model.layers.0.self_attn.q_proj.weight"])


def test_a_missing_relative_path_that_is_no_repo_id_is_still_not_found(tmp_path):
    with pytest.raises(ExtractionError, match="checkpoint not found"):
        extract(str(tmp_path / "no" / "such" / "model.safetensors"))


def test_an_index_naming_a_shard_outside_the_folder_is_refused(tmp_path, rng):
    folder = write_sharded(tmp_path / "m", _tensors(rng))
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    name = next(iter(data["weight_map"]))
    save_file({name: np.zeros((2, 2), np.float32)}, str(tmp_path / "evil.safetensors"))
    data["weight_map"][name] = "../evil.safetensors"
    index.write_text(json.dumps(data))
    with pytest.raises(ExtractionError, match="lies outside"):
        extract(str(folder))


def test_a_folder_with_one_safetensors_file_and_config(tmp_path, rng):
    t = _tensors(rng)
    folder = tmp_path / "single"
    folder.mkdir()
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**CONFIG, "tie_word_embeddings": False}))
    ex = extract(str(folder))
    assert ex.config["tie_word_embeddings"] is False and "lm_head.weight" not in ex.skipped
    ref = load_file(str(folder / "model.safetensors"))
    for leaf in ex.leaves:
        np.testing.assert_array_equal(leaf.array.load(), ref[leaf.name])


def test_a_config_that_is_not_json_is_a_named_error(tmp_path, rng):
    folder = write_sharded(tmp_path / "m", _tensors(rng))
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ExtractionError, match=r"config\.json: not a JSON config"):
        extract(str(folder))

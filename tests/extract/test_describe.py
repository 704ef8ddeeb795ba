"""Describe before compute: ``diffract describe`` and ``models.describe`` read headers only.

Counts are checked against the arrays written; "no tensor data read" is proven three ways:
a folder whose data bytes are overwritten with garbage still describes the same, no memory
map is ever made (np.memmap refuses), and the bytes the process reads (``/proc/self/io``)
stay far below the data's size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q, quants
from safetensors.numpy import save_file

from diffract import Session
from diffract._errors import ExtractionError
from diffract.cli import main
from diffract.extract.describe import describe
from test_hf_layouts import COMMIT, CONFIG, fake_cache, write_sharded


def _model(rng, layers=3, hidden=64, kv=32, ffn=96, vocab=200):
    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = rng.standard_normal((hidden, hidden)).astype(np.float16)
        t[p + "self_attn.k_proj.weight"] = rng.standard_normal((kv, hidden)).astype(np.float16)
        t[p + "mlp.up_proj.weight"] = rng.standard_normal((ffn, hidden)).astype(np.float32)
        t[p + "input_layernorm.weight"] = np.ones(hidden, np.float32)
    t["model.norm.weight"] = np.ones(hidden, np.float32)
    return t


@pytest.fixture
def rng():
    return np.random.default_rng(11)


@pytest.fixture
def folder(tmp_path, rng):
    t = _model(rng)
    return write_sharded(tmp_path / "m", t), t


def _garble_data(folder: Path) -> int:
    """Overwrite every shard's tensor data with 0xFF bytes (NaNs; headers intact)."""
    total = 0
    for f in folder.glob("*.safetensors"):
        raw = bytearray(f.read_bytes())
        start = 8 + int.from_bytes(raw[:8], "little")
        raw[start:] = b"\xff" * (len(raw) - start)
        total += len(raw) - start
        f.write_bytes(bytes(raw))
    return total


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_counts_per_type_layer_and_status_match_the_arrays(folder):
    path, t = folder
    d = describe(str(path))
    assert d.format == "safetensors" and len(d.files) == 2
    assert {x.name for x in d.tensors} == set(t) | {"lm_head.weight"}
    real = [x for x in d.tensors if x.name in t]
    assert d.n_params == sum(a.size for a in t.values())
    assert d.nbytes == sum(a.nbytes for a in t.values())
    for x in real:
        assert x.shape == t[x.name].shape
        assert x.dtype == str(t[x.name].dtype)
        assert x.nbytes == t[x.name].nbytes
    layers = d.by_layer()
    for i in range(3):
        want = [a for n, a in t.items() if n.startswith(f"model.layers.{i}.")]
        assert layers[i] == {
            "tensors": len(want),
            "params": sum(a.size for a in want),
            "bytes": sum(a.nbytes for a in want),
        }
    assert layers[None]["params"] == t["model.embed_tokens.weight"].size + 64
    types = d.by_type()
    assert types["dense"]["tensors"] == 9 and types["norm"]["tensors"] == 4
    assert types["embedding"]["params"] == 200 * 64
    assert d.by_status() == {"analyzed": 10, "stats only": 4, "skipped": 1}
    assert "tie_word_embeddings=true" in d.skipped()["lm_head.weight"]
    assert d.config["num_key_value_heads"] == CONFIG["num_key_value_heads"]
    total = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    assert d.file_bytes == total and 0 < d.header_bytes < total - d.nbytes + 2000


def test_describes_a_folder_whose_data_is_garbage_without_touching_it(folder, monkeypatch):
    path, _ = folder
    before = describe(str(path)).to_dict()
    data_bytes = _garble_data(path)

    def refuse(*args, **kwargs):
        raise AssertionError("describe memory-mapped tensor data")

    monkeypatch.setattr(np, "memmap", refuse)
    r0 = _rchar()
    after = describe(str(path)).to_dict()
    read = _rchar() - r0
    assert after == before  # garbage data: the same description
    assert read < data_bytes / 4, (read, data_bytes)


def test_reads_only_headers_of_a_large_folder(tmp_path):
    """A 64 MB checkpoint: the process reads a few kB (header, index, config)."""
    big = {
        f"model.layers.{i}.mlp.up_proj.weight": np.zeros((1024, 2048), np.float32) for i in range(8)
    }
    write_sharded(tmp_path / "big", big)
    r0 = _rchar()
    d = describe(str(tmp_path / "big"))
    read = _rchar() - r0
    assert d.nbytes == 8 * 1024 * 2048 * 4
    assert read < 200_000, read


def test_session_describe_and_the_repo_id_route(tmp_path, monkeypatch, rng):
    t = _model(rng, layers=1)
    fake_cache(tmp_path / "hub", "Org/Desc", {COMMIT: t}, {"main": COMMIT})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    s = Session(profile="ram")
    d = s.models.describe("Org/Desc")
    assert d.source.endswith(COMMIT) and d.n_params == sum(a.size for a in t.values())
    assert s.models.describe("Org/Desc", revision=COMMIT).to_dict() == d.to_dict()
    assert s.models.ids() == []  # nothing added
    with pytest.raises(ExtractionError, match="not in the local Hugging Face cache"):
        s.models.describe("Org/Other")


def test_describe_a_gguf_keeps_quant_types_and_on_disk_bytes(tmp_path, rng):
    a = rng.standard_normal((64, 256)).astype(np.float32)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_uint32("llama.attention.head_count", 4)
    q = quants.quantize(a, Q.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", q, raw_shape=q.shape, raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(256, np.float32))
    block, per_block = gguf.GGML_QUANT_SIZES[Q.Q8_1]
    w.add_tensor(
        "blk.0.ffn_up.weight",
        np.zeros((2, 256 // block * per_block), np.uint8),
        raw_shape=(2, 256 // block * per_block),
        raw_dtype=Q.Q8_1,
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    d = describe(tmp_path / "m.gguf")
    by = {x.name: x for x in d.tensors}
    qp = by["model.layers.0.self_attn.q_proj.weight"]
    assert qp.meta == {"gguf_name": "blk.0.attn_q.weight", "gguf_type": "Q8_0"}
    assert qp.nbytes == q.nbytes and qp.params == a.size and qp.status == "analyzed"
    assert by["model.layers.0.input_layernorm.weight"].status == "stats only"
    up = by["model.layers.0.mlp.up_proj.weight"]
    assert up.status == "skipped" and "Q8_1" in up.reason  # described, not refused
    assert d.config["num_attention_heads"] == 4


def test_cli_describe_text_and_json(folder, capsys):
    path, t = folder
    assert main(["describe", str(path)]) == 0
    out = capsys.readouterr().out
    assert "10 analyzed (matrices), 4 stats only (1-D), 1 skipped" in out
    assert f"{sum(a.size for a in t.values()):,} parameters" in out
    assert main(["describe", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n_params"] == sum(a.size for a in t.values())
    assert data["by_layer"]["0"]["tensors"] == 4
    assert main(["describe", str(path), "--tensors"]) == 0
    assert "model.layers.2.mlp.up_proj.weight  [96, 64]  float32  dense  analyzed" in (
        capsys.readouterr().out
    )


def test_cli_describe_errors_are_one_line(tmp_path, capsys):
    assert main(["describe", "Org/NotCached"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("diffract: error:") and "never downloads" in err
    (tmp_path / "m.onnx").write_bytes(b"x")
    assert main(["describe", str(tmp_path / "m.onnx")]) == 2
    assert "describe reads the headers" in capsys.readouterr().err


def test_a_single_safetensors_file(tmp_path, rng):
    a = {"w": rng.standard_normal((5, 7)).astype(np.float32), "b": np.zeros(5, np.float32)}
    save_file(a, str(tmp_path / "x.safetensors"))
    d = describe(tmp_path / "x.safetensors")
    assert [(x.name, x.status) for x in d.tensors] == [("b", "stats only"), ("w", "analyzed")]
    assert d.n_params == 40 and d.nbytes == 160
    assert math.isclose(d.file_bytes, (tmp_path / "x.safetensors").stat().st_size)

"""GGUF files: small files written with gguf's own writer, values checked against
gguf's reader + dequantizer, names lined up with the safetensors of the same model, and
crafted or truncated files refused with a named error before anything is allocated."""

from __future__ import annotations

import struct
import tracemalloc

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q, quants

from diffract import Session
from diffract._errors import ExtractionError
from diffract.extract import extract
from diffract.extract.gguf import GGUFError, hf_name

N_HEAD, N_KV, HIDDEN, FFN = 4, 2, 256, 512
HEAD_DIM = HIDDEN // N_HEAD


def llama_cpp_permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf LlamaModel.permute, written out independently."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def k_quant_blocks(rng, rows, cols, qtype):
    """Raw Q4_K / Q6_K blocks: random bytes with finite float16 scales (gguf cannot quantize
    these types, so the blocks are made by hand in llama.cpp's block layout)."""
    block, per_block = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, per_block), dtype=np.uint8)
    scale = np.float16(0.01) if qtype == Q.Q6_K else np.float16(0.02)
    half = np.frombuffer(np.array([scale], np.float16).tobytes(), np.uint8)
    if qtype == Q.Q4_K:  # d, dmin: the first two float16s
        raw[..., 0:2] = half
        raw[..., 2:4] = half
    else:  # Q6_K: d is the last float16 (after ql, qh and the int8 scales)
        raw[..., per_block - 2 :] = half
    return raw.reshape(rows, -1)


def hf_weights(rng):
    """A one-layer Llama (GQA) in Hugging Face names."""
    return {
        "model.embed_tokens.weight": rng.standard_normal((64, HIDDEN)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((HIDDEN, HIDDEN)).astype(
            np.float32
        ),
        "model.layers.0.self_attn.k_proj.weight": rng.standard_normal(
            (N_KV * HEAD_DIM, HIDDEN)
        ).astype(np.float32),
        "model.layers.0.self_attn.v_proj.weight": rng.standard_normal(
            (N_KV * HEAD_DIM, HIDDEN)
        ).astype(np.float32),
        "model.layers.0.self_attn.o_proj.weight": rng.standard_normal((HIDDEN, HIDDEN)).astype(
            np.float32
        ),
        "model.layers.0.mlp.gate_proj.weight": rng.standard_normal((FFN, HIDDEN)).astype(
            np.float32
        ),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((FFN, HIDDEN)).astype(np.float32),
        "model.layers.0.mlp.down_proj.weight": rng.standard_normal((HIDDEN, FFN)).astype(
            np.float32
        ),
        "model.layers.0.input_layernorm.weight": rng.standard_normal(HIDDEN).astype(np.float32),
        "model.layers.0.post_attention_layernorm.weight": rng.standard_normal(HIDDEN).astype(
            np.float32
        ),
        "model.norm.weight": rng.standard_normal(HIDDEN).astype(np.float32),
        "lm_head.weight": rng.standard_normal((64, HIDDEN)).astype(np.float32),
    }


#: Hugging Face name -> GGUF name, as llama.cpp's converter writes them
GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def write_gguf(path, tensors, arch="llama", extra=None):
    """Write ``{gguf name: (array, qtype)}`` with gguf's writer (quantizing with gguf.quants;
    a uint8 array is written as raw blocks of ``qtype``)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.attention.head_count", N_HEAD)
    w.add_uint32(f"{arch}.attention.head_count_kv", N_KV)
    w.add_uint32(f"{arch}.embedding_length", HIDDEN)
    w.add_uint32(f"{arch}.block_count", 1)
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(100)])  # a long array
    for key, value in (extra or {}).items():
        w.add_string(key, value)
    for name, (arr, qtype) in tensors.items():
        if arr.dtype == np.uint8 or qtype in (Q.F32, Q.F16):
            data = (
                arr
                if arr.dtype == np.uint8
                else arr.astype(np.float16 if qtype == Q.F16 else np.float32)
            )
            if arr.dtype == np.uint8:
                w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
            else:
                w.add_tensor(name, data)
        else:
            q = quants.quantize(arr, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def reference(path):
    """GGUF name -> (dequantized array, type name) through gguf's own reader."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        out[t.name] = (
            quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape),
            t.tensor_type.name,
        )
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(3)


def test_every_required_type_matches_gguf_dequantize(tmp_path, rng):
    a = rng.standard_normal((8, 512)).astype(np.float32)
    tensors = {
        "blk.0.ffn_up.weight": (a, Q.Q8_0),
        "blk.0.ffn_gate.weight": (k_quant_blocks(rng, 8, 512, Q.Q4_K), Q.Q4_K),
        "blk.0.ffn_down.weight": (k_quant_blocks(rng, 8, 512, Q.Q6_K), Q.Q6_K),
        "blk.0.attn_v.weight": (a, Q.F16),
        "blk.0.attn_output.weight": (a, Q.BF16),
        "token_embd.weight": (a, Q.F32),
    }
    path = write_gguf(tmp_path / "m.gguf", tensors)
    ref = reference(path)
    ex = extract(str(path))
    got = {leaf.meta["gguf_name"]: leaf for leaf in ex.leaves}
    assert set(got) == set(tensors)
    for name, (want, tname) in ref.items():
        leaf = got[name]
        assert leaf.meta["gguf_type"] == tname
        assert leaf.name == hf_name(name, "llama")
        arr = np.asarray(leaf.array.load(), dtype=np.float32)
        assert arr.shape == want.shape == (8, 512)
        np.testing.assert_array_equal(arr, want.astype(np.float32))
        assert np.isfinite(arr).all() and np.abs(arr).max() > 0
    # the reference itself is close to the floats that were quantized
    np.testing.assert_allclose(ref["blk.0.ffn_up.weight"][0], a, atol=0.05)
    np.testing.assert_allclose(ref["blk.0.attn_output.weight"][0], a, rtol=1e-2)
    assert got["blk.0.attn_v.weight"].dtype == "float16"
    assert got["blk.0.ffn_up.weight"].dtype == "float32"


def test_names_and_values_line_up_with_the_safetensors_of_the_same_model(tmp_path, rng):
    hf = hf_weights(rng)
    tensors = {}
    for name, w in hf.items():
        if name.endswith("q_proj.weight"):
            w = llama_cpp_permute(w, N_HEAD)
        elif name.endswith("k_proj.weight"):
            w = llama_cpp_permute(w, N_KV)
        tensors[GGUF_NAMES[name]] = (w, Q.F32)
    path = write_gguf(tmp_path / "f32.gguf", tensors)
    ex = extract(str(path))
    got = {leaf.name: np.asarray(leaf.array.load()) for leaf in ex.leaves}
    assert set(got) == set(hf)
    for name, want in hf.items():
        np.testing.assert_array_equal(got[name], want)  # Q and K rows back in HF order
    meta = {leaf.name: leaf.meta for leaf in ex.leaves}
    assert meta["model.layers.0.self_attn.k_proj.weight"]["rotary_unpermuted"] is True
    assert meta["model.layers.0.self_attn.k_proj.weight"]["attention"]["kv_heads"] == N_KV
    assert "rotary_unpermuted" not in meta["model.layers.0.self_attn.v_proj.weight"]
    assert ex.config["num_key_value_heads"] == N_KV and ex.config["head_dim"] == HEAD_DIM


def test_quantized_q_rows_are_unpermuted_after_dequantizing(tmp_path, rng):
    q = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
    path = write_gguf(
        tmp_path / "q8.gguf", {"blk.0.attn_q.weight": (llama_cpp_permute(q, N_HEAD), Q.Q8_0)}
    )
    ((deq, _),) = reference(path).values()
    unperm = deq.reshape(N_HEAD, HEAD_DIM // 2, 2, HIDDEN).swapaxes(1, 2).reshape(HIDDEN, HIDDEN)
    leaf = extract(str(path)).leaves[0]
    np.testing.assert_array_equal(leaf.array.load(), unperm)
    np.testing.assert_allclose(leaf.array.load(), q, atol=0.05)  # the HF weight, quantized


def test_other_architectures_keep_their_gguf_names(tmp_path, rng):
    a = rng.standard_normal((4, 32)).astype(np.float32)
    path = write_gguf(tmp_path / "x.gguf", {"blk.0.attn_q.weight": (a, Q.F32)}, arch="rwkv6")
    leaf = extract(str(path)).leaves[0]
    assert leaf.name == "blk.0.attn_q.weight"
    np.testing.assert_array_equal(leaf.array.load(), a)  # no unpermuting outside Llama


def test_an_unsupported_type_is_a_clear_error_naming_it(tmp_path, rng):
    block, per_block = gguf.GGML_QUANT_SIZES[Q.Q8_1]
    raw = rng.integers(0, 255, size=(2, 64 // block * per_block), dtype=np.uint8)
    path = write_gguf(tmp_path / "q81.gguf", {"blk.0.ffn_up.weight": (raw, Q.Q8_1)})
    with pytest.raises(GGUFError, match=r"'blk\.0\.ffn_up\.weight'.*Q8_1.*types read:.*Q4_K"):
        extract(str(path))


def test_integer_tensors_are_skipped_with_the_reason(tmp_path, rng):
    w = gguf.GGUFWriter(str(tmp_path / "i.gguf"), "llama")
    w.add_tensor("token_embd.weight", rng.standard_normal((4, 32)).astype(np.float32))
    w.add_tensor("blk.0.positions", np.arange(8, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ex = extract(str(tmp_path / "i.gguf"))
    assert [leaf.name for leaf in ex.leaves] == ["model.embed_tokens.weight"]
    assert "I32" in ex.skipped["blk.0.positions"]


def test_session_references_a_gguf_and_reads_slices_back(tmp_path, rng):
    a = rng.standard_normal((16, 64)).astype(np.float32)
    path = write_gguf(tmp_path / "m.gguf", {"blk.0.ffn_up.weight": (a, Q.Q8_0)})
    s = Session(profile="ram")
    (sl,) = s.models.add(str(path), "g")
    assert sl.meta["gguf_type"] == "Q8_0"
    assert s.models.info("g")["weights"] == "referenced"
    ((want, _),) = reference(path).values()
    np.testing.assert_array_equal(s.models.weights("model.layers.0.mlp.up_proj.weight", "g"), want)


def test_memory_is_bounded_tensor_by_tensor(tmp_path, rng):
    tensors = {
        f"blk.{i}.ffn_up.weight": (rng.standard_normal((256, 1024)).astype(np.float32), Q.Q8_0)
        for i in range(6)
    }
    path = write_gguf(tmp_path / "big.gguf", tensors)
    one = 256 * 1024 * 4  # one dequantized tensor, float32
    extract(str(path)).leaves[0].array.load()  # imports and caches first: not the file's cost
    tracemalloc.start()
    try:
        ex = extract(str(path))
        _, peak_extract = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        arr = ex.leaves[0].array.load()
        _, peak_load = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert arr.shape == (256, 1024)
    assert peak_extract < one // 4  # the header only: no tensor is read
    assert peak_load < 4 * one  # one tensor's working set, not the file's six


# --- untrusted input ----------------------------------------------------------------------


def _small(tmp_path, rng):
    a = rng.standard_normal((4, 64)).astype(np.float32)
    return write_gguf(tmp_path / "s.gguf", {"blk.0.ffn_up.weight": (a, Q.F32)})


def _tensor_info_at(data, name=b"blk.0.ffn_up.weight"):
    """Offset of the n_dims field after a tensor's name in the tensor table."""
    i = data.rfind(name)
    assert i > 0
    return i + len(name)


def _refused(path, match):
    tracemalloc.start()
    try:
        with pytest.raises(ExtractionError, match=match):
            extract(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000  # refused before allocating anything its claims would need


def test_truncated_file_is_refused(tmp_path, rng):
    path = _small(tmp_path, rng)
    data = path.read_bytes()
    for cut in (10, 40, len(data) // 2, len(data) - 4):
        path.write_bytes(data[:cut])
        _refused(path, r"GGUF|truncated")


def test_a_huge_claimed_shape_is_refused_before_allocation(tmp_path, rng):
    path = _small(tmp_path, rng)
    data = bytearray(path.read_bytes())
    at = _tensor_info_at(data)
    struct.pack_into("<QQ", data, at + 4, 2**40, 2**40)  # dims: 2**80 floats
    path.write_bytes(bytes(data))
    _refused(path, r"runs past the end")


def test_an_offset_past_the_end_is_refused(tmp_path, rng):
    path = _small(tmp_path, rng)
    data = bytearray(path.read_bytes())
    at = _tensor_info_at(data)
    struct.pack_into("<Q", data, at + 4 + 16 + 4, 2**20)  # offset, aligned
    path.write_bytes(bytes(data))
    _refused(path, r"runs past the end")


def test_huge_counts_and_string_lengths_are_refused(tmp_path, rng):
    path = _small(tmp_path, rng)
    data = bytearray(path.read_bytes())
    crafted = bytearray(data)
    struct.pack_into("<Q", crafted, 8, 2**62)  # tensor count
    path.write_bytes(bytes(crafted))
    _refused(path, r"tensors and .* metadata entries")
    crafted = bytearray(data)
    struct.pack_into("<Q", crafted, 24, 2**62)  # the first key's length
    path.write_bytes(bytes(crafted))
    _refused(path, r"metadata key #0 needs")


def test_not_a_gguf_and_an_unknown_type_id(tmp_path, rng):
    path = _small(tmp_path, rng)
    data = bytearray(path.read_bytes())
    bad = bytearray(data)
    bad[:4] = b"GGUX"
    path.write_bytes(bytes(bad))
    _refused(path, "not a GGUF file")
    bad = bytearray(data)
    struct.pack_into("<I", bad, _tensor_info_at(data) + 4 + 16, 999)
    path.write_bytes(bytes(bad))
    _refused(path, "unknown GGML type id 999")


def test_dequantizing_in_row_chunks_gives_the_same_values(tmp_path, rng, monkeypatch):
    import diffract.extract.gguf as gmod

    tensors = {
        "blk.0.ffn_gate.weight": (k_quant_blocks(rng, 8, 512, Q.Q4_K), Q.Q4_K),
        "blk.0.ffn_down.weight": (k_quant_blocks(rng, 8, 512, Q.Q6_K), Q.Q6_K),
    }
    path = write_gguf(tmp_path / "k.gguf", tensors)
    monkeypatch.setattr(gmod, "_CHUNK", 3 * 512 * 4)  # 3 rows a chunk: 3 + 3 + 2
    ref = reference(path)
    for leaf in extract(str(path)).leaves:
        np.testing.assert_array_equal(leaf.array.load(), ref[leaf.meta["gguf_name"]][0])


def test_header_metadata_keeps_scalars_and_summarizes_token_lists(tmp_path, rng):
    from diffract.extract.gguf import read_gguf_header

    header = read_gguf_header(_small(tmp_path, rng))
    assert header.architecture == "llama"
    assert header.metadata["llama.attention.head_count"] == N_HEAD
    assert header.metadata["tokenizer.ggml.tokens"] == "<array of 100>"
    assert header.metadata["general.architecture"] == "llama"

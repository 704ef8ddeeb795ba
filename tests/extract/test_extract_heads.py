"""Per-head attention slices (``heads=``): each head's q/k/v/o and its QK / OV circuits,
checked against explicit NumPy slicing in TransformerLens's conventions on GPT-2-small
shapes (fused Conv1D ``c_attn``), a GQA Llama (8 query heads, 2 KV heads; the KV head of a
query head from transformers' own ``repeat_kv``) and Phi-3's fused ``qkv_proj``; bad
configs are errors naming the weight."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaModel, Phi3Config, Phi3Model
from transformers.models.llama.modeling_llama import repeat_kv

from diffract import ExtractionError, ParameterType, Session
from diffract.extract import extract
from diffract.extract.heads import HeadConfig


def _leaves(model, **options):
    return {leaf.name: leaf for leaf in extract(model, **options).leaves}


def _arr(leaf):
    return np.asarray(leaf.array, dtype=np.float64)


def _np(t):
    return t.detach().double().numpy()


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_head=12, n_embd=768, vocab_size=8, n_positions=8)
    cfg.bos_token_id = cfg.eos_token_id = 0
    return GPT2Model(cfg)


def test_gpt2_small_heads_are_explicit_slices_of_c_attn(gpt2):
    got = _leaves(gpt2, heads=True)
    attn = gpt2.h[0].attn
    w = _np(attn.c_attn.weight)  # Conv1D: in x out, 768 x 2304
    o = _np(attn.c_proj.weight)  # Conv1D: in x out, 768 x 768
    assert w.shape == (768, 2304)
    d = 64
    for h in range(12):
        cols = slice(h * d, (h + 1) * d)
        # TransformerLens: W_Q[h] = W[:, q cols] (d_model x d_head), W_O[h] = c_proj[rows, :]
        wq, wk, wv = w[:, cols], w[:, 768:][:, cols], w[:, 1536:][:, cols]
        wo = o[cols, :]
        p = f"h.0.attn.head{h}"
        np.testing.assert_allclose(_arr(got[f"{p}.q"]), wq.T, rtol=1e-6)
        np.testing.assert_allclose(_arr(got[f"{p}.o"]), wo.T, rtol=1e-6)
        np.testing.assert_allclose(_arr(got[f"h.0.attn.kv_head{h}.k"]), wk.T, rtol=1e-6)
        np.testing.assert_allclose(_arr(got[f"h.0.attn.kv_head{h}.v"]), wv.T, rtol=1e-6)
        qk, ov = wq @ wk.T, wv @ wo  # TransformerLens's QK and OV
        np.testing.assert_allclose(_arr(got[f"{p}.qk"]), qk, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(_arr(got[f"{p}.ov"]), ov.T, rtol=1e-5, atol=1e-7)
        assert got[f"{p}.qk"].type == ParameterType.from_string("qk_circuit")
        assert got[f"{p}.ov"].type == ParameterType.from_string("ov_circuit")
        assert got[f"{p}.q"].type == ParameterType.from_string("attention_head")
    meta = got["h.0.attn.head3.qk"].meta["attention_head"]
    assert meta == {
        "block": "h.0.attn", "num_heads": 12, "num_kv_heads": 12, "head_dim": 64,
        "of": ["h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight"],
        "role": "qk", "head": 3, "kv_head": 3,
    }  # fmt: skip
    # the heads tile the whole matrices: nothing is lost or counted twice
    q = np.concatenate([_arr(got[f"h.0.attn.head{h}.q"]) for h in range(12)])
    np.testing.assert_allclose(q, w[:, :768].T, rtol=1e-6)
    # the QK circuit is the head's attention score bilinear form on the residual stream
    x = np.random.default_rng(0).standard_normal((5, 768))
    scores = (x @ w[:, :64]) @ (x @ w[:, 768:832]).T
    np.testing.assert_allclose(x @ _arr(got["h.0.attn.head0.qk"]) @ x.T, scores, rtol=1e-4)
    # the originals stay
    assert got["h.0.attn.c_attn.weight"].shape == (768, 2304)


def _llama(**kw):
    torch.manual_seed(1)
    cfg = LlamaConfig(
        hidden_size=128, num_attention_heads=8, num_key_value_heads=2, intermediate_size=64,
        num_hidden_layers=2, vocab_size=16, **kw,
    )  # fmt: skip
    return LlamaModel(cfg)


@pytest.mark.parametrize("head_dim", [None, 32])
def test_gqa_heads_share_the_kv_head_that_repeat_kv_gives(head_dim):
    model = _llama(**({} if head_dim is None else {"head_dim": head_dim}))
    d = head_dim or 16
    got = _leaves(model, heads=True)
    for layer in range(2):
        a = model.layers[layer].self_attn
        wq, wk, wv, wo = (_np(m.weight) for m in (a.q_proj, a.k_proj, a.v_proj, a.o_proj))
        assert wq.shape == (8 * d, 128) and wk.shape == (2 * d, 128)
        # transformers' own GQA rule: K heads repeated to the query heads
        k_rep = repeat_kv(torch.from_numpy(wk.reshape(1, 2, d, 128)), 4)[0].numpy()
        v_rep = repeat_kv(torch.from_numpy(wv.reshape(1, 2, d, 128)), 4)[0].numpy()
        p = f"layers.{layer}.self_attn"
        assert sorted(n for n in got if n.startswith(f"{p}.kv_head")) == [
            f"{p}.kv_head{g}.{r}" for g in range(2) for r in ("k", "v")
        ]
        for g in range(2):
            np.testing.assert_allclose(_arr(got[f"{p}.kv_head{g}.k"]), wk[g * d : (g + 1) * d])
        for h in range(8):
            rows = slice(h * d, (h + 1) * d)
            np.testing.assert_allclose(_arr(got[f"{p}.head{h}.q"]), wq[rows], rtol=1e-6)
            np.testing.assert_allclose(_arr(got[f"{p}.head{h}.o"]), wo[:, rows], rtol=1e-6)
            qk = wq[rows].T @ k_rep[h]  # TransformerLens: W_Q[h] @ W_K[h].T
            ov = (v_rep[h].T @ wo[:, rows].T).T  # (W_V[h] @ W_O[h]).T
            np.testing.assert_allclose(_arr(got[f"{p}.head{h}.qk"]), qk, rtol=1e-5, atol=1e-8)
            np.testing.assert_allclose(_arr(got[f"{p}.head{h}.ov"]), ov, rtol=1e-5, atol=1e-8)
            assert got[f"{p}.head{h}.qk"].meta["attention_head"]["kv_head"] == h // 4


def test_phi3_fused_qkv_proj_splits_q_then_k_then_v():
    torch.manual_seed(2)
    cfg = Phi3Config(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        num_hidden_layers=1, vocab_size=16, pad_token_id=0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = Phi3Model(cfg)
    got = _leaves(model, heads=True)
    a = model.layers[0].self_attn
    w, wo = _np(a.qkv_proj.weight), _np(a.o_proj.weight)
    assert w.shape == (64 + 2 * 32, 64)  # (H + 2 KV) * d x d_model, d = 16
    wq, wk, wv = w[:64], w[64:96], w[96:]
    for h in range(4):
        rows, kv = slice(h * 16, (h + 1) * 16), slice((h // 2) * 16, (h // 2 + 1) * 16)
        p = f"layers.0.self_attn.head{h}"
        np.testing.assert_allclose(_arr(got[f"{p}.q"]), wq[rows], rtol=1e-6)
        np.testing.assert_allclose(_arr(got[f"{p}.qk"]), wq[rows].T @ wk[kv], rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(_arr(got[f"{p}.ov"]), wo[:, rows] @ wv[kv], rtol=1e-5, atol=1e-8)


def test_flax_layout_and_a_config_json_next_to_the_checkpoint(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    wq, wk, wv, wo = (
        rng.standard_normal(s).astype(np.float32) for s in [(16, 16), (8, 16), (8, 16), (16, 16)]
    )
    save_file(
        {"blk.attn.q_proj.weight": wq, "blk.attn.k_proj.weight": wk,
         "blk.attn.v_proj.weight": wv, "blk.attn.o_proj.weight": wo},
        str(tmp_path / "model.safetensors"),
    )  # fmt: skip
    (tmp_path / "config.json").write_text(
        json.dumps({"num_attention_heads": 2, "num_key_value_heads": 1, "hidden_size": 16})
    )
    got = _leaves(str(tmp_path / "model.safetensors"), heads=True)
    assert got["blk.attn.head1.q"].meta["attention_head"]["head_dim"] == 8  # hidden 16 / 2 heads
    qk = wq[8:].T.astype(np.float64) @ wk
    np.testing.assert_allclose(_arr(got["blk.attn.head1.qk"]), qk, rtol=1e-5, atol=1e-6)
    # the same weights in Flax's in x out layout give the same slices
    flax = {"blk": {"attn": {p: {"kernel": m.T} for p, m in
            [("q_proj", wq), ("k_proj", wk), ("v_proj", wv), ("o_proj", wo)]}}}  # fmt: skip
    from flax.core import FrozenDict

    other = _leaves(FrozenDict(flax), heads=HeadConfig(2, 1))
    assert other["blk.attn.k_proj.kernel"].layout == "in_out"
    for name in ("blk.attn.head1.qk", "blk.attn.head0.ov", "blk.attn.kv_head0.v"):
        np.testing.assert_allclose(_arr(other[name]), _arr(got[name]), rtol=1e-5, atol=1e-6)


def test_no_circuits_adds_the_head_matrices_only(gpt2):
    got = _leaves(gpt2, heads=HeadConfig(num_heads=12, circuits=False))
    assert "h.0.attn.head0.q" in got and not any(n.endswith((".qk", ".ov")) for n in got)
    assert _leaves(gpt2, heads="no-circuits").keys() == got.keys()


def test_bad_configs_name_the_weight(gpt2):
    with pytest.raises(ExtractionError, match=r"h\.0\.attn\.c_attn\.weight.*outputs"):
        extract(gpt2, heads={"num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 64})
    with pytest.raises(ExtractionError, match="not a multiple of num_kv_heads"):
        HeadConfig(num_heads=12, num_kv_heads=5)
    with pytest.raises(ExtractionError, match="no attention weights"):
        extract({"mlp.weight": np.ones((4, 4))}, heads=HeadConfig(2))
    with pytest.raises(ExtractionError, match=r"no \.config and no config\.json"):
        extract({"a.q_proj.weight": np.ones((4, 4))}, heads=True)
    with pytest.raises(ExtractionError, match="none of"):
        extract(gpt2, heads={"hidden_size": 768})
    with pytest.raises(ExtractionError, match=r"the q weight has 8 outputs, not 12"):
        extract({"a.q_proj.weight": np.ones((8, 4))}, heads=HeadConfig(3, head_dim=4))


def test_fields_and_store_work_on_head_slices_unchanged(gpt2):
    ref = _np(gpt2.h[0].attn.c_attn.weight)
    qk = ref[:, 128:192] @ ref[:, 896:960].T  # head 2
    with Session(profile="ram") as s:
        s.models.add(gpt2, "gpt2", heads=True)
        info = s.models.slice("h.0.attn.head2.qk", "gpt2")
        assert info.type == ParameterType.from_string("qk_circuit")
        assert info.meta["attention_head"]["head"] == 2
        s.compute.apply("hard_rank", "esd_max", progress=False)
        assert s.results.get("hard_rank", "h.0.attn.head2.qk", "gpt2") == 64  # rank <= head_dim
        s_max = float(np.linalg.svd(qk, compute_uv=False)[0])
        got = s.results.get("esd_max", "h.0.attn.head2.qk", "gpt2")
        assert got == pytest.approx(s_max**2 / 768, rel=1e-5)


def test_head_grid_pivots_heads_by_block_in_natural_order():
    from diffract.extract.heads import head_grid

    names = ["h.10.attn.head1.qk", "h.2.attn.head0.qk", "h.2.attn.head1.qk", "h.2.attn.head1.ov",
             "h.10.attn.head0.qk", "h.2.attn.c_attn.weight", "h.2.attn.kv_head0.k"]  # fmt: skip
    blocks, heads, grid = head_grid(names, [1.0, 2.0, 3.0, 9.0, None, 7.0, 8.0], role="qk")
    assert blocks == ["h.2.attn", "h.10.attn"] and heads == [0, 1]
    np.testing.assert_array_equal(grid, [[2.0, np.nan], [3.0, 1.0]])
    assert head_grid(names, range(7), role="k")[2].tolist() == [[6.0]]
    with pytest.raises(ValueError, match="role"):
        head_grid(names, range(7), role="x")


def test_bert_query_key_value_pair_with_attention_output_dense():
    from transformers import BertConfig, BertModel

    torch.manual_seed(4)
    cfg = BertConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                     intermediate_size=32, vocab_size=16)  # fmt: skip
    model = BertModel(cfg)
    got = _leaves(model, heads=True)
    att = model.encoder.layer[0].attention
    wq, wk = _np(att.self.query.weight), _np(att.self.key.weight)
    wv, wo = _np(att.self.value.weight), _np(att.output.dense.weight)
    p = "encoder.layer.0.attention.self"
    for h in range(4):
        rows = slice(h * 16, (h + 1) * 16)
        qk, ov = wq[rows].T @ wk[rows], wo[:, rows] @ wv[rows]
        np.testing.assert_allclose(_arr(got[f"{p}.head{h}.qk"]), qk, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(_arr(got[f"{p}.head{h}.ov"]), ov, rtol=1e-5, atol=1e-8)
    assert got[f"{p}.head0.o"].meta["attention_head"]["of"][-1] == (
        "encoder.layer.0.attention.output.dense.weight"
    )


def test_gpt2_attention_forward_is_the_sum_of_its_head_circuits():
    # transformers' own GPT2Attention (biases zeroed, eager, a causal mask) against
    # sum_h softmax(x QK_h x^T / sqrt(d) + mask) x OV_h^T built from the slices alone
    torch.manual_seed(5)
    cfg = GPT2Config(n_layer=1, n_head=4, n_embd=32, vocab_size=8, n_positions=8,
                     bos_token_id=0, eos_token_id=0, attn_implementation="eager")  # fmt: skip
    model = GPT2Model(cfg).eval()
    attn = model.h[0].attn
    with torch.no_grad():
        attn.c_attn.bias.zero_()
        attn.c_proj.bias.zero_()
        attn.c_attn.weight[:, :64] *= 30  # q and k: scores far from 0, attention not uniform
    got = _leaves(model, heads=True)
    x = np.random.default_rng(1).standard_normal((6, 32))
    mask = np.triu(np.full((6, 6), -1e9), k=1)  # causal, added to the scores
    with torch.no_grad():
        xt, mt = torch.from_numpy(x).float()[None], torch.from_numpy(mask).float()[None, None]
        want = _np(attn(xt, attention_mask=mt)[0][0])
    out = np.zeros((6, 32))
    for h in range(4):
        scores = x @ _arr(got[f"h.0.attn.head{h}.qk"]) @ x.T / np.sqrt(8) + mask
        a = np.exp(scores - scores.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        assert a[-1].max() > 0.5  # a sharp pattern: the QK circuit matters
        out += a @ x @ _arr(got[f"h.0.attn.head{h}.ov"]).T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_llama_gqa_attention_forward_is_the_sum_of_its_head_circuits():
    # transformers' LlamaAttention (eager; rotary made the identity: cos = 1, sin = 0) with
    # 8 query heads on 2 KV heads, against the head circuits alone
    model = _llama(head_dim=32, attn_implementation="eager").eval()
    with torch.no_grad():  # scores far from 0: attention not uniform
        model.layers[1].self_attn.q_proj.weight *= 30
        model.layers[1].self_attn.k_proj.weight *= 30
    got = _leaves(model, heads=True)
    x = np.random.default_rng(2).standard_normal((5, 128))
    mask = np.triu(np.full((5, 5), -1e9), k=1)
    identity = (torch.ones(1, 5, 32), torch.zeros(1, 5, 32))
    with torch.no_grad():
        xt, mt = torch.from_numpy(x).float()[None], torch.from_numpy(mask).float()[None, None]
        want = _np(model.layers[1].self_attn(xt, identity, mt)[0][0])
    out = np.zeros((5, 128))
    for h in range(8):
        scores = x @ _arr(got[f"layers.1.self_attn.head{h}.qk"]) @ x.T / np.sqrt(32) + mask
        a = np.exp(scores - scores.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        assert a[-1].max() > 0.5  # a sharp pattern: the QK circuit matters
        out += a @ x @ _arr(got[f"layers.1.self_attn.head{h}.ov"]).T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_circuits_over_the_limit_are_an_error_unless_asked_for(gpt2, monkeypatch):
    import diffract.extract.heads as heads_mod

    # GPT-2 small, 1 layer: 2 x 12 circuits of 768 x 768 float64 = 108 MiB
    monkeypatch.setattr(heads_mod, "CIRCUIT_LIMIT", 100 * 2**20)
    with pytest.raises(ExtractionError, match=r"12 heads would take 0\.1 GiB.*no-circuits"):
        extract(gpt2, heads=True)
    got = _leaves(gpt2, heads=HeadConfig(12, circuits=True))
    assert "h.0.attn.head11.ov" in got
    monkeypatch.setattr(heads_mod, "CIRCUIT_LIMIT", 110 * 2**20)
    assert "h.0.attn.head11.qk" in _leaves(gpt2, heads=True)

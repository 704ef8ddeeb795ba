"""Extraction options that derive slices, in closed form: ``lora="merged"`` and
``lora_scaling``, ``base_model=`` deltas (W - W_base of a known perturbation), ``intra``
(products of known consecutive matrices) and ``pool=False`` (per kernel position slices,
WeightWatcher's slice order); bad input is an error naming the slice or option."""

from __future__ import annotations

import numpy as np
import peft
import pytest
import torch

from diffract import ExtractionError, InvalidArgumentError, ParameterType, Session
from diffract.extract import ExtractedLeaf, extract
from diffract.extract.derived import kernel_position_slices


def _leaves(model, **options):
    return {leaf.name: leaf for leaf in extract(model, **options).leaves}


def _arr(leaf):
    return np.asarray(leaf.array, dtype=np.float64)


def _peft_model(r=4, alpha=16):
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16))
    config = peft.LoraConfig(
        r=r, lora_alpha=alpha, target_modules=["0", "2"], init_lora_weights=False
    )
    return peft.get_peft_model(base, config)


def test_merged_is_peft_merge_and_unload():
    model = _peft_model(r=4, alpha=16)
    got = _leaves(model, lora="merged")
    assert not any(n.endswith(".lora") for n in got)
    merged = {k: v.double().numpy() for k, v in model.merge_and_unload().state_dict().items()}
    model = _peft_model(r=4, alpha=16)  # merge_and_unload changed the other
    for name in ("0.weight", "2.weight"):
        np.testing.assert_allclose(_arr(got[name]), merged[name], rtol=1e-6, atol=1e-7)
        assert got[name].meta["lora"] == {
            "rank": 4,
            "scaling": 4.0,
            "mode": "merged",
            "adapter": "default",
        }
    plain = _leaves(model, lora_scaling="none")
    update = _leaves(model)
    np.testing.assert_allclose(4.0 * _arr(plain["0.lora"]), _arr(update["0.lora"]), rtol=1e-12)
    assert plain["0.lora"].meta["lora"]["scaling"] == 1.0


def test_rank_r_update_has_exactly_r_nonzero_singular_values():
    got = _leaves(_peft_model(r=3))
    for name in ("0.lora", "2.lora"):
        s = np.linalg.svd(_arr(got[name]), compute_uv=False)
        assert np.sum(s > 1e-12 * s[0]) == 3
        assert s[3] < 1e-12 * s[0]  # float64 update: no float32 rounding floor


def test_merged_needs_the_base_weight(tmp_path):
    _peft_model().save_pretrained(tmp_path)
    with pytest.raises(
        ExtractionError, match=r"lora='merged'.*'0\.lora'.*no base weight '0\.weight'"
    ):
        extract(tmp_path, lora="merged")


def test_unknown_lora_options_name_the_option():
    with pytest.raises(ExtractionError, match="option 'lora' must be one of"):
        extract({"w": np.eye(3)}, lora="sum")
    with pytest.raises(ExtractionError, match="option 'lora_scaling' must be one of"):
        extract({"w": np.eye(3)}, lora_scaling="alpha")


def test_base_model_delta_of_a_known_perturbation():
    rng = np.random.default_rng(0)
    base = {"a.weight": rng.standard_normal((20, 10)), "b.weight": rng.standard_normal((5, 20))}
    u, v = rng.standard_normal((20, 2)), rng.standard_normal((2, 10))
    ft = {
        "a.weight": base["a.weight"] + u @ v,
        "b.weight": base["b.weight"].copy(),
        "head": np.ones((3, 5)),
    }
    ex = extract(ft, base_model=base)
    got = {leaf.name: leaf for leaf in ex.leaves}
    assert set(got) == {"a.weight", "b.weight"}
    np.testing.assert_allclose(_arr(got["a.weight"]), u @ v, atol=1e-5)
    assert not np.any(_arr(got["b.weight"]))
    assert "not in the base model" in ex.skipped["head"]
    s = np.linalg.svd(_arr(got["a.weight"]), compute_uv=False)
    assert np.sum(s > 1e-4 * s[0]) == 2  # the planted rank-2 perturbation
    assert got["a.weight"].meta["delta"]["base"]


def test_base_model_errors_name_the_slice():
    with pytest.raises(ExtractionError, match=r"slice 'a\.weight' has shape \(4, 3\).*\(3, 3\)"):
        extract({"a.weight": np.ones((4, 3))}, base_model={"a.weight": np.ones((3, 3))})
    with pytest.raises(ExtractionError, match="no slice of the model has a same-named slice"):
        extract({"a.weight": np.ones((4, 3))}, base_model={"x.weight": np.ones((4, 3))})


def test_base_model_by_stored_id_in_a_session():
    rng = np.random.default_rng(1)
    base = {"w": rng.standard_normal((12, 8))}
    bump = np.outer(rng.standard_normal(12), rng.standard_normal(8))
    with Session(profile="ram") as s:
        s.models.add(base, "base")
        s.models.add({"w": base["w"] + bump}, "ft", base_model="base")
        np.testing.assert_allclose(s.models.weights("w", "ft"), bump, atol=1e-5)
        assert s.models.slice("w", "ft").meta["delta"]["base"] == "stored model 'base'"
        s.compute.apply("hard_rank", progress=False)
        assert s.results.get("hard_rank", "w", "ft") == 1
        with pytest.raises(ExtractionError, match=r"slice 'w' has shape"):
            s.models.add({"w": np.ones((3, 3))}, "bad", base_model="base")


def test_intra_products_of_known_matrices():
    rng = np.random.default_rng(2)
    w0, w1, w2 = (
        rng.standard_normal((6, 4)),
        rng.standard_normal((5, 6)),
        rng.standard_normal((3, 7)),
    )
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 5), torch.nn.Linear(7, 3))
    with torch.no_grad():
        for layer, w in zip(model, (w0, w1, w2), strict=True):
            layer.weight.copy_(torch.from_numpy(w))
    got = _leaves(model, intra=True)
    intra = {n: leaf for n, leaf in got.items() if n.startswith("intra:")}
    assert set(intra) == {"intra:0.weight:1.weight"}  # 1 -> 2 does not chain (5 != 7)
    want = w1 @ w0 / (np.linalg.norm(w0) * np.linalg.norm(w1))
    np.testing.assert_allclose(_arr(intra["intra:0.weight:1.weight"]), want, rtol=1e-5)
    assert intra["intra:0.weight:1.weight"].meta == {"intra": ["0.weight", "1.weight"]}
    assert "0.weight" in got and "intra:0.weight:1.weight" not in _leaves(model)


def test_pool_false_slices_per_kernel_position():
    conv = torch.nn.Conv2d(3, 5, (2, 3))
    w = conv.weight.detach().double().numpy()
    got = _leaves(conv, pool=False)
    pos = {n: leaf for n, leaf in got.items() if n.startswith("weight:")}
    assert len(pos) == 6 and "weight" in got
    for i in range(2):
        for j in range(3):
            leaf = pos[f"weight:{i * 3 + j}"]  # WeightWatcher's slice_id: i then j
            np.testing.assert_allclose(_arr(leaf), w[:, :, i, j], rtol=1e-6)
            assert leaf.shape == (5, 3) and leaf.meta["kernel_position"]["position"] == [i, j]
    assert not _leaves(conv).keys() - {"weight", "bias"}
    # Flax/Keras layout (kh, kw, in, out): the same out x in matrices, in the same order
    k = np.transpose(w, (2, 3, 1, 0))
    leaf = ExtractedLeaf("conv.kernel", k, k.shape, "float64", ParameterType.CONV, "in_out")
    flax = kernel_position_slices([leaf])
    assert [x.name for x in flax] == [f"conv.kernel:{p}" for p in range(6)]
    np.testing.assert_allclose(_arr(flax[4]), w[:, :, 1, 1], rtol=1e-6)


def test_layer_selection_peft_analyzes_the_adapters_only(tmp_path):
    model = _peft_model(r=4)
    with Session(profile="local", path=tmp_path / "st") as s:
        s.models.add(model, "ft", lora_scaling="none")
        report = s.compute.apply("hard_rank", "esd_max", progress=False, layer_selection="peft")
        reasons = {e.name: e.reason for e in report.not_applicable_reasons}
        assert set(reasons) == {"0.weight", "2.weight"}  # biases are 1-D: no spectrum at all
        assert all("analyzes the adapters only" in r for r in reasons.values())
        assert s.results.get("hard_rank", "0.lora", "ft") == 4
        layer = model.base_model.model[0]
        ba = (layer.lora_B["default"].weight @ layer.lora_A["default"].weight).detach().double()
        s_max = float(np.linalg.svd(ba.numpy(), compute_uv=False)[0])
        assert s.results.get("esd_max", "0.lora", "ft") == pytest.approx(s_max**2 / 48, rel=1e-6)
    with Session(profile="local", path=tmp_path / "st") as s:  # the meta is stored
        assert s.models.slice("0.lora", "ft").meta["lora"] == {
            "rank": 4, "scaling": 1.0, "mode": "update", "adapter": "default"
        }  # fmt: skip


def test_bad_flags_name_the_option():
    with Session(profile="ram") as s:
        with pytest.raises(InvalidArgumentError, match="intra"):
            s.models.add({"w": np.eye(3)}, "m", intra="yes")
        with pytest.raises(InvalidArgumentError, match="pool"):
            s.models.add({"w": np.eye(3)}, "m", pool=0)
        with pytest.raises(ExtractionError, match="option 'lora'"):
            s.models.add({"w": np.eye(3)}, "m", lora="delta")


def test_merged_refuses_two_adapters_on_one_layer():
    model = _peft_model()
    model.add_adapter("second", peft.LoraConfig(r=2, target_modules=["0"], init_lora_weights=False))
    got = _leaves(model)
    assert {"0.lora", "0.lora.second", "2.lora"} <= set(got)
    assert got["0.lora.second"].meta["lora"]["rank"] == 2
    with pytest.raises(
        ExtractionError, match=r"lora='merged': '0\.weight' has more than one adapter"
    ):
        extract(model, lora="merged")

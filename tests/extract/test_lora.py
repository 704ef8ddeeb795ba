"""LoRA / PEFT adapters (diffract/extract/lora.py): one slice per adapted layer holding
scaling * B @ A (PEFT's scaling alpha / r), from a PEFT model built here and from its saved
adapter files; a rank-r update has exactly r nonzero singular values; mismatched pairs are
errors naming the slice."""

from __future__ import annotations

import json

import numpy as np
import peft
import pytest
import torch

from diffract import ExtractionError, Session
from diffract.extract import extract


class Adapted(torch.nn.Module):
    """A layer with hand-made LoRA factors (no peft): scaling 1."""

    def __init__(self, r_a: int = 3, r_b: int = 3) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.layer = torch.nn.Module()
        self.layer.weight = torch.nn.Parameter(torch.randn(12, 8, generator=g))
        self.layer.lora_A = torch.nn.Module()
        self.layer.lora_A.weight = torch.nn.Parameter(torch.randn(r_a, 8, generator=g))
        self.layer.lora_B = torch.nn.Module()
        self.layer.lora_B.weight = torch.nn.Parameter(torch.randn(12, r_b, generator=g))


def _leaves(model):
    return {leaf.name: np.asarray(leaf.array, dtype=np.float64) for leaf in extract(model).leaves}


def test_hand_made_pair_is_one_rank_r_slice():
    m = Adapted()
    got = _leaves(m)
    assert set(got) == {"layer.weight", "layer.lora"}
    want = (m.layer.lora_B.weight @ m.layer.lora_A.weight).detach().double().numpy()
    np.testing.assert_allclose(got["layer.lora"], want, rtol=1e-5)
    s = np.linalg.svd(got["layer.lora"], compute_uv=False)
    assert int(np.sum(s > 1e-5 * s[0])) == 3  # rank r


def _peft_model(r: int = 4, alpha: int = 16):
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16))
    config = peft.LoraConfig(
        r=r, lora_alpha=alpha, target_modules=["0", "2"], init_lora_weights=False
    )
    return peft.get_peft_model(base, config)


def _peft_update(model, idx: str, scaling: float) -> np.ndarray:
    layer = model.base_model.model[int(idx)]
    a = layer.lora_A["default"].weight.detach().double().numpy()
    b = layer.lora_B["default"].weight.detach().double().numpy()
    return scaling * b @ a


def test_peft_module_scaled_as_peft():
    model = _peft_model(r=4, alpha=16)
    got = _leaves(model)
    assert {"0.lora", "2.lora"} <= set(got)
    assert not any("lora_A" in n or "lora_B" in n for n in got)
    assert {"0.weight", "0.bias", "2.weight"} <= set(got)  # the base weights, named as in the base
    np.testing.assert_array_equal(
        got["0.weight"], model.base_model.model[0].base_layer.weight.detach().double().numpy()
    )
    for idx in ("0", "2"):
        np.testing.assert_allclose(got[f"{idx}.lora"], _peft_update(model, idx, 16 / 4), rtol=1e-5)
    # PEFT's own merged weight: W + update
    layer = model.base_model.model[0]
    delta = layer.get_delta_weight("default").detach().double().numpy()
    np.testing.assert_allclose(got["0.lora"], delta, rtol=1e-5, atol=1e-7)


def test_peft_adapter_files_and_session(tmp_path):
    model = _peft_model(r=4, alpha=8)
    model.save_pretrained(tmp_path / "adapter")
    got = _leaves(tmp_path / "adapter")
    assert set(got) == {"0.lora", "2.lora"}
    for idx in ("0", "2"):
        np.testing.assert_allclose(got[f"{idx}.lora"], _peft_update(model, idx, 8 / 4), rtol=1e-5)
    same = _leaves(tmp_path / "adapter" / "adapter_model.safetensors")
    assert set(same) == set(got)
    s = Session("ram")
    s.models.add(tmp_path / "adapter", "lora")
    s.compute.apply("weights_svals", progress=False)
    sv = np.asarray(s.results.get("weights_svals", "0.lora", "lora"))
    assert int(np.sum(sv > 1e-5 * sv.max())) == 4  # a rank-r update
    s.close()


def test_rslora_scaling(tmp_path):
    model = _peft_model(r=4, alpha=8)
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "adapter_config.json").read_text())
    cfg["use_rslora"] = True
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    got = _leaves(tmp_path)
    np.testing.assert_allclose(got["0.lora"], _peft_update(model, "0", 8 / 2), rtol=1e-5)


def test_mismatched_ranks_name_the_slice():
    with pytest.raises(ExtractionError, match=r"'layer\.lora'.*mismatched ranks.*rank 3.*rank 2"):
        extract(Adapted(r_a=3, r_b=2))


def test_config_rank_disagreeing_with_the_factors(tmp_path):
    _peft_model(r=4).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "adapter_config.json").read_text())
    cfg["r"] = 8
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ExtractionError, match=r"'0\.lora'.*mismatched ranks.*r=8"):
        extract(tmp_path)


def test_lone_factor_names_the_slice():
    m = Adapted()
    del m.layer.lora_B
    with pytest.raises(ExtractionError, match=r"'layer\.lora'.*no lora_B partner"):
        extract(m)

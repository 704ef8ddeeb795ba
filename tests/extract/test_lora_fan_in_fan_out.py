"""``models.add(peft_model, lora="merged")`` on layers stored (in, out): GPT-2's ``Conv1D``.

PEFT marks such layers ``fan_in_fan_out`` and merges ``W + scaling * (B @ A)^T``; the merged
slices must equal PEFT's own ``merge_and_unload`` weights (a square ``c_proj`` too, where a
missing transpose would not show as a shape error).
"""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def test_merged_conv1d_lora_equals_peft_merge_and_unload():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    lora = peft.LoraConfig(
        r=2, lora_alpha=6, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True
    )
    model = peft.get_peft_model(transformers.GPT2LMHeadModel(cfg), lora)
    with torch.no_grad():  # B starts at zero: give the update a value
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    s = Session(profile="ram")
    s.models.add(model, model_id="merged", lora="merged")
    s.models.add(model, model_id="update")
    reference = model.merge_and_unload().state_dict()
    checked = 0
    for sl in s.filter(model_ids=["merged"]).models.slices():
        if "lora" not in sl.meta:
            continue
        got = np.asarray(s.models.weights(sl.name, model_id="merged"))
        want = reference[sl.name].numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        # the update slice stays (out, in) = B @ A, the transpose of what was merged in
        update = s.models.weights(sl.name.removesuffix(".weight") + ".lora", model_id="update")
        assert np.asarray(update).shape == want.shape[::-1]
        checked += 1
    # c_attn (32 x 96) and the square c_proj (32 x 32) of both blocks; mlp.c_proj too
    assert checked == 6

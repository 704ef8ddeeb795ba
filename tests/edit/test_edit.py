"""Model editing (``diffract.svd_smoothing`` / ``svd_sharpness``, WeightWatcher's
``SVDSmoothing`` / ``SVDSharpness``): the edited model analyzed by a session has the truncated
spectrum in closed form; the original model's weights are unchanged (by hash); torch,
Equinox and NumPy dicts come back as the same kind of model; bad input gets named errors."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import diffract
from diffract import InvalidArgumentError, Session

SVALS = np.array([10.0, 7.0, 5.0, 3.0, 2.0, 1.5, 1.0, 0.5])


def planted(n: int = 12, m: int = 8, seed: int = 0) -> np.ndarray:
    """An n x m matrix whose singular values are SVALS."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, m)))
    v, _ = np.linalg.qr(rng.standard_normal((m, m)))
    return (u * SVALS) @ v.T


def digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return h.hexdigest()


def analyzed_svals(model, name: str) -> np.ndarray:
    s = Session(profile="ram")
    try:
        s.models.add(model, model_id="edited")
        s.compute.apply("weights_svals", progress=False)
        return np.sort(np.asarray(s.results.get("weights_svals", name, "edited")))[::-1]
    finally:
        s.close()


def test_smoothing_numpy_dict_closed_form():
    w = planted()
    model = {"layer": {"weight": w, "bias": np.ones(12)}}
    before = digest([w, model["layer"]["bias"]])
    new = diffract.svd_smoothing(model, percent=0.5, method="svd")
    assert digest([model["layer"]["weight"], model["layer"]["bias"]]) == before
    assert isinstance(new, dict) and new is not model
    np.testing.assert_array_equal(new["layer"]["bias"], model["layer"]["bias"])
    got = analyzed_svals(new, "layer.weight")
    want = np.where(np.arange(8) < 4, SVALS, 0.0)  # int(0.5 * 8) = 4 kept
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_sharpness_removes_the_top_components():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((200, 100)) * 0.1
    w[0, 0] = 50.0  # a correlation trap: a huge entry spikes the shuffled ESD too
    new = diffract.svd_sharpness({"w": w})
    s_old = np.linalg.svd(w, compute_uv=False)
    s_new = np.linalg.svd(new["w"], compute_uv=False)
    k = int(np.sum(s_new < 1e-9))
    assert k >= 1  # the trap's component is removed
    np.testing.assert_allclose(np.sort(s_new), np.sort(np.r_[np.zeros(k), s_old[k:]]), atol=1e-9)
    assert np.abs(w - new["w"]).max() > 1.0  # and the trap entry is mostly gone with it


def test_torch_module_new_model_original_unchanged():
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.ReLU(), torch.nn.Linear(12, 4))
    with torch.no_grad():
        net[0].weight.copy_(torch.as_tensor(planted(), dtype=torch.float32))
    params = [p.detach().numpy().copy() for p in net.parameters()]
    before = digest(params)
    new = diffract.svd_smoothing(net, percent=0.25, method="svd")
    assert isinstance(new, torch.nn.Sequential) and new is not net
    assert digest([p.detach().numpy() for p in net.parameters()]) == before
    got = np.linalg.svd(new[0].weight.detach().double().numpy(), compute_uv=False)
    np.testing.assert_allclose(got, np.where(np.arange(8) < 2, SVALS, 0.0), atol=1e-5)
    assert new[0].weight.dtype == torch.float32
    np.testing.assert_array_equal(new[0].bias.detach().numpy(), params[1])  # 1-D: untouched
    got = analyzed_svals(new, "0.weight")
    np.testing.assert_allclose(got, np.where(np.arange(8) < 2, SVALS, 0.0), atol=1e-5)


def test_torch_conv_per_kernel_position():
    import torch

    conv = torch.nn.Conv2d(8, 12, 2, bias=False)
    with torch.no_grad():
        for i in range(2):
            for j in range(2):
                conv.weight[:, :, i, j] = torch.as_tensor(planted(seed=i * 2 + j))
    new = diffract.svd_smoothing(conv, percent=0.5, method="svd")
    w = new.weight.detach().double().numpy()
    for i in range(2):
        for j in range(2):
            s = np.linalg.svd(w[:, :, i, j], compute_uv=False)
            np.testing.assert_allclose(s, np.where(np.arange(8) < 4, SVALS, 0.0), atol=1e-5)


def test_equinox_module_new_model_original_unchanged():
    import equinox as eqx
    import jax

    lin = eqx.nn.Linear(8, 12, key=jax.random.PRNGKey(0))
    lin = eqx.tree_at(
        lambda m: m.weight, lin, jax.numpy.asarray(planted(), dtype=jax.numpy.float32)
    )
    before = digest([lin.weight, lin.bias])
    new = diffract.svd_smoothing(lin, percent=0.5, method="svd")
    assert type(new) is type(lin) and isinstance(new.weight, jax.Array)
    assert digest([lin.weight, lin.bias]) == before
    np.testing.assert_array_equal(np.asarray(new.bias), np.asarray(lin.bias))
    got = analyzed_svals(new, "weight")
    np.testing.assert_allclose(got, np.where(np.arange(8) < 4, SVALS, 0.0), atol=1e-5)
    assert new(jax.numpy.ones(8)).shape == (12,)  # still a working module


def test_detx_and_rmt_methods_keep_the_counted_components():
    from diffract.kernels.diagnostics import detx

    w = planted()
    lam = np.sort(SVALS**2)
    k = int(detx(lam, 0)[0])
    got = np.linalg.svd(diffract.svd_smoothing({"w": w})["w"], compute_uv=False)
    np.testing.assert_allclose(got, np.where(np.arange(8) < k, SVALS, 0.0), atol=1e-9)
    rmt = diffract.svd_smoothing({"w": w}, method="rmt")["w"]
    assert np.linalg.matrix_rank(rmt) <= 8


@pytest.mark.parametrize("percent", [0.0, -0.1, 1.5, float("nan"), "half", True])
def test_percent_outside_range_is_named(percent):
    with pytest.raises(InvalidArgumentError, match="percent"):
        diffract.svd_smoothing({"w": planted()}, percent=percent, method="svd")


def test_unknown_method_is_named():
    with pytest.raises(InvalidArgumentError, match="unknown method 'lambda_max'"):
        diffract.svd_smoothing({"w": planted()}, method="lambda_max")


def test_bad_seed_is_named():
    with pytest.raises(InvalidArgumentError, match="seed"):
        diffract.svd_sharpness({"w": planted()}, seed=1.5)


def test_peft_module_edits_its_base_weights():
    import peft
    import torch

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 12))
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["0"]))
    with torch.no_grad():
        model.base_model.model[0].base_layer.weight.copy_(torch.as_tensor(planted()))
        model.base_model.model[0].lora_B["default"].weight.normal_()  # PEFT starts B at 0
    state = model.state_dict()  # base weight and bias, lora_A and lora_B
    assert any("lora_B" in k for k in state) and any("base_layer.weight" in k for k in state)
    before = digest([state[k].detach().numpy() for k in sorted(state)])
    new = diffract.svd_smoothing(model, percent=0.5, method="svd")
    state = model.state_dict()
    assert digest([state[k].detach().numpy() for k in sorted(state)]) == before
    assert new is not model
    w = new.base_model.model[0].base_layer.weight.detach().double().numpy()
    s = np.linalg.svd(w, compute_uv=False)
    np.testing.assert_allclose(s, np.where(np.arange(8) < 4, SVALS, 0.0), atol=1e-5)
    a = model.base_model.model[0].lora_A["default"].weight
    assert torch.equal(new.base_model.model[0].lora_A["default"].weight, a)  # factors kept


def test_flax_params_in_out_kernels_per_position():
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    def leaves_digest(params) -> str:  # sha256 of every leaf, kernels and biases
        return digest(jax.tree_util.tree_leaves(params))

    bias = jnp.asarray(np.linspace(-1.0, 1.0, 12), dtype=jnp.float32)
    dense = {"params": {"Dense_0": {"kernel": jnp.asarray(planted().T), "bias": bias}}}
    before = leaves_digest(dense)
    new = diffract.svd_smoothing(dense, percent=0.5, method="svd")
    assert leaves_digest(dense) == before and len(jax.tree_util.tree_leaves(dense)) == 2
    assert isinstance(new["params"]["Dense_0"]["kernel"], jax.Array)
    np.testing.assert_array_equal(np.asarray(new["params"]["Dense_0"]["bias"]), np.asarray(bias))
    s = np.linalg.svd(np.asarray(new["params"]["Dense_0"]["kernel"]), compute_uv=False)
    np.testing.assert_allclose(s, np.where(np.arange(8) < 4, SVALS, 0.0), atol=1e-5)
    got = analyzed_svals(new, "params.Dense_0.kernel")  # a session reads the edited params
    np.testing.assert_allclose(got, np.where(np.arange(8) < 4, SVALS, 0.0), atol=1e-5)
    conv = nn.Conv(12, (2, 2)).init(jax.random.PRNGKey(0), jnp.ones((1, 5, 5, 8)))
    kernel = np.stack([planted(seed=i).T for i in range(4)]).reshape(2, 2, 8, 12)
    conv = {"params": {**conv["params"], "kernel": jnp.asarray(kernel)}}
    before = leaves_digest(conv)
    new = diffract.svd_smoothing(conv, percent=0.25, method="svd")
    assert leaves_digest(conv) == before
    w = np.asarray(new["params"]["kernel"])
    for i in range(2):
        for j in range(2):  # (kh, kw, in, out): ceil(int(0.25 * 8 * 4) / 4) = 2 kept each
            s = np.linalg.svd(w[i, j], compute_uv=False)
            np.testing.assert_allclose(s, np.where(np.arange(8) < 2, SVALS, 0.0), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(conv["params"]["kernel"]), kernel.astype(np.float32))
    # weights_svals pools the 4 kernel positions: 10 and 7 four times each, the rest zero
    got = analyzed_svals(new, "params.kernel")
    want = np.sort(np.tile(np.where(np.arange(8) < 2, SVALS, 0.0), 4))[::-1]
    np.testing.assert_allclose(got, want, atol=1e-5)

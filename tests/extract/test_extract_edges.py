"""Edge cases of extraction: what counts as a weight (parameters, each tensor once; buffers,
running statistics and optimizer state skipped with a reason), training checkpoints,
parametrized and wrapped PyTorch modules, meta tensors, and layouts (ONNX, Keras).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffract import ExtractionError, LazyArray, ParameterType, Session

nn = torch.nn


def add(model, model_id="m", **kw):
    s = Session(profile="ram")
    slices = s.models.add(model, model_id=model_id, **kw)
    return s, {sl.name: sl for sl in slices}, s.models.info(model_id)


def frob(s, model_id="m"):
    s.compute.apply("frob_norm", progress=False)
    return {
        r["name"]: r["frob_norm"]
        for r in s.results.export_table("frob_norm", export_format="list")
        if r["model_id"] == model_id
    }


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))


MLP_NAMES = {"0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"}
BN_STATS = {"1.running_mean", "1.running_var", "1.num_batches_tracked"}


# --- 1. training checkpoints ---------------------------------------------------------------


def training_checkpoint(tmp_path, **extra):
    m = mlp()
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(4, 6)).sum().backward()
    opt.step()
    ckpt = {"model": m.state_dict(), "optimizer": opt.state_dict(), "epoch": 1, **extra}
    path = tmp_path / "ckpt.pt"
    torch.save(ckpt, path)
    return m, str(path)


def test_training_checkpoint_takes_the_model_key_and_skips_optimizer_state(tmp_path):
    m, path = training_checkpoint(tmp_path)
    s, got, info = add(path)
    assert set(got) == MLP_NAMES
    assert info["weights"] == "referenced"
    assert "optimizer" in info["skipped"] and "'model'" in info["skipped"]["optimizer"]
    assert "epoch" in info["skipped"]
    assert set(info["skipped"]) >= BN_STATS
    values = frob(s)
    for name, p in m.named_parameters():
        if p.ndim == 2:  # frob_norm applies to matrices
            assert values[name] == pytest.approx(float(torch.linalg.norm(p.detach())), rel=1e-5)


def test_training_checkpoint_copied_has_no_optimizer_slices(tmp_path):
    _, path = training_checkpoint(tmp_path)
    _, got, info = add(path, copy_weights=True)
    assert set(got) == MLP_NAMES
    assert info["weights"] == "copied"
    assert not any(n.startswith("optimizer") for n in got)


def test_checkpoint_tensors_at_any_depth_are_lazy(tmp_path):
    from diffract._vocab.tree import tree_leaves_with_path
    from diffract.extract import model_tree

    m = mlp()
    path = tmp_path / "nested.pt"
    torch.save({"model": {"body": m.state_dict()}, "optimizer": {"state": {}}}, path)
    leaves = tree_leaves_with_path(model_tree(str(path)).tree)
    assert leaves and all(isinstance(leaf, LazyArray) for _, leaf in leaves)
    _, got, info = add(str(path))
    assert {f"body.{n}" for n in MLP_NAMES} == set(got)
    assert info["weights"] == "referenced"


def test_checkpoint_prefers_the_model_over_ema_weights(tmp_path):
    m = mlp()
    path = tmp_path / "ema.pt"
    ema = {k: v * 2 for k, v in m.state_dict().items()}
    torch.save({"ema": ema, "state_dict": m.state_dict(), "step": 10}, path)
    s, got, info = add(str(path))
    assert set(got) == MLP_NAMES
    assert "EMA" in info["skipped"]["ema"]
    want = float(torch.linalg.norm(m[0].weight.detach()))
    assert frob(s)["0.weight"] == pytest.approx(want, rel=1e-5)
    path2 = tmp_path / "only_ema.pt"
    torch.save({"ema": ema, "optimizer": {"state": {0: {"m": torch.ones(2)}}}}, path2)
    _, got, info = add(str(path2))
    assert set(got) == MLP_NAMES and "optimizer" in info["skipped"]


def test_a_checkpoint_that_cannot_be_decided_lists_its_keys(tmp_path):
    m = mlp()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.randn(2, 6)).sum().backward()
    opt.step()
    path = tmp_path / "odd.pt"
    torch.save({"weights_v2": m.state_dict(), "optimizer": opt.state_dict()}, path)
    with pytest.raises(ExtractionError, match=r"top-level keys \['weights_v2', 'optimizer'\]"):
        add(str(path))
    with pytest.raises(ExtractionError, match=r"torch.load\(path, weights_only=True\)\[KEY\]"):
        add(str(path))
    path2 = tmp_path / "two.pt"
    torch.save({"model": m.state_dict(), "state_dict": m.state_dict()}, path2)
    with pytest.raises(ExtractionError, match="several keys could hold the model's weights"):
        add(str(path2))


def test_a_nested_model_file_without_training_state_is_kept_whole(tmp_path):
    path = tmp_path / "parts.pt"
    torch.save({"encoder": mlp().state_dict(), "decoder": {"w": torch.ones(3, 2)}}, path)
    _, got, info = add(str(path))
    assert set(got) == {f"encoder.{n}" for n in MLP_NAMES} | {"decoder.w"}
    assert {f"encoder.{n}" for n in BN_STATS} <= set(info["skipped"])


def test_flat_state_dict_file_skips_a_stray_optimizer_entry(tmp_path):
    m = mlp()
    path = tmp_path / "flat.pt"
    torch.save({**m.state_dict(), "optimizer": {"state": {0: torch.ones(2)}}}, path)
    _, got, info = add(str(path))
    assert set(got) == MLP_NAMES and "optimizer" in info["skipped"]


# --- 2. parameters once; buffers and running statistics skipped -----------------------------


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.shared = self.fc  # the same submodule under a second name
        self.register_buffer("mask", torch.ones(4, 4))
        self.fc.bias.requires_grad_(False)


def test_torch_module_parameters_once_buffers_skipped():
    _, got, info = add(Tied())
    assert set(got) == {"emb.weight", "fc.weight", "fc.bias", "bn.weight", "bn.bias"}
    assert got["emb.weight"].type == ParameterType.EMBEDDING
    assert got["bn.weight"].type == ParameterType.NORM
    skipped = info["skipped"]
    assert "alias of 'emb.weight'" in skipped["head.weight"]
    assert "alias of 'fc.weight'" in skipped["shared.weight"]
    assert "alias of 'fc.bias'" in skipped["shared.bias"]
    for stat in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        assert "running statistic" in skipped[stat]
    assert "buffer" in skipped["mask"]


def test_torch_state_dict_and_file_skip_batchnorm_buffers(tmp_path):
    m = mlp()
    _, got, info = add(m.state_dict())
    assert set(got) == MLP_NAMES
    assert set(info["skipped"]) == BN_STATS
    assert all("running statistic" in r for r in info["skipped"].values())
    torch.save(m.state_dict(), tmp_path / "m.pt")
    _, got, info = add(str(tmp_path / "m.pt"))
    assert set(got) == MLP_NAMES and set(info["skipped"]) == BN_STATS
    _, got, _ = add(m)
    assert set(got) == MLP_NAMES


def test_flax_nnx_batch_stats_are_listed_as_skipped():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 8, rngs=rngs)
            self.bn = nnx.BatchNorm(8, rngs=rngs)

    _, got, info = add(Net(nnx.Rngs(0)))
    assert set(got) == {"lin.kernel", "lin.bias", "bn.scale", "bn.bias"}
    assert "running statistic" in info["skipped"]["bn.mean"]
    assert "running statistic" in info["skipped"]["bn.var"]


def test_flax_linen_variables_keep_params_only():
    import jax

    jnp = jax.numpy
    from flax import linen
    from flax.core import freeze

    class Net(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.BatchNorm(use_running_average=False)(linen.Dense(8)(x))

    variables = Net().init(jax.random.PRNGKey(0), jnp.ones((2, 4)))
    for model in (variables, freeze(variables)):
        _, got, info = add(model)
        assert set(got) == {
            "params.Dense_0.kernel",
            "params.Dense_0.bias",
            "params.BatchNorm_0.scale",
            "params.BatchNorm_0.bias",
        }
        assert got["params.Dense_0.kernel"].layout == "in_out"
        assert set(info["skipped"]) == {
            "batch_stats.BatchNorm_0.mean",
            "batch_stats.BatchNorm_0.var",
        }


def test_keras_moving_statistics_skipped_frozen_weights_kept():
    import keras

    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(3, name="d"),
            keras.layers.BatchNormalization(name="bn"),
        ],
        name="net",
    )
    model.get_layer("d").trainable = False  # frozen: still parameters
    _, got, info = add(model)
    assert set(got) == {"d.kernel", "d.bias", "bn.gamma", "bn.beta"}
    assert set(info["skipped"]) == {"bn.moving_mean", "bn.moving_variance"}
    assert all("running statistic" in r for r in info["skipped"].values())


def test_equinox_batchnorm_state_skipped():
    import warnings

    import equinox as eqx
    import jax

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bn = eqx.nn.BatchNorm(4, axis_name="batch")
        model = eqx.nn.Sequential([eqx.nn.Linear(4, 4, key=jax.random.PRNGKey(1)), bn])
        _, got, info = add(model)
        assert set(got) == {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"}
        assert "Equinox state" in info["skipped"]["layers.1.ema_state_index.init.0"]
        assert "Equinox state" in info["skipped"]["layers.1.ema_state_index.init.1"]
        layer, state = eqx.nn.make_with_state(eqx.nn.BatchNorm)(4, axis_name="b")
        _, got, info = add((layer, state))
        assert set(got) == {"0.weight", "0.bias"}
        assert any(k.startswith("1.") and "Equinox state" in r for k, r in info["skipped"].items())


# --- 3. parametrized modules -----------------------------------------------------------------


def test_parametrized_weights_are_the_effective_tensor():
    from torch.nn.utils.parametrizations import spectral_norm, weight_norm

    torch.manual_seed(0)
    m = nn.Sequential(weight_norm(nn.Linear(8, 16)), spectral_norm(nn.Linear(16, 4)))
    m(torch.randn(3, 8))  # one training-mode forward: spectral norm's vectors updated
    u_before = m[1].parametrizations.weight[0]._u.clone()
    s, got, info = add(m)
    assert set(got) == {"0.weight", "0.bias", "1.weight", "1.bias"}
    assert got["0.weight"].shape == (16, 8) and got["0.weight"].type == ParameterType.DENSE
    assert got["1.weight"].shape == (4, 16) and got["1.weight"].type == ParameterType.DENSE
    skipped = info["skipped"]
    for name in (
        "0.parametrizations.weight.original0",
        "0.parametrizations.weight.original1",
        "1.parametrizations.weight.original",
        "1.parametrizations.weight.0._u",
        "1.parametrizations.weight.0._v",
    ):
        assert name in skipped and "weight'" in skipped[name], name
    torch.testing.assert_close(m[1].parametrizations.weight[0]._u, u_before)  # unchanged
    assert m.training and m[1].parametrizations.weight.training
    m.eval()
    values = frob(s)
    with torch.no_grad():
        for i in (0, 1):
            want = float(torch.linalg.norm(m[i].weight))
            assert values[f"{i}.weight"] == pytest.approx(want, rel=1e-5)


def test_legacy_hook_weight_norm_is_the_effective_tensor():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = nn.Sequential(torch.nn.utils.weight_norm(nn.Linear(8, 5)))
    s, got, info = add(m)
    assert set(got) == {"0.weight", "0.bias"}
    assert {"0.weight_g", "0.weight_v"} <= set(info["skipped"])
    assert frob(s)["0.weight"] == pytest.approx(
        float(torch.linalg.norm(m[0].weight.detach())), rel=1e-5
    )


# --- 4. meta device -----------------------------------------------------------------------


def test_meta_model_is_an_extraction_error_naming_the_parameter():
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match=r"'0\.weight' is on the meta device"):
        s.models.add(m, model_id="meta")
    with pytest.raises(ExtractionError, match="meta device"):
        s.models.add(m.state_dict(), model_id="meta")
    assert s.models.ids() == []


# --- 5. wrappers --------------------------------------------------------------------------


def test_wrapped_modules_have_the_plain_names_and_uids():
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    plain = {sl.name: sl.uid for sl in Session(profile="ram").models.add(m, model_id="m")}
    for wrapped in (torch.compile(m), nn.DataParallel(m), torch.compile(nn.DataParallel(m))):
        _, got, _ = add(wrapped)
        assert {n: sl.uid for n, sl in got.items()} == plain
        assert got["0.weight"].type == ParameterType.DENSE


def test_wrapper_prefixes_are_stripped_from_state_dicts_and_files(tmp_path):
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    names = {"0.weight", "0.bias", "1.weight", "1.bias"}
    for wrapped in (torch.compile(m), nn.DataParallel(m)):
        sd = wrapped.state_dict()
        assert all(k.startswith(("_orig_mod.", "module.")) for k in sd)
        _, got, _ = add(sd)
        assert set(got) == names
        torch.save({"model": sd, "epoch": 2}, tmp_path / "w.pt")
        _, got, _ = add(str(tmp_path / "w.pt"))
        assert set(got) == names
    partial = {"module.w": torch.ones(2, 2), "other.w": torch.ones(2, 2)}
    _, got, _ = add(partial)
    assert set(got) == {"module.w", "other.w"}  # not every key: kept as is


# --- 6. layouts ---------------------------------------------------------------------------


def onnx_model(nodes, inits, inputs, outputs):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(v, name=k) for k, v in inits.items()],
    )
    model = helper.make_model(graph)
    onnx.checker.check_model(model)
    return model


def test_onnx_layout_follows_the_consuming_operator():
    from onnx import helper

    rng = np.random.default_rng(0)
    inits = {
        "mm": rng.normal(size=(8, 16)).astype(np.float32),  # X @ W: (in, out)
        "g0": rng.normal(size=(16, 4)).astype(np.float32),  # Gemm transB=0: (in, out)
        "g1": rng.normal(size=(3, 4)).astype(np.float32),  # Gemm transB=1: (out, in)
    }
    nodes = [
        helper.make_node("MatMul", ["x", "mm"], ["h"]),
        helper.make_node("Gemm", ["h", "g0"], ["y"]),
        helper.make_node("Gemm", ["y", "g1"], ["z"], transB=1),
    ]
    model = onnx_model(nodes, inits, [("x", [1, 8])], [("z", [1, 3])])
    s, got, _ = add(model)
    assert {n: sl.layout for n, sl in got.items()} == {
        "mm": "in_out",
        "g0": "in_out",
        "g1": "out_in",
    }
    assert all(sl.type == ParameterType.DENSE for sl in got.values())
    # the same weights in PyTorch layout give the same orientation-dependent fields
    twin = {"mm": inits["mm"].T, "g0": inits["g0"].T, "g1": inits["g1"]}
    s.models.add(twin, model_id="twin")
    s.compute.apply("weights_std", "stable_rank", progress=False)
    rows = s.results.export_table("stable_rank", export_format="list")
    by = {(r["model_id"], r["name"]): r["stable_rank"] for r in rows}
    for name in twin:
        assert by[("m", name)] == pytest.approx(by[("twin", name)], rel=1e-5)


def test_onnx_batchnorm_statistics_are_skipped():
    from onnx import helper

    inits = {k: np.full(4, v, np.float32) for k, v in (("s", 1.0), ("b", 0.1), ("mu", 0.0))}
    inits["var"] = np.ones(4, np.float32)
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["y"])]
    model = onnx_model(nodes, inits, [("x", [1, 4])], [("y", [1, 4])])
    _, got, info = add(model)
    assert set(got) == {"s", "b"}
    assert got["s"].type == ParameterType.NORM and got["b"].type == ParameterType.BIAS
    assert set(info["skipped"]) == {"mu", "var"}


def test_onnx_file_weights_are_copied(tmp_path):
    import onnx
    from onnx import helper

    model = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        {"w": np.ones((4, 2), np.float32)},
        [("x", [1, 4])],
        [("y", [1, 2])],
    )
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    _, got, info = add(str(tmp_path / "m.onnx"))
    assert info["weights"] == "copied" and got["w"].layout == "in_out"


def test_keras_recurrent_and_separable_kernels_are_in_out():
    import keras

    seq = keras.Sequential(
        [keras.Input((5, 4)), keras.layers.LSTM(6, name="lstm"), keras.layers.Dense(2, name="d")]
    )
    _, got, _ = add(seq)
    rk = got["lstm.lstm_cell.recurrent_kernel"]
    assert rk.shape == (6, 24) and rk.layout == "in_out"
    assert got["lstm.lstm_cell.kernel"].layout == "in_out"
    assert got["lstm.lstm_cell.bias"].layout == "out_in"
    sep = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.SeparableConv2D(4, 3, name="sep")], name="s"
    )
    _, got, _ = add(sep)
    assert got["sep.depthwise_kernel"].layout == "in_out"
    assert got["sep.pointwise_kernel"].layout == "in_out"
    assert got["sep.bias"].layout == "out_in"


# --- 7. ONNX external data ------------------------------------------------------------------


def test_model_proto_without_its_external_data_is_an_extraction_error(tmp_path, monkeypatch):
    import onnx
    from onnx import helper

    model = onnx_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        {"W": np.ones((16, 16), np.float32)},
        [("x", [1, 16])],
        [("y", [1, 16])],
    )
    onnx.save_model(
        model,
        str(tmp_path / "ext.onnx"),
        save_as_external_data=True,
        location="ext.data",
        size_threshold=0,
    )
    proto = onnx.load(str(tmp_path / "ext.onnx"), load_external_data=False)
    monkeypatch.chdir(tmp_path)  # even where the data file would resolve against the CWD
    with pytest.raises(ExtractionError, match=r"initializer 'W'.*'ext.data'.*load_external_data"):
        add(proto)
    _, got, _ = add(str(tmp_path / "ext.onnx"))  # the path reads the data file
    assert set(got) == {"W"}
    _, got, _ = add(onnx.load(str(tmp_path / "ext.onnx")))
    assert set(got) == {"W"}

"""Every model source with the same weights gives the same slices and field values.

The reference is a small network in PyTorch layout (embedding, two dense layers, a layer
norm, a 3x3 conv). Each framework names its leaves its own way (``kernel``, ``scale``,
``embedding``...) and Flax/Keras store kernels (in, out): the expected name map and layout
are stated per framework, and the field values must agree to float32 precision.
"""

from __future__ import annotations

import numpy as np
import pytest

from diffract import ExtractionError, ParameterType, Session

CANON = {
    "emb.weight": (10, 6),
    "fc1.weight": (8, 6),
    "fc1.bias": (8,),
    "ln.weight": (8,),
    "ln.bias": (8,),
    "conv.weight": (5, 3, 3, 3),
    "conv.bias": (5,),
    "fc2.weight": (4, 8),
    "fc2.bias": (4,),
}
TYPES = {
    "emb.weight": ParameterType.EMBEDDING,
    "fc1.weight": ParameterType.DENSE,
    "fc1.bias": ParameterType.BIAS,
    "ln.weight": ParameterType.NORM,
    "ln.bias": ParameterType.BIAS,
    "conv.weight": ParameterType.CONV,
    "conv.bias": ParameterType.BIAS,
    "fc2.weight": ParameterType.DENSE,
    "fc2.bias": ParameterType.BIAS,
}
FIELDS = ("frob_norm", "weights_std", "stable_rank", "spectral_norm")


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(42)
    return {k: rng.normal(size=s).astype(np.float32) for k, s in CANON.items()}


def flax_name(n: str) -> str:
    layer, leaf = n.split(".")
    if layer == "emb":
        return "emb.embedding"
    if layer == "ln":
        return "ln.scale" if leaf == "weight" else "ln.bias"
    return f"{layer}.kernel" if leaf == "weight" else n


def keras_name(n: str) -> str:
    layer, leaf = n.split(".")
    if layer == "emb":
        return "emb.embeddings"
    if layer == "ln":
        return "ln.gamma" if leaf == "weight" else "ln.beta"
    return f"{layer}.kernel" if leaf == "weight" else n


def to_in_out(name: str, w: np.ndarray) -> np.ndarray:
    """PyTorch layout -> Flax/Keras kernel layout."""
    if name.endswith(".weight") and name.split(".")[0] in ("fc1", "fc2"):
        return w.T
    if name == "conv.weight":
        return np.transpose(w, (2, 3, 1, 0))  # (O, I, H, W) -> (H, W, I, O)
    return w


# --- builders: each returns (model object or path, {their name: canonical name}) ---------


def build_numpy(w, tmp_path):
    return dict(w), {k: k for k in w}


def build_torch_module(w, tmp_path):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.fc1 = nn.Linear(6, 8)
            self.ln = nn.LayerNorm(8)
            self.conv = nn.Conv2d(3, 5, 3)
            self.fc2 = nn.Linear(8, 4)

    net = Net()
    net.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()})
    return net, {k: k for k in w}


def build_torch_state_dict(w, tmp_path):
    net, names = build_torch_module(w, tmp_path)
    return net.state_dict(), names


def build_torch_file(w, tmp_path):
    import torch

    path = tmp_path / "model.pt"
    torch.save({k: torch.from_numpy(v) for k, v in w.items()}, path)
    return str(path), {k: k for k in w}


def build_safetensors(w, tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file(dict(w), str(path))
    return str(path), {k: k for k in w}


def build_npz(w, tmp_path):
    path = tmp_path / "model.npz"
    np.savez(path, **w)
    return str(path), {k: k for k in w}


def build_onnx(w, tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Gather", ["emb.weight", "ids"], ["e"]),
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["hn"]),
        helper.make_node("Gemm", ["hn", "fc2.weight", "fc2.bias"], ["y"], transB=1),
        helper.make_node("Conv", ["img", "conv.weight", "conv.bias"], ["c"]),
    ]
    graph = helper.make_graph(
        nodes,
        "net",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6]),
            helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8]),
        ],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
            for n, s in (("e", [2, 6]), ("y", [1, 4]), ("c", [1, 5, 6, 6]))
        ],
        initializer=[numpy_helper.from_array(v, name=k) for k, v in w.items()],
    )
    model = helper.make_model(graph)
    onnx.checker.check_model(model)
    return model, {k: k for k in w}


def build_equinox(w, tmp_path):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    class Net(eqx.Module):
        emb: eqx.nn.Embedding
        fc1: eqx.nn.Linear
        ln: eqx.nn.LayerNorm
        conv: eqx.nn.Conv2d
        fc2: eqx.nn.Linear

    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    net = Net(
        eqx.nn.Embedding(10, 6, key=keys[0]),
        eqx.nn.Linear(6, 8, key=keys[1]),
        eqx.nn.LayerNorm(8),
        eqx.nn.Conv2d(3, 5, 3, key=keys[2]),
        eqx.nn.Linear(8, 4, key=keys[3]),
    )
    leaves = {
        "emb.weight": lambda m: m.emb.weight,
        "fc1.weight": lambda m: m.fc1.weight,
        "fc1.bias": lambda m: m.fc1.bias,
        "ln.weight": lambda m: m.ln.weight,
        "ln.bias": lambda m: m.ln.bias,
        "conv.weight": lambda m: m.conv.weight,
        "conv.bias": lambda m: m.conv.bias,
        "fc2.weight": lambda m: m.fc2.weight,
        "fc2.bias": lambda m: m.fc2.bias,
    }
    for name, where in leaves.items():
        value = w[name].reshape(5, 1, 1) if name == "conv.bias" else w[name]
        net = eqx.tree_at(where, net, jnp.asarray(value))
    return net, {k: k for k in w}


def build_flax_nnx(w, tmp_path):
    import jax.numpy as jnp
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.emb = nnx.Embed(10, 6, rngs=rngs)
            self.fc1 = nnx.Linear(6, 8, rngs=rngs)
            self.ln = nnx.LayerNorm(8, rngs=rngs)
            self.conv = nnx.Conv(3, 5, (3, 3), rngs=rngs)
            self.fc2 = nnx.Linear(8, 4, rngs=rngs)

    net = Net(nnx.Rngs(0))
    for name, value in w.items():
        layer, _ = name.split(".")
        leaf = flax_name(name).split(".")[1]
        getattr(getattr(net, layer), leaf)[...] = jnp.asarray(to_in_out(name, value))
    return net, {flax_name(k): k for k in w}


def build_flax_linen(w, tmp_path):
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, ids, x, img):
            e = nn.Embed(10, 6, name="emb")(ids)
            h = nn.LayerNorm(name="ln")(nn.Dense(8, name="fc1")(x))
            c = nn.Conv(5, (3, 3), padding="VALID", name="conv")(img)
            return e, nn.Dense(4, name="fc2")(h), c

    variables = Net().init(
        jax.random.PRNGKey(0), jnp.zeros(2, jnp.int32), jnp.zeros((1, 6)), jnp.zeros((1, 8, 8, 3))
    )
    params = jax.tree_util.tree_map(lambda x: x, variables["params"])
    params = {k: dict(v) for k, v in params.items()}
    for name, value in w.items():
        layer, leaf = flax_name(name).split(".")
        assert params[layer][leaf].shape == to_in_out(name, value).shape
        params[layer][leaf] = jnp.asarray(to_in_out(name, value))
    return params, {flax_name(k): k for k in w}


def build_keras(w, tmp_path):
    import keras

    ids = keras.Input((2,), dtype="int32")
    x = keras.Input((6,))
    img = keras.Input((8, 8, 3))
    e = keras.layers.Embedding(10, 6, name="emb")(ids)
    h = keras.layers.LayerNormalization(name="ln")(keras.layers.Dense(8, name="fc1")(x))
    y = keras.layers.Dense(4, name="fc2")(h)
    c = keras.layers.Conv2D(5, 3, name="conv")(img)
    model = keras.Model([ids, x, img], [e, y, c], name="net")
    for layer in ("emb", "fc1", "ln", "conv", "fc2"):
        lay = model.get_layer(layer)
        vals = []
        for var in lay.weights:
            canon = {v: k for k, v in {k: keras_name(k) for k in w}.items()}[f"{layer}.{var.name}"]
            vals.append(to_in_out(canon, w[canon]))
        lay.set_weights(vals)
    return model, {keras_name(k): k for k in w}


BUILDERS = {
    "numpy": build_numpy,
    "torch.nn.Module": build_torch_module,
    "torch.state_dict": build_torch_state_dict,
    "torch file": build_torch_file,
    "safetensors": build_safetensors,
    "npz": build_npz,
    "onnx": build_onnx,
    "equinox": build_equinox,
    "flax.nnx": build_flax_nnx,
    "flax.linen": build_flax_linen,
    "keras": build_keras,
}


@pytest.fixture(scope="module")
def reference(weights, tmp_path_factory):
    s = Session(profile="ram")
    s.models.add(dict(weights), model_id="ref")
    s.compute.apply(*FIELDS, progress=False)
    return {r["name"]: r for r in s.results.export_table(*FIELDS, export_format="list")}


@pytest.mark.parametrize("source", list(BUILDERS))
def test_same_weights_same_slices_and_fields(source, weights, reference, tmp_path):
    model, names = BUILDERS[source](weights, tmp_path)
    s = Session(profile="ram")
    slices = s.models.add(model, model_id=f"m-{source.replace(' ', '-')}")
    got = {sl.name: sl for sl in slices}
    assert set(got) == set(names), f"{source}: names {sorted(got)}"
    for their, canon in names.items():
        sl = got[their]
        assert sl.type == TYPES[canon], f"{source}: {their} typed {sl.type}"
        expected_shape = (
            to_in_out(canon, weights[canon]).shape if sl.layout == "in_out" else CANON[canon]
        )
        if source == "equinox" and canon == "conv.bias":
            expected_shape = (5, 1, 1)
        assert sl.shape == expected_shape, f"{source}: {their} shape {sl.shape}"
        if (
            source in ("flax.nnx", "flax.linen", "keras")
            and canon.split(".")[0] in ("fc1", "fc2", "conv")
            and canon.endswith("weight")
        ):
            assert sl.layout == "in_out"
    s.compute.apply(*FIELDS, progress=False)
    rows = {r["name"]: r for r in s.results.export_table(*FIELDS, export_format="list")}
    for their, canon in names.items():
        for f in FIELDS:
            want, have = reference[canon][f], rows[their][f]
            if want is None:
                assert have is None, f"{source}: {their}.{f} = {have}, expected not applicable"
            else:
                assert have == pytest.approx(want, rel=1e-5), f"{source}: {their}.{f}"


def test_bf16_and_fp16_kept_and_converted(tmp_path):
    import torch

    sd = {
        "a.weight": torch.randn(6, 4, dtype=torch.bfloat16),
        "b.weight": torch.randn(5, 3, dtype=torch.float16),
        "c.weight": torch.randn(3, 3, dtype=torch.float32),
    }
    from safetensors.torch import save_file

    save_file(sd, str(tmp_path / "m.safetensors"))
    for model in (sd, str(tmp_path / "m.safetensors")):
        s = Session(profile="ram")
        slices = s.models.add(model, model_id="m")
        assert {sl.name: sl.dtype for sl in slices} == {
            "a.weight": "bfloat16",
            "b.weight": "float16",
            "c.weight": "float32",
        }
        s.compute.apply("frob_norm", progress=False)
        rows = {
            r["name"]: r["frob_norm"]
            for r in s.results.export_table("frob_norm", export_format="list")
        }
        for name, t in sd.items():
            assert rows[name] == pytest.approx(float(torch.linalg.norm(t.float())), rel=1e-5)


def test_safetensors_is_read_lazily(weights, tmp_path):
    from safetensors.numpy import save_file

    from diffract import LazyArray
    from diffract._vocab.tree import tree_leaves_with_path
    from diffract.extract import model_tree

    path = tmp_path / "m.safetensors"
    save_file(dict(weights), str(path))
    leaves = tree_leaves_with_path(model_tree(str(path)).tree)
    assert leaves and all(isinstance(leaf, LazyArray) for _, leaf in leaves)
    loaded = {".".join(p): leaf.load() for p, leaf in leaves}
    for k, v in weights.items():
        np.testing.assert_array_equal(loaded[k], v)


def test_sharded_safetensors_folder(weights, tmp_path):
    import json

    from safetensors.numpy import save_file

    names = sorted(weights)
    half = len(names) // 2
    save_file(
        {k: weights[k] for k in names[:half]}, str(tmp_path / "model-00001-of-00002.safetensors")
    )
    save_file(
        {k: weights[k] for k in names[half:]}, str(tmp_path / "model-00002-of-00002.safetensors")
    )
    index = {
        "weight_map": {
            k: f"model-0000{1 if i < half else 2}-of-00002.safetensors" for i, k in enumerate(names)
        }
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    s = Session(profile="ram")
    assert {sl.name for sl in s.models.add(str(tmp_path), model_id="sharded")} == set(weights)


def test_custom_extractor_registered_by_the_user(weights):
    import diffract
    from diffract.extract import unregister_extractor

    class MyModel:
        def __init__(self, params):
            self.params = params

    diffract.register_extractor(
        "mymodel", lambda m: isinstance(m, MyModel), lambda m: {"body": m.params}
    )
    try:
        s = Session(profile="ram")
        slices = s.models.add(MyModel({"w": weights["fc1.weight"]}), model_id="mine")
        assert [sl.name for sl in slices] == ["body.w"]
        assert s.models.info("mine")["framework"] == "mymodel"
    finally:
        unregister_extractor("mymodel")


def test_filter_spec_prefix_tree_and_predicate(weights):
    s = Session(profile="ram")
    nested = {
        "enc": {"w": weights["fc1.weight"], "b": weights["fc1.bias"]},
        "head": {"w": weights["fc2.weight"]},
    }
    kept = s.models.add(nested, model_id="a", filter_spec={"enc": True, "head": False})
    assert sorted(sl.name for sl in kept) == ["enc.b", "enc.w"]
    kept = s.models.add(nested, model_id="b", filter_spec=lambda x: getattr(x, "ndim", 0) == 2)
    assert sorted(sl.name for sl in kept) == ["enc.w", "head.w"]
    assert s.models.info("b")["skipped"] == {"enc.b": "excluded by filter_spec"}


def test_integer_and_scalar_leaves_are_skipped_with_a_reason(weights):
    s = Session(profile="ram")
    model = {"w": weights["fc1.weight"], "steps": np.arange(3), "scale": np.float32(2.0), "lr": 0.1}
    slices = s.models.add(model, model_id="m")
    assert [sl.name for sl in slices] == ["w"]
    skipped = s.models.info("m")["skipped"]
    assert "not a floating-point array" in skipped["steps"]
    assert "0-d" in skipped["scale"]
    assert "not an array" in skipped["lr"]


def test_0d_leaf_kept_by_filter_spec_is_a_clear_error():
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match="'scale' is 0-d"):
        s.models.add(
            {"w": np.ones((2, 2)), "scale": np.float32(2.0)}, model_id="m", filter_spec=True
        )
    assert s.models.ids() == []


def test_model_without_weights_and_unknown_object_are_clear_errors(tmp_path):
    s = Session(profile="ram")
    with pytest.raises(ExtractionError, match="no weight slices"):
        s.models.add({"steps": np.arange(3)}, model_id="m")
    with pytest.raises(ExtractionError, match="cannot extract weights from an object of type"):
        s.models.add(object(), model_id="m")
    with pytest.raises(ExtractionError, match="checkpoint not found"):
        s.models.add(str(tmp_path / "nope.safetensors"), model_id="m")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 3)
    with pytest.raises(ExtractionError, match="not a safetensors file"):
        s.models.add(str(tmp_path / "junk.safetensors"), model_id="m")
    assert s.models.ids() == []


class EvilPayload:
    """An arbitrary class: unpickling it would run the checkpoint author's code."""


def test_pickled_objects_in_torch_checkpoint_are_refused(tmp_path):
    import torch

    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2, 2), "obj": EvilPayload()}, path)
    with pytest.raises(ExtractionError, match="weights_only=True"):
        Session(profile="ram").models.add(str(path), model_id="evil")


def test_import_of_diffract_does_not_activate_frameworks():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, diffract\n"
        "s = diffract.Session(profile='ram')\n"
        "s.models.add({'w': np.ones((3, 2))}, model_id='m')\n"
        "print(sorted(m for m in ('torch', 'jax', 'flax', 'equinox', 'onnx', 'keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"

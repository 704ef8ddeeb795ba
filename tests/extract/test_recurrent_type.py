"""The ``recurrent`` parameter type (issue 31 point 1): RNN, LSTM and GRU weights typed from
their module classes (PyTorch, Keras, Flax NNX, Equinox) and from their names (a PyTorch state
dict, Flax Linen params), analyzed by default like a dense matrix, and left out by
WeightWatcher's layer selection as WeightWatcher 0.7.7 leaves ``nn.LSTM`` out (its PyTorch
layer types know Linear, Conv and Embedding only; its state-dict reader takes ``*.weight``
keys only)."""

from __future__ import annotations

import numpy as np
import pytest

from _engine_fields import NA
from diffract import ParameterType
from diffract._vocab.slices import infer_type
from diffract.extract import extract

torch = pytest.importorskip("torch")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.rnn = torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True, proj_size=4)
        self.gru = torch.nn.GRU(8, 12)
        self.cell = torch.nn.RNNCell(4, 6)
        self.fc = torch.nn.Linear(16, 10)


def _types(source) -> dict[str, str]:
    return {leaf.name: leaf.type.value for leaf in extract(source).leaves}


def test_the_type_is_built_in_and_keeps_the_old_values():
    assert ParameterType.RECURRENT.value == "recurrent"
    assert ParameterType.from_string("recurrent") is ParameterType.RECURRENT
    assert ParameterType.RECURRENT in ParameterType.builtin()
    assert not ParameterType.RECURRENT.is_custom
    old = {"unknown": 0, "dense": 1, "embedding": 2, "conv": 4, "norm": 8, "bias": 16, "other": 32}
    assert {t: int(ParameterType(t)) for t in old} == old


@pytest.mark.parametrize("as_state_dict", [False, True])
def test_torch_module_and_state_dict(as_state_dict):
    net = _Net()
    types = _types(net.state_dict() if as_state_dict else net)
    recurrent = {n for n, t in types.items() if t == "recurrent"}
    expected = {
        f"rnn.weight_{k}_l{layer}{d}"
        for k in ("ih", "hh", "hr")
        for layer in (0, 1)
        for d in ("", "_reverse")
    } | {"gru.weight_ih_l0", "gru.weight_hh_l0", "cell.weight_ih", "cell.weight_hh"}
    assert recurrent == expected
    assert types["rnn.bias_ih_l1_reverse"] == "bias" and types["cell.bias_hh"] == "bias"
    assert types["fc.weight"] == "dense" and types["conv.weight"] == "conv"


def test_names_without_a_module():
    assert infer_type("encoder.lstm.weight_hh_l3_reverse", (8, 2)) == "recurrent"
    assert infer_type("rnn.0.rnn.weight_ih_l0", (8, 2)) == "recurrent"
    assert infer_type("rnn.0.rnn.bias_ih_l0", (8,)) == "bias"
    assert infer_type("rnn.0.linear.weight", (8, 2)) == "dense"  # a Linear beside the LSTM
    assert infer_type("params.OptimizedLSTMCell_0.hi.kernel", (4, 4)) == "recurrent"
    assert infer_type("GRUCell_2.in.bias", (4,)) == "bias"
    assert infer_type("Dense_0.kernel", (4, 4)) == "dense"


def test_keras_layers():
    keras = pytest.importorskip("keras")
    x = keras.Input((5, 3))
    y = keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True))(x)
    y = keras.layers.GRU(4, return_sequences=True)(y)
    y = keras.layers.SimpleRNN(4)(y)
    y = keras.layers.Dense(2, name="head")(y)  # named: Keras numbers unnamed layers per process
    types = _types(keras.Model(x, y))
    recurrent = {n for n, t in types.items() if t == "recurrent"}
    assert len(recurrent) == 8  # kernel and recurrent_kernel of 2 LSTMs, the GRU, the RNN
    assert all(n.endswith(("kernel", "recurrent_kernel")) for n in recurrent)
    assert "head.kernel" not in recurrent and types["head.kernel"] == "dense"
    assert {t for n, t in types.items() if n.endswith(".bias")} == {"bias"}


def test_flax_and_equinox_cells():
    nnx = pytest.importorskip("flax.nnx")
    jax = pytest.importorskip("jax")
    eqx = pytest.importorskip("equinox")

    class M(nnx.Module):
        def __init__(self, rngs):
            self.lstm = nnx.OptimizedLSTMCell(3, 4, rngs=rngs)
            self.gru = nnx.GRUCell(3, 4, rngs=rngs)
            self.fc = nnx.Linear(4, 2, rngs=rngs)

    types = _types(M(nnx.Rngs(0)))
    # the Linear layers inside a cell are the cell's recurrent weights
    assert {n for n, t in types.items() if t == "recurrent"} == {
        n for n in types if n.startswith(("lstm.", "gru.")) and n.endswith("kernel")
    }
    assert types["fc.kernel"] == "dense"

    class E(eqx.Module):
        a: eqx.nn.LSTMCell
        b: eqx.nn.GRUCell
        c: eqx.nn.Linear

    k = jax.random.split(jax.random.key(0), 3)
    cells = (eqx.nn.LSTMCell(3, 4, key=k[0]), eqx.nn.GRUCell(3, 4, key=k[1]))
    types = _types(E(*cells, eqx.nn.Linear(4, 2, key=k[2])))
    assert {n for n, t in types.items() if t == "recurrent"} == {
        f"{i}.weight_{x}" for i in "ab" for x in ("ih", "hh")
    }
    assert types["b.bias_n"] == "bias" and types["c.weight"] == "dense"


def test_analyzed_by_default_left_out_by_weightwatchers_selection(fs):
    weights = {k: v.numpy().astype(np.float64) for k, v in _Net().state_dict().items()}
    default = fs.run({"m": weights}, ["pl_alpha", "esd_max"], min_evals=None)
    assert default.values["m"]["rnn.weight_ih_l0"]["esd_max"] is not NA
    ww = fs.run({"m": weights}, ["esd_max", "num_evals"], conventions="weightwatcher")
    reasons = {e.name: e.reason for e in ww.report.not_applicable_reasons}
    recurrent = {n for n, t in _types(weights).items() if t == "recurrent"}
    assert recurrent <= set(reasons)
    assert "layer type 'recurrent' is not analyzed" in reasons["gru.weight_hh_l0"]
    assert ww.values["m"]["fc.weight"]["esd_max"] is not NA
    assert all(ww.values["m"][n]["esd_max"] is NA for n in recurrent)
    assert ww.values["m"]["rnn.weight_ih_l0"]["num_evals"] == 8  # shape fields still there

"""The x axis of the per-layer figures (``layers``, line and bar, in panels, their static
snapshots, the report and the sidebar) names its layers: ``"index short-name"`` ticks, at
most a dozen, from :func:`diffract.viz._common.short_names` (the sidebar's names too)."""

from __future__ import annotations

import pytest

from _ui_helpers import mlp
from diffract import Session
from diffract.viz._common import MAX_LAYER_TICKS, SHORT_NAME_CHARS, layer_ticks, short_names


def test_short_names_tell_layers_apart_with_the_fewest_components():
    assert short_names(["layers.0.weight", "layers.1.weight", "layers.2.weight"]) == [
        "layers.0",
        "layers.1",
        "layers.2",
    ]
    bert = [
        f"encoder.layer.{i}.attention.self.{k}.weight"
        for i, k in ((0, "query"), (0, "key"), (1, "query"))
    ]
    assert short_names(bert) == ["0.query", "key", "1.query"]
    # no shared last component: names keep what tells them apart
    assert short_names(["fc1.weight", "fc1.bias", "fc2.weight"]) == [
        "fc1.weight",
        "bias",
        "fc2.weight",
    ]
    long = short_names(["a." + "x" * 40, "b." + "y" * 40])[0]
    assert len(long) == SHORT_NAME_CHARS and long.startswith("…") and long.endswith("x" * 15)
    assert short_names([]) == []


def test_layer_ticks_are_at_most_a_dozen_evenly_spaced_and_named():
    names = [f"model.layers.{i}.mlp.down_proj.weight" for i in range(48)]
    ticks = layer_ticks(names)
    assert len(ticks["tickvals"]) <= MAX_LAYER_TICKS
    assert (
        ticks["tickvals"][0] == 0
        and len(set(map(int.__sub__, ticks["tickvals"][1:], ticks["tickvals"]))) == 1
    )
    assert ticks["ticktext"][1] == f"{ticks['tickvals'][1]} layers.{ticks['tickvals'][1]}"
    assert layer_ticks(["a.weight", "b.weight"])["ticktext"] == ["0 a", "1 b"]


@pytest.mark.parametrize("kind", ["line", "bar"])
def test_a_layers_figure_names_its_ticks_after_the_deepest_model(kind):
    s = Session("ram")
    s.models.add(mlp(0, layers=3, width=12), "short")
    s.models.add(mlp(1, layers=5, width=12), "deep")
    s.compute.apply("frob_norm", progress=False)
    fig = s.viz.layers("frob_norm", kind=kind)
    axis = fig.layout.xaxis
    assert axis.tickmode == "array"
    assert list(axis.tickvals) == [0, 1, 2, 3, 4]  # the deep model's five layers, not three
    assert list(axis.ticktext) == [f"{i} layers.{i}" for i in range(5)]
    # the ticks sit on the points: x is the depth index
    deep = next(t for t in fig.data if t.name == "deep")
    assert list(deep.x) == [0, 1, 2, 3, 4]

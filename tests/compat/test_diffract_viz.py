"""Issue 14, point 6: Diffract's visualization API (DIFFRACT-API.md §6): ``session.viz`` wrappers,
``draw`` with a plot object or a YAML configuration, the plot classes and themes at Diffract's
import paths; axes and groupings by metadata name (``model_id``, ``layer_id``, ...) work."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from diffract import ParameterOverrides, Session
from diffract.viz import DEFAULT_THEME
from diffract.viz.data import FieldRef, Ordering, OrderMode
from diffract.viz.plots import (
    BoxPlot,
    ClusterBarChart,
    HeatmapPlot,
    SubplotSpec,
    UpdateFigure,
)
from diffract.viz.plots.subplots import GridAxisBind
from diffract.viz.styling import DARK_THEME, LayoutStyle, Theme

CONFIG = """
plot:
  _target_: diffract.viz.plots.base.UpdateFigure
  plot:
    _target_: diffract.viz.plots.boxplot.BoxPlot
    y: stable_rank
    x: model_id
    marker_color: steelblue
config:
  layout:
    width: 640
"""


@pytest.fixture(scope="module")
def session():
    import torch

    s = Session(profile="ram")
    for m in ("run-1", "run-<2>"):  # a label that must be escaped
        torch.manual_seed(len(m))
        net = torch.nn.Sequential(*[torch.nn.Linear(12, 12) for _ in range(4)])
        overrides = {
            f"{i}.weight": ParameterOverrides(other_meta={"layer_id": i // 2, "head_id": i % 2})
            for i in range(4)
        }
        s.models.add(net, model_id=m, parameter_overrides=overrides)
    s.compute.apply("frob_norm", "stable_rank", progress=False)
    return s


def _xs(fig):
    return [x for t in fig.data for x in (t.x if t.x is not None else [])]


def test_wrappers_take_metadata_names(session):
    fig = session.viz.box(
        y="stable_rank", x="model_id", marker_color="layer_id", theme=DEFAULT_THEME
    )
    assert isinstance(fig, go.Figure) and set(_xs(fig)) == {"run-1", "run-&lt;2&gt;"}
    assert fig.layout.plot_bgcolor == "white"  # Diffract's default theme, when asked for
    assert len(fig.data[0].y) == 8
    plain = session.viz.box(y="stable_rank", x="model_id")
    assert plain.layout.paper_bgcolor == "rgba(0,0,0,0)"  # ours otherwise: theme-aware
    heat = session.viz.heatmap(z="stable_rank", x="head_id", y="layer_id")
    assert np.asarray(heat.data[0].z).shape == (2, 2)
    grouped = session.viz.scatter(x="frob_norm", y="stable_rank", group_by="model_id")
    assert [t.name for t in grouped.data] == ["run-1", "run-&lt;2&gt;"]
    lines = session.viz.line(y="frob_norm", x="in_model_idx", group_by="model_id")
    assert [list(t.x) for t in lines.data if t.mode == "lines"] == [
        [1, 3, 5, 7]
    ] * 2  # biases first
    order = Ordering(mode=OrderMode.CUSTOM, custom_order=["run-<2>", "run-1"])
    custom = session.viz.sparkline(y="frob_norm", x=FieldRef("model_id", ordering=order))
    assert list(custom.data[-1].x) == ["run-&lt;2&gt;", "run-1"]
    violin = session.viz.violin(y="frob_norm", x="model_id", jitter_enabled=True)
    assert violin.data[0].type == "violin"
    filtered = session.viz.box(
        y="stable_rank", x="model_id", value_filter={"stable_rank": (">", 1e9)}
    )
    assert list(filtered.data[0].y) == []
    ours = session.viz.scatter("frob_norm", "stable_rank")  # our own figure, unchanged
    assert isinstance(ours, go.Figure)


def test_plot_classes_grid_and_update(session):
    plot = BoxPlot(
        y=FieldRef("stable_rank"),
        x=FieldRef("model_id"),
        jitter_enabled=True,
        jitter_color=FieldRef("layer_id"),
    )
    fig = session.viz.draw(plot=plot)
    assert fig.data[1].marker.color is not None
    wrapped = UpdateFigure(
        plot=BoxPlot(y="stable_rank", x="model_id"),
        layout={"title": "Custom"},
        xaxes={"tickangle": -45},
    )
    fig = session.viz.draw(plot=wrapped)
    assert fig.layout.title.text == "Custom" and fig.layout.xaxis.tickangle == -45
    grid = session.viz.grid(
        subplots=[
            SubplotSpec(
                row=1,
                col=c,
                title=m,
                plot=BoxPlot(y="stable_rank", x="model_id"),
                session_filter={"model_ids": [m]},
            )
            for c, m in ((1, "run-1"), (2, "run-<2>"))
        ],
        make_subplots_kwargs={"shared_yaxes": True},
    )
    assert [a.text for a in grid.layout.annotations] == ["run-1", "run-&lt;2&gt;"]
    bound = session.viz.bound_grid(
        plot_template=HeatmapPlot(z="stable_rank", x="head_id", y="layer_id"),
        col=GridAxisBind(target="session_filter", key="model_ids", values=["run-1", "run-<2>"]),
    )
    assert len(bound.data) == 2
    bars = session.viz.draw(plot=ClusterBarChart(field="frob_norm", num_bins=5))
    assert len(bars.data) == 2 and len(bars.data[0].x) == 5
    themed = session.viz.box(
        y="stable_rank", x="model_id", theme=Theme(layout=LayoutStyle(width=500))
    )
    assert themed.layout.width == 500
    assert (
        session.viz.box(y="stable_rank", x="model_id", theme=DARK_THEME).layout.plot_bgcolor
        == "#1e1e1e"
    )


def test_draw_from_a_yaml_config(session, tmp_path):
    p = tmp_path / "box.yaml"
    p.write_text(CONFIG)
    fig = session.viz.draw(config_path=p)
    assert fig.layout.width == 640 and set(_xs(fig)) == {"run-1", "run-&lt;2&gt;"}
    assert fig.data[0].marker.color == "steelblue"  # a Plotly literal stays a literal
    by_layer = session.viz.draw(config_path=p, overrides=["plot.plot.x=layer_id"])
    assert set(_xs(by_layer)) == {"0", "1"}
    (tmp_path / "theme.yaml").write_text("width: 300\nfont_family: Arial\n")
    assert session.viz.draw(config_path=p, theme_path=tmp_path / "theme.yaml").layout.width == 640
    with pytest.raises(ValueError, match="exactly one"):
        session.viz.draw()
    (tmp_path / "bad.yaml").write_text("nothing: here\n")
    with pytest.raises(ValueError, match="top-level 'plot'"):
        session.viz.draw(config_path=tmp_path / "bad.yaml")


def test_an_unknown_axis_name_is_a_named_error(session):
    from diffract.session import KernelNotFoundError

    with pytest.raises(KernelNotFoundError, match="nope"):
        session.viz.box(y="stable_rank", x="nope")

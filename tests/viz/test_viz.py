"""Static figures: ``session.viz.*`` / ``scope.viz.*`` are plain Plotly Figures from tables."""

from __future__ import annotations

import numpy as np
import plotly  # noqa: F401  (a test dependency: missing is a failure)
import plotly.graph_objects as go
import pytest

from _ui_helpers import mlp
from diffract import Session, viz


@pytest.fixture(scope="module")
def session():
    s = Session("ram")
    s.models.add(mlp(0, layers=5, width=40), "ckpt-000")
    s.models.add(mlp(1, layers=5, width=40), "ckpt-100")
    s.compute.apply("frob_norm", "stable_rank", "pl_alpha", "esd", "pl_esd_xmin", progress=False)
    return s


def test_layers_line_and_bar(session):
    fig = session.viz.layers("frob_norm")
    assert isinstance(fig, go.Figure) and not isinstance(fig, go.FigureWidget)
    assert [t.name for t in fig.data] == ["ckpt-000", "ckpt-100"]
    rows = session.results.export_table("frob_norm", export_format="list")
    want = [
        r["frob_norm"] for r in rows if r["model_id"] == "ckpt-000" and r["frob_norm"] is not None
    ]
    assert list(fig.data[0].y) == pytest.approx(want)
    assert list(fig.data[0].customdata[0][:3]) == ["ckpt-000", "layers.0.weight", "dense"]
    assert "%{customdata[0]}" in fig.data[0].hovertemplate  # hover: model, name, type, value
    bar = session.viz.layers("frob_norm", kind="bar")
    assert bar.data[0].type == "bar" and bar.layout.barmode == "group"
    with pytest.raises(ValueError, match="kind"):
        session.viz.layers("frob_norm", kind="pie")


def test_scoped_viz_and_heatmap(session):
    scope = session.filter(model_ids="ckpt-100")
    assert [t.name for t in scope.viz.layers("stable_rank").data] == ["ckpt-100"]
    hm = session.viz.heatmap("pl_alpha")
    assert hm.data[0].type == "heatmap"
    assert list(hm.data[0].y) == ["ckpt-000", "ckpt-100"] and len(hm.data[0].z[0]) == 5


def test_esd_log_log_with_power_law_fit(session):
    fig = session.viz.esd("layers.2.weight", model_id="ckpt-000")
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    hist, fit = fig.data
    assert min(hist.y) > 0
    alpha = session.results.get("pl_alpha", "layers.2.weight", "ckpt-000")
    assert f"{alpha:.3g}" in fit.name
    xmin = session.results.get("pl_esd_xmin", "layers.2.weight", "ckpt-000")
    assert fit.x[0] == pytest.approx(xmin)


def test_scatter_and_write_html(session, tmp_path):
    fig = session.viz.scatter("frob_norm", "stable_rank")
    assert len(fig.data) == 2 and len(fig.data[0].x) == 5
    out = tmp_path / "fig.html"
    fig.write_html(out, include_plotlyjs=False)
    assert "frob_norm" in out.read_text()


def test_empty_before_compute_and_unknown_figure():
    s = Session("ram")
    s.models.add(mlp(0), "m")
    assert s.viz.layers("frob_norm").data == ()
    assert "not computed" in s.viz.esd("layers.0.weight").layout.title.text
    with pytest.raises(AttributeError, match="available"):
        _ = s.viz.nope
    assert set(viz.__all__) <= set(dir(s.viz))


def test_ids_and_names_reach_plotly_as_text_not_markup():
    """Plotly reads hover, legend, tick and title strings as an HTML subset (<b>, <br>,
    <a href>); ids and layer names from users or checkpoint files are escaped."""
    import numpy as np

    evil_id = '<a href="http:evil.example">log in<b>'  # '/' is reserved in ids
    s = Session("ram")
    s.models.add({"<b>w</b>": np.random.default_rng(0).standard_normal((24, 16))}, evil_id)
    s.compute.apply("frob_norm", "esd", "pl_alpha", "pl_esd_xmin", "stable_rank", progress=False)
    escaped = '&lt;a href="http:evil.example"&gt;log in&lt;b&gt;'
    line = s.viz.layers("frob_norm")
    assert line.data[0].name == escaped
    assert list(line.data[0].customdata[0][:2]) == [escaped, "&lt;b&gt;w&lt;/b&gt;"]
    heat = s.viz.heatmap("frob_norm")
    assert list(heat.data[0].y) == [escaped]
    sc = s.viz.scatter("frob_norm", "stable_rank")
    assert sc.data[0].name == escaped and sc.data[0].customdata[0][0] == escaped
    esd = s.viz.esd("<b>w</b>", model_id=evil_id)
    assert "<a" not in esd.layout.title.text and "&lt;b&gt;w&lt;/b&gt;" in esd.layout.title.text


def test_the_heatmap_layer_axis_names_its_layers(session):
    """Ticks on the columns labelled "index short-name" (not -0.5..2.5), in depth order as
    the exported table lists them."""
    hm = session.viz.heatmap("frob_norm")
    rows = session.results.export_table("frob_norm", export_format="list")
    names = [r["name"] for r in rows if r["model_id"] == "ckpt-000" and r["frob_norm"] is not None]
    assert names == [f"layers.{i}.weight" for i in range(5)]
    x = hm.layout.xaxis
    assert x.tickmode == "array" and list(x.tickvals) == list(range(len(names)))
    assert list(x.ticktext) == [f"{i} layers.{i}" for i in range(5)]
    assert x.title.text == "layer (depth order)"


def test_a_deep_heatmap_names_a_dozen_columns_not_every_one():
    # an LLM's 48 layers: 48 slanted whole names squeezed the plot; now about a dozen
    s = Session("ram")
    rng = np.random.default_rng(0)
    s.models.add(
        {f"model.layers.{i}.mlp.down_proj.weight": rng.normal(size=(8, 6)) for i in range(48)},
        "llm",
    )
    s.compute.apply("frob_norm", progress=False)
    x = s.viz.heatmap("frob_norm").layout.xaxis
    assert 8 <= len(x.tickvals) <= 12 and x.tickvals[0] == 0
    assert all(t == f"{v} layers.{v}" for v, t in zip(x.tickvals, x.ticktext, strict=True))
    s.close()


def test_heatmap_columns_whose_layers_differ_say_so():
    s = Session("ram")
    s.models.add(mlp(0, layers=3), "a")
    s.models.add({"enc.weight": mlp(1, layers=1)["layers.0.weight"]}, "b")
    s.compute.apply("frob_norm", progress=False)
    x = s.viz.heatmap("frob_norm").layout.xaxis
    assert list(x.ticktext) == ["0 layers.0*", "1 layers.1", "2 layers.2"]
    assert x.title.text == "layer (depth order); * differs between models"
    s.close()

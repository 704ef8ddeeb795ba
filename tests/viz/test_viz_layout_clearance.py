"""Figure layouts keep their parts apart (issue 29, point 5): the title sits under the row
Plotly's toolbar takes, the legend under the x axis title (not on it), axes widen their
margins for long tick labels so axis titles stand clear of them. Checked in a browser in
docs/img/polish-*.png (bounding boxes of title / modebar / legend / axis titles)."""

from __future__ import annotations

import numpy as np
import pytest

from diffract import Session
from diffract.viz._common import MODEBAR_ROW, SHORT_NAME_CHARS, TITLE_EXTRA_LINE
from diffract.widgets import FieldPanel

LAYERS = [f"encoder.layer.{i}.attention.output.dense.weight" for i in range(3)]


@pytest.fixture(scope="module")
def session():
    s = Session("ram")
    for step in (0, 10, 20):
        rng = np.random.default_rng(step)
        w = {n: rng.normal(size=(20, 12)).astype(np.float32) for n in LAYERS}
        s.models.add(w, f"r-{step}", meta={"track": {"run": "r", "step": step}})
    s.compute.apply("frob_norm", progress=False)
    yield s
    s.close()


def _panel(session, kind):
    two = {"models": ["r-0", "r-20"]} if kind == "compare" else {}
    return FieldPanel(session, "frob_norm", kind=kind, live=False, **two)


@pytest.mark.parametrize("kind", ["line", "heatmap", "evolution", "bar", "compare"])
def test_title_under_the_toolbar_row_legend_at_the_foot(session, kind):
    lay = _panel(session, kind).figure.layout
    t = lay.title
    assert t.yref == "container" and t.y == 1 and t.yanchor == "top"
    # Plotly's toolbar buttons are 24 px tall; a two-line title (evolution) is lifted by its
    # second line, so it is padded by that line too (the rendered check is below)
    lines = t.text.count("<br>") + 1
    assert t.pad.t == MODEBAR_ROW + TITLE_EXTRA_LINE * (lines - 1) and MODEBAR_ROW >= 24
    assert t.x == 0 and t.xanchor == "left"  # away from the toolbar at the right
    # the top margin holds the toolbar row and a title line (two for evolution)
    assert lay.margin.t >= MODEBAR_ROW + (60 if lines == 2 else 40)
    leg = lay.legend
    assert leg.orientation == "h" and leg.yref == "container" and leg.y == 0
    assert leg.yanchor == "bottom"  # under the x axis title, never on it


def test_axes_make_room_for_long_layer_names(session):
    lay = FieldPanel(session, "frob_norm", kind="evolution", live=False).figure.layout
    # rows keyed by the whole names, labelled with the short ones (the hover has the whole)
    assert lay.yaxis.type == "category" and lay.yaxis.tickmode == "array"
    assert len(lay.yaxis.ticktext) == len(lay.yaxis.tickvals) == 3
    assert all(len(t) <= SHORT_NAME_CHARS for t in lay.yaxis.ticktext)
    for ax in (lay.xaxis, lay.yaxis, lay.xaxis2, lay.yaxis2):
        assert ax.automargin is True and ax.title.standoff == 10
    assert lay.yaxis.title.text == "layer"


@pytest.mark.parametrize("kind", ["line", "heatmap", "evolution", "bar", "compare"])
def test_rendered_title_starts_under_the_toolbar_row(session, kind):
    # drawn by Plotly itself (kaleido, Chromium) at a 900 px JupyterLab window's output width:
    # no text in the rows the toolbar takes (measured: the two-line evolution title started
    # at row 18, under the toolbar's buttons at rows 2..23, before it was padded by its line)
    import io

    from PIL import Image

    fig = _panel(session, kind).figure
    fig.update_layout(width=468, height=500, paper_bgcolor="white")
    img = np.asarray(Image.open(io.BytesIO(fig.to_image(format="png"))).convert("L"))
    inked = [y for y in range(img.shape[0]) if (img[y] < 200).any()]
    assert inked and inked[0] >= MODEBAR_ROW - 1, (kind, inked[:3])


def test_the_compare_axis_names_the_common_slices(session):
    x = _panel(session, "compare").figure.layout.xaxis
    assert x.tickmode == "array" and list(x.tickvals) == [0, 1, 2]
    # encoder.layer.<i>.attention.output.dense.weight: a bare number keeps its word
    assert list(x.ticktext) == ["0 layer.0", "1 layer.1", "2 layer.2"]

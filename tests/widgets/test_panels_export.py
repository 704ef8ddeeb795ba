"""Panel export and layout: ``panel.to_csv`` / the CSV download link hold the plotted values
(equal to the exported fields), the plot toolbar downloads PNG or SVG (Plotly's config, part of
the widget's first state), the panel fills its output's width, and the live ESD panel has
exponent tick labels (10<sup>k</sup>, one rule with ``viz.esd_full``) and the xmin line."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re

import numpy as np
import pytest

from diffract import Session, viz
from diffract.viz.kinds import esd_full
from diffract.widgets import FieldPanel


def _model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((200, 80)) * 0.05
    w += 3.0 * np.outer(rng.standard_normal(200), rng.standard_normal(80)) / 80
    return {"a.weight": w, "b.weight": rng.standard_normal((60, 40)) * 0.01}


@pytest.fixture(scope="module")
def session():
    s = Session("ram")
    s.models.add(_model(0), "m0")
    s.models.add(_model(1), "m1")
    s.compute.apply("frob_norm", "esd", "pl_alpha", "pl_esd_xmin", progress=False)
    yield s
    s.close()


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _link_csv(panel: FieldPanel) -> str:
    href = re.search(r"href='data:text/csv;charset=utf-8;base64,([^']+)'", panel.csv_link.value)
    assert href and f"download='{panel.file_stem()}.csv'" in panel.csv_link.value
    return base64.b64decode(href.group(1)).decode()


def test_csv_of_a_line_panel_is_the_exported_field(session, tmp_path):
    p = FieldPanel(session, "frob_norm", live=False)
    rows = _csv(p.to_csv(tmp_path / "out.csv"))
    # CRLF rows (RFC 4180), kept as written (issue 28, point 20)
    assert (tmp_path / "out.csv").read_bytes().decode() == p.to_csv() == _link_csv(p)
    table = session.results.export_table("frob_norm", export_format="list")
    assert [(r["trace"], r["detail"].split(" | ")[1], float(r["y"])) for r in rows] == [
        (t["model_id"], t["name"], t["frob_norm"]) for t in table
    ]
    # and the independent reference: numpy's Frobenius norm of the weights
    m0a = next(float(r["y"]) for r in rows if r["trace"] == "m0" and "a.weight" in r["detail"])
    assert m0a == pytest.approx(np.linalg.norm(_model(0)["a.weight"]), rel=1e-6)


def test_csv_of_a_heatmap_has_one_row_per_cell(session):
    p = FieldPanel(session, "frob_norm", kind="heatmap", live=False)
    rows = _csv(p.to_csv())
    hm = p.figure.data[0]
    assert len(rows) == p.n_values() == 4
    for r in rows:
        i, j = list(hm.y).index(r["y"]), list(hm.x).index(int(r["x"]))
        assert float(r["z"]) == hm.z[i][j]


def test_csv_link_follows_the_data(session):
    s = Session("ram")
    s.models.add(_model(3), "m")
    p = FieldPanel(s, "frob_norm", live=False)
    assert _csv(_link_csv(p)) == []
    s.compute.apply("frob_norm", progress=False)
    p.refresh()
    assert len(_csv(_link_csv(p))) == 2
    s.close()


def test_image_format_is_in_the_figures_first_state(session):
    p = FieldPanel(session, "frob_norm", image_format="svg", live=False, poll=None)
    config = p.figure_dict()["config"]
    assert config["toImageButtonOptions"] == {"format": "svg", "filename": "frob_norm-line"}
    assert config["responsive"] is True and config["displaylogo"] is False
    assert p.get_state()["image_format"] == "svg" and p.download_name == "frob_norm-line"
    data = json.loads(p.figure_json)["data"]
    p.image_format = "png"  # the toggle: a synced trait the view reads into Plotly's config
    assert p.figure_dict()["config"]["toImageButtonOptions"]["format"] == "png"
    assert json.loads(p.figure_json)["data"] == data  # same data
    with pytest.raises(ValueError, match="image_format"):
        FieldPanel(session, "frob_norm", image_format="jpeg")
    with pytest.raises(Exception, match="image_format"):
        p.image_format = "jpeg"


def test_panel_fills_the_width(session):
    p = FieldPanel(session, "frob_norm", live=False, poll=None)
    layout = json.loads(p.figure_json)["layout"]
    assert "width" not in layout and layout["autosize"] is True and layout["height"] == 380
    assert p.figure.layout.width is None and p.figure.layout.autosize is True
    assert FieldPanel(session, "frob_norm", height=250, poll=None).figure.layout.height == 250


def _assert_exponent_ticks(axis) -> None:
    assert axis.type == "log" and axis.exponentformat == "power" and axis.ticktext
    for value, text in zip(axis.tickvals, axis.ticktext, strict=True):
        k = round(math.log10(value))
        assert value == pytest.approx(10.0**k) and text == f"10<sup>{k}</sup>"


def test_esd_panel_ticks_and_xmin_line(session):
    p = FieldPanel(session, kind="esd", slice="a.weight", model_id="m0", live=False)
    _assert_exponent_ticks(p.figure.layout.xaxis)
    _assert_exponent_ticks(p.figure.layout.yaxis)
    static = session.viz.esd_full("a.weight", model_id="m0")
    assert p.figure.layout.xaxis.ticktext == static.layout.xaxis.ticktext
    xmin = session.results.get("pl_esd_xmin", "a.weight", "m0")
    (line,) = [t for t in p.figure.data if t.meta == "xmin"]
    assert list(line.x) == [pytest.approx(xmin)] * 2
    # the ticks span every plotted eigenvalue
    xs = [x for t in p.figure.data for x in t.x]
    assert min(p.figure.layout.xaxis.tickvals) <= min(xs)
    assert max(p.figure.layout.xaxis.tickvals) >= max(xs)
    # session.viz.esd (the plain figure) uses the same rule
    plain = session.viz.esd("a.weight", model_id="m0")
    _assert_exponent_ticks(plain.layout.xaxis)
    assert esd_full.exponent_ticks is viz.exponent_ticks  # one implementation


def test_the_comm_opens_with_data_layout_and_config(session, monkeypatch):
    """A browser model still loading its module can miss updates sent right after the comm
    opens (a blank plot). A panel's comm opens with its figure, status and CSV link."""
    import ipywidgets

    opened = []
    original = ipywidgets.Widget.open

    def spy(self):
        original(self)
        if isinstance(self, FieldPanel):
            opened.append(self.get_state())

    monkeypatch.setattr(ipywidgets.Widget, "open", spy)
    p = FieldPanel(session, "frob_norm", kind="heatmap", image_format="svg", live=False, poll=None)
    (state,) = opened
    assert state["image_format"] == "svg" and state["height"] == 380
    fig = json.loads(state["figure_json"])
    (trace,) = fig["data"]
    assert trace["type"] == "heatmap" and trace["z"] == [list(r) for r in p.figure.data[0].z]
    assert "width" not in fig["layout"] and state["value_count"] == p.n_values() == 4
    assert state["csv_href"].startswith("data:text/csv;charset=utf-8;base64,")
    assert "frob_norm" in state["status_html"]

"""The ``alpha_errorbars`` figure kind (the worked example of adding a kind: one module in
``viz/kinds/`` and one registry entry): its values against the store and the closed form of
the error, and that panels, the report, ``session.viz`` and the figure route all offer it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _ui_helpers import make_store, mlp
from diffract import Session, viz
from diffract.report import figures
from diffract.viz import registry
from diffract.widgets import FieldPanel

pytest_plugins = ("pytest_jupyter.jupyter_server",)

FIELDS = ("pl_alpha", "pl_alpha_sigma", "pl_esd_xmin", "esd")


@pytest.fixture(scope="module")
def session():
    s = Session("ram")
    s.models.add(mlp(0, layers=4, width=40), "a")
    s.models.add(mlp(1, layers=4, width=40), "b")
    s.compute.apply(*FIELDS, progress=False)
    return s


def test_points_are_alpha_with_its_closed_form_sigma(session):
    spec = registry.build(session, "alpha_errorbars")
    assert [t["name"] for t in spec["data"]] == ["a", "b"]
    uids = {s.uid: s for s in session.models.slices()}
    for t in spec["data"]:
        for y, err, cd in zip(t["y"], t["error_y"]["array"], t["customdata"], strict=True):
            s = uids[cd[-1]]  # the point's slice, by the uid it carries
            assert (s.model_id, s.name) == (t["name"], cd[1])
            assert y == session.results.get("pl_alpha", s.uid)
            # the standard error of the MLE exponent: (alpha - 1) / sqrt(m), m = tail size
            evals = np.asarray(session.results.get("esd", s.uid), dtype=float)
            m = int(np.sum(evals >= session.results.get("pl_esd_xmin", s.uid)))
            assert err == pytest.approx((y - 1) / np.sqrt(m), rel=1e-6)
    assert spec["data"][0]["error_y"]["visible"] is True


def test_offered_by_panels_session_viz_and_report(session):
    from diffract.widgets.panel import KINDS

    assert "alpha_errorbars" in KINDS
    panel = FieldPanel(session, kind="alpha_errorbars", live=False)
    alphas = session.results.export_table("pl_alpha", export_format="list")
    assert panel.n_values() == sum(r["pl_alpha"] is not None for r in alphas)
    assert panel.fields == ("pl_alpha",)
    fig = session.viz.alpha_errorbars()
    assert fig.to_plotly_json()["data"][0]["error_y"]["array"] == pytest.approx(
        list(panel.spec["data"][0]["error_y"]["array"])
    )
    assert viz.figure(session, "alpha_errorbars").data[0].name == "a"
    assert 'id="figure-alpha_errorbars"' in figures(session)


def test_report_leaves_it_out_while_nothing_is_stored():
    s = Session("ram")
    s.models.add(mlp(0, layers=2, width=10), "a")
    assert "figure-alpha_errorbars" not in figures(s)


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"diffract": True}}}


async def test_served_by_the_figure_route(jp_fetch, jp_root_dir):
    make_store(jp_root_dir / ".diffract", models=("m1",), fields=FIELDS)
    r = await jp_fetch(
        "diffract", "api", "figure", params={"kind": "alpha_errorbars", "store": ".diffract"}
    )
    reply = json.loads(r.body)
    assert reply["kind"] == "alpha_errorbars"
    (trace,) = reply["figure"]["data"]
    assert trace["name"] == "m1" and len(trace["error_y"]["array"]) == len(trace["y"]) > 0

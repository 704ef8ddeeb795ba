"""ESD figures with overlays (``viz.esd_full``), the grid (``viz.esd_grid``) and files of every
figure (``viz.save``): the plotted values are the stored ones (xmin line at ``pl_esd_xmin``,
the MP curve ending at ``mp_fit_bulk_max``, the randomized ESD from ``esd_rand``), and log
axes are labelled with powers of ten, not SI prefixes."""

from __future__ import annotations

import math

import kaleido  # noqa: F401  (a test dependency: PNG and SVG files)
import numpy as np
import plotly.graph_objects as go
import pytest

from diffract import InvalidArgumentError, Session, viz

FIELDS = ("esd", "pl_esd_xmin", "pl_alpha", "mp_fit_bulk_max", "mp_fit_bulk_min", "esd_rand")


def _model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((300, 100)) * 0.05
    w += 3.0 * np.outer(rng.standard_normal(300), rng.standard_normal(100)) / 100  # a spike
    return {"a.weight": w, "b.weight": rng.standard_normal((120, 80)) * 0.01}


@pytest.fixture(scope="module")
def session():
    s = Session("ram")
    s.models.add(_model(0), "m0")
    s.models.add(_model(1), "m1")
    s.compute.apply(*FIELDS, progress=False)
    yield s
    s.close()


def by_meta(fig: go.Figure, meta: str):
    found = [t for t in fig.data if t.meta == meta]
    assert len(found) == 1, [t.meta for t in fig.data]
    return found[0]


def test_xmin_line_at_the_stored_xmin(session):
    fig = session.viz.esd_full("a.weight", model_id="m0")
    xmin = session.results.get("pl_esd_xmin", "a.weight", "m0")
    line = by_meta(fig, "xmin")
    assert list(line.x) == [pytest.approx(xmin), pytest.approx(xmin)]
    hist = fig.data[0]
    assert min(line.y) < min(hist.y) and max(line.y) > max(hist.y)  # spans the histogram


def test_mp_bulk_ends_at_the_stored_edge(session):
    fig = session.viz.esd_full("a.weight", model_id="m0")
    hi = session.results.get("mp_fit_bulk_max", "a.weight", "m0")
    lo = session.results.get("mp_fit_bulk_min", "a.weight", "m0")
    mp = by_meta(fig, "mp_bulk")
    assert mp.x[-1] == pytest.approx(hi) and mp.x[0] == pytest.approx(lo)
    assert mp.y[-1] == pytest.approx(0.0, abs=1e-9)  # the density vanishes at the edge
    # the curve is a density: it integrates to ~1 over the bulk
    assert np.trapezoid(mp.y, mp.x) == pytest.approx(1.0, abs=0.05)


def test_randomized_esd_overlay_from_the_stored_field(session):
    fig = session.viz.esd_full("a.weight", model_id="m0")
    rand = np.asarray(session.results.get("esd_rand", "a.weight", "m0"))
    trace = by_meta(fig, "esd_rand")
    assert min(trace.x) >= rand[rand > 0].min() * 0.9 and max(trace.x) <= rand.max() * 1.1
    edges = np.sqrt(np.asarray(trace.x[1:]) * np.asarray(trace.x[:-1]))
    assert len(edges) and np.all(np.diff(trace.x) > 0)


def test_exponent_tick_labels(session):
    fig = session.viz.esd_full("a.weight", model_id="m0")
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "log" and axis.exponentformat == "power"
        for value, text in zip(axis.tickvals, axis.ticktext, strict=True):
            k = round(math.log10(value))
            assert value == pytest.approx(10.0**k) and text == f"10<sup>{k}</sup>"
        assert not any(t[-1] in "munpkMG" for t in axis.ticktext)  # no SI prefixes
    assert viz.exponent_ticks(2e-3, 50.0)["ticktext"] == [f"10<sup>{k}</sup>" for k in range(-3, 3)]


def test_overlays_absent_until_stored():
    s = Session("ram")
    s.models.add(_model(2), "m")
    s.compute.apply("esd", progress=False)
    fig = s.viz.esd_full("a.weight")
    assert [t.meta for t in fig.data] == ["eigenvalue"]  # the histogram only
    s.close()


def test_grid_of_every_slice(session):
    fig = session.viz.esd_grid(cols=2)
    # model:short name over each panel (the whole name is its hover text)
    titles = [a.text.split(" (")[0] for a in fig.layout.annotations]
    assert titles == ["m0:a", "m0:b", "m1:a", "m1:b"]
    assert [a.hovertext for a in fig.layout.annotations] == [
        "m0:a.weight",
        "m0:b.weight",
        "m1:a.weight",
        "m1:b.weight",
    ]
    xmin = session.results.get("pl_esd_xmin", "b.weight", "m1")
    line = [t for t in fig.data if t.meta == "xmin" and t.xaxis == "x4"]
    assert len(line) == 1 and line[0].x[0] == pytest.approx(xmin)
    assert fig.layout.xaxis4.type == "log" and fig.layout.xaxis4.anchor == "y4"
    one = session.filter(model_ids="m1").viz.esd_grid()
    # one model: the short names alone
    assert [a.text.split(" (")[0] for a in one.layout.annotations] == ["a", "b"]
    with pytest.raises(InvalidArgumentError, match="cols"):
        session.viz.esd_grid(cols=0)


def test_save_html_every_figure(session, tmp_path):
    paths = session.viz.save(tmp_path / "figs")
    names = sorted(p.name for p in paths)
    want = ["m0__a.weight", "m0__b.weight", "m1__a.weight", "m1__b.weight", "esd_grid"]
    assert names == sorted(f"{n}.html" for n in want)
    assert all(p.exists() and "plotly" in p.read_text() for p in paths)
    with pytest.raises(InvalidArgumentError, match="unknown format 'jpeg'"):
        session.viz.save(tmp_path, format="jpeg")


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_save_images(session, tmp_path, fmt):
    paths = session.filter(model_ids="m0").viz.save(tmp_path, format=fmt, grid=False)
    assert [p.name for p in paths] == [f"m0__a.weight.{fmt}", f"m0__b.weight.{fmt}"]
    head = paths[0].read_bytes()[:8]
    assert head.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in paths[0].read_bytes()[:400]


def test_the_xmin_line_spans_the_plot_from_bottom_to_top(session):
    fig = session.viz.esd_full("a.weight", model_id="m0")
    line = by_meta(fig, "xmin")
    lo, hi = fig.layout.yaxis.range
    assert list(line.y) == [pytest.approx(10**lo), pytest.approx(10**hi)]


def test_numerical_zero_eigenvalues_do_not_squash_the_spectrum():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((120, 20)) @ rng.standard_normal((20, 90))  # rank 20 of 90
    s = Session("ram")
    s.models.add({"low.weight": w}, "m")
    s.compute.apply("esd", progress=False)
    stored = np.asarray(s.results.get("esd", "low.weight", "m"), dtype=float)
    big = stored.max()
    zeros = int(np.sum(stored < big * 1e-10))  # round-off of the 70 missing directions
    # what is kept is numpy's rank: the 70 others are round-off (1e-13 and such)
    assert stored.size - zeros == np.linalg.matrix_rank(w) == 20
    real = np.sort(stored)[-20:]
    for fig in (s.viz.esd("low.weight", model_id="m"), s.viz.esd_full("low.weight", model_id="m")):
        xs = [x for t in fig.data if t.meta == "eigenvalue" for x in t.x]
        # the axis covers the 20 real eigenvalues, from the smallest to the largest
        assert real.min() * 0.5 <= min(xs) and max(xs) <= real.max() * 2
        assert f"{zeros} eigenvalue(s) ≈ 0 not drawn" in fig.layout.title.text
    s.close()


def test_the_grid_has_one_legend_axis_titles_and_the_same_colours_in_every_panel(session):
    fig = session.viz.esd_grid(cols=2)  # 4 panels, 2 x 2
    assert fig.layout.showlegend is not False
    shown = [t.name for t in fig.data if t.showlegend is not False]
    kinds = {t.meta for t in fig.data}
    assert len(shown) == len(set(shown)) == len(kinds)  # one entry per kind of trace
    assert {"ESD", "power-law fit", "xmin of the fit"} <= set(shown)
    for kind in kinds:  # the same colour in every panel
        colours = {
            (t.line.color if t.mode == "lines" else t.marker.color)
            for t in fig.data
            if t.meta == kind
        }
        assert len(colours) == 1 and None not in colours, (kind, colours)
    # the fit keeps its panel's own alpha in its hover text
    alpha = session.results.get("pl_alpha", "a.weight", "m0")
    fit = [t for t in fig.data if t.meta == "pl_fit" and t.xaxis == "x"]
    assert f"α={alpha:.3g}" in fit[0].hovertext
    # the bottom row's x axes and the left column's y axes are titled
    lay = fig.layout
    assert lay.xaxis3.title.text == lay.xaxis4.title.text == "eigenvalue"
    assert lay.yaxis.title.text == lay.yaxis3.title.text == "density"
    assert lay.xaxis.title.text is None and lay.yaxis2.title.text is None

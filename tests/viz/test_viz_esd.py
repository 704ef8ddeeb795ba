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
    titles = [a.text.split(" (")[0] for a in fig.layout.annotations]
    assert titles == ["m0:a.weight", "m0:b.weight", "m1:a.weight", "m1:b.weight"]
    xmin = session.results.get("pl_esd_xmin", "b.weight", "m1")
    line = [t for t in fig.data if t.meta == "xmin" and t.xaxis == "x4"]
    assert len(line) == 1 and line[0].x[0] == pytest.approx(xmin)
    assert fig.layout.xaxis4.type == "log" and fig.layout.xaxis4.anchor == "y4"
    one = session.filter(model_ids="m1").viz.esd_grid()
    assert [a.text.split(" (")[0] for a in one.layout.annotations] == ["m1:a.weight", "m1:b.weight"]
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

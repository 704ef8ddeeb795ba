"""ESD figures with their fits drawn in, a grid of them, and files of every figure.

``esd_full(slice)``
    The ESD of one slice (log-log) with the power-law fit, a vertical line at the fit's
    ``pl_esd_xmin``, the Marchenko-Pastur bulk (WeightWatcher's fitted one, ``mp_fit_bulk_min``
    / ``mp_fit_bulk_max``, when stored, else ours, ``mp_esd_min`` / ``mp_esd_max``) and the
    randomized ESD (``esd_rand``). Each overlay is drawn when its fields are stored.
``esd_grid(slices=None)``
    :func:`esd_full` of every slice of the scope with a stored ``esd``, in a grid.
``save(folder, format="html")``
    Writes every slice's :func:`esd_full` (and the grid) to HTML, SVG or PNG files.

Log axes carry exponent tick labels (10<sup>-3</sup>, from ``tickvals`` / ``ticktext``), not
Plotly's SI prefixes (``10n``): :func:`diffract.viz.exponent_ticks`, the one tick rule of every
ESD figure. PNG and SVG need kaleido (``pip install kaleido``, in the test
extra) and a Chrome or Chromium it finds (Debian's ``/usr/bin/chromium`` works offline).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diffract._errors import InvalidArgumentError
from diffract.viz import _figure, _is_number, _stored, esd_spec, exponent_ticks, find_slice

if TYPE_CHECKING:
    from diffract.session import Scope

#: the file formats :func:`save` writes
FORMATS = ("html", "svg", "png")

#: (min, max) field pairs of the Marchenko-Pastur bulk, first stored wins
_MP_EDGES = (("mp_fit_bulk_min", "mp_fit_bulk_max", "MP fit"), ("mp_esd_min", "mp_esd_max", "MP"))


def _positive(values: Any) -> Any:
    import numpy as np

    v = np.asarray(values, dtype=float).ravel()
    return v[np.isfinite(v) & (v > 0)]


def _mp_curve(lo: float, hi: float) -> tuple[list[float], list[float]]:
    """The Marchenko-Pastur density with bulk edges [lo, hi] (points from lo, or hi/1e4 when
    lo is 0, up to hi)."""
    import numpy as np

    ra, rb = math.sqrt(max(lo, 0.0)), math.sqrt(hi)
    sigma = (ra + rb) / 2  # sqrt(a) = sigma (1 - sqrt c), sqrt(b) = sigma (1 + sqrt c)
    c = ((rb - ra) / (ra + rb)) ** 2
    xs = np.geomspace(max(lo, hi * 1e-4), hi, 80)
    with np.errstate(invalid="ignore"):
        ys = np.sqrt(np.clip((hi - xs) * (xs - lo), 0, None)) / (2 * math.pi * c * sigma**2 * xs)
    return xs.tolist(), ys.tolist()


def _overlays(scope: Scope, uid: str, ymax: float) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = []
    xmin = _stored(scope, uid, "pl_esd_xmin")
    if _is_number(xmin) and xmin > 0:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"xmin={xmin:.3g}",
                "x": [float(xmin), float(xmin)],
                "y": [ymax * 1e-6, ymax * 10],
                "line": {"color": "#d62728", "width": 1.5},
                "hoverinfo": "name",
                "meta": "xmin",
            }
        )
    for lo_field, hi_field, label in _MP_EDGES:
        lo, hi = _stored(scope, uid, lo_field), _stored(scope, uid, hi_field)
        if _is_number(lo) and _is_number(hi) and hi > 0:
            xs, ys = _mp_curve(float(lo), float(hi))
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{label} bulk, edge {hi:.3g}",
                    "x": xs,
                    "y": ys,
                    "line": {"color": "#2ca02c"},
                    "hoverinfo": "name",
                    "meta": "mp_bulk",
                }
            )
            break
    return data


def _rand_trace(scope: Scope, uid: str, edges: Any) -> dict[str, Any] | None:
    import numpy as np

    rand = _stored(scope, uid, "esd_rand")
    if rand is None:
        return None
    r = _positive(rand)
    if not r.size:
        return None
    counts, _ = np.histogram(r, bins=edges)
    density = counts / (r.size * np.diff(edges))
    centers = np.sqrt(edges[:-1] * edges[1:])
    keep = counts > 0
    return {
        "type": "scatter",
        "mode": "markers",
        "name": "randomized ESD",
        "x": centers[keep].tolist(),
        "y": density[keep].tolist(),
        "marker": {"symbol": "x", "color": "#ff7f0e", "size": 6},
        "hoverinfo": "x+y+name",
        "meta": "esd_rand",
    }


def esd_full_spec(
    scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60
) -> dict[str, Any]:
    """Traces and layout of :func:`esd_full`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slice: the slice's uid, or its name (with ``model_id`` when several models have it).
        model_id: the model of a slice given by name.
        bins: number of histogram bins (log-spaced).

    Returns:
        ``{"data": traces, "layout": layout}`` (Plotly's figure format): the traces of
        :func:`diffract.viz.esd` then the overlays, each trace's ``meta`` naming what it is
        (``"xmin"``, ``"mp_bulk"``, ``"esd_rand"``).
    """
    import numpy as np

    spec = esd_spec(scope, slice, model_id=model_id, bins=bins)
    if not spec["data"]:
        return spec
    uid = find_slice(scope, slice, model_id).uid
    evals = _positive(scope.results.get("esd", uid))
    ymax = max(max(t["y"]) for t in spec["data"] if t["y"])
    data = list(spec["data"]) + _overlays(scope, uid, ymax)
    rand = _stored(scope, uid, "esd_rand")
    pool = np.concatenate([evals, _positive(rand)]) if rand is not None else evals
    lo, hi = float(pool.min()), float(pool.max())
    edges = np.logspace(np.log10(lo), np.log10(hi if hi > lo else lo * 1.01), bins + 1)
    trace = _rand_trace(scope, uid, edges)
    if trace is not None:
        data.append(trace)
    xs = [x for t in data for x in t["x"] if x > 0]
    ys = [y for t in data if t.get("meta") != "xmin" for y in t["y"] if y > 0]
    layout = dict(spec["layout"])
    layout["xaxis"] = {**layout["xaxis"], **exponent_ticks(min(xs), max(xs))}
    layout["yaxis"] = {**layout["yaxis"], **exponent_ticks(min(ys), max(ys))}
    layout["yaxis"]["range"] = [math.log10(min(ys)) - 0.2, math.log10(max(ys)) + 0.2]
    return {"data": data, "layout": layout}


def esd_full(scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60) -> Any:
    """The ESD of one slice with its power-law fit, xmin line, Marchenko-Pastur bulk and
    randomized ESD (each when its fields are stored).

    Args:
        scope: the session or scope whose stored fields are drawn.
        slice: the slice's uid, or its name (with ``model_id`` when several models have it).
        model_id: the model of a slice given by name.
        bins: number of histogram bins (log-spaced).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while ``esd`` is not stored).
    """
    return _figure(esd_full_spec(scope, slice, model_id=model_id, bins=bins))


def _esd_slices(scope: Scope, slices: list[str] | None) -> list[Any]:
    if slices is not None:
        return [find_slice(scope, s) for s in slices]
    found = []
    for s in scope.models.slices():
        if _stored(scope, s.uid, "esd") is not None:
            found.append(s)
    return found


def esd_grid_spec(
    scope: Scope, slices: list[str] | None = None, *, cols: int = 3, bins: int = 40
) -> dict[str, Any]:
    """Traces and layout of :func:`esd_grid`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slices: uids (or names) to draw; default: every slice of the scope with a stored ESD.
        cols: panels per row.
        bins: histogram bins per panel.

    Returns:
        ``{"data": traces, "layout": layout}``; panel i's traces are on axes ``x{i+1}`` /
        ``y{i+1}`` and its title is annotation i.

    Raises:
        InvalidArgumentError: ``cols`` is not a positive int.
    """
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise InvalidArgumentError(f"esd_grid: cols must be a positive int, got {cols!r}")
    chosen = _esd_slices(scope, slices)
    rows = max(1, math.ceil(len(chosen) / cols))
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        "title": {"text": f"ESDs ({len(chosen)} slices)"},
        "showlegend": False,
        "annotations": [],
        "height": 280 * rows + 80,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
    }
    gap = 0.06
    for i, s in enumerate(chosen):
        r, c = divmod(i, cols)
        x0, x1 = c / cols + gap / 2, (c + 1) / cols - gap / 2
        y1, y0 = 1 - r / rows - gap, 1 - (r + 1) / rows + gap / 2
        panel = esd_full_spec(scope, s.uid, bins=bins)
        n = "" if i == 0 else str(i + 1)
        for t in panel["data"]:
            data.append({**t, "xaxis": f"x{n}", "yaxis": f"y{n}"})
        for axis, other, dom in (("x", "y", [x0, x1]), ("y", "x", [y0, y1])):
            settings = dict(panel["layout"][f"{axis}axis"])
            settings.pop("title", None)
            layout[f"{axis}axis{n}"] = {**settings, "domain": dom, "anchor": f"{other}{n}"}
        title = panel["layout"]["title"]["text"].removeprefix("ESD of ")
        layout["annotations"].append(
            {
                "text": title,
                "x": (x0 + x1) / 2,
                "y": y1 + 0.01,
                "xref": "paper",
                "yref": "paper",
                "showarrow": False,
                "xanchor": "center",
                "yanchor": "bottom",
                "font": {"size": 11},
            }
        )
    return {"data": data, "layout": layout}


def esd_grid(
    scope: Scope, slices: list[str] | None = None, *, cols: int = 3, bins: int = 40
) -> Any:
    """:func:`esd_full` of many slices as a grid of panels.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slices: uids (or names) to draw; default: every slice of the scope with a stored ESD.
        cols: panels per row.
        bins: histogram bins per panel.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        InvalidArgumentError: ``cols`` is not a positive int.
    """
    return _figure(esd_grid_spec(scope, slices, cols=cols, bins=bins))


def _file_stem(s: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{s.model_id}__{s.name}").strip("._") or "slice"


def save(
    scope: Scope,
    folder: str | Path,
    *,
    format: str = "html",
    slices: list[str] | None = None,
    grid: bool = True,
) -> list[Path]:
    """Write the ESD figure of every slice of the scope (:func:`esd_full`) to files.

    One file per slice, ``<model>__<name>.<format>``, and ``esd_grid.<format>`` with them all
    when ``grid``. HTML files load plotly.js from its CDN; SVG and PNG are rendered by kaleido
    (one browser start for all files).

    Args:
        scope: the session or scope whose stored fields are drawn.
        folder: where the files go (created when missing).
        format: ``"html"``, ``"svg"`` or ``"png"``.
        slices: uids (or names) to draw; default: every slice with a stored ESD.
        grid: also write the grid of all of them.

    Returns:
        The paths written, in slice order (the grid last).

    Raises:
        InvalidArgumentError: an unknown ``format``.
        ImportError: SVG or PNG without kaleido installed.
    """
    if format not in FORMATS:
        raise InvalidArgumentError(f"save: unknown format {format!r}; use one of {list(FORMATS)}")
    if format != "html":
        import importlib.util

        if importlib.util.find_spec("kaleido") is None:
            raise ImportError(
                f"save(format={format!r}) needs kaleido (pip install kaleido) and Chrome or "
                "Chromium; format='html' needs neither"
            )
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    chosen = _esd_slices(scope, slices)
    figs, paths = [], []
    for s in chosen:
        figs.append(esd_full(scope, s.uid))
        paths.append(out / f"{_file_stem(s)}.{format}")
    if grid and chosen:
        figs.append(esd_grid(scope, [s.uid for s in chosen]))
        paths.append(out / f"esd_grid.{format}")
    if format == "html":
        for fig, path in zip(figs, paths, strict=True):
            fig.write_html(path, include_plotlyjs="cdn")
    elif figs:
        import plotly.io as pio

        pio.write_images(figs, paths, format=format)
    return paths

"""``esd_full``: one slice's ESD with its fits drawn in.

The power-law fit, a vertical line at the fit's ``pl_esd_xmin``, the Marchenko-Pastur bulk
(WeightWatcher's fitted one, ``mp_fit_bulk_min`` / ``mp_fit_bulk_max``, when stored, else
ours, ``mp_esd_min`` / ``mp_esd_max``) and the randomized ESD (``esd_rand``), each drawn
when its fields are stored. The live esd panel and the server's ``esd`` figure show this.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from diffract.viz._common import (
    exponent_ticks,
    find_slice,
    is_number,
    log_edges,
    log_histogram,
    positive,
    stored,
)
from diffract.viz.kinds.esd import drawn_evals, esd_spec

if TYPE_CHECKING:
    from diffract.session import Scope

#: (min, max) field pairs of the Marchenko-Pastur bulk, first stored wins
MP_EDGES = (("mp_fit_bulk_min", "mp_fit_bulk_max", "MP fit"), ("mp_esd_min", "mp_esd_max", "MP"))


def mp_curve(lo: float, hi: float) -> tuple[list[float], list[float]]:
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
    xmin = stored(scope, uid, "pl_esd_xmin")
    if is_number(xmin) and xmin > 0:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"xmin={xmin:.3g}",
                "x": [float(xmin), float(xmin)],
                "y": [ymax * 1e-6, ymax * 10],  # spans the axis range once it is known
                "line": {"color": "#d62728", "width": 1.5},
                "hoverinfo": "name",
                "meta": "xmin",
            }
        )
    for lo_field, hi_field, label in MP_EDGES:
        lo, hi = stored(scope, uid, lo_field), stored(scope, uid, hi_field)
        if is_number(lo) and is_number(hi) and hi > 0:
            xs, ys = mp_curve(float(lo), float(hi))
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


def _rand_trace(rand: Any, edges: Any) -> dict[str, Any] | None:
    r = positive(rand)
    if not r.size:
        return None
    centers, density = log_histogram(r, edges)
    return {
        "type": "scatter",
        "mode": "markers",
        "name": "randomized ESD",
        "x": centers.tolist(),
        "y": density.tolist(),
        "marker": {"symbol": "x", "color": "#ff7f0e", "size": 6},
        "hoverinfo": "x+y+name",
        "meta": "esd_rand",
    }


def esd_full_spec(
    scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.esd_full`.

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
    evals = drawn_evals(scope.results.get("esd", uid))[0]
    ymax = max(max(t["y"]) for t in spec["data"] if t["y"])
    data = list(spec["data"]) + _overlays(scope, uid, ymax)
    rand = stored(scope, uid, "esd_rand")
    if rand is not None:
        pool = np.concatenate([evals, positive(rand)])
        trace = _rand_trace(rand, log_edges(float(pool.min()), float(pool.max()), bins))
        if trace is not None:
            data.append(trace)
    xs = [x for t in data for x in t["x"] if x > 0]
    ys = [y for t in data if t.get("meta") != "xmin" for y in t["y"] if y > 0]
    layout = dict(spec["layout"])
    layout["xaxis"] = {**layout["xaxis"], **exponent_ticks(min(xs), max(xs))}
    layout["yaxis"] = {**layout["yaxis"], **exponent_ticks(min(ys), max(ys))}
    lo, hi = math.log10(min(ys)) - 0.2, math.log10(max(ys)) + 0.2
    layout["yaxis"]["range"] = [lo, hi]
    for t in data:  # the xmin line spans the plot, bottom to top, not from mid-air
        if t.get("meta") == "xmin":
            t["y"] = [10**lo, 10**hi]
    return {"data": data, "layout": layout}

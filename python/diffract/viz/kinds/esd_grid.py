"""``esd_grid``: :mod:`~diffract.viz.kinds.esd_full` of many slices as a grid of panels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from diffract._errors import InvalidArgumentError
from diffract.viz._common import (
    MODEBAR_ROW,
    NEUTRAL_LAYOUT,
    find_slice,
    plain,
    short_names,
    stored,
    title_below_modebar,
)
from diffract.viz.kinds.esd_full import esd_full_spec

if TYPE_CHECKING:
    from diffract.session import Scope


def esd_slices(scope: Scope, slices: list[str] | None) -> list[Any]:
    """The slices named (uids or names), or every slice of the scope with a stored ``esd``."""
    if slices is not None:
        return [find_slice(scope, s) for s in slices]
    return [s for s in scope.models.slices() if stored(scope, s.uid, "esd") is not None]


#: one colour per kind of trace, the same in every panel (Plotly's cycle would give the
#: ESD of each panel another colour), and the legend entry that names it once
GRID_STYLE: dict[str, tuple[str, str]] = {
    "eigenvalue": ("#1f77b4", "ESD"),
    "pl_fit": ("#9467bd", "power-law fit"),
    "xmin": ("#d62728", "xmin of the fit"),
    "mp_bulk": ("#2ca02c", "Marchenko-Pastur bulk"),
    "esd_rand": ("#ff7f0e", "randomized ESD"),
}


def _styled(t: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    """Trace ``t`` with its kind's colour and legend group; the first of each kind has the
    legend entry, the panel's own label (α, xmin, edge) stays in its hover text."""
    kind = t.get("meta") or ""
    if kind not in GRID_STYLE:
        return t
    colour, label = GRID_STYLE[kind]
    out = {**t, "legendgroup": kind, "showlegend": kind not in seen, "name": label}
    seen.add(kind)
    if t.get("mode") == "lines":
        out["line"] = {**t.get("line", {}), "color": colour}
        if t.get("hoverinfo") == "name":
            out["hoverinfo"], out["hovertext"] = "text", t.get("name", label)
    else:
        out["marker"] = {**t.get("marker", {}), "color": colour}
    return out


def esd_grid_spec(
    scope: Scope, slices: list[str] | None = None, *, cols: int = 3, bins: int = 40
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.esd_grid`.

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
    chosen = esd_slices(scope, slices)
    rows = max(1, math.ceil(len(chosen) / cols))
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        # under the toolbar's row, left: the toolbar covered a centred title at 900 px
        "title": title_below_modebar(f"ESDs ({len(chosen)} slices)"),
        "showlegend": True,
        # one legend for every panel, above them, under the title
        "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1, "yanchor": "bottom"},
        "margin": {"t": 100 + MODEBAR_ROW},
        "annotations": [],
        "height": 280 * rows + 120,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        # the grey that reads on light and dark pages (Plotly's #444 vanished on dark)
        "font": dict(NEUTRAL_LAYOUT["font"]),
    }
    gap = 0.06
    seen: set[str] = set()
    short = short_names([s.name for s in chosen])
    several = len({s.model_id for s in chosen}) > 1
    for i, s in enumerate(chosen):
        r, c = divmod(i, cols)
        x0, x1 = c / cols + gap / 2, (c + 1) / cols - gap / 2
        y1, y0 = 1 - r / rows - gap, 1 - (r + 1) / rows + gap / 2
        panel = esd_full_spec(scope, s.uid, bins=bins)
        n = "" if i == 0 else str(i + 1)
        for t in panel["data"]:
            data.append({**_styled(t, seen), "xaxis": f"x{n}", "yaxis": f"y{n}"})
        last_row = i + cols >= len(chosen)  # nothing under this panel: its x axis is titled
        for axis, other, dom in (("x", "y", [x0, x1]), ("y", "x", [y0, y1])):
            settings = dict(panel["layout"][f"{axis}axis"])
            titled = (axis == "x" and last_row) or (axis == "y" and c == 0)
            if not titled:
                settings.pop("title", None)
            layout[f"{axis}axis{n}"] = {**settings, "domain": dom, "anchor": f"{other}{n}"}
        # "model:short-name (α=...)": a whole name ran into the next panel's title at 900 px;
        # it is the title's hover text
        whole = f"{plain(s.model_id)}:{plain(s.name)}"
        fit = panel["layout"]["title"]["text"].removeprefix(f"ESD of {whole}")
        label = f"{plain(s.model_id)}:{plain(short[i])}" if several else plain(short[i])
        layout["annotations"].append(
            {
                "text": label + fit,
                "hovertext": whole,
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

"""What every figure kind of :mod:`diffract.viz` shares: the neutral layout, hover text,
value formatting, the rows a figure reads, the stored values of one slice, log-axis ticks and
the one log-binned ESD histogram.

Private to the package: its names are plain (no underscore) because the kind modules beside
it use them; nothing outside ``diffract.viz`` imports this module.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from diffract._vocab.steps import incomplete_checkpoints

if TYPE_CHECKING:
    from diffract.session import Scope

#: hover text shared by every per-parameter trace: model, name, type, value
HOVER = "<b>%{customdata[0]}</b><br>%{customdata[1]}<br>type: %{customdata[2]}<br>%{meta}: %{customdata[3]}<extra></extra>"

#: a layout that reads on light and dark JupyterLab themes alike
NEUTRAL_LAYOUT: dict[str, Any] = {
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"color": "#7f7f7f", "size": 12},
    # t: the title sits under the row Plotly's toolbar (modebar) takes at the top right
    # (MODEBAR_ROW px), so a 900 px panel's toolbar never covers it
    "margin": {"l": 60, "r": 20, "t": 80, "b": 50},
    "hovermode": "closest",
    # at the foot of the figure, under the x axis title (a legend at paper y=-0.2 sat on
    # it); Plotly widens the bottom margin to hold it
    "legend": {
        "orientation": "h",
        "x": 0,
        "xanchor": "left",
        "yref": "container",
        "y": 0,
        "yanchor": "bottom",
    },
}
#: pixels at the top of a figure kept for Plotly's toolbar (its buttons are ~24 px tall)
MODEBAR_ROW = 30
#: grid and axis line colours of every cartesian axis
AXIS = {
    "gridcolor": "rgba(128,128,128,0.25)",
    "zerolinecolor": "rgba(128,128,128,0.4)",
    "linecolor": "rgba(128,128,128,0.6)",
    # long tick labels (layer names) widen the margin instead of running under the title
    "automargin": True,
}


def fmt(v: Any) -> str:
    """A value as hover text shows it (five significant digits, ``nan``)."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.5g}"
    return str(v)


def is_number(v: Any) -> bool:
    """Whether ``v`` is a finite int or float (not a bool): a value a figure can place."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def plain(text: Any) -> str:
    """``text`` for a Plotly string (hover, legend, title), which Plotly reads as a small
    HTML subset (``<b>``, ``<br>``, ``<a href>``): model ids and layer names come from users
    and checkpoint files, so ``&``, ``<`` and ``>`` are escaped and shown as typed."""
    return html.escape(str(text), quote=False)


def custom(r: dict[str, Any], v: Any) -> list[str]:
    """The customdata of one per-parameter point: model, name, type, value (see :data:`HOVER`)."""
    return [plain(r["model_id"]), plain(r["name"] or "(model)"), plain(r["type"]), fmt(v)]


def layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    """The neutral layout with a title and two titled axes; ``xaxis`` / ``yaxis`` in ``extra``
    update the axes, other keys are set as they are."""
    out = dict(NEUTRAL_LAYOUT)
    out["title"] = title_below_modebar(title)
    if extra_lines := title.count("<br>"):  # room above the plot for each extra title line
        margin = NEUTRAL_LAYOUT["margin"]
        out["margin"] = {**margin, "t": margin["t"] + TITLE_LINE_ROOM * extra_lines}
    out["xaxis"] = {"title": {"text": xtitle, "standoff": 10}, **AXIS}
    out["yaxis"] = {"title": {"text": ytitle, "standoff": 10}, **AXIS}
    for k, v in extra.items():
        if k in ("xaxis", "yaxis"):
            out[k].update(v)
        else:
            out[k] = v
    return out


#: the most x ticks a per-layer axis labels (evenly spaced): more would overlap at 900 px
MAX_LAYER_TICKS = 12
#: a short layer name longer than this keeps its last characters, after an ellipsis
SHORT_NAME_CHARS = 16


def short_names(names: Sequence[str]) -> list[str]:
    """Short names telling layers apart on an axis: the shortest dotted suffix no other name
    has (a last component every name shares, ``weight``, left out), then only its numbers and
    its last word, where that still tells them apart
    (``encoder.layer.3.attention.self.query.weight`` -> ``3.query``; ``layers.2.weight`` ->
    ``layers.2``)."""
    parts = [str(n).split(".") for n in names]
    while parts and all(len(p) > 1 and p[-1] == parts[0][-1] for p in parts):
        for p in parts:
            p.pop()
    suffixes = [[".".join(p[len(p) - k :]) for k in range(len(p) + 1)] for p in parts]

    def unique_from(i: int) -> list[str]:
        p, k = parts[i], 1
        while k < len(p) and any(
            j != i and k < len(suffixes[j]) and suffixes[j][k] == suffixes[i][k]
            for j in range(len(parts))
        ):
            k += 1
        if k < len(p) and all(c.isdigit() for c in p[len(p) - k :]):
            k += 1  # a bare number says nothing: its word too
        return p[len(p) - k :]

    full = [unique_from(i) for i in range(len(parts))]

    def compact(comps: list[str]) -> str:
        words = [j for j, c in enumerate(comps) if not c.isdigit()]
        last_word = words[-1] if words else -1
        keep = (c for j, c in enumerate(comps) if c.isdigit() or j in (len(comps) - 1, last_word))
        return ".".join(keep)

    short = [compact(c) for c in full]
    out = []
    for comps, name in zip(full, short, strict=True):
        text = name if short.count(name) == 1 else ".".join(comps)
        out.append(text if len(text) <= SHORT_NAME_CHARS else "…" + text[-(SHORT_NAME_CHARS - 1) :])
    return out


def layer_ticks(names: Sequence[str]) -> dict[str, Any]:
    """The x axis of a per-layer figure whose ``x`` is the depth index: at most
    :data:`MAX_LAYER_TICKS` evenly spaced ticks, each ``"index short-name"``
    (:func:`short_names`), so a layer is found by name, not counted to."""
    step = max(1, math.ceil(len(names) / MAX_LAYER_TICKS))
    short = short_names(names)
    vals = list(range(0, len(names), step))
    return {
        "tickmode": "array",
        "tickvals": vals,
        "ticktext": [f"{i} {plain(short[i])}" for i in vals],
        "automargin": True,
    }


#: pixels a title's second line (``<br><sub>...``) lifts its first: Plotly anchors a
#: multi-line title's top at its first line's, then shifts the block up by its extra lines
TITLE_EXTRA_LINE = 14
#: pixels of top margin each extra title line takes (with the pad above, clear of the plot)
TITLE_LINE_ROOM = 24


def title_below_modebar(text: str) -> dict[str, Any]:
    """A title left-aligned over the plot, placed under the toolbar's row (``MODEBAR_ROW``
    px from the top): Plotly's toolbar covered a centred title in a 900 px panel. A title of
    several lines is moved down by the extra lines' height, which Plotly lifts it by."""
    extra = text.count("<br>")
    return {
        "text": text,
        "x": 0,
        "xref": "paper",
        "xanchor": "left",
        "y": 1,
        "yref": "container",
        "yanchor": "top",
        "pad": {"t": MODEBAR_ROW + TITLE_EXTRA_LINE * extra},
    }


def exponent_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Log-axis settings with ticks at the powers of ten spanning [lo, hi], labelled
    ``10<sup>k</sup>`` (Plotly's own labels use SI prefixes: "10n", "1μ", "10k").

    Every log axis of the ESD figures (:func:`diffract.viz.esd`, the live esd panel and
    :func:`diffract.viz.esd_full`) takes its ticks from here.

    Args:
        lo: the smallest positive value on the axis.
        hi: the largest value on the axis.

    Returns:
        Axis settings: ``type="log"``, ``tickvals``, ``ticktext`` and ``exponentformat="power"``.
    """
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    step = max(1, math.ceil((k1 - k0 + 1) / 8))  # at most ~8 labels
    ks = list(range(k0, k1 + 1, step))
    return {
        "type": "log",
        "tickvals": [10.0**k for k in ks],
        "ticktext": [f"10<sup>{k}</sup>" for k in ks],
        "exponentformat": "power",
    }


# ------------------------------------------------------------------------------------------
# the ESD histogram (the one place it is computed)
# ------------------------------------------------------------------------------------------


def positive(values: Any) -> Any:
    """The finite positive values of an array, flattened (what a log axis can show)."""
    import numpy as np

    v = np.asarray(values, dtype=float).ravel()
    return v[np.isfinite(v) & (v > 0)]


def log_edges(lo: float, hi: float, bins: int) -> Any:
    """``bins`` log-spaced histogram bins from ``lo`` to ``hi`` (both kept exactly; a range
    of one value is widened by 1%)."""
    import numpy as np

    if hi <= lo:
        hi = lo * 1.01 + 1e-12
    edges = np.logspace(np.log10(lo), np.log10(hi), bins + 1)
    edges[0], edges[-1] = lo, hi  # logspace may round the ends inward and drop a value
    return edges


def log_histogram(values: Any, edges: Any) -> tuple[Any, Any]:
    """The density of ``values`` over log-spaced ``edges``, at the bins' geometric centres.

    Args:
        values: positive eigenvalues (see :func:`positive`).
        edges: bin edges (see :func:`log_edges`).

    Returns:
        ``(centers, density)`` of the non-empty bins; the density integrates to the fraction
        of values inside the edges.
    """
    import numpy as np

    counts, _ = np.histogram(values, bins=edges)
    density = counts / (values.size * np.diff(edges))
    centers = np.sqrt(edges[:-1] * edges[1:])
    keep = counts > 0
    return centers[keep], density[keep]


# ------------------------------------------------------------------------------------------
# what figures read
# ------------------------------------------------------------------------------------------


def field_rows(
    scope: Scope,
    *fields: str,
    reference: str | None = None,
    complete: bool = False,
    keep: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """``scope.results.export_table(*fields)`` as rows, or ``[]`` while nothing is stored.

    The reference model's own rows are left out when only cross fields are asked for (with
    per-parameter fields they stay, their cross columns None).

    Args:
        scope: the session or scope to read.
        *fields: the fields to export.
        reference: the reference model, needed by cross-model fields.
        complete: leave out the rows of incomplete checkpoints (a tracked step whose analysis
            has not committed: in progress, or cut by a crash;
            :func:`diffract._vocab.steps.incomplete_checkpoints`), as the panels do.
        keep: model ids kept even when incomplete (the models a caller named); the
            reference is always kept.

    Returns:
        One dict per slice (the ``"list"`` export format).
    """
    from diffract._errors import FieldNotComputedError

    try:
        rows = scope.results.export_table(*fields, export_format="list", reference=reference)
    except FieldNotComputedError:
        return []
    if not complete:
        return rows
    # the export re-read the store: its state is the one the rows come from
    hide = set(incomplete_checkpoints(scope.session.store)).difference(keep, [reference])
    return [r for r in rows if r["model_id"] not in hide] if hide else rows


def by_model(
    rows: list[dict[str, Any]], field: str, models: list[str] | None
) -> dict[str, list[dict[str, Any]]]:
    """The rows holding a number for ``field``, grouped by model (only ``models`` when given)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if models is not None and r["model_id"] not in models:
            continue
        if not is_number(r.get(field)):
            continue
        out.setdefault(r["model_id"], []).append(r)
    return out


def find_slice(scope: Scope, key: str, model_id: str | None = None) -> Any:
    """The slice of the scope with uid ``key``, or named ``key`` (in ``model_id``).

    Args:
        scope: the session or scope to look in.
        key: a uid or a parameter name.
        model_id: the model of a slice given by name.

    Returns:
        The slice's :class:`~diffract.SliceInfo`.
    """
    return scope.models.slice(key, model_id)


def stored(scope: Scope, uid: str, field: str) -> Any:
    """The stored value of ``field`` for the slice, or None when it is not stored."""
    from diffract._errors import FieldNotComputedError, UnknownFieldError

    try:
        return scope.results.get(field, uid)
    except (FieldNotComputedError, UnknownFieldError, KeyError):
        return None


def to_figure(spec: dict[str, Any]) -> Any:
    """A ``plotly.graph_objects.Figure`` of a spec (Plotly is imported here, when drawn)."""
    import plotly.graph_objects as go

    return go.Figure(spec)

"""Static Plotly figures from stored fields: ``session.viz.NAME(...)`` / ``scope.viz.NAME(...)``.

Every figure is built in two steps: a *spec* (plain dicts: traces and layout, read from the
scope's tables, never from a live model) and a ``plotly.graph_objects.Figure`` made from it.
The live panels of :mod:`diffract.widgets` use the same specs, so a panel and its static twin
show the same thing. ``fig.write_html(...)`` saves one.

Figures:

``layers(field)``
    The field across depth (one line or bar group per model).
``heatmap(field)``
    Layer x model (or x checkpoint, when the models are checkpoints of one network).
``esd(slice)``
    The eigenvalue spectrum of one slice on log-log axes with its power-law fit.
``scatter(x, y)``
    Two per-parameter fields against each other, one colour per model.
``esd_full(slice)``, ``esd_grid()``, ``save(folder)``
    The ESD with xmin line, MP bulk and randomized ESD; a grid of them; files of every
    figure (defined in :mod:`diffract.viz_esd`).
``compare(field, models=(a, b), mode=...)``, ``evolution(field, run=...)``
    Two models slice by slice (difference or ratio); a tracked run across its steps
    (defined in :mod:`diffract.viz_compare`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diffract._core.steps import incomplete_checkpoints

if TYPE_CHECKING:
    from diffract.session import Scope

__all__ = [  # noqa: F822 (three from viz_esd and two from viz_compare, by __getattr__)
    "compare",
    "esd",
    "esd_full",
    "esd_grid",
    "evolution",
    "heatmap",
    "layers",
    "save",
    "scatter",
]

#: Diffract's import paths ``diffract.viz.plots``, ``.data``, ``.styling`` and ``.api`` are the
#: modules of the folder ``_viz_compat/`` beside this module (see docs/migrating-from-diffract.md)
__path__ = [str(Path(__file__).with_name("_viz_compat"))]
#: Diffract's names read from ``diffract.viz`` itself -> the module defining them
_DIFFRACT_NAMES = {
    **dict.fromkeys(
        ("DEFAULT_THEME", "DARK_THEME", "MINIMAL_THEME", "Theme", "apply_theme", "load_theme"),
        "diffract.viz.styling",
    ),
    **dict.fromkeys(("render", "render_from_config"), "diffract.viz.api"),
    # ours, in the module beside this one (it imports this one)
    **dict.fromkeys(("esd_full", "esd_grid", "save"), "diffract.viz_esd"),
    **dict.fromkeys(("compare", "evolution"), "diffract.viz_compare"),
}


def __getattr__(name: str) -> Any:
    if name in _DIFFRACT_NAMES:
        import importlib

        return getattr(importlib.import_module(_DIFFRACT_NAMES[name]), name)
    raise AttributeError(f"module 'diffract.viz' has no attribute {name!r}")


#: hover text shared by every per-parameter trace: model, name, type, value
HOVER = "<b>%{customdata[0]}</b><br>%{customdata[1]}<br>type: %{customdata[2]}<br>%{meta}: %{customdata[3]}<extra></extra>"

#: a layout that reads on light and dark JupyterLab themes alike
NEUTRAL_LAYOUT: dict[str, Any] = {
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "font": {"color": "#7f7f7f", "size": 12},
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "hovermode": "closest",
    "legend": {"orientation": "h", "y": -0.2},
}
_AXIS = {
    "gridcolor": "rgba(128,128,128,0.25)",
    "zerolinecolor": "rgba(128,128,128,0.4)",
    "linecolor": "rgba(128,128,128,0.6)",
}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.5g}"
    return str(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def exponent_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Log-axis settings with ticks at the powers of ten spanning [lo, hi], labelled
    ``10<sup>k</sup>`` (Plotly's own labels use SI prefixes: "10n", "1μ", "10k").

    Every log axis of the ESD figures (:func:`esd`, the live esd panel and
    :func:`diffract.viz_esd.esd_full`) takes its ticks from here.

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
# tables
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
            :func:`diffract._core.steps.incomplete_checkpoints`), as the panels do.
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


def _by_model(
    rows: list[dict[str, Any]], field: str, models: list[str] | None
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if models is not None and r["model_id"] not in models:
            continue
        v = r.get(field)
        if not _is_number(v):
            continue
        out.setdefault(r["model_id"], []).append(r)
    return out


def _plain(text: Any) -> str:
    """``text`` for a Plotly string (hover, legend, title), which Plotly reads as a small
    HTML subset (``<b>``, ``<br>``, ``<a href>``): model ids and layer names come from users
    and checkpoint files, so ``&``, ``<`` and ``>`` are escaped and shown as typed."""
    return html.escape(str(text), quote=False)


def _custom(r: dict[str, Any], v: Any) -> list[str]:
    return [_plain(r["model_id"]), _plain(r["name"] or "(model)"), _plain(r["type"]), _fmt(v)]


def _layout(title: str, xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    layout = dict(NEUTRAL_LAYOUT)
    layout["title"] = {"text": title}
    layout["xaxis"] = {"title": {"text": xtitle}, **_AXIS}
    layout["yaxis"] = {"title": {"text": ytitle}, **_AXIS}
    for k, v in extra.items():
        if k in ("xaxis", "yaxis"):
            layout[k].update(v)
        else:
            layout[k] = v
    return layout


# ------------------------------------------------------------------------------------------
# specs (plain dicts) and figures
# ------------------------------------------------------------------------------------------


def layers_spec(
    scope: Scope,
    field: str,
    *,
    models: list[str] | None = None,
    kind: str = "line",
    reference: str | None = None,
) -> dict[str, Any]:
    """Traces and layout of :func:`layers`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`field_rows`).
        kind: ``"line"`` (one line per model) or ``"bar"`` (grouped bars).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts (Plotly's figure format).

    Raises:
        ValueError: ``kind`` is neither ``"line"`` nor ``"bar"``.
    """
    if kind not in ("line", "bar"):
        raise ValueError(f"kind must be 'line' or 'bar', got {kind!r}")
    rows = field_rows(scope, field, reference=reference, complete=True, keep=models or ())
    data = []
    for m, rs in _by_model(rows, field, models).items():
        x = list(range(len(rs)))
        y = [r[field] for r in rs]
        trace: dict[str, Any] = {
            "type": "scatter" if kind == "line" else "bar",
            "name": _plain(m),
            "x": x,
            "y": y,
            "customdata": [_custom(r, r[field]) for r in rs],
            "hovertemplate": HOVER,
            "meta": field,
        }
        if kind == "line":
            trace["mode"] = "lines+markers"
        data.append(trace)
    depth = max((len(t["x"]) for t in data), default=0)
    # integer ticks only: about a dozen labels whatever the depth (no repeated "1, 1, 2, 2")
    ticks = {"tickformat": "d", "tick0": 0, "dtick": max(1, math.ceil(depth / 12))}
    layout = _layout(f"{field} across depth", "layer (depth order)", field, xaxis=ticks)
    if kind == "bar":
        layout["barmode"] = "group"
    return {"data": data, "layout": layout}


def heatmap_spec(
    scope: Scope, field: str, *, models: list[str] | None = None, reference: str | None = None
) -> dict[str, Any]:
    """Traces and layout of :func:`heatmap`: rows are models (or checkpoints), columns layers.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts (Plotly's figure format).
    """
    rows = field_rows(scope, field, reference=reference, complete=True, keep=models or ())
    by_model = _by_model(rows, field, models)
    ids = list(by_model)
    width = max((len(rs) for rs in by_model.values()), default=0)
    z: list[list[float | None]] = []
    custom: list[list[list[str]]] = []
    for m in ids:
        rs = by_model[m]
        z.append([r[field] for r in rs] + [None] * (width - len(rs)))
        pad = [[_plain(m), "", "", "-"]] * (width - len(rs))
        custom.append([_custom(r, r[field]) for r in rs] + pad)
    data = []
    if ids:
        data.append(
            {
                "type": "heatmap",
                "name": field,
                "z": z,
                "x": list(range(width)),
                "y": [_plain(m) for m in ids],
                "customdata": custom,
                "hovertemplate": HOVER,
                "meta": field,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": field}},
            }
        )
    layout = _layout(
        f"{field}: layer x model", "layer (depth order)", "model", yaxis={"type": "category"}
    )
    return {"data": data, "layout": layout}


def scatter_spec(
    scope: Scope,
    x: str,
    y: str,
    *,
    models: list[str] | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """Traces and layout of :func:`scatter`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        x: the per-parameter field on the x axis.
        y: the per-parameter field on the y axis.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts (Plotly's figure format).
    """
    rows = field_rows(scope, x, y, reference=reference, complete=True, keep=models or ())
    data = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if (
            (models is None or r["model_id"] in models)
            and _is_number(r.get(x))
            and _is_number(r.get(y))
        ):
            groups.setdefault(r["model_id"], []).append(r)
    for m, rs in groups.items():
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": _plain(m),
                "x": [r[x] for r in rs],
                "y": [r[y] for r in rs],
                "customdata": [
                    [
                        _plain(r["model_id"]),
                        _plain(r["name"]),
                        _plain(r["type"]),
                        f"{_fmt(r[x])}, {y}: {_fmt(r[y])}",
                    ]
                    for r in rs
                ],
                "hovertemplate": HOVER,
                "meta": x,
            }
        )
    return {"data": data, "layout": _layout(f"{y} vs {x}", x, y)}


def esd_spec(
    scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60
) -> dict[str, Any]:
    """Traces and layout of :func:`esd`.

    Reads the stored ``esd`` (eigenvalues) and, when present, ``pl_alpha`` and ``pl_esd_xmin``
    of the slice.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slice: the slice's uid, or its name (with ``model_id`` when several models
            have it).
        model_id: the model of a slice given by name.
        bins: number of histogram bins (log-spaced).

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts (Plotly's figure format).
        Without a stored ``esd`` the traces are empty and the title says so.
    """
    import numpy as np

    from diffract._errors import FieldNotComputedError

    s = find_slice(scope, slice, model_id)
    title = f"ESD of {_plain(s.model_id)}:{_plain(s.name)}"
    try:
        evals = np.asarray(scope.results.get("esd", s.uid), dtype=float)
    except FieldNotComputedError:
        return {
            "data": [],
            "layout": _layout(title + " (esd not computed yet)", "eigenvalue", "density"),
        }
    evals = evals[np.isfinite(evals) & (evals > 0)]
    data: list[dict[str, Any]] = []
    if evals.size:
        lo, hi = float(evals.min()), float(evals.max())
        if hi <= lo:
            hi = lo * 1.01 + 1e-12
        edges = np.logspace(np.log10(lo), np.log10(hi), bins + 1)
        edges[0], edges[-1] = lo, hi  # logspace may round the ends inward and drop a value
        counts, _ = np.histogram(evals, bins=edges)
        density = counts / (evals.size * np.diff(edges))
        centers = np.sqrt(edges[:-1] * edges[1:])
        keep = counts > 0
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "ESD",
                "x": centers[keep].tolist(),
                "y": density[keep].tolist(),
                "customdata": [
                    [_plain(s.model_id), _plain(s.name), s.type.value, f"{c:.4g}"]
                    for c in centers[keep]
                ],
                "hovertemplate": HOVER,
                "meta": "eigenvalue",
            }
        )
        fit = _stored(scope, s.uid, "pl_alpha"), _stored(scope, s.uid, "pl_esd_xmin")
        alpha, xmin = fit
        if _is_number(alpha) and _is_number(xmin) and alpha > 1 and xmin > 0:
            tail = evals[evals >= xmin]
            xs = np.logspace(np.log10(xmin), np.log10(hi), 50)
            frac = tail.size / evals.size
            ys = frac * (alpha - 1) / xmin * (xs / xmin) ** (-alpha)
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"power law α={alpha:.3g}, xmin={xmin:.3g}",
                    "x": xs.tolist(),
                    "y": ys.tolist(),
                    "hoverinfo": "name",
                    "line": {"dash": "dash"},
                }
            )
            title += f" (α={alpha:.3g})"
    axes: dict[str, Any] = {"xaxis": {"type": "log"}, "yaxis": {"type": "log"}}
    if data:
        px = [x for t in data for x in t["x"] if x > 0]
        py = [y for t in data for y in t["y"] if y > 0]
        axes = {
            "xaxis": exponent_ticks(min(px), max(px)),
            "yaxis": exponent_ticks(min(py), max(py)),
        }
    layout = _layout(title, "eigenvalue", "density", **axes)
    return {"data": data, "layout": layout}


#: the columns of :func:`table_rows`
TABLE_COLUMNS = ("trace", "x", "y", "z", "detail")


def table_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The values a figure spec plots, one row per point or heatmap cell (its CSV export).

    Args:
        spec: ``{"data": traces, "layout": layout}`` as the ``*_spec`` functions build it.

    Returns:
        Dicts with :data:`TABLE_COLUMNS`: the trace's name, the point's ``x`` and ``y`` (a
        heatmap cell's column and row label) and a heatmap's ``z``, and ``detail``: the
        point's hover fields (model, slice name, type, ...) joined by ``" | "``. Heatmap cells
        without a value are left out.
    """
    rows: list[dict[str, Any]] = []
    for t in spec["data"]:
        name, custom = t.get("name"), t.get("customdata")
        if t["type"] == "heatmap":
            for i, label in enumerate(t["y"]):
                for j, x in enumerate(t["x"]):
                    z = t["z"][i][j]
                    if z is not None:
                        cd = custom[i][j] if custom else []
                        rows.append(_row(name, x, label, z, cd))
            continue
        for k, (x, y) in enumerate(zip(t.get("x", []), t.get("y", []), strict=False)):
            rows.append(_row(name, x, y, None, custom[k] if custom else []))
    return rows


def _row(trace: Any, x: Any, y: Any, z: Any, custom: Any) -> dict[str, Any]:
    detail = " | ".join(html.unescape(str(c)) for c in custom)
    return {"trace": html.unescape(str(trace)), "x": x, "y": y, "z": z, "detail": detail}


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


def _stored(scope: Scope, uid: str, field: str) -> Any:
    """The stored value of ``field`` for the slice, or None when it is not stored."""
    from diffract._errors import FieldNotComputedError, UnknownFieldError

    try:
        return scope.results.get(field, uid)
    except (FieldNotComputedError, UnknownFieldError, KeyError):
        return None


def _figure(spec: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    return go.Figure(spec)


def layers(
    scope: Scope,
    field: str,
    *,
    models: list[str] | None = None,
    kind: str = "line",
    reference: str | None = None,
) -> Any:
    """``field`` across depth for each model of the scope, as lines or bars.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`field_rows`).
        kind: ``"line"`` (one line per model) or ``"bar"`` (grouped bars).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).

    Raises:
        ValueError: ``kind`` is neither ``"line"`` nor ``"bar"``.
    """
    return _figure(layers_spec(scope, field, models=models, kind=kind, reference=reference))


def heatmap(
    scope: Scope, field: str, *, models: list[str] | None = None, reference: str | None = None
) -> Any:
    """``field`` as a layer x model heatmap (models may be checkpoints of one network).

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).
    """
    return _figure(heatmap_spec(scope, field, models=models, reference=reference))


def esd(scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60) -> Any:
    """The eigenvalue spectrum of one slice on log-log axes.

    With the stored power-law fit (``pl_alpha``, ``pl_esd_xmin``) when it is computed.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slice: the slice's uid, or its name (with ``model_id`` when several models
            have it).
        model_id: the model of a slice given by name.
        bins: number of histogram bins (log-spaced).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).
    """
    return _figure(esd_spec(scope, slice, model_id=model_id, bins=bins))


def scatter(
    scope: Scope, x: str, y: str, *, models: list[str] | None = None, reference: str | None = None
) -> Any:
    """Per-parameter field ``y`` against field ``x``, one colour per model.

    Args:
        scope: the session or scope whose stored fields are drawn.
        x: the per-parameter field on the x axis.
        y: the per-parameter field on the y axis.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).
    """
    return _figure(scatter_spec(scope, x, y, models=models, reference=reference))


SPECS = {
    "line": layers_spec,
    "bar": layers_spec,
    "heatmap": heatmap_spec,
    "esd": esd_spec,
    "scatter": scatter_spec,
}

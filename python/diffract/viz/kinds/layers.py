"""``layers``: a per-parameter field across depth, one line (or bar group) per model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract.viz._common import HOVER, by_model, custom, field_rows, layer_ticks, layout, plain
from diffract.viz.kinds.alpha_errorbars import stored_sigmas

if TYPE_CHECKING:
    from diffract.session import Scope


def layers_spec(
    scope: Scope,
    field: str,
    *,
    models: list[str] | None = None,
    kind: str = "line",
    reference: str | None = None,
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.layers`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`diffract.viz.field_rows`).
        kind: ``"line"`` (one line per model) or ``"bar"`` (grouped bars).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts (Plotly's figure format); each
        point's ``customdata`` is ``[model, name, type, value, uid]``. Where ``<field>_sigma``
        is stored (``pl_alpha_sigma``), each trace has ``error_y``: alpha +- sigma.

    Raises:
        ValueError: ``kind`` is neither ``"line"`` nor ``"bar"``.
    """
    if kind not in ("line", "bar"):
        raise ValueError(f"kind must be 'line' or 'bar', got {kind!r}")
    rows = field_rows(scope, field, reference=reference, complete=True, keep=models or ())
    # a fitted exponent (pl_alpha) with its standard error stored: error bars, alpha +- sigma
    sigmas = stored_sigmas(scope, field, reference) if rows else {}
    data = []
    groups = by_model(rows, field, models)
    for m, rs in groups.items():
        trace: dict[str, Any] = {
            "type": "scatter" if kind == "line" else "bar",
            "name": plain(m),
            "x": list(range(len(rs))),
            "y": [r[field] for r in rs],
            "customdata": [[*custom(r, r[field]), r.get("uid")] for r in rs],
            "hovertemplate": HOVER,
            "meta": field,
        }
        if kind == "line":
            trace["mode"] = "lines+markers"
        if sigmas:
            errs = [sigmas.get(str(r.get("uid"))) for r in rs]
            trace["error_y"] = {"type": "data", "array": errs, "visible": True}
        data.append(trace)
    # the deepest model names the ticks: "index short-name", about a dozen of them
    deepest = max(groups.values(), key=len, default=[])
    ticks = layer_ticks([str(r["name"] or "(model)") for r in deepest])
    out = layout(f"{field} across depth", "layer (depth order)", field, xaxis=ticks)
    if kind == "bar":
        out["barmode"] = "group"
    return {"data": data, "layout": out}

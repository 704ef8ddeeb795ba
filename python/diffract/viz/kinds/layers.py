"""``layers``: a per-parameter field across depth, one line (or bar group) per model."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from diffract.viz._common import HOVER, by_model, custom, field_rows, layout, plain
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
    for m, rs in by_model(rows, field, models).items():
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
    depth = max((len(t["x"]) for t in data), default=0)
    # integer ticks only: about a dozen labels whatever the depth (no repeated "1, 1, 2, 2")
    ticks = {"tickformat": "d", "tick0": 0, "dtick": max(1, math.ceil(depth / 12))}
    out = layout(f"{field} across depth", "layer (depth order)", field, xaxis=ticks)
    if kind == "bar":
        out["barmode"] = "group"
    return {"data": data, "layout": out}

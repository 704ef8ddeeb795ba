"""``scatter``: two per-parameter fields against each other, one colour per model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract.viz._common import HOVER, field_rows, fmt, is_number, layout, plain

if TYPE_CHECKING:
    from diffract.session import Scope


def scatter_spec(
    scope: Scope,
    x: str,
    y: str,
    *,
    models: list[str] | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.scatter`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        x: the per-parameter field on the x axis.
        y: the per-parameter field on the y axis.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`diffract.viz.field_rows`).
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
            and is_number(r.get(x))
            and is_number(r.get(y))
        ):
            groups.setdefault(r["model_id"], []).append(r)
    for m, rs in groups.items():
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": plain(m),
                "x": [r[x] for r in rs],
                "y": [r[y] for r in rs],
                "customdata": [
                    [
                        plain(r["model_id"]),
                        plain(r["name"]),
                        plain(r["type"]),
                        f"{fmt(r[x])}, {y}: {fmt(r[y])}",
                    ]
                    for r in rs
                ],
                "hovertemplate": HOVER,
                "meta": x,
            }
        )
    return {"data": data, "layout": layout(f"{y} vs {x}", x, y)}

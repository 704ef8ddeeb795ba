"""``heatmap``: a per-parameter field as layer x model (or x checkpoint)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract.viz._common import HOVER, by_model, custom, field_rows, layer_ticks, layout, plain

if TYPE_CHECKING:
    from diffract.session import Scope


def column_ticks(groups: dict[str, list[dict[str, Any]]], width: int) -> dict[str, Any]:
    """The x axis of a layer x model heatmap: about a dozen evenly spaced ticks, each
    ``"index short-name"`` (:func:`~diffract.viz._common.layer_ticks`: ``x`` stays the column
    index, so an update never turns the axis into a numeric one reading -0.5..2.5; a 48-layer
    model no longer gets 48 slanted whole names). Names come from the model with the most
    layers; a column whose layer differs between models is marked ``*`` and the axis title
    says so."""
    longest = max(groups.values(), key=len, default=[])
    names = [
        str(longest[i]["name"] or "(model)") if i < len(longest) else str(i) for i in range(width)
    ]
    ticks = layer_ticks(names)
    differs = {
        i
        for i in range(width)
        if len({str(rs[i]["name"]) for rs in groups.values() if i < len(rs)}) > 1
    }
    ticks["ticktext"] = [
        f"{t}*" if v in differs else t
        for v, t in zip(ticks["tickvals"], ticks["ticktext"], strict=True)
    ]
    title = "layer (depth order)" + ("; * differs between models" if differs else "")
    return {**ticks, "title": {"text": title, "standoff": 10}}


def heatmap_spec(
    scope: Scope, field: str, *, models: list[str] | None = None, reference: str | None = None
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.heatmap`: rows are models (or checkpoints),
    columns layers.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`diffract.viz.field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        ``{"data": traces, "layout": layout}`` as plain dicts (Plotly's figure format).
    """
    rows = field_rows(scope, field, reference=reference, complete=True, keep=models or ())
    groups = by_model(rows, field, models)
    ids = list(groups)
    width = max((len(rs) for rs in groups.values()), default=0)
    z: list[list[float | None]] = []
    cells: list[list[list[str]]] = []
    for m in ids:
        rs = groups[m]
        z.append([r[field] for r in rs] + [None] * (width - len(rs)))
        pad = [[plain(m), "", "", "-"]] * (width - len(rs))
        cells.append([custom(r, r[field]) for r in rs] + pad)
    data = []
    if ids:
        data.append(
            {
                "type": "heatmap",
                "name": field,
                "z": z,
                "x": list(range(width)),
                "y": [plain(m) for m in ids],
                "customdata": cells,
                "hovertemplate": HOVER,
                "meta": field,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": field}},
            }
        )
    out = layout(
        f"{field}: layer x model",
        "",
        "model",
        yaxis={"type": "category"},
        xaxis=column_ticks(groups, width),
    )
    return {"data": data, "layout": out}

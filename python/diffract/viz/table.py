"""The values a figure spec plots, as rows: a panel's CSV export."""

from __future__ import annotations

import html
import re
from typing import Any

#: the columns of :func:`table_rows`
TABLE_COLUMNS = ("trace", "x", "y", "z", "detail")

_HOVER_CELL = re.compile(r"%\{customdata\[(\d+)\]\}")


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
        shown = _hover_cells(t)
        if t["type"] == "heatmap":
            for i, label in enumerate(t["y"]):
                for j, x in enumerate(t["x"]):
                    z = t["z"][i][j]
                    if z is not None:
                        cd = custom[i][j] if custom else []
                        rows.append(_row(name, x, label, z, cd, shown))
            continue
        for k, (x, y) in enumerate(zip(t.get("x", []), t.get("y", []), strict=False)):
            rows.append(_row(name, x, y, None, custom[k] if custom else [], shown))
    return rows


def _hover_cells(trace: dict[str, Any]) -> int | None:
    """How many customdata cells the trace's hover shows (cells past them, such as a
    layers figure's slice uid, are for clicks, not for reading); None: all of them."""
    found = [int(i) for i in _HOVER_CELL.findall(trace.get("hovertemplate") or "")]
    return max(found) + 1 if found else None


def _row(trace: Any, x: Any, y: Any, z: Any, custom: Any, shown: int | None) -> dict[str, Any]:
    detail = " | ".join(html.unescape(str(c)) for c in list(custom)[:shown])
    return {"trace": html.unescape(str(trace)), "x": x, "y": y, "z": z, "detail": detail}

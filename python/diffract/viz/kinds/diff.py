"""The ``diff`` kind: what fine-tuning changed, per layer (:mod:`diffract.finetune`).

Bars: each layer's relative change ``||W_t - W_b||_F / ||W_b||_F`` in layer order, coloured by
the update's kind (low-rank, full-rank, noise, unchanged); markers on a second axis: the
share of the update's energy above the Marchenko-Pastur edge (signal) and the overlap of the
base's and the tuned model's top singular subspaces. The hover text gives the signal rank,
effective and stable rank.
"""

from __future__ import annotations

from typing import Any

from diffract.viz._common import AXIS, layout

#: bar colour per update kind (read on light and dark themes)
KIND_COLOURS = {
    "low-rank": "#1f77b4",
    "full-rank": "#d62728",
    "noise": "#9e9e9e",
    "unchanged": "#cccccc",
}

_HOVER = (
    "<b>%{x}</b><br>relative change: %{y:.4g}<br>%{customdata[0]}<br>signal rank: "
    "%{customdata[1]}<br>signal share: %{customdata[2]:.3f}<br>effective rank: "
    "%{customdata[3]:.1f}<br>stable rank: %{customdata[4]:.2f}<extra></extra>"
)


def _label(r: dict[str, Any]) -> str:
    """The text over a bar: the kind, with the signal rank where it says something."""
    kind = r["update_kind"]
    return f"{kind} r={r['signal_rank']}" if kind in ("low-rank", "full-rank") else kind


def _share_markers(
    rows: list[dict[str, Any]], column: str, name: str, symbol: str, colour: str
) -> dict[str, Any]:
    """A marker trace of the 0-1 share ``column`` per layer, on the second y axis."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [r["name"] for r in rows],
        "y": [r[column] for r in rows],
        "yaxis": "y2",
        "marker": {"symbol": symbol, "size": 8, "color": colour},
    }


def diff_figure(result: Any, title: str | None = None) -> dict[str, Any]:
    """The spec of a :class:`~diffract.finetune.DiffResult` (the CLI's report draws it too).

    Args:
        result: the diff.
        title: the figure title (default: ``tuned vs base``).

    Returns:
        ``{"data": traces, "layout": layout}``.
    """
    rows = result.rows
    names = [r["name"] for r in rows]
    bars = {
        "type": "bar",
        "name": "relative change",
        "x": names,
        "y": [r["rel_change"] for r in rows],
        "marker": {"color": [KIND_COLOURS[r["update_kind"]] for r in rows]},
        "text": [_label(r) for r in rows],
        "textposition": "outside",
        "cliponaxis": False,
        "customdata": [
            [
                r["update_kind"],
                r["signal_rank"],
                r["signal_share"],
                r["effective_rank"],
                r["stable_rank"],
            ]
            for r in rows
        ],
        "hovertemplate": _HOVER,
    }
    share = _share_markers(rows, "signal_share", "signal share", "diamond", "#ff7f0e")
    kept = _share_markers(
        rows, "subspace_overlap", "top-k subspace overlap", "circle-open", "#2ca02c"
    )
    lay = layout(
        title or f"{result.tuned} vs {result.base}: what changed per layer",
        "layer (bar colour and label: the update's kind and signal rank)",
        "||W_t - W_b|| / ||W_b||",
        margin={"l": 60, "r": 70, "t": 80, "b": 50},
        yaxis2={
            **AXIS,
            "title": {"text": "share (0-1)"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 1.05],
            "tickmode": "linear",
            "tick0": 0,
            "dtick": 0.2,
            "showgrid": False,
        },
    )
    return {"data": [bars, share, kept], "layout": lay}


def diff_spec(scope: Any, models: list[str]) -> dict[str, Any]:
    """The ``diff`` figure of two stored models ``[base, tuned]`` of ``scope``."""
    from diffract.finetune import diff_stored

    base, tuned = models
    return diff_figure(diff_stored(scope, base, tuned))

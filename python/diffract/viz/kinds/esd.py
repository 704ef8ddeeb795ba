"""``esd``: one slice's eigenvalue spectrum on log-log axes with its stored power-law fit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract.viz._common import (
    HOVER,
    exponent_ticks,
    find_slice,
    is_number,
    layout,
    log_edges,
    log_histogram,
    plain,
    positive,
    stored,
)

if TYPE_CHECKING:
    from diffract.session import Scope

#: eigenvalues below this share of the largest are numerical zeros (a rank-deficient
#: matrix's round-off, 1e-13 and such): drawn, they stretch a log axis over ten decades and
#: squash the spectrum into its right edge
ZERO_EVAL_SHARE = 1e-10


def drawn_evals(raw: Any) -> tuple[Any, int]:
    """The eigenvalues an ESD figure draws and how many numerical zeros it leaves out.

    Args:
        raw: the stored eigenvalues.

    Returns:
        ``(evals, zeros)``: the finite positive values not below ``ZERO_EVAL_SHARE`` of the
        largest, and the count of the finite values (zeros included) left out.
    """
    import numpy as np

    v = np.asarray(raw, dtype=float).ravel()
    v = v[np.isfinite(v)]
    pos = positive(v)
    if not pos.size:
        return pos, int(v.size)
    kept = pos[pos >= pos.max() * ZERO_EVAL_SHARE]
    return kept, int(v.size - kept.size)


def esd_spec(
    scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.esd`.

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
    title = f"ESD of {plain(s.model_id)}:{plain(s.name)}"
    try:
        raw = scope.results.get("esd", s.uid)
    except FieldNotComputedError:
        return {
            "data": [],
            "layout": layout(title + " (esd not computed yet)", "eigenvalue", "density"),
        }
    evals, zeros = drawn_evals(raw)
    data: list[dict[str, Any]] = []
    if evals.size:
        edges = log_edges(float(evals.min()), float(evals.max()), bins)
        hi = float(edges[-1])
        centers, density = log_histogram(evals, edges)
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "ESD",
                "x": centers.tolist(),
                "y": density.tolist(),
                "customdata": [
                    [plain(s.model_id), plain(s.name), s.type.value, f"{c:.4g}"] for c in centers
                ],
                "hovertemplate": HOVER,
                "meta": "eigenvalue",
            }
        )
        alpha, xmin = stored(scope, s.uid, "pl_alpha"), stored(scope, s.uid, "pl_esd_xmin")
        if is_number(alpha) and is_number(xmin) and alpha > 1 and xmin > 0:
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
                    "meta": "pl_fit",
                }
            )
            title += f" (α={alpha:.3g})"
    if zeros:
        title += f" · {zeros} eigenvalue(s) ≈ 0 not drawn"
    axes: dict[str, Any] = {"xaxis": {"type": "log"}, "yaxis": {"type": "log"}}
    if data:
        px = [x for t in data for x in t["x"] if x > 0]
        py = [y for t in data for y in t["y"] if y > 0]
        axes = {
            "xaxis": exponent_ticks(min(px), max(px)),
            "yaxis": exponent_ticks(min(py), max(py)),
        }
    return {"data": data, "layout": layout(title, "eigenvalue", "density", **axes)}

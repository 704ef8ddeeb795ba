"""``alpha_errorbars``: a power-law alpha per layer with its standard error as error bars.

The field (``pl_alpha`` by default) across depth, one trace per model, each point's error bar
its ``<field>_sigma`` (``pl_alpha_sigma``: ``(alpha - 1) / sqrt(m)`` over the ``m``
eigenvalues of the fitted tail), so layers whose alpha rests on few eigenvalues read as
uncertain.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from diffract.viz._common import by_model, field_rows, fmt, is_number, layout, plain

if TYPE_CHECKING:
    from diffract.session import Scope

_HOVER = (
    "<b>%{customdata[0]}</b><br>%{customdata[1]}<br>type: %{customdata[2]}<br>"
    "%{meta}: %{customdata[3]}<extra></extra>"
)


def stored_sigmas(scope: Scope, field: str, reference: str | None = None) -> dict[str, float]:
    """uid -> the stored ``<field>_sigma`` (a fitted exponent's standard error), or {} when
    no such field exists or none is stored; the ``layers`` kind draws them as error bars."""
    from diffract._errors import DiffractError

    sigma = f"{field}_sigma"
    try:
        rows = field_rows(scope, sigma, reference=reference)
    except DiffractError:  # no kernel produces <field>_sigma
        return {}
    return {r["uid"]: r[sigma] for r in rows if is_number(r.get(sigma))}


def alpha_errorbars_spec(
    scope: Scope,
    field: str = "pl_alpha",
    *,
    models: list[str] | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """Traces and layout of the ``alpha_errorbars`` figure.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: the fitted exponent; its error is the stored ``<field>_sigma``.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs.
        reference: the reference model of cross-model fields.

    Returns:
        ``{"data": traces, "layout": layout}``: per model a line of the field across depth
        with ``error_y.array`` the sigmas (None where no sigma is stored); each point's
        ``customdata`` is ``[model, name, type, "alpha ± sigma", uid]``.
    """
    sigma = f"{field}_sigma"
    rows = field_rows(scope, field, sigma, reference=reference, complete=True, keep=models or ())
    data = []
    for m, rs in by_model(rows, field, models).items():
        errs = [r.get(sigma) if is_number(r.get(sigma)) else None for r in rs]
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": plain(m),
                "x": list(range(len(rs))),
                "y": [r[field] for r in rs],
                "error_y": {"type": "data", "array": errs, "visible": True},
                "customdata": [
                    [
                        plain(r["model_id"]),
                        plain(r["name"]),
                        plain(r["type"]),
                        f"{fmt(r[field])} ± {fmt(e) if e is not None else '-'}",
                        r.get("uid"),
                    ]
                    for r, e in zip(rs, errs, strict=True)
                ],
                "hovertemplate": _HOVER,
                "meta": field,
            }
        )
    depth = max((len(t["x"]) for t in data), default=0)
    ticks = {"tickformat": "d", "tick0": 0, "dtick": max(1, math.ceil(depth / 12))}
    title = f"{field} ± {sigma} across depth"
    return {"data": data, "layout": layout(title, "layer (depth order)", field, xaxis=ticks)}

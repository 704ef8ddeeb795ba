"""``compare``: a per-parameter field of model ``b`` against model ``a``, slice by slice.

``b - a`` (or ``b / a``) per slice matched by name, across depth: how a fine-tune or a later
checkpoint moved each layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract._errors import InvalidArgumentError, UnknownModelError
from diffract.viz._common import (
    field_rows,
    fmt,
    is_number,
    layer_ticks,
    layout,
    plain,
)

if TYPE_CHECKING:
    from diffract.session import Scope

#: the ways :func:`compare_spec` sets two values against each other
MODES = ("difference", "ratio")

_COMPARE_HOVER = (
    "<b>%{customdata[0]}</b><br>type: %{customdata[1]}<br>%{customdata[2]}<br>"
    "%{meta}: %{y:.5g}<extra></extra>"
)


def compare_models(scope: Scope, models: Any) -> tuple[str, str]:
    """The two stored model ids a comparison sets against each other, checked.

    Args:
        scope: the session or scope holding them.
        models: ``(a, b)``; ``None`` takes the scope's models when it holds exactly two.

    Returns:
        ``(a, b)``.

    Raises:
        InvalidArgumentError: not exactly two distinct ids.
        UnknownModelError: an id that is not stored in the scope.
    """
    ids = scope.models.ids()
    if models is None:
        if len(ids) != 2:
            raise InvalidArgumentError(
                f"compare needs models=[a, b] (two model or checkpoint ids); this scope holds "
                f"{len(ids)} models: {ids[:8]}"
            )
        models = ids
    chosen = [models] if isinstance(models, str) else list(models)
    if len(chosen) != 2 or chosen[0] == chosen[1]:
        raise InvalidArgumentError(f"compare needs two different models, got {chosen!r}")
    for m in chosen:
        if m not in ids:
            raise UnknownModelError(f"compare: no model {m!r} in this scope; models: {ids}")
    return chosen[0], chosen[1]


def common_slices(scope: Scope, a: str, b: str) -> list[tuple[str, str]]:
    """The slice names both models have, in ``a``'s depth order, with their type.

    Raises:
        InvalidArgumentError: the models share no slice name.
    """
    names: dict[str, dict[str, str]] = {a: {}, b: {}}
    for s in scope.models.slices():
        if s.model_id in names:
            names[s.model_id][s.name] = s.type.value
    common = [(n, t) for n, t in names[a].items() if n in names[b]]
    if not common:
        raise InvalidArgumentError(
            f"compare: models {a!r} and {b!r} share no slice name (e.g. {a!r} has "
            f"{list(names[a])[:3]}, {b!r} has {list(names[b])[:3]}); slices are matched by name"
        )
    return common


def compare_spec(
    scope: Scope,
    field: str,
    *,
    models: Any = None,
    mode: str = "difference",
    reference: str | None = None,
) -> dict[str, Any]:
    """Traces and layout of :func:`diffract.viz.compare`: one point per common slice with both values.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: ``(a, b)``: the baseline and the model set against it (default: the scope's
            two models).
        mode: ``"difference"`` (``b - a``) or ``"ratio"`` (``b / a``; no point where
            ``a`` is 0).
        reference: the reference model of cross-model fields.

    Returns:
        ``{"data": traces, "layout": layout}``; the trace's x is the slice's position among
        the common slices (in ``a``'s depth order) and its customdata
        ``[name, type, "a: .. b: .."]``.

    Raises:
        InvalidArgumentError: an unknown mode, not two models, or no common slice.
        UnknownModelError: a model that is not stored.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"compare: mode must be one of {MODES}, got {mode!r}")
    a, b = compare_models(scope, models)
    common = common_slices(scope, a, b)
    values: dict[tuple[str, str], float] = {}
    for r in field_rows(scope, field, reference=reference):
        if r["model_id"] in (a, b) and is_number(r.get(field)):
            values[(r["model_id"], r["name"])] = r[field]
    xs, ys, custom = [], [], []
    for i, (name, typ) in enumerate(common):
        va, vb = values.get((a, name)), values.get((b, name))
        if va is None or vb is None or (mode == "ratio" and va == 0):
            continue
        xs.append(i)
        ys.append(vb - va if mode == "difference" else vb / va)
        custom.append([plain(name), plain(typ), f"{plain(a)}: {fmt(va)}, {plain(b)}: {fmt(vb)}"])
    what = f"{b} - {a}" if mode == "difference" else f"{b} / {a}"
    data = []
    if xs:
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": plain(what),
                "x": xs,
                "y": ys,
                "customdata": custom,
                "hovertemplate": _COMPARE_HOVER,
                "meta": f"{field} {mode}",
            }
        )
    base = 0.0 if mode == "difference" else 1.0
    out = layout(
        # two lines: a 900 px window's panel cut the one-line title at "(4 of 8 com"
        f"{plain(field)}: {plain(what)} per slice"
        f"<br><sub>{len(xs)} of {len(common)} common slices</sub>",
        "slice (depth order)",
        f"{field} {mode}",
        # the common slices named ("index short-name"), as the per-layer figures are
        xaxis=layer_ticks([name for name, _ in common]),
    )
    out["shapes"] = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": base,
            "y1": base,
            "line": {"color": "rgba(128,128,128,0.7)", "dash": "dot", "width": 1},
        }
    ]
    return {"data": data, "layout": out}

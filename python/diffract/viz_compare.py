"""Figures that set stored fields side by side: two models slice by slice, a run across steps.

``compare(field, models=(a, b), mode="difference" | "ratio")``
    ``b - a`` (or ``b / a``) of a per-parameter field, per slice matched by name, across
    depth: how a fine-tune or a later checkpoint moved each layer.
``evolution(field, run=None)``
    A tracked training run (:mod:`diffract.tracking`): a layer x step heatmap of the field
    and one line per layer across steps, checkpoints ordered by their training step
    (``meta["track"]["step"]``, read through :mod:`diffract._core.steps`), not by id; a
    step whose analysis has not committed (:mod:`diffract.tracking.ledger`) is left out.

Both are specs (plain dicts) first, like every figure of :mod:`diffract.viz`, so the live
panels (``FieldPanel(kind="compare" | "evolution")``) draw the same thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract._core.steps import order_by_step, track_of
from diffract._errors import InvalidArgumentError, UnknownModelError
from diffract.tracking.ledger import incomplete_checkpoints
from diffract.viz import _AXIS, _figure, _fmt, _is_number, _layout, _plain, field_rows

if TYPE_CHECKING:
    from diffract.session import Scope

#: the ways :func:`compare` sets two values against each other
MODES = ("difference", "ratio")

_COMPARE_HOVER = (
    "<b>%{customdata[0]}</b><br>type: %{customdata[1]}<br>%{customdata[2]}<br>"
    "%{meta}: %{y:.5g}<extra></extra>"
)
_EVOLUTION_HOVER = "<b>%{customdata[0]}</b><br>step %{x} (%{customdata[1]})<br>%{meta}: %{customdata[2]}<extra></extra>"


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
    """Traces and layout of :func:`compare`: one point per common slice with both values.

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
        if r["model_id"] in (a, b) and _is_number(r.get(field)):
            values[(r["model_id"], r["name"])] = r[field]
    xs, ys, custom = [], [], []
    for i, (name, typ) in enumerate(common):
        va, vb = values.get((a, name)), values.get((b, name))
        if va is None or vb is None or (mode == "ratio" and va == 0):
            continue
        xs.append(i)
        ys.append(vb - va if mode == "difference" else vb / va)
        custom.append(
            [_plain(name), _plain(typ), f"{_plain(a)}: {_fmt(va)}, {_plain(b)}: {_fmt(vb)}"]
        )
    what = f"{b} - {a}" if mode == "difference" else f"{b} / {a}"
    data = []
    if xs:
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": _plain(what),
                "x": xs,
                "y": ys,
                "customdata": custom,
                "hovertemplate": _COMPARE_HOVER,
                "meta": f"{field} {mode}",
            }
        )
    base = 0.0 if mode == "difference" else 1.0
    layout = _layout(
        f"{_plain(field)}: {_plain(what)} per slice ({len(xs)} of {len(common)} common slices)",
        "slice (depth order)",
        f"{field} {mode}",
        xaxis={"tickformat": "d", "tick0": 0, "dtick": max(1, -(-len(common) // 12))},
    )
    layout["shapes"] = [
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
    return {"data": data, "layout": layout}


def tracked_runs(scope: Scope) -> dict[str, list[tuple[int, str]]]:
    """The tracked runs of the scope: run name -> ``[(step, model_id), ...]`` in step order.

    Incomplete checkpoints (a tracker's step whose analysis has not committed: in progress,
    or cut by a crash; :func:`diffract.tracking.incomplete_checkpoints`) are left out; a run
    holding only those is listed with no step.
    """
    ids = scope.models.ids()  # re-reads a store another process writes; then its listing
    store = scope.session.store
    stored, incomplete = store.models(), incomplete_checkpoints(store)
    meta = {m: stored[m].get("meta") for m in ids if m in stored}
    runs: dict[str, list[tuple[int, str]]] = {}
    for m in order_by_step(meta, meta.get):
        t = track_of(meta[m])
        if t is not None:
            steps = runs.setdefault(t[0], [])
            if m not in incomplete:
                steps.append((t[1], m))
    return runs


def pick_run(scope: Scope, run: str | None) -> str:
    """``run``, or the scope's only tracked run when it is None.

    Raises:
        InvalidArgumentError: ``run`` is None and the scope holds no tracked run, or several.
    """
    if run is not None:
        if not isinstance(run, str) or not run:
            raise InvalidArgumentError(f"evolution: run must be a run name, got {run!r}")
        return run
    runs = sorted(tracked_runs(scope))
    if len(runs) == 1:
        return runs[0]
    if not runs:
        raise InvalidArgumentError(
            "evolution: no tracked checkpoints in this scope (models whose meta holds "
            '{"track": {"run", "step"}}); pass run="NAME" to follow a run that has not stored '
            "a step yet"
        )
    raise InvalidArgumentError(f"evolution: several tracked runs, pick one with run=: {runs}")


def evolution_spec(
    scope: Scope, field: str, *, run: str | None = None, reference: str | None = None
) -> dict[str, Any]:
    """Traces and layout of :func:`evolution`.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        run: the tracked run (default: the scope's only one).
        reference: the reference model of cross-model fields (drift from the first step).

    Returns:
        ``{"data": traces, "layout": layout}``: a heatmap (rows: layers in depth order,
        columns: the run's steps in step order, one column each, labelled with the step
        numbers: ``x`` is the column index, the axis' ``ticktext`` the steps; an update never
        turns it into a numeric axis) on the top axes, then one line per layer (x = steps) on
        ``x2`` / ``y2``. Empty while the run has no stored value.

    Raises:
        InvalidArgumentError: no ``run`` given and not exactly one tracked run.
    """
    run = pick_run(scope, run)
    steps = tracked_runs(scope).get(run, [])
    ids = {m: step for step, m in steps}
    cells: dict[str, dict[int, float]] = {}
    for r in field_rows(scope, field, reference=reference):
        if r["model_id"] in ids and _is_number(r.get(field)):
            cells.setdefault(r["name"], {})[ids[r["model_id"]]] = r[field]
    order = [s for s, _ in steps if any(s in row for row in cells.values())]
    layers = list(cells)
    data: list[dict[str, Any]] = []
    if order:
        by_step = {s: m for s, m in steps}
        z = [[cells[n].get(s) for s in order] for n in layers]
        custom = [
            [[_plain(n), _plain(by_step[s]), _fmt(cells[n].get(s, "-"))] for s in order]
            for n in layers
        ]
        data.append(
            {
                "type": "heatmap",
                "name": field,
                "z": z,
                "x": list(range(len(order))),
                "y": [_plain(n) for n in layers],
                "customdata": custom,
                "hovertemplate": _EVOLUTION_HOVER,
                "meta": field,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": field}, "len": 0.55, "y": 1, "yanchor": "top"},
            }
        )
        for n in layers:
            pts = [s for s in order if s in cells[n]]
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": _plain(n),
                    "x": pts,
                    "y": [cells[n][s] for s in pts],
                    "customdata": [[_plain(n), _plain(by_step[s]), _fmt(cells[n][s])] for s in pts],
                    "hovertemplate": _EVOLUTION_HOVER,
                    "meta": field,
                    "xaxis": "x2",
                    "yaxis": "y2",
                    "showlegend": len(layers) <= 12,
                }
            )
    span = f"steps {order[0]}..{order[-1]}" if order else "no step stored yet"
    layout = _layout(
        # two lines: a 900 px JupyterLab panel cut the one-line title at "steps 9."
        f"{_plain(field)} across training"
        f"<br><sub>run {_plain(run)}: {len(order)} checkpoints, {span}</sub>",
        "",
        "layer",
        margin={"l": 60, "r": 20, "t": 72, "b": 50},
        xaxis={
            "domain": [0, 1],
            "anchor": "y",
            "tickvals": list(range(len(order))),
            "ticktext": [str(s) for s in order],
            "title": {"text": "step"},
        },
        yaxis={"type": "category", "autorange": "reversed", "domain": [0.45, 1]},
    )
    layout["xaxis2"] = {"title": {"text": "step"}, "anchor": "y2", "domain": [0, 1], **_AXIS}
    layout["yaxis2"] = {"title": {"text": field}, "anchor": "x2", "domain": [0, 0.33], **_AXIS}
    return {"data": data, "layout": layout}


def compare(
    scope: Scope,
    field: str,
    *,
    models: Any = None,
    mode: str = "difference",
    reference: str | None = None,
) -> Any:
    """``field`` of model ``b`` against model ``a``, slice by slice (matched by name).

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: ``(a, b)``: the baseline and the model set against it (default: the scope's
            two models).
        mode: ``"difference"`` (``b - a``) or ``"ratio"`` (``b / a``).
        reference: the reference model of cross-model fields.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        InvalidArgumentError: an unknown mode, not two models, or no common slice.
        UnknownModelError: a model that is not stored.
    """
    return _figure(compare_spec(scope, field, models=models, mode=mode, reference=reference))


def evolution(
    scope: Scope, field: str, *, run: str | None = None, reference: str | None = None
) -> Any:
    """``field`` across the steps of a tracked training run: a layer x step heatmap and one
    line per layer.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        run: the tracked run (default: the scope's only one).
        reference: the reference model of cross-model fields.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        InvalidArgumentError: no ``run`` given and not exactly one tracked run.
    """
    return _figure(evolution_spec(scope, field, run=run, reference=reference))

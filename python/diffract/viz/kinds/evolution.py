"""``evolution``: a tracked training run (:mod:`diffract.tracking`) across its steps.

A layer x step heatmap of the field and one line per layer across steps, checkpoints ordered
by their training step (``meta["track"]["step"]``, read through :mod:`diffract._vocab.steps`),
not by id; a step whose analysis has not committed (:mod:`diffract.tracking.ledger`) is left
out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract._errors import InvalidArgumentError
from diffract._vocab.steps import order_by_step, track_of
from diffract.tracking.ledger import incomplete_checkpoints
from diffract.viz._common import AXIS, field_rows, fmt, is_number, layout, plain, short_names

if TYPE_CHECKING:
    from diffract.session import Scope

#: hover text of both plots: layer, step, checkpoint, value (the heatmap's x is a column
#: index, not the step, so the step comes from customdata)
_EVOLUTION_HOVER = "<b>%{customdata[0]}</b><br>step %{customdata[3]} (%{customdata[1]})<br>%{meta}: %{customdata[2]}<extra></extra>"


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
    """Traces and layout of :func:`diffract.viz.evolution`.

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
        if r["model_id"] in ids and is_number(r.get(field)):
            cells.setdefault(r["name"], {})[ids[r["model_id"]]] = r[field]
    order = [s for s, _ in steps if any(s in row for row in cells.values())]
    layers = list(cells)
    data: list[dict[str, Any]] = []
    if order:
        by_step = {s: m for s, m in steps}
        z = [[cells[n].get(s) for s in order] for n in layers]
        custom = [
            [[plain(n), plain(by_step[s]), fmt(cells[n].get(s, "-")), s] for s in order]
            for n in layers
        ]
        data.append(
            {
                "type": "heatmap",
                "name": field,
                "z": z,
                "x": list(range(len(order))),
                "y": [plain(n) for n in layers],
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
                    "name": plain(n),
                    "x": pts,
                    "y": [cells[n][s] for s in pts],
                    "customdata": [[plain(n), plain(by_step[s]), fmt(cells[n][s]), s] for s in pts],
                    "hovertemplate": _EVOLUTION_HOVER,
                    "meta": field,
                    "xaxis": "x2",
                    "yaxis": "y2",
                    "showlegend": len(layers) <= 12,
                }
            )
    span = f"steps {order[0]}..{order[-1]}" if order else "no step stored yet"
    out = layout(
        # two lines: a 900 px JupyterLab panel cut the one-line title at "steps 9."
        f"{plain(field)} across training"
        f"<br><sub>run {plain(run)}: {len(order)} checkpoints, {span}</sub>",
        "",
        "layer",
        xaxis={
            "domain": [0, 1],
            "anchor": "y",
            "tickvals": list(range(len(order))),
            "ticktext": [str(s) for s in order],
            "title": {"text": "step", "standoff": 10},
        },
        # automargin (from AXIS) widens the left margin for the layer names, so the axis
        # title stands clear of them instead of over them
        yaxis={
            "type": "category",
            "autorange": "reversed",
            "domain": [0.45, 1],
            # short names tell the rows apart (a whole name is in the hover); the sidebar
            # names its lines' legend after them
            "tickmode": "array",
            "tickvals": [plain(n) for n in layers],
            "ticktext": [plain(t) for t in short_names(layers)],
        },
    )
    out["xaxis2"] = {
        "title": {"text": "step", "standoff": 10},
        "anchor": "y2",
        "domain": [0, 1],
        **AXIS,
    }
    out["yaxis2"] = {
        "title": {"text": field, "standoff": 10},
        "anchor": "x2",
        "domain": [0, 0.33],
        **AXIS,
    }
    return {"data": data, "layout": out}

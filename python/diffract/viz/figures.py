"""The figure functions of :mod:`diffract.viz`: each draws one kind's spec as a
``plotly.graph_objects.Figure`` (``session.viz.<name>(...)`` binds the scope).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from diffract.viz import registry
from diffract.viz._common import to_figure
from diffract.viz.kinds.compare import compare_spec
from diffract.viz.kinds.esd import esd_spec
from diffract.viz.kinds.esd_full import esd_full_spec
from diffract.viz.kinds.esd_grid import esd_grid_spec
from diffract.viz.kinds.evolution import evolution_spec
from diffract.viz.kinds.heatmap import heatmap_spec
from diffract.viz.kinds.layers import layers_spec
from diffract.viz.kinds.scatter import scatter_spec

if TYPE_CHECKING:
    from diffract.session import Scope


def layers(
    scope: Scope,
    field: str,
    *,
    models: list[str] | None = None,
    kind: str = "line",
    reference: str | None = None,
) -> Any:
    """``field`` across depth for each model of the scope, as lines or bars.

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`diffract.viz.field_rows`).
        kind: ``"line"`` (one line per model) or ``"bar"`` (grouped bars).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).

    Raises:
        ValueError: ``kind`` is neither ``"line"`` nor ``"bar"``.
    """
    return to_figure(layers_spec(scope, field, models=models, kind=kind, reference=reference))


def heatmap(
    scope: Scope, field: str, *, models: list[str] | None = None, reference: str | None = None
) -> Any:
    """``field`` as a layer x model heatmap (models may be checkpoints of one network).

    Args:
        scope: the session or scope whose stored fields are drawn.
        field: a per-parameter scalar field.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`diffract.viz.field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).
    """
    return to_figure(heatmap_spec(scope, field, models=models, reference=reference))


def esd(scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60) -> Any:
    """The eigenvalue spectrum of one slice on log-log axes.

    With the stored power-law fit (``pl_alpha``, ``pl_esd_xmin``) when it is computed.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slice: the slice's uid, or its name (with ``model_id`` when several models
            have it).
        model_id: the model of a slice given by name.
        bins: number of histogram bins (log-spaced).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).
    """
    return to_figure(esd_spec(scope, slice, model_id=model_id, bins=bins))


def esd_full(scope: Scope, slice: str, *, model_id: str | None = None, bins: int = 60) -> Any:
    """The ESD of one slice with its power-law fit, xmin line, Marchenko-Pastur bulk and
    randomized ESD (each when its fields are stored).

    Args:
        scope: the session or scope whose stored fields are drawn.
        slice: the slice's uid, or its name (with ``model_id`` when several models have it).
        model_id: the model of a slice given by name.
        bins: number of histogram bins (log-spaced).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while ``esd`` is not stored).
    """
    return to_figure(esd_full_spec(scope, slice, model_id=model_id, bins=bins))


def esd_grid(
    scope: Scope, slices: list[str] | None = None, *, cols: int = 3, bins: int = 40
) -> Any:
    """:func:`esd_full` of many slices as a grid of panels.

    Args:
        scope: the session or scope whose stored fields are drawn.
        slices: uids (or names) to draw; default: every slice of the scope with a stored ESD.
        cols: panels per row.
        bins: histogram bins per panel.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        InvalidArgumentError: ``cols`` is not a positive int.
    """
    return to_figure(esd_grid_spec(scope, slices, cols=cols, bins=bins))


def scatter(
    scope: Scope, x: str, y: str, *, models: list[str] | None = None, reference: str | None = None
) -> Any:
    """Per-parameter field ``y`` against field ``x``, one colour per model.

    Args:
        scope: the session or scope whose stored fields are drawn.
        x: the per-parameter field on the x axis.
        y: the per-parameter field on the y axis.
        models: the model ids to draw; default: every model of the scope but the incomplete
            checkpoints of tracked runs (:func:`diffract.viz.field_rows`).
        reference: the reference model of cross-model fields (drift against a checkpoint).

    Returns:
        A ``plotly.graph_objects.Figure`` (empty while nothing is stored).
    """
    return to_figure(scatter_spec(scope, x, y, models=models, reference=reference))


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
    return to_figure(compare_spec(scope, field, models=models, mode=mode, reference=reference))


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
    return to_figure(evolution_spec(scope, field, run=run, reference=reference))


def figure(
    scope: Scope, kind: str, fields: str | Sequence[str] | None = None, **params: Any
) -> Any:
    """Any figure kind of :mod:`diffract.viz.registry` by name, e.g.
    ``figure(session, "alpha_errorbars")``.

    Args:
        scope: the session or scope whose stored fields are drawn.
        kind: a name of :data:`diffract.viz.registry.KINDS`.
        fields: its field(s) (default: the kind's own).
        **params: ``models``, ``slice``, ``model_id``, ``reference``, ``mode``, ``run``,
            ``slices`` as the kind needs.

    Returns:
        A ``plotly.graph_objects.Figure``.

    Raises:
        InvalidArgumentError: an unknown kind or parameter, or what the kind needs missing.
    """
    return to_figure(registry.build(scope, kind, fields, **params))

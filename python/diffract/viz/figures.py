"""The figure functions of :mod:`diffract.viz`: each draws one kind's spec as a
``plotly.graph_objects.Figure`` (``session.viz.<name>(...)`` binds the scope).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

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

P = ParamSpec("P")


#: Returns: of every figure function (its spec builder's Returns: describes the plain dicts)
_RETURNS = """Returns:
    A ``plotly.graph_objects.Figure`` of :func:`diffract.viz.{spec}`'s traces and layout
    (empty while the fields it draws are not stored).
"""


def _figure_of(spec: Callable[P, dict[str, Any]], summary: str) -> Callable[P, Any]:
    """The figure function of a kind's spec builder: the same arguments (and their docs, read
    from the builder's docstring, written once), a ``plotly.graph_objects.Figure`` back."""
    name = spec.__name__.removesuffix("_spec")

    def draw(*args: P.args, **kwargs: P.kwargs) -> Any:
        return to_figure(spec(*args, **kwargs))

    draw.__name__ = draw.__qualname__ = name
    draw.__module__ = __name__
    draw.__signature__ = inspect.signature(spec).replace(return_annotation=Any)  # type: ignore[attr-defined]
    draw.__doc__ = _figure_doc(inspect.getdoc(spec) or "", summary, spec.__name__)
    return draw


def _figure_doc(spec_doc: str, summary: str, spec: str) -> str:
    """``summary``, then the spec builder's docstring past its first paragraph with its
    ``Returns:`` section replaced by the figure's."""
    _, _, body = spec_doc.partition("\n\n")
    head, returns, rest = body.partition("Returns:\n")
    if not returns:
        raise ValueError(f"{spec} has no Returns: section to replace")
    after = rest.partition("\n\n")[2]  # the builder's Returns: text ends at a blank line
    return f"{summary}\n\n{head}{_RETURNS.format(spec=spec)}" + (f"\n{after}" if after else "")


layers = _figure_of(
    layers_spec, "``field`` across depth for each model of the scope, as lines or bars."
)
heatmap = _figure_of(
    heatmap_spec, "``field`` as a layer x model heatmap (models may be checkpoints of one network)."
)
esd = _figure_of(esd_spec, "The eigenvalue spectrum of one slice on log-log axes.")
esd_full = _figure_of(
    esd_full_spec,
    "The ESD of one slice with its power-law fit, xmin line, Marchenko-Pastur bulk and "
    "randomized ESD (each when its fields are stored).",
)
esd_grid = _figure_of(esd_grid_spec, ":func:`esd_full` of many slices as a grid of panels.")
scatter = _figure_of(
    scatter_spec, "Per-parameter field ``y`` against field ``x``, one colour per model."
)
compare = _figure_of(
    compare_spec, "``field`` of model ``b`` against model ``a``, slice by slice (matched by name)."
)
evolution = _figure_of(
    evolution_spec,
    "``field`` across the steps of a tracked training run: a layer x step heatmap and one "
    "line per layer.",
)


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

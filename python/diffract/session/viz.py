"""``scope.viz``: static Plotly figures from the scope's stored fields.

Each figure is a function of :mod:`diffract.viz` taking the scope first; ``scope.viz.<name>``
binds it. Every other kind of the figure registry (:mod:`diffract.viz.registry`) is bound
too, as ``diffract.viz.figure(scope, name, ...)``. The figures module is a front end (it
needs plotly), found by name on first use.

The published Diffract's figures (``box``, ``violin``, ``scatter``, ``heatmap``,
``sparkline`` / ``line``, ``grid``, ``bound_grid``, ``draw``) come from ``diffract.viz.api``;
``scatter`` and ``heatmap`` exist in both: a call with Diffract's keyword options (or a
metadata key as an axis) is Diffract's, one in our form (``heatmap("pl_alpha")``,
``scatter("x", "y")``) ours.
"""

from __future__ import annotations

from typing import Any

from diffract.session.scope import Namespace, frontend

#: Diffract's figure names
DIFFRACT_FIGURES = ("box", "violin", "sparkline", "line", "grid", "bound_grid", "draw")
#: our own options of the figures both libraries name alike
_OURS = {"scatter": {"x", "y", "models", "reference"}, "heatmap": {"field", "models", "reference"}}


class Viz(Namespace):
    """Static Plotly figures from stored fields (see :mod:`diffract.viz`).

    ``scope.viz.heatmap(...)`` is ``diffract.viz.heatmap(scope, ...)``.
    """

    def __getattr__(self, name: str) -> Any:
        if name in DIFFRACT_FIGURES:
            return self._bind(getattr(frontend("diffract_figures"), name), name)
        figures = frontend("figures")
        if name not in figures.__all__:
            if name in figures.registry.KINDS:
                return self._bind(_kind_figure(figures, name), name)
            raise AttributeError(f"viz has no figure {name!r}; available: {_names(figures)}")
        fn = getattr(figures, name)
        if name in _OURS:
            return self._dispatch(name, fn)
        return self._bind(fn, name)

    def _bind(self, fn: Any, name: str) -> Any:
        def bound(*args: Any, **kwargs: Any) -> Any:
            return fn(self._scope, *args, **kwargs)

        bound.__doc__ = fn.__doc__
        bound.__name__ = name
        return bound

    def _dispatch(self, name: str, ours: Any) -> Any:
        def bound(*args: Any, **kwargs: Any) -> Any:
            if self._is_diffract_call(name, args, kwargs):
                theirs = getattr(frontend("diffract_figures"), name)
                return theirs(self._scope, **kwargs)
            return ours(self._scope, *args, **kwargs)

        bound.__doc__ = ours.__doc__
        bound.__name__ = name
        return bound

    def _is_diffract_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if args:
            return False
        if set(kwargs) - _OURS[name] or any(
            not isinstance(v, (str, list, type(None))) for v in kwargs.values()
        ):
            return True
        registry = self._session.registry
        axes = [v for k in ("x", "y") if isinstance(v := kwargs.get(k), str)]
        return any(not registry.has_field(a) for a in axes)

    def __dir__(self) -> list[str]:
        return _names(frontend("figures"))


def _names(figures: Any) -> list[str]:
    """Every figure name ``scope.viz`` answers to."""
    return sorted({*figures.__all__, *DIFFRACT_FIGURES, *figures.registry.KINDS})


def _kind_figure(figures: Any, name: str) -> Any:
    """``figures.figure(scope, name, ...)`` for a kind that has no function of its own."""

    def draw(scope: Any, *fields: str, **params: Any) -> Any:
        return figures.figure(scope, name, fields or None, **params)

    draw.__doc__ = f"The {name!r} figure: {figures.registry.KINDS[name].title}."
    return draw

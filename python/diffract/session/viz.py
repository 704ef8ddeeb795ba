"""``scope.viz``: static Plotly figures from the scope's stored fields.

Each figure is a function of :mod:`diffract.viz` taking the scope first; ``scope.viz.<name>``
binds it. The figures module is a front end (it needs plotly), found by name on first use.
"""

from __future__ import annotations

from typing import Any

from diffract.session._frontends import frontend
from diffract.session.selection import Namespace


class Viz(Namespace):
    """Static Plotly figures from stored fields (see :mod:`diffract.viz`).

    ``scope.viz.heatmap(...)`` is ``diffract.viz.heatmap(scope, ...)``.
    """

    def __getattr__(self, name: str) -> Any:
        figures = frontend("figures")
        if name not in figures.__all__:
            raise AttributeError(f"viz has no figure {name!r}; available: {figures.__all__}")
        fn = getattr(figures, name)

        def bound(*args: Any, **kwargs: Any) -> Any:
            return fn(self._scope, *args, **kwargs)

        bound.__doc__ = fn.__doc__
        bound.__name__ = name
        return bound

    def __dir__(self) -> list[str]:
        return list(frontend("figures").__all__)

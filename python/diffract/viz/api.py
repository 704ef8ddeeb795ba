# mypy: disable-error-code="import-untyped"
"""``session.viz`` as the published Diffract has it: one-line plot wrappers, grids and
``draw`` (a plot object, or a YAML plot configuration read with PyYAML, no Hydra needed).

YAML format: a top-level ``plot`` node naming its class with ``_target_`` (nested nodes with
``_target_`` are built too) and an optional ``config`` mapping applied with ``fig.update``.
``overrides`` are ``"dotted.key=value"`` strings (Hydra's override syntax for plain keys).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from diffract.viz.data import FieldRef
from diffract.viz.plots import (
    BoxPlot,
    HeatmapPlot,
    ScatterPlot,
    SparklinePlot,
    ViolinPlot,
)
from diffract.viz.plots.subplots import GridPlot, build_bound_grid
from diffract.viz.styling import Theme, load_theme

__all__ = [
    "bound_grid",
    "box",
    "draw",
    "grid",
    "heatmap",
    "line",
    "render",
    "render_from_config",
    "scatter",
    "sparkline",
    "violin",
]


def _theme(theme: Theme | None, theme_path: str | os.PathLike[str] | None) -> Theme | None:
    if theme is not None:
        return theme
    return load_theme(theme_path) if theme_path is not None else None


def render(plot: Any, *, session: Any, theme: Theme | None = None) -> Any:
    """``plot.render(session, theme)``, checked to be a Plotly figure.

    Raises:
        TypeError: ``render`` did not return a ``plotly.graph_objects.Figure``.
    """
    import plotly.graph_objects as go

    fig = plot.render(session, theme=theme)
    if not isinstance(fig, go.Figure):
        raise TypeError(
            f"{type(plot).__name__}.render() returned {type(fig).__name__}, not a Figure"
        )
    return fig


def _wrapper(cls: type) -> Any:
    def draw_one(
        scope: Any,
        *,
        theme: Theme | None = None,
        theme_path: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> Any:
        return render(cls(**options), session=scope, theme=_theme(theme, theme_path))

    draw_one.__name__ = cls.__name__
    draw_one.__doc__ = (
        f"A {cls.__name__} of the scope (keyword options of the class; theme, theme_path)."
    )
    return draw_one


box = _wrapper(BoxPlot)
violin = _wrapper(ViolinPlot)
scatter = _wrapper(ScatterPlot)
heatmap = _wrapper(HeatmapPlot)
sparkline = line = _wrapper(SparklinePlot)


def grid(
    scope: Any,
    *,
    subplots: list[Any],
    make_subplots_kwargs: dict[str, Any] | None = None,
    theme: Theme | None = None,
    theme_path: str | os.PathLike[str] | None = None,
) -> Any:
    """Subplots on one figure (``SubplotSpec`` cells)."""
    g = GridPlot(subplots=subplots, make_subplots_kwargs=make_subplots_kwargs)
    return render(g, session=scope, theme=_theme(theme, theme_path))


def bound_grid(
    scope: Any,
    *,
    plot_template: Any,
    row: Any = None,
    col: Any = None,
    cell_rules: list[Any] | None = None,
    title_template: str | None = None,
    make_subplots_kwargs: dict[str, Any] | None = None,
    base_session_filter: dict[str, Any] | None = None,
    base_value_filter: dict[str, Any] | None = None,
    theme: Theme | None = None,
    theme_path: str | os.PathLike[str] | None = None,
) -> Any:
    """A grid of ``plot_template`` with values bound along rows and columns."""
    g = build_bound_grid(
        plot_template,
        row,
        col,
        cell_rules,
        title_template,
        make_subplots_kwargs,
        base_session_filter,
        base_value_filter,
    )
    return render(g, session=scope, theme=_theme(theme, theme_path))


# --- YAML configurations --------------------------------------------------------------------


def _target(path: str) -> Any:
    """The class a ``_target_`` names; Diffract's module paths map onto ours by class name."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        if not path.startswith("diffract."):
            raise ValueError(f"_target_ {path!r} cannot be imported") from None
    for mod in (
        "diffract.viz.plots",
        "diffract.viz.plots.subplots",
        "diffract.viz.data",
        "diffract.viz.styling",
    ):
        found = getattr(importlib.import_module(mod), name, None)
        if found is not None:
            return found
    raise ValueError(f"_target_ {path!r}: no such plot class or helper")


def _build(node: Any) -> Any:
    if isinstance(node, list):
        return [_build(v) for v in node]
    if not isinstance(node, dict):
        return node
    args = {k: _build(v) for k, v in node.items() if k not in ("_target_", "_convert_")}
    if "_target_" not in node:
        return args
    return _target(node["_target_"])(**args)


def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _override(data: dict[str, Any], item: str) -> None:
    key, sep, value = item.lstrip("+").partition("=")
    if not sep:
        raise ValueError(f"override {item!r} must be 'dotted.key=value'")
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {item!r}: {p!r} is not a mapping")
    node[parts[-1]] = _parse_value(value)


def load_plot_config(
    path: str | os.PathLike[str], overrides: list[str] | None = None
) -> tuple[Any, dict[str, Any]]:
    """The plot object and the ``config`` mapping of a YAML plot configuration.

    Raises:
        FileNotFoundError: no such file.
        ValueError: malformed YAML, no top-level ``plot`` node, or a bad override.
    """
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: malformed YAML ({exc})") from None
    if not isinstance(data, dict) or "plot" not in data:
        raise ValueError(f"{p}: a plot configuration needs a top-level 'plot' node")
    for item in overrides or []:
        _override(data, item)
    return _build(data["plot"]), dict(data.get("config") or {})


def render_from_config(
    session: Any,
    config_path: str | os.PathLike[str],
    overrides: list[str] | None = None,
    theme: Theme | None = None,
    theme_path: str | os.PathLike[str] | None = None,
) -> Any:
    """The figure a YAML plot configuration describes."""
    plot, config = load_plot_config(config_path, overrides)
    fig = render(plot, session=session, theme=_theme(theme, theme_path))
    if config:
        fig.update(config)
    return fig


def draw(
    scope: Any,
    *,
    plot: Any = None,
    config_path: str | os.PathLike[str] | None = None,
    overrides: list[str] | None = None,
    theme: Theme | None = None,
    theme_path: str | os.PathLike[str] | None = None,
) -> Any:
    """A plot object's figure, or a YAML configuration's (exactly one of the two).

    Raises:
        ValueError: neither or both of ``plot`` and ``config_path``.
    """
    if (plot is None) == (config_path is None):
        raise ValueError("draw() takes exactly one of plot= and config_path=")
    if plot is not None:
        return render(plot, session=scope, theme=_theme(theme, theme_path))
    return render_from_config(scope, config_path, overrides, theme, theme_path)  # type: ignore[arg-type]


def uses_diffract_api(args: tuple[Any, ...], kwargs: dict[str, Any], ours: set[str]) -> bool:
    """Whether a ``scatter``/``heatmap`` call is Diffract's (keyword plot options) or ours."""
    if args:
        return False
    extra = set(kwargs) - ours
    refs = [v for v in kwargs.values() if isinstance(v, FieldRef)]
    return bool(extra or refs or "z" in kwargs)

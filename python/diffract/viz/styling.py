# mypy: disable-error-code="import-untyped"
"""``diffract.viz.styling``: Diffract's figure themes (layout, fonts, backgrounds, axes, legend,
colour bar, palettes), the three presets and a YAML theme reader.

A figure drawn without a theme keeps our neutral look (transparent backgrounds, grey text:
it reads on light and dark JupyterLab themes); a theme given overrides it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

__all__ = [
    "DARK_THEME",
    "DEFAULT_THEME",
    "MINIMAL_THEME",
    "AxesStyle",
    "BackgroundStyle",
    "ColorbarStyle",
    "LayoutStyle",
    "LegendStyle",
    "PaletteBundle",
    "Theme",
    "TypographyStyle",
    "apply_theme",
    "load_theme",
]

_COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


@dataclass
class LayoutStyle:
    """Figure size and margins."""

    width: int | None = None
    height: int | None = None
    margin: dict[str, int] = field(default_factory=lambda: {"l": 80, "r": 40, "t": 60, "b": 80})


@dataclass
class TypographyStyle:
    """Fonts."""

    font_family: str = "Times New Roman"
    title_font_size: int = 16
    label_font_size: int = 14
    tick_font_size: int = 12


@dataclass
class BackgroundStyle:
    """Plot and paper colours."""

    plot_bgcolor: str = "white"
    paper_bgcolor: str = "white"


@dataclass
class AxesStyle:
    """Grid and axis lines."""

    grid_color: str = "lightgrey"
    line_color: str = "black"
    show_grid: bool = True
    show_line: bool = True
    mirror: bool = True


@dataclass
class LegendStyle:
    """The legend box."""

    bgcolor: str = "rgba(255,255,255,0.8)"
    border_color: str = "lightgrey"
    border_width: int = 1
    font_size: int = 12


@dataclass
class ColorbarStyle:
    """Where colour bars go."""

    orientation: str = "h"
    x: float = 0.5
    y: float = -0.15
    xanchor: str = "center"
    yanchor: str = "top"
    thickness: int = 15
    len: float = 0.5


@dataclass
class PaletteBundle:
    """Discrete colours, marker symbols and line dashes, cycled over groups."""

    color: list[str] = field(default_factory=lambda: list(_COLORS))
    symbols: list[str] = field(
        default_factory=lambda: ["circle", "square", "diamond", "cross", "x", "triangle-up"]
    )
    dashes: list[str] = field(default_factory=lambda: ["solid", "dash", "dot", "dashdot"])


@dataclass
class Theme:
    """A complete figure style."""

    layout: LayoutStyle = field(default_factory=LayoutStyle)
    typography: TypographyStyle = field(default_factory=TypographyStyle)
    background: BackgroundStyle = field(default_factory=BackgroundStyle)
    axes: AxesStyle = field(default_factory=AxesStyle)
    legend: LegendStyle = field(default_factory=LegendStyle)
    colorbar: ColorbarStyle = field(default_factory=ColorbarStyle)
    palettes: PaletteBundle = field(default_factory=PaletteBundle)


DEFAULT_THEME = Theme()
DARK_THEME = Theme(
    typography=TypographyStyle(font_family="Arial"),
    background=BackgroundStyle(plot_bgcolor="#1e1e1e", paper_bgcolor="#1e1e1e"),
    axes=AxesStyle(grid_color="#444444", line_color="#cccccc"),
    legend=LegendStyle(bgcolor="rgba(30,30,30,0.8)", border_color="#444444"),
)
MINIMAL_THEME = Theme(
    typography=TypographyStyle(font_family="Arial"),
    axes=AxesStyle(show_grid=False, mirror=False),
    legend=LegendStyle(border_width=0),
)


def apply_theme(fig: Any, theme: Theme | None) -> Any:
    """Style ``fig`` with ``theme`` (None: our neutral look) and return it.

    Args:
        fig: a ``plotly.graph_objects.Figure``.
        theme: the theme.

    Returns:
        The same figure.
    """
    if theme is None:
        fig.update_layout(
            paper_bgcolor="rgba(0,0,0,0)",
            plot_bgcolor="rgba(0,0,0,0)",
            font={"color": "#7f7f7f", "size": 12},
        )
        grid = {"gridcolor": "rgba(128,128,128,0.25)", "linecolor": "rgba(128,128,128,0.6)"}
        fig.update_xaxes(**grid)
        fig.update_yaxes(**grid)
        return fig
    t, a = theme.typography, theme.axes
    fig.update_layout(
        width=theme.layout.width,
        height=theme.layout.height,
        margin=theme.layout.margin,
        font={"family": t.font_family, "size": t.label_font_size},
        title_font_size=t.title_font_size,
        plot_bgcolor=theme.background.plot_bgcolor,
        paper_bgcolor=theme.background.paper_bgcolor,
        legend={
            "bgcolor": theme.legend.bgcolor,
            "bordercolor": theme.legend.border_color,
            "borderwidth": theme.legend.border_width,
            "font": {"size": theme.legend.font_size},
        },
    )
    axes = {
        "showgrid": a.show_grid,
        "gridcolor": a.grid_color,
        "showline": a.show_line,
        "linecolor": a.line_color,
        "mirror": a.mirror,
        "tickfont": {"size": t.tick_font_size},
    }
    fig.update_xaxes(**axes)
    fig.update_yaxes(**axes)
    return fig


_FLAT = {
    "width": ("layout", "width"),
    "height": ("layout", "height"),
    "margin": ("layout", "margin"),
    "font_family": ("typography", "font_family"),
    "title_font_size": ("typography", "title_font_size"),
    "label_font_size": ("typography", "label_font_size"),
    "tick_font_size": ("typography", "tick_font_size"),
    "background_color": ("background", "plot_bgcolor"),
    "paper_bgcolor": ("background", "paper_bgcolor"),
    "grid_color": ("axes", "grid_color"),
    "border_color": ("axes", "line_color"),
    "show_borders": ("axes", "show_line"),
    "mirror_axes": ("axes", "mirror"),
    "legend_bgcolor": ("legend", "bgcolor"),
    "legend_border_color": ("legend", "border_color"),
    "legend_border_width": ("legend", "border_width"),
    "legend_font_size": ("legend", "font_size"),
    "discrete_colormap": ("palettes", "color"),
    "marker_symbols": ("palettes", "symbols"),
    "line_dashes": ("palettes", "dashes"),
}


def theme_from_mapping(data: dict[str, Any], where: str = "theme") -> Theme:
    """A :class:`Theme` from a structured or flat mapping (see :func:`load_theme`).

    Raises:
        ValueError: an unknown key, or ``show_x_grid`` and ``show_y_grid`` that disagree.
    """
    theme = Theme()
    groups = {f.name for f in fields(Theme)}
    if set(data) <= groups:
        for g, values in data.items():
            setattr(theme, g, replace(getattr(theme, g), **(values or {})))
        return theme
    flat = dict(data)
    gx, gy = flat.pop("show_x_grid", None), flat.pop("show_y_grid", None)
    if gx is not None or gy is not None:
        if gx is not None and gy is not None and gx != gy:
            raise ValueError(f"{where}: show_x_grid and show_y_grid must agree")
        theme.axes.show_grid = bool(gx if gx is not None else gy)
    for k, v in flat.items():
        if k.startswith("colorbar_") and hasattr(theme.colorbar, k[9:]):
            setattr(theme.colorbar, k[9:], v)
            continue
        if k not in _FLAT:
            raise ValueError(f"{where}: unknown theme key {k!r}")
        g, attr = _FLAT[k]
        setattr(getattr(theme, g), attr, v)
    return theme


def load_theme(path: str | os.PathLike[str]) -> Theme:
    """A theme from a YAML file: structured (``layout:``, ``typography:``...) or flat keys.

    Args:
        path: the YAML file.

    Returns:
        The theme.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a malformed file or an unknown key.
    """
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: malformed YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: a theme is a mapping")
    return theme_from_mapping(data, str(p))

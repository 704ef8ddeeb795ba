# mypy: disable-error-code="import-untyped"
"""``diffract.viz.plots.base``: what every Diffract plot class shares, and ``UpdateFigure``.

A plot is a keyword-only object holding field references (:class:`FieldRef`) and styling
options; ``render(session, theme=None)`` reads the scope's entries and returns a Plotly
figure. Labels (categories, group names, titles) are HTML-escaped, as in our own figures.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from diffract.viz.data import DataProvider, Entry, FieldRef, apply_filter, get_field_value
from diffract.viz.styling import Theme, apply_theme

_AXIS_COMMON = (
    "title",
    "showticklabels",
    "tickangle",
    "tickfont_size",
    "tickfont_family",
    "tickfont_color",
    "showgrid",
    "gridcolor",
    "showline",
    "linecolor",
)
_AXIS_NUMERIC = (
    "range",
    "dtick",
    "tick0",
    "tickformat",
    "zeroline",
    "zerolinecolor",
    "tickmode",
    "tickvals",
    "ticktext",
)
_AXIS_CATEGORICAL = ("categoryorder", "categoryarray")
_COLORAXIS = (
    "coloraxis_id",
    "colorscale",
    "showscale",
    "cmin",
    "cmax",
    "colorbar_title",
    "coloraxis_override",
)
_MARKER = ("size", "size_range", "opacity", "opacity_range", "color", "symbol")
_LINE = ("width", "width_range", "color", "dash", "shape", "smoothing")
_JITTER = ("enabled", "width", "offset", "seed", "density_scale", "color", "colorscale")

#: every styling option a plot accepts, by name
STYLE_OPTIONS = frozenset(
    [f"{a}_{k}" for a in ("x", "y") for k in _AXIS_COMMON + _AXIS_NUMERIC + _AXIS_CATEGORICAL]
    + [f"{p}_{k}" for p in ("marker", "line", "heatmap", "jitter") for k in _COLORAXIS]
    + [f"marker_{k}" for k in _MARKER]
    + [f"line_{k}" for k in _LINE]
    + [f"jitter_{k}" for k in _JITTER]
    + [f"{a}_rescale_{k}" for a in ("x", "y", "z") for k in ("range", "traces_separately")]
)
#: options holding a field reference (a string there names a field or metadata key)
REF_OPTIONS = frozenset(
    {"marker_color", "marker_symbol", "marker_size", "line_color", "line_dash", "jitter_color"}
)
_DEFAULTS = {
    "marker_size": 6,
    "marker_opacity": 0.7,
    "line_width": 2,
    "jitter_width": 0.12,
    "jitter_offset": -0.35,
    "jitter_seed": 42,
    "jitter_colorscale": "Viridis",
    "marker_colorscale": "Viridis",
}


def label(v: Any) -> str:
    """A value as an escaped Plotly label."""
    if isinstance(v, float):
        v = f"{v:.5g}"
    return html.escape(str(v), quote=False)


def is_plotly_literal(name: str, value: str) -> bool:
    """Whether ``value`` is a literal colour, symbol or dash rather than a field name."""
    if name.endswith("dash"):
        return value in ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")
    if name.endswith("symbol"):
        return value in (
            "circle",
            "square",
            "diamond",
            "cross",
            "x",
            "triangle-up",
            "triangle-down",
            "star",
            "hexagon",
            "pentagon",
        )
    if value.startswith(("#", "rgb", "hsl")):
        return True
    return value.lower() in _CSS_COLORS


_CSS_COLORS = frozenset(
    [
        "black",
        "white",
        "red",
        "green",
        "blue",
        "yellow",
        "orange",
        "purple",
        "pink",
        "brown",
        "grey",
        "gray",
        "cyan",
        "magenta",
        "lightgrey",
        "lightgray",
        "darkgrey",
        "darkgray",
        "navy",
        "teal",
        "olive",
        "maroon",
        "lime",
        "aqua",
        "silver",
        "gold",
        "indigo",
        "violet",
        "crimson",
        "coral",
        "salmon",
        "tomato",
        "steelblue",
        "royalblue",
        "skyblue",
    ]
)


class PlotBase:
    """Keyword-only plot options, checked by name."""

    #: option name -> default (required options have none)
    FIELDS: ClassVar[dict[str, Any]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    #: options whose strings become :class:`FieldRef`
    REFS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **kwargs: Any) -> None:
        allowed = set(self.FIELDS) | set(self.REQUIRED) | {"title", "value_filter"} | STYLE_OPTIONS
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown option(s) {unknown}")
        missing = [k for k in self.REQUIRED if kwargs.get(k) is None]
        if missing:
            raise TypeError(f"{type(self).__name__} needs {missing}")
        self.title = kwargs.pop("title", None)
        self.value_filter = kwargs.pop("value_filter", None)
        for k, v in {**_DEFAULTS, **self.FIELDS}.items():
            setattr(self, k, v)
        for k, v in kwargs.items():
            setattr(self, k, self._coerce(k, v))
        self._given = set(kwargs)

    def __getattr__(self, name: str) -> Any:
        # options are set by name in __init__ (FIELDS and the style options): this tells a
        # type checker so; a name that is no option still raises as without it
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _coerce(self, name: str, value: Any) -> Any:
        if isinstance(value, str) and (name in self.REFS or name in self.REQUIRED):
            return FieldRef(value)
        if isinstance(value, str) and name in REF_OPTIONS and not is_plotly_literal(name, value):
            return FieldRef(value)
        return value

    def replace(self, **changes: Any) -> PlotBase:
        """A copy with some options changed."""
        current = {k: getattr(self, k) for k in self._given | set(self.REQUIRED)}
        current.update(title=self.title, value_filter=self.value_filter)
        current.update(changes)
        return type(self)(**{k: v for k, v in current.items() if v is not None})

    def refs(self) -> list[str]:
        """The names this plot reads (fields and metadata keys)."""
        out = []
        for k in [*self.REQUIRED, *self.REFS, *REF_OPTIONS]:
            v = getattr(self, k, None)
            if isinstance(v, FieldRef):
                out.append(v.field)
            elif isinstance(v, (list, tuple)):
                out += [x.field if isinstance(x, FieldRef) else str(x) for x in v]
        out += list(self.value_filter or {})
        return list(dict.fromkeys(out))

    def entries(self, session: Any) -> list[Entry]:
        """The scope's entries for this plot, filtered by ``value_filter``."""
        return apply_filter(DataProvider(session).entries(self.refs()), self.value_filter)

    def figure(self, session: Any) -> Any:  # pragma: no cover - every plot defines it
        raise NotImplementedError

    def render(self, session: Any, theme: Theme | None = None) -> Any:
        """The Plotly figure of this plot on ``session`` (a session or scope).

        Args:
            session: what to read.
            theme: a :class:`Theme`; None keeps our neutral, theme-aware look.

        Returns:
            A ``plotly.graph_objects.Figure``.
        """
        fig = self.figure(session)
        apply_theme(fig, theme)
        if self.title:
            fig.update_layout(title={"text": label(self.title)})
        self._style_axes(fig)
        return fig

    def _style_axes(self, fig: Any) -> None:
        for axis in ("x", "y"):
            props: dict[str, Any] = {}
            for k in _AXIS_COMMON + _AXIS_NUMERIC + _AXIS_CATEGORICAL:
                v = getattr(self, f"{axis}_{k}", None)
                if v is None:
                    continue
                if k == "title":
                    props["title"] = {"text": label(v)}
                elif k.startswith("tickfont_"):
                    props.setdefault("tickfont", {})[k[9:]] = v
                else:
                    props[k] = v
            if "title" not in props:
                ref = getattr(self, axis, None)
                if isinstance(ref, FieldRef):
                    props["title"] = {"text": label(ref.field)}
            (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**props)

    def value(self, e: Entry, name: str) -> Any:
        """An entry's value of an option holding a reference (or the option's constant)."""
        ref = getattr(self, name, None)
        if isinstance(ref, FieldRef):
            return get_field_value(e, ref.field)
        return ref


def numbers(v: Any) -> list[float]:
    """An entry's value as numbers: a scalar as one, an array flattened, else none."""
    if isinstance(v, np.ndarray):
        return [float(x) for x in v.ravel() if np.isfinite(x)]
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        f = float(v)
        return [f] if math.isfinite(f) else []
    return []


def categories(ref: Any, values: Iterable[Any]) -> list[Any]:
    """The distinct category values in the ref's ordering."""
    ordering = getattr(ref, "ordering", None)
    return ordering.apply(values) if ordering is not None else list(dict.fromkeys(values))


def marker_props(plot: PlotBase, entries: list[Entry]) -> dict[str, Any]:
    """Plotly marker properties: size, opacity, colour (constant or by a reference)."""
    props: dict[str, Any] = {"size": plot.marker_size, "opacity": plot.marker_opacity}
    color = getattr(plot, "marker_color", None)
    if isinstance(color, FieldRef):
        vals = [get_field_value(e, color.field) for e in entries]
        if all(isinstance(v, (int, float)) for v in vals if v is not None):
            vals = [math.nan if v is None else v for v in vals]
            props.update(color=vals, colorscale=plot.marker_colorscale, showscale=True)
        else:
            cats = list(dict.fromkeys(vals))
            palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
            props["color"] = [palette[cats.index(v) % len(palette)] for v in vals]
    elif color is not None:
        props["color"] = color
    symbol = getattr(plot, "marker_symbol", None)
    if isinstance(symbol, str):
        props["symbol"] = symbol
    return props


class UpdateFigure(PlotBase):
    """Another plot, then Plotly updates: ``config``, ``update``, ``layout``, ``traces``,
    ``xaxes``, ``yaxes`` (dicts applied after it renders)."""

    def __init__(
        self,
        *,
        plot: Any,
        config: dict[str, Any] | None = None,
        update: dict[str, Any] | None = None,
        layout: dict[str, Any] | None = None,
        traces: dict[str, Any] | None = None,
        xaxes: dict[str, Any] | None = None,
        yaxes: dict[str, Any] | None = None,
    ) -> None:
        self.plot, self.config, self.update = plot, config, update
        self.layout, self.traces, self.xaxes, self.yaxes = layout, traces, xaxes, yaxes
        self.title, self.value_filter, self._given = None, None, set()

    def refs(self) -> list[str]:
        """The names the wrapped plot reads."""
        return list(self.plot.refs())

    def render(self, session: Any, theme: Theme | None = None) -> Any:
        """The wrapped plot's figure with the updates applied."""
        fig = self.plot.render(session, theme=theme)
        for upd in (self.config, self.update):
            if upd:
                fig.update(upd)
        if self.layout:
            fig.update_layout(self.layout)
        if self.traces:
            fig.update_traces(**self.traces)
        if self.xaxes:
            fig.update_xaxes(**self.xaxes)
        if self.yaxes:
            fig.update_yaxes(**self.yaxes)
        return fig

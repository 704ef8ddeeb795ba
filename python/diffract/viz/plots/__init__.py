# mypy: disable-error-code="import-untyped"
"""``diffract.viz.plots``: Diffract's plot classes (box, violin, scatter, heatmap, sparkline,
cluster bars, grids), drawn from a scope's stored fields and parameter metadata."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from diffract.viz.data import Entry, FieldRef, get_field_value
from diffract.viz.plots.base import (
    PlotBase,
    UpdateFigure,
    categories,
    label,
    marker_props,
    numbers,
)
from diffract.viz.plots.subplots import GridPlot, SubplotSpec

__all__ = [
    "BoxPlot",
    "ClusterBarChart",
    "GridPlot",
    "HeatmapPlot",
    "ScatterPlot",
    "Sparkline",
    "SparklinePlot",
    "SubplotSpec",
    "UpdateFigure",
    "ViolinPlot",
]


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def _xy(plot: PlotBase, entries: list[Entry]) -> tuple[list[Any], list[float], list[Entry]]:
    """x category and y numbers per sample (arrays flattened into several samples)."""
    xs, ys, owners = [], [], []
    for e in entries:
        x = plot.value(e, "x")
        for y in numbers(plot.value(e, "y")):
            xs.append(x)
            ys.append(y)
            owners.append(e)
    return xs, ys, owners


class BoxPlot(PlotBase):
    """Distribution of ``y`` per category of ``x``."""

    REQUIRED = ("y", "x")
    FIELDS: ClassVar[dict[str, Any]] = {"box_width": 0.5, "boxpoints": "outliers"}

    def figure(self, session: Any) -> Any:
        """The figure (see :meth:`PlotBase.render`)."""
        xs, ys, owners = _xy(self, self.entries(session))
        order = categories(self.x, xs)
        kind = getattr(_go(), "Violin" if isinstance(self, ViolinPlot) else "Box")
        args = self._trace_args(owners)
        points = args.pop("points_marker", None)
        fig = _go().Figure()
        shown = [label(x) for x in xs]
        fig.add_trace(kind(x=shown, y=ys, name=label(self.y.field), **args))
        if points is not None:  # points coloured per entry: a scatter over the boxes
            fig.add_trace(
                _go().Scatter(
                    x=shown,
                    y=ys,
                    mode="markers",
                    marker=points,
                    showlegend=False,
                    name=label(self.y.field),
                )
            )
        fig.update_xaxes(
            type="category", categoryorder="array", categoryarray=[label(c) for c in order]
        )
        return fig

    def _trace_args(self, owners: list[Entry]) -> dict[str, Any]:
        args: dict[str, Any] = {"width": self.box_width, "boxpoints": self.boxpoints}
        if getattr(self, "jitter_enabled", False):
            args.update(
                boxpoints="all", jitter=min(1.0, 2 * self.jitter_width), pointpos=self.jitter_offset
            )
        color = getattr(self, "jitter_color", None) or getattr(self, "marker_color", None)
        if isinstance(color, FieldRef):
            vals = [get_field_value(e, color.field) for e in owners]
            if all(isinstance(v, (int, float)) for v in vals if v is not None):
                vals = [math.nan if v is None else v for v in vals]
                marker = {
                    "color": vals,
                    "colorscale": self.jitter_colorscale,
                    "showscale": True,
                    "colorbar": {"title": {"text": label(color.field)}},
                }
            else:
                marker = marker_props(self.replace(marker_color=color), owners)
            args.update(points_marker=marker, boxpoints=False)
        elif isinstance(color, str):
            args["marker"] = {"color": color}
        return args


class ViolinPlot(BoxPlot):
    """Density of ``y`` per category of ``x``; array fields give one sample per element."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "points": "outliers",
        "box_visible": True,
        "meanline_visible": True,
        "side": "positive",
        "bandwidth": None,
    }

    def _trace_args(self, owners: list[Entry]) -> dict[str, Any]:
        args: dict[str, Any] = {
            "points": "all" if getattr(self, "jitter_enabled", False) else self.points,
            "box_visible": self.box_visible,
            "meanline_visible": self.meanline_visible,
            "side": self.side,
        }
        if self.bandwidth is not None:
            args["bandwidth"] = self.bandwidth
        return args


def _groups(plot: PlotBase, entries: list[Entry]) -> dict[Any, list[Entry]]:
    group = getattr(plot, "group_by", None)
    out: dict[Any, list[Entry]] = {}
    for e in entries:
        key = get_field_value(e, group.field) if isinstance(group, FieldRef) else None
        out.setdefault(key, []).append(e)
    return out


class ScatterPlot(PlotBase):
    """``y`` against ``x``, one trace per ``group_by`` value."""

    REQUIRED = ("x", "y")
    FIELDS: ClassVar[dict[str, Any]] = {"group_by": None}
    REFS = frozenset({"group_by"})

    def figure(self, session: Any) -> Any:
        """The figure (see :meth:`PlotBase.render`)."""
        fig = _go().Figure()
        for key, group in _groups(self, self.entries(session)).items():
            found = [(numbers(self.value(e, "x")), numbers(self.value(e, "y")), e) for e in group]
            pts = [(x[0], y[0], e) for x, y, e in found if x and y]
            fig.add_trace(
                _go().Scatter(
                    x=[p[0] for p in pts],
                    y=[p[1] for p in pts],
                    mode="markers",
                    name=label(key) if key is not None else label(self.y.field),
                    marker=marker_props(self, [p[2] for p in pts]),
                    text=[
                        label(f"{p[2]['metadata']['model_id']}: {p[2]['metadata']['name']}")
                        for p in pts
                    ],
                )
            )
        return fig


class HeatmapPlot(PlotBase):
    """``z`` over the categories of ``x`` and ``y`` (the mean where several entries meet)."""

    REQUIRED = ("z", "x", "y")
    FIELDS: ClassVar[dict[str, Any]] = {
        "fill_value": math.nan,
        "show_text": False,
        "text_format": ".2f",
        "text_font_size": 10,
        "reverse_y": True,
        "heatmap_colorscale": "Viridis",
    }

    def figure(self, session: Any) -> Any:
        """The figure (see :meth:`PlotBase.render`)."""
        cells: dict[tuple[Any, Any], list[float]] = {}
        for e in self.entries(session):
            for v in numbers(self.value(e, "z")):
                cells.setdefault((self.value(e, "x"), self.value(e, "y")), []).append(v)
        xs = categories(self.x, [k[0] for k in cells])
        ys = categories(self.y, [k[1] for k in cells])
        z = [
            [float(np.mean(cells[(x, y)])) if (x, y) in cells else self.fill_value for x in xs]
            for y in ys
        ]
        trace: dict[str, Any] = {
            "z": z,
            "x": [label(x) for x in xs],
            "y": [label(y) for y in ys],
            "colorscale": self.heatmap_colorscale,
        }
        if self.show_text:
            trace.update(
                texttemplate=f"%{{z:{self.text_format}}}", textfont={"size": self.text_font_size}
            )
        fig = _go().Figure(_go().Heatmap(**trace))
        fig.update_xaxes(type="category")
        fig.update_yaxes(type="category", autorange="reversed" if self.reverse_y else True)
        return fig


class SparklinePlot(PlotBase):
    """``y`` along ``x`` per ``group_by`` value; several values at one x give a mean line and
    a min-max band."""

    REQUIRED = ("y", "x")
    FIELDS: ClassVar[dict[str, Any]] = {
        "group_by": None,
        "mode": "lines",
        "show_bands": True,
        "band_opacity": 0.3,
        "band_line_width": 0.5,
        "x_axis_mode": None,
    }
    REFS = frozenset({"group_by"})

    def figure(self, session: Any) -> Any:
        """The figure (see :meth:`PlotBase.render`)."""
        entries = self.entries(session)
        xs_all = [self.value(e, "x") for e in entries]
        mode = self.x_axis_mode or (
            "numeric"
            if all(isinstance(x, (int, float)) for x in xs_all if x is not None)
            else "categorical"
        )
        fig = _go().Figure()
        for key, group in _groups(self, entries).items():
            by_x: dict[Any, list[float]] = {}
            for e in group:
                by_x.setdefault(self.value(e, "x"), []).extend(numbers(self.value(e, "y")))
            xs = (
                categories(self.x, by_x)
                if mode == "categorical"
                else sorted((x for x in by_x if x is not None), key=float)
            )
            xs = [x for x in xs if by_x.get(x)]
            shown = [label(x) for x in xs] if mode == "categorical" else xs
            name = label(key) if key is not None else label(self.y.field)
            ys = [float(np.mean(by_x[x])) for x in xs]
            if self.show_bands and any(len(by_x[x]) > 1 for x in xs):
                lo = [min(by_x[x]) for x in xs]
                hi = [max(by_x[x]) for x in xs]
                fig.add_trace(
                    _go().Scatter(
                        x=shown + shown[::-1],
                        y=hi + lo[::-1],
                        fill="toself",
                        opacity=self.band_opacity,
                        showlegend=False,
                        line={"width": self.band_line_width},
                        name=name,
                    )
                )
            fig.add_trace(
                _go().Scatter(
                    x=shown, y=ys, mode=self.mode, name=name, line={"width": self.line_width}
                )
            )
        fig.update_xaxes(type="category" if mode == "categorical" else "linear")
        return fig


Sparkline = SparklinePlot


class ClusterBarChart(PlotBase):
    """Histogram lines of one field's values per group (e.g. per model)."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "group_by": None,
        "aggregate_by": None,
        "parameter_uids": None,
        "parameter_names": None,
        "parameter_types": None,
        "model_ids": None,
        "num_bins": 20,
        "binning": "exponential",
        "left_bound": None,
        "right_bound": None,
        "draw_statistics": False,
        "mode": "lines+markers",
        "color_by": None,
        "dash_by": None,
        "marker_by": None,
        "legend_format": None,
        "legend_keys": None,
    }
    REQUIRED = ("field",)
    field: str

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("group_by", ["model_id"])
        super().__init__(**kwargs)
        if isinstance(self.field, FieldRef):
            self.field = self.field.field

    def refs(self) -> list[str]:
        """The field and the grouping keys."""
        return [self.field, *(self.group_by or [])]

    def figure(self, session: Any) -> Any:
        """The figure (see :meth:`PlotBase.render`)."""
        scope = session.filter(
            param_ids=self.parameter_uids,
            param_names=self.parameter_names,
            param_types=self.parameter_types,
            model_ids=self.model_ids,
        )
        entries = self.entries(scope)
        values = [v for e in entries for v in numbers(get_field_value(e, self.field))]
        fig = _go().Figure()
        if not values:
            return fig
        lo = self.left_bound if self.left_bound is not None else min(values)
        hi = self.right_bound if self.right_bound is not None else max(values)
        if self.binning == "exponential" and lo > 0:
            edges = np.geomspace(lo, hi if hi > lo else lo * 10, self.num_bins + 1)
        else:
            edges = np.linspace(lo, hi if hi > lo else lo + 1, self.num_bins + 1)
        centers = (edges[:-1] + edges[1:]) / 2
        groups: dict[tuple[Any, ...], list[float]] = {}
        for e in entries:
            key = tuple(get_field_value(e, g) for g in self.group_by or [])
            groups.setdefault(key, []).extend(numbers(get_field_value(e, self.field)))
        for key, vals in groups.items():
            counts, _ = np.histogram(vals, bins=edges)
            fig.add_trace(
                _go().Scatter(
                    x=centers.tolist(),
                    y=counts.tolist(),
                    mode=self.mode,
                    name=label(", ".join(str(k) for k in key) or self.field),
                )
            )
        return fig

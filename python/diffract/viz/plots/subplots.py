# mypy: disable-error-code="import-untyped"
"""``diffract.viz.plots.subplots``: grids of plots, by hand (``GridPlot`` of ``SubplotSpec``)
or bound to values along rows and columns (``build_bound_grid``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diffract.viz.data import FieldRef
from diffract.viz.plots.base import label
from diffract.viz.styling import Theme, apply_theme

__all__ = [
    "CellSelector",
    "GridAxisBind",
    "GridCellRule",
    "GridPlot",
    "SubplotSpec",
    "build_bound_grid",
]

_FILTER_KEYS = ("param_ids", "param_names", "param_types", "model_ids")


@dataclass(kw_only=True)
class SubplotSpec:
    """One cell of a grid: its place (1-based), title, plot and the filters it draws under."""

    row: int
    col: int
    plot: Any
    title: str | None = None
    session_filter: dict[str, Any] | None = None
    value_filter: dict[str, Any] | None = None
    filter: dict[str, Any] | None = None

    def scope(self, session: Any) -> Any:
        """``session`` narrowed by ``session_filter`` (keys of ``session.filter``)."""
        f = dict(self.filter or {}, **(self.session_filter or {}))
        bad = sorted(set(f) - set(_FILTER_KEYS))
        if bad:
            raise ValueError(f"session_filter keys {bad} are not among {list(_FILTER_KEYS)}")
        return session.filter(**f) if f else session


@dataclass(kw_only=True)
class GridPlot:
    """Subplots on one figure (``rows``, ``cols`` and titles come from the specs)."""

    subplots: list[SubplotSpec]
    make_subplots_kwargs: dict[str, Any] | None = None
    title: str | None = None

    def refs(self) -> list[str]:
        """The names the cells read."""
        return [r for s in self.subplots for r in s.plot.refs()]

    def render(self, session: Any, theme: Theme | None = None) -> Any:
        """All cells on one figure.

        Args:
            session: what to read (each cell narrows it by its filters).
            theme: a :class:`Theme`, or None for our neutral look.

        Returns:
            A ``plotly.graph_objects.Figure``.
        """
        from plotly.subplots import make_subplots

        if not self.subplots:
            raise ValueError("a grid needs at least one SubplotSpec")
        rows = max(s.row for s in self.subplots)
        cols = max(s.col for s in self.subplots)
        titles = [""] * (rows * cols)
        for s in self.subplots:
            titles[(s.row - 1) * cols + (s.col - 1)] = label(s.title or "")
        kwargs = {
            k: v
            for k, v in (self.make_subplots_kwargs or {}).items()
            if k not in ("rows", "cols", "subplot_titles")
        }
        fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, **kwargs)
        for s in self.subplots:
            plot = s.plot
            if s.value_filter:
                merged = dict(getattr(plot, "value_filter", None) or {}, **s.value_filter)
                plot = plot.replace(value_filter=merged)
            child = plot.render(s.scope(session), theme=None)
            for trace in child.data:
                fig.add_trace(trace, row=s.row, col=s.col)
        apply_theme(fig, theme)
        if self.title:
            fig.update_layout(title={"text": label(self.title)})
        return fig


@dataclass
class CellSelector:
    """Which cells a rule applies to: all, first/last row or column, or one place."""

    where: str = "all"
    row: int | None = None
    col: int | None = None

    def matches(self, r: int, c: int, rows: int, cols: int) -> bool:
        """Whether cell (r, c) (1-based) of a rows x cols grid is selected."""
        where = {
            "all": True,
            "first_row": r == 1,
            "last_row": r == rows,
            "first_col": c == 1,
            "last_col": c == cols,
        }
        if self.where not in where:
            raise ValueError(f"CellSelector.where must be one of {list(where)}, got {self.where!r}")
        return where[self.where] and self.row in (None, r) and self.col in (None, c)


@dataclass
class GridCellRule:
    """Changes for the selected cells: another plot, plot options, filters."""

    selector: CellSelector = field(default_factory=CellSelector)
    plot: Any = None
    plot_format: dict[str, Any] | None = None
    session_filter: dict[str, Any] | None = None
    value_filter: dict[str, Any] | None = None


@dataclass
class GridAxisBind:
    """Values bound along rows or columns: a plot option, a session filter or a value filter."""

    target: str
    key: str
    values: list[Any]
    labels: list[str] | None = None
    op: str | None = None

    def __post_init__(self) -> None:
        if self.target not in ("plot", "session_filter", "value_filter"):
            raise ValueError(
                f"GridAxisBind.target must be plot, session_filter or value_filter, got {self.target!r}"
            )

    def label_of(self, i: int) -> str:
        """The label of the i-th value."""
        return str(self.labels[i]) if self.labels else str(self.values[i])


def _bind(b: GridAxisBind, i: int, plot: Any, sf: dict[str, Any], vf: dict[str, Any]) -> Any:
    v = b.values[i]
    if b.target == "plot":
        ref = getattr(plot, b.key, None)
        return plot.replace(
            **{b.key: FieldRef(v) if isinstance(ref, FieldRef) and isinstance(v, str) else v}
        )
    if b.target == "session_filter":
        sf[b.key] = v if isinstance(v, list) else [v]
    else:
        vf[b.key] = (b.op or "==", v)
    return plot


def build_bound_grid(
    plot_template: Any,
    row: GridAxisBind | None = None,
    col: GridAxisBind | None = None,
    cell_rules: list[GridCellRule] | None = None,
    title_template: str | None = None,
    make_subplots_kwargs: dict[str, Any] | None = None,
    base_session_filter: dict[str, Any] | None = None,
    base_value_filter: dict[str, Any] | None = None,
    theme: Theme | None = None,
) -> GridPlot:
    """A :class:`GridPlot` whose cells are ``plot_template`` with the bound values.

    Raises:
        ValueError: neither ``row`` nor ``col`` is given.
    """
    if row is None and col is None:
        raise ValueError("build_bound_grid() needs a row or a col binding")
    nr, nc = len(row.values) if row else 1, len(col.values) if col else 1
    if title_template is None:
        title_template = (
            "{row_label} | {col_label}" if row and col else "{row_label}" if row else "{col_label}"
        )
    specs = []
    for r in range(nr):
        for c in range(nc):
            sf, vf = dict(base_session_filter or {}), dict(base_value_filter or {})
            plot = plot_template
            for b, i in ((row, r), (col, c)):
                if b is not None:
                    plot = _bind(b, i, plot, sf, vf)
            for rule in cell_rules or []:
                if rule.selector.matches(r + 1, c + 1, nr, nc):
                    plot = rule.plot or plot
                    if rule.plot_format:
                        plot = plot.replace(**rule.plot_format)
                    sf.update(rule.session_filter or {})
                    vf.update(rule.value_filter or {})
            title = title_template.format(
                row_label=row.label_of(r) if row else "", col_label=col.label_of(c) if col else ""
            )
            specs.append(
                SubplotSpec(
                    row=r + 1,
                    col=c + 1,
                    plot=plot,
                    title=title,
                    session_filter=sf or None,
                    value_filter=vf or None,
                )
            )
    return GridPlot(subplots=specs, make_subplots_kwargs=make_subplots_kwargs)

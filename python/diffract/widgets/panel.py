"""``FieldPanel``: a live Plotly FigureWidget of stored fields (imported by diffract.widgets)."""

from __future__ import annotations

import base64
import contextlib
import html
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from copy import deepcopy
from pathlib import Path
from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets

from diffract import viz
from diffract._core.csv_cells import safe_cell
from diffract.viz import registry
from diffract.widgets import _PANELS, _SNAP_STYLE, _as_scope, _snapshot_bundle


@contextlib.contextmanager
def _without_iri_grammar() -> Iterator[None]:
    """Import plotly's FigureWidget without building rfc3987_syntax's IRI grammar.

    ``plotly.basewidget`` imports nbformat, nbformat imports jsonschema, and jsonschema's format
    checkers import ``rfc3987_syntax`` when it is installed (JupyterLab's dependencies bring
    it), which compiles a Lark grammar at import: 3 to 15 s of a first panel here
    (benchmarks/panel_latency.py), for IRI format checks nothing in a kernel's plotting uses.
    While the FigureWidget is imported the module reads as absent (jsonschema skips the
    ``iri`` / ``iri-reference`` checkers, as without the package); later imports of it work.
    Nothing changes when jsonschema's format checkers are already loaded.
    """
    skip = "jsonschema._format" not in sys.modules and "rfc3987_syntax" not in sys.modules
    if skip:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if skip and sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]


with _without_iri_grammar():
    from plotly.graph_objects import FigureWidget

#: the figure kinds a panel draws (:data:`diffract.viz.registry.KINDS` offered to panels)
KINDS = registry.panel_kinds()
#: the image formats the plot toolbar's camera button downloads (Plotly's own download)
IMAGE_FORMATS = ("png", "svg")
_DATA_KEYS = ("x", "y", "z", "customdata", "name", "meta")
_AXIS_KEY = re.compile(r"^[xy]axis\d*$")
#: seconds after a display at which a panel's views are asked to fit their output
AUTOSIZE_AFTER_S = (0.5, 1.5, 4.0)


class PanelFigure(FigureWidget):
    """A ``FigureWidget`` whose data, layout and Plotly config (``responsive``, the toolbar's
    image format) are in the state its comm opens with.

    Plotly opens the widget's comm first and sends data, layout and config as updates right
    after; a browser model still loading its module can miss those (then a view drew empty
    axes, or a 700 px plot that ignores the window's width and overflows a narrow notebook).
    Set before the comm opens, they are part of what every view first reads.
    """

    def __init__(
        self, data: Any = None, layout: Any = None, *, config: dict[str, Any] | None = None
    ) -> None:
        self._panel_config = dict(config or {})
        plain = go.Figure(data=data, layout=layout)
        self._config = dict(self._panel_config)
        self._widget_data = deepcopy(plain._data)
        self._widget_layout = deepcopy(plain._layout_obj._props)
        super().__init__(data=data, layout=layout)

    @traitlets.validate("_config")
    def _with_panel_config(self, proposal: Any) -> dict[str, Any]:
        return {**(proposal["value"] or {}), **getattr(self, "_panel_config", {})}


def reader_scope(scope: Any) -> Any:
    """A scope over the same data for reading from any thread.

    Persistent stores get their own read-only handle (no lock, no shared state with a writer in
    this kernel); other stores are read through ``scope`` itself.

    Args:
        scope: the scope to read.

    Returns:
        A scope with the same filter chain.
    """
    from diffract.session import Scope, Session

    session = scope.session
    store = session.store
    if getattr(store, "persistent", False) and store.path:
        ro = Session(
            backend=store.backend, path=store.path, readonly=True, registry=session.registry
        )
        return Scope(ro, scope.filter_chain)
    return scope


class FieldPanel(ipw.VBox):
    """A Plotly FigureWidget of stored fields that updates in place as values land.

    Args:
        source: the session or scope whose stored fields are drawn.
        fields: the field (or, for ``kind="scatter"``, the two fields ``(x, y)``); an esd
            panel reads ``esd``.
        kind: ``"line"`` / ``"bar"`` (a field across depth, one trace per model),
            ``"heatmap"`` (layer x model or checkpoint), ``"esd"`` (one slice's spectrum with
            its power-law fit and xmin line; pass ``slice=``), ``"scatter"`` (two fields),
            ``"compare"`` (model ``b`` against ``a`` per slice, matched by name; pass
            ``models=[a, b]`` and ``mode=``), ``"evolution"`` (a tracked run: layer x step
            heatmap and per-layer lines, steps in training order; ``run=``).
        models: the model ids to draw; default: every model of the scope. A compare panel
            takes ``[a, b]`` (default: the scope's two models).
        slice: the uid or name of the slice an esd panel shows.
        model_id: the model of a slice given by name.
        reference: the reference model of cross-model fields (drift from a checkpoint).
        live: refresh when a run of this kernel commits a chunk.
        poll: also re-read the store every ``poll`` seconds (for a writer in another process).
        mode: a compare panel's ``"difference"`` (``b - a``) or ``"ratio"`` (``b / a``).
        run: the tracked run an evolution panel follows (default: the scope's only one).
        image_format: ``"png"`` or ``"svg"``: what the camera button of the plot's toolbar
            downloads (also a toggle in the panel's export bar).
        height: the figure's height in pixels (default 380; 620 for an evolution panel).

    Raises:
        ValueError: an unknown ``kind`` or ``image_format``, or fields that do not fit it;
            a compare panel without two stored models sharing a slice name; an evolution
            panel without ``run=`` in a scope with no or several tracked runs.
        UnknownFieldError: a field no registered kernel produces.
        UnknownModelError: a compare panel's model that is not stored.
    """

    def __init__(
        self,
        source: Any,
        fields: str | Sequence[str] | None = None,
        *,
        kind: str = "line",
        models: Sequence[str] | None = None,
        slice: str | None = None,
        model_id: str | None = None,
        reference: str | None = None,
        live: bool = True,
        poll: float | None = None,
        mode: str = "difference",
        run: str | None = None,
        image_format: str = "png",
        height: int | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {IMAGE_FORMATS}, got {image_format!r}")
        spec_kind = registry.kind(kind)
        fields = [fields] if isinstance(fields, str) else list(fields or [])
        if spec_kind.fields == 2 and len(fields) != 2:
            raise ValueError(f"a {kind} panel needs two fields: fields=('x_field', 'y_field')")
        if spec_kind.slice:
            if not slice:
                raise ValueError(
                    f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} panel needs slice=<uid or "
                    "name> (and model_id= if the name is in several models)"
                )
            fields = fields or list(spec_kind.default_fields)
        elif spec_kind.default_fields and not fields:
            fields = list(spec_kind.default_fields)
        if not spec_kind.slice and spec_kind.fields >= 1 and len(fields) < 1:
            raise ValueError(f"a {kind} panel needs a field, e.g. FieldPanel(session, 'pl_alpha')")
        if spec_kind.fields == 1 and len(fields) > 1:
            raise ValueError(f"a {kind} panel shows one field; make one panel per field")
        scope = _as_scope(source)
        for f in fields:
            scope.session.registry.producer(f)  # unknown field: clear error
        self.kind = kind
        self.fields = tuple(fields)
        self.slice = slice
        self.slice_model = model_id
        #: reference model for cross-model fields (e.g. drift from the first checkpoint)
        self.reference = reference
        self.source = scope
        #: a compare panel's mode; an evolution panel's run (resolved by the kind)
        self.mode = mode
        _, request = registry.check(
            kind,
            self.fields,
            models=models,
            slice=slice,
            model_id=model_id,
            reference=reference,
            mode=mode,
            run=run,
        )
        if spec_kind.prepare is not None:  # a compare's two models, an evolution's run
            request = spec_kind.prepare(scope, request)
        self.request = request
        self.models = list(request.models) if request.models is not None else None
        self.run: str | None = request.run
        self._reader = reader_scope(scope)
        self._lock = threading.Lock()
        self._last: float = 0.0
        self._poll_stop = threading.Event()
        #: how many times the data was updated in place / traces were rebuilt
        self.updates = 0
        self.rebuilds = 0
        self.status = ipw.HTML(layout=ipw.Layout(margin="0 0 0 8px", flex="1 1 auto"))
        self.status.add_class("diffract-panel-status")
        self.height = height or (620 if kind == "evolution" else 380)
        self.image_format = ipw.ToggleButtons(
            options=[("PNG", "png"), ("SVG", "svg")],
            value=image_format,
            description="image",
            tooltips=[
                "the camera button of the plot's toolbar downloads a PNG",
                "the camera button of the plot's toolbar downloads an SVG",
            ],
            style={"button_width": "48px", "description_width": "44px"},
        )
        self.image_format.add_class("diffract-panel-format")
        self.csv_link = ipw.HTML()
        self.csv_link.add_class("diffract-panel-csv")
        export = ipw.HBox(
            [self.image_format, self.csv_link], layout=ipw.Layout(align_items="center")
        )
        export.add_class("diffract-panel-export")
        self.toolbar = ipw.HBox(
            [self.status, export],
            layout=ipw.Layout(width="100%", flex_flow="row wrap", align_items="center"),
        )
        self.spec: dict[str, Any] = {"data": [], "layout": {}}
        # The first data goes into the FigureWidget's constructor, so that it is part of the
        # widget's initial state (sent with the comm's opening): a browser model still loading its
        # module can miss the updates sent right after it (then views drew empty axes: the
        # blank-heatmap race). Later edits also end in sync_figure_state.
        with self._lock:
            self._last = time.monotonic()
            spec = self.build_spec()
            self.figure = self._new_figure(spec)
            self.spec = spec
            self._set_status()
            self._set_csv_link()
        super().__init__(
            children=[self.toolbar, self.figure], layout=ipw.Layout(width="100%", min_width="0")
        )
        self.add_class("diffract-panel")
        self.image_format.observe(self._on_format, names="value")
        if live:
            _PANELS.add(self)
        if poll:
            self.watch(poll)

    # --- data --------------------------------------------------------------------------------
    def build_spec(self) -> dict[str, Any]:
        """The figure description from the store, as :mod:`diffract.viz` builds it.

        The incomplete checkpoints of tracked runs (a step whose analysis has not committed:
        in progress, or cut by a crash) are left out, unless named in ``models=``.

        Returns:
            ``{"data": traces, "layout": layout}`` as plain dicts.
        """
        return registry.KINDS[self.kind].build(self._reader, self.request)

    # --- figure and export -----------------------------------------------------------------------
    def _new_figure(self, spec: dict[str, Any]) -> PanelFigure:
        """A figure widget holding ``spec`` from its construction on (its initial state)."""
        layout = go.Layout({"height": self.height, "autosize": True, **viz.NEUTRAL_LAYOUT})
        _layout_into(layout, spec["layout"])
        fmt = self.image_format.value
        config = {
            "responsive": True,
            "displaylogo": False,
            "toImageButtonOptions": {"format": fmt, "filename": self.file_stem()},
        }
        return PanelFigure(data=spec["data"], layout=layout, config=config)

    def _on_format(self, change: dict[str, Any]) -> None:
        """A new image format: plotly.js reads its config once per view, so the figure widget
        is made again with the new one (same data and layout)."""
        with self._lock:
            old = self.figure
            self.figure = self._new_figure(self.spec)
            self.children = (self.toolbar, self.figure)
            old.close()
        self._resize_views_later()

    def file_stem(self) -> str:
        """The base name of the panel's downloads.

        Returns:
            The field (or slice) and kind, e.g. ``pl_alpha-heatmap``, safe as a file name.
        """
        what = self.slice if registry.KINDS[self.kind].slice else "-".join(self.fields)
        return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{what}-{self.kind}").strip("._") or "panel"

    def table(self) -> list[dict[str, Any]]:
        """The panel's plotted values as rows (what :meth:`to_csv` writes).

        Returns:
            One dict per plotted point or heatmap cell: ``trace``, ``x``, ``y``, ``z`` (a
            heatmap's value; its ``y`` is the row label) and ``detail`` (the point's hover
            fields: model, slice name, ...).
        """
        return viz.table_rows(self.spec)

    def to_csv(self, path: str | Path | None = None) -> str:
        """The panel's plotted values as CSV (see :meth:`table`).

        Args:
            path: a file to write it to as well.

        Returns:
            The CSV text.
        """
        import csv
        import io

        buf = io.StringIO()
        # CRLF rows (RFC 4180): a cell holding a CR or LF is quoted, so it cannot start a row
        writer = csv.DictWriter(buf, fieldnames=viz.TABLE_COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        # a text cell starting like a formula (a model id, a name) is written as text
        writer.writerows({k: safe_cell(v) for k, v in row.items()} for row in self.table())
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text, encoding="utf-8", newline="")
        return text

    def _set_csv_link(self) -> None:
        """The export bar's CSV link: the plotted values as a data: URL download."""
        data = base64.b64encode(self.to_csv().encode()).decode()
        n = len(self.spec["data"]) and self.n_values()
        self.csv_link.value = (
            f"<a class='diffract-panel-csv-link' download='{self.file_stem()}.csv' "
            f"href='data:text/csv;charset=utf-8;base64,{data}' title='the plotted values as CSV "
            f"({n} values)' style='margin:0 8px;color:var(--jp-content-link-color,#1976d2)'>"
            "⤓ CSV</a>"
        )

    def refresh(self) -> bool:
        """Re-read the store and update the figure in place.

        Returns:
            True when something changed.
        """
        with self._lock:
            self._last = time.monotonic()
            spec = self.build_spec()
            changed = spec != self.spec
            if changed:
                self._apply(spec)
                self.spec = spec
                self._set_csv_link()
            self._set_status()
            return changed

    def _apply(self, spec: dict[str, Any]) -> None:
        fig = self.figure
        new = spec["data"]
        same_shape = len(fig.data) == len(new) and all(
            tr.type == d["type"] and tr.name == d.get("name")
            for tr, d in zip(fig.data, new, strict=True)
        )
        with fig.batch_update():
            if same_shape:
                for tr, d in zip(fig.data, new, strict=True):
                    for key in _DATA_KEYS:
                        if key in d and key != "name":
                            tr[key] = d[key]
                self.updates += 1
            else:
                fig.data = ()
                if new:
                    fig.add_traces(new)
                self.rebuilds += 1
            _layout_into(fig.layout, spec["layout"])
        sync_figure_state(fig)

    def n_values(self) -> int:
        """How many values the panel shows now: what a test or a caller checks after an update.

        Returns:
            Heatmap cells with a value plus the points of non-line traces (an evolution
            panel's lines repeat its heatmap's cells and are not counted twice).
        """
        n = 0
        for d in self.spec["data"]:
            if d.get("xaxis") == "x2":
                continue  # an evolution panel's lines: the heatmap's values drawn again
            if d["type"] == "heatmap":
                n += sum(v is not None for row in d["z"] for v in row)
            elif d.get("mode") != "lines":
                n += len(d.get("y", []))
        return n

    def _set_status(self) -> None:
        first = self.fields[0] if self.fields else ""  # a diff panel reads no field
        what = {
            "esd": self.slice,
            "scatter": " vs ".join(reversed(self.fields)),
            "compare": f"{first}: "
            + (" / " if self.mode == "ratio" else " - ").join(reversed(self.models or [])),
            "evolution": f"{first} · run {self.run}",
            "diff": "fine-tune diff: " + " vs ".join(reversed(self.models or [])),
        }.get(self.kind, first)
        n = self.n_values()
        traces = len(self.spec["data"])
        if n:
            text = f"<b>{html.escape(what)}</b> · {n} values · {traces} trace{'s' * (traces != 1)} · updated {time.strftime('%H:%M:%S')}"
        elif self.kind != "esd" and (arrays := self._array_fields()):
            hint = (
                "; show one parameter's spectrum with kind='esd' and slice=UID (its uid or "
                "name): <code>FieldPanel(session, kind='esd', slice=UID)</code>, or "
                "<code>%diffract show esd --kind esd --slice UID</code>"
                if "esd" in arrays
                else ""
            )
            text = (
                f"<b>{html.escape(what)}</b> · {html.escape(', '.join(arrays))} "
                f"hold{'s' * (len(arrays) == 1)} an array per slice, not a number: a "
                f"{self.kind} panel needs a scalar field{hint}"
            )
        else:
            text = (
                f"<b>{html.escape(what)}</b> · nothing stored yet: compute it "
                f"(<code>session.compute.apply({', '.join(repr(f) for f in self.fields)})</code>); this panel updates as values land"
            )
        self.status.value = text

    def _array_fields(self) -> list[str]:
        """The panel's fields whose stored values are arrays (not numbers): a line, bar,
        heatmap or scatter panel cannot show them."""
        out = []
        for f in self.fields:
            try:
                rows = viz.field_rows(self._reader, f, reference=self.reference)
            except Exception:
                continue
            if any(_is_array(r.get(f)) for r in rows):
                out.append(f)
        return out

    # --- liveness ------------------------------------------------------------------------------
    def _on_store_changed(self, *, force: bool = False) -> None:
        if force or time.monotonic() - self._last > 0.3:
            self.refresh()

    def watch(self, interval: float = 1.0) -> None:
        """Re-read the store every ``interval`` seconds in a daemon thread (stop with :meth:`stop`).

        Args:
            interval: seconds between two reads.
        """
        self._poll_stop.clear()

        def loop() -> None:
            while not self._poll_stop.wait(interval):
                try:
                    self.refresh()
                except Exception:
                    continue

        threading.Thread(target=loop, name="diffract-panel-poll", daemon=True).start()

    def stop(self) -> None:
        """Stop polling and live updates."""
        self._poll_stop.set()
        _PANELS.discard(self)

    def state(self) -> dict[str, Any]:
        """A plain description of what the panel shows (for tests and snapshots).

        Returns:
            ``{"kind", "fields", "traces": [{"name", "type", "x", "y"}], "n_values"}``.
        """
        return {
            "kind": self.kind,
            "fields": list(self.fields),
            "traces": [
                {
                    "name": tr.name,
                    "type": tr.type,
                    "x": list(tr.x) if tr.x is not None else [],
                    "y": list(tr.y) if tr.y is not None else [],
                }
                for tr in self.figure.data
            ],
            "n_values": self.n_values(),
        }

    # --- static fallback -----------------------------------------------------------------------
    def snapshot_html(self) -> str:
        """A static HTML summary of what the panel shows, for notebooks viewed without a running
        kernel (nbviewer, exported HTML); the widget's fallback view.

        Returns:
            HTML with the status line and, per trace, its count, range and a sparkline.
        """
        parts = [
            f"<div class='diffract-snapshot' style='{_SNAP_STYLE}'><b>{html.escape(self.status.value and _strip(self.status.value))}</b>"
        ]
        for d in self.spec["data"]:
            if d["type"] == "heatmap":
                parts.append(
                    f"<div>{html.escape(str(d.get('name')))}: heatmap {len(d['y'])} models × {len(d['x'])} layers</div>"
                )
                continue
            ys = [v for v in d.get("y", []) if isinstance(v, (int, float))]
            if not ys:
                continue
            parts.append(
                f"<div>{html.escape(str(d.get('name')))}: {len(ys)} points, min {min(ys):.4g}, max {max(ys):.4g} {_sparkline(ys)}</div>"
            )
        parts.append("</div>")
        return "".join(parts)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        self._resize_views_later()
        return _snapshot_bundle(ipw.VBox, self, self.snapshot_html(), kwargs)

    def _resize_views_later(self) -> None:
        """Ask the figure's views to fit their output again, a few times after a display.

        plotly.js sizes a figure when its view first draws; a view drawn before JupyterLab
        attached its output gets Plotly's default 700 px and, until the window is resized,
        overflows a narrower notebook (the scrollbar at 900 px). A relayout to ``autosize``
        once the output is attached sizes it to its container.
        """
        for delay in AUTOSIZE_AFTER_S:
            timer = threading.Timer(delay, self._autosize)
            timer.daemon = True
            timer.start()

    def _autosize(self) -> None:
        with self._lock:
            self.figure._send_relayout_msg({"autosize": True})


def _layout_into(target: Any, layout: dict[str, Any]) -> None:
    """Put a spec's title, axes, shapes, bar mode and margin (a spec with a two-line title
    sets a taller top) into a figure's layout (the rest stays)."""
    target.title = layout.get("title")
    target.update({axis: settings for axis, settings in layout.items() if _AXIS_KEY.match(axis)})
    for key in ("barmode", "margin"):
        if key in layout:
            target[key] = layout[key]
    target.shapes = layout.get("shapes", ())


def sync_figure_state(fig: go.FigureWidget) -> None:
    """Assign a FigureWidget's whole data and layout to its synced state traits.

    Plotly sends edits made after construction (``add_traces``, restyles, relayouts) to the
    browser as one-shot ``_py2js_*`` messages and syncs ``_widget_data`` / ``_widget_layout``
    (what a new view draws) only when they are assigned whole. Assigning the full state after
    each edit makes a view rendered later (a second view, a re-opened output) draw what Python
    holds; views already rendered follow the messages (they do not re-read these traits).

    Args:
        fig: the figure whose state to sync.
    """
    fig._widget_data = deepcopy(fig._data)
    fig._widget_layout = deepcopy(fig._layout_obj._props)


def _is_array(v: Any) -> bool:
    return isinstance(v, (list, tuple)) or getattr(v, "ndim", 0) > 0


def _strip(text: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", text)


def _sparkline(ys: list[float], width: int = 160, height: int = 28) -> str:
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    n = max(len(ys) - 1, 1)
    pts = " ".join(
        f"{i * width / n:.1f},{height - (y - lo) / span * height:.1f}" for i, y in enumerate(ys)
    )
    return f"<svg width='{width}' height='{height}' style='vertical-align:middle'><polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{pts}'/></svg>"

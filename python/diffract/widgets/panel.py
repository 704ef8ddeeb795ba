"""``FieldPanel``: a live Plotly figure of stored fields, an AnyWidget (imported by diffract.widgets)."""

from __future__ import annotations

import base64
import contextlib
import html
import json
import re
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from copy import deepcopy
from pathlib import Path
from typing import Any

import anywidget
import plotly.graph_objects as go
import traitlets as t
from plotly.utils import PlotlyJSONEncoder

from diffract import viz
from diffract._vocab.csv_cells import safe_cell
from diffract.viz import registry
from diffract.widgets import PANELS, SNAP_STYLE, STATIC, as_scope, esm_module

#: the figure kinds a panel draws (:data:`diffract.viz.registry.KINDS` offered to panels)
KINDS = registry.panel_kinds()
#: the image formats the plot toolbar's camera button downloads (Plotly's own download)
IMAGE_FORMATS = ("png", "svg")
_AXIS_KEY = re.compile(r"^[xy]axis\d*$")
#: seconds between two looks at the store's commits (a panel follows new data by default)
FOLLOW_S = 1.0


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


class _Line:
    """The ``.value`` of a line of the panel's bar (its status, its CSV link), read from the
    synced traits: ``panel.status.value`` reads as it did when the bar was ipywidgets."""

    def __init__(self, read: Any) -> None:
        self._read = read

    @property
    def value(self) -> str:
        return str(self._read())


class FieldPanel(anywidget.AnyWidget):
    """A Plotly figure of stored fields that follows the store as values land (an AnyWidget).

    It re-reads the store when a run of this kernel commits a chunk and, by default, when a
    writer (a tracker, another process) commits: every ``poll`` seconds it compares the
    store's commit state and redraws only on a change. Displayed, it carries a static copy
    of its figure (Plotly JSON and HTML) that is updated to the final state after each cell,
    for saved notebooks, nbconvert and front ends without the widget.

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
        poll: seconds between two looks at the store's commits (a tracker, a writer in another
            process); ``None`` or ``0``: follow only runs of this kernel (and :meth:`refresh`).
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

    _esm = esm_module("panel")
    #: the figure as Plotly JSON (``{"data", "layout"}``, as :mod:`diffract.viz` builds it)
    figure_json = t.Unicode("{}").tag(sync=True)
    #: the status line (HTML): what is shown, or what to do while nothing is
    status_html = t.Unicode("").tag(sync=True)
    #: the plotted values as a ``data:text/csv`` URL (the bar's CSV link)
    csv_href = t.Unicode("").tag(sync=True)
    #: the base name of the panel's downloads (CSV, PNG, SVG)
    download_name = t.Unicode("panel").tag(sync=True)
    #: how many values the panel shows (:meth:`n_values`)
    value_count = t.Int(0).tag(sync=True)
    #: what the camera button of the plot's toolbar downloads: ``"png"`` or ``"svg"``
    image_format = t.Unicode("png").tag(sync=True)
    #: the figure's height in pixels
    height = t.Int(380).tag(sync=True)

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
        poll: float | None = FOLLOW_S,
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
        scope = as_scope(source)
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
        self._lock = threading.RLock()
        self._last: float = 0.0
        self._poll_stop = threading.Event()
        #: how many times the data was updated in place / traces were rebuilt
        self.updates = 0
        self.rebuilds = 0
        self.status = _Line(lambda: self.status_html)
        self.csv_link = _Line(self._csv_anchor)
        self.spec: dict[str, Any] = {"data": [], "layout": {}}
        self._figure: go.Figure | None = None
        #: the display ids of this panel's outputs (their static copies follow the figure)
        self._display_ids: list[str] = []
        self._static_sent: tuple[str, str] | None = None
        self._poll = float(poll or 0.0)
        self._fig_height = height or (620 if kind == "evolution" else 380)
        self._fig_format = image_format
        # The first data is part of the widget's first state (sent with the comm's opening): a
        # browser model still loading its module cannot miss it.
        with self._lock:
            self._last = time.monotonic()
            self._token = self._store_token()
            spec = self.build_spec()
            self.spec = spec
            first = self._published(spec)
        super().__init__(
            image_format=image_format,
            height=self._fig_height,
            download_name=self.file_stem(),
            **first,
        )
        self.on_msg(self._on_view_msg)
        if live:
            PANELS.add(self)
        if poll:
            self.watch(poll)

    def _on_view_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A view asks for Plotly (once per page; see js/widgets/panel.ts): the built bundle."""
        if isinstance(content, dict) and content.get("type") == "plotly-js":
            self.send({"type": "plotly-js", "source": _plotly_module()})

    @t.validate("image_format")
    def _check_format(self, proposal: Any) -> str:
        if proposal["value"] not in IMAGE_FORMATS:
            raise ValueError(
                f"image_format must be one of {IMAGE_FORMATS}, got {proposal['value']!r}"
            )
        self._fig_format = str(proposal["value"])
        return self._fig_format

    # --- data --------------------------------------------------------------------------------
    def build_spec(self) -> dict[str, Any]:
        """The figure description from the store, as :mod:`diffract.viz` builds it.

        The incomplete checkpoints of tracked runs (a step whose analysis has not committed:
        in progress, or cut by a crash) are left out, unless named in ``models=``.

        Returns:
            ``{"data": traces, "layout": layout}`` as plain dicts.
        """
        return registry.KINDS[self.kind].build(self._reader, self.request)

    def _store_token(self) -> tuple[Any, ...]:
        """What changes when the store gains a commit: cheap to read every second.

        The reader's handle sees other writers' commits after ``refresh`` (one query for
        SQLite, a listing for the log stores); the content's counts then say whether anything
        landed (new models, values, records waiting to be applied).
        """
        store = self._reader.session.store
        with contextlib.suppress(Exception):
            store.refresh()
        return store.content_token()

    # --- figure and export -----------------------------------------------------------------------
    def _layout(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The figure's layout: the neutral base, the panel's height and the spec's title, axes,
        shapes, bar mode and margin (a spec with a two-line title sets a taller top)."""
        layout: dict[str, Any] = {
            "height": self._fig_height,
            "autosize": True,
            **deepcopy(viz.NEUTRAL_LAYOUT),
        }
        src = spec["layout"]
        if src.get("title") is not None:
            layout["title"] = deepcopy(src["title"])
        for key, value in src.items():
            if _AXIS_KEY.match(key) or key in ("barmode", "margin", "shapes", "legend"):
                layout[key] = deepcopy(value)
        return layout

    @property
    def figure(self) -> go.Figure:
        """The panel's figure as a plain Plotly ``Figure`` (what the view draws)."""
        with self._lock:
            if self._figure is None:
                self._figure = go.Figure(
                    data=self.spec["data"], layout=self._layout(self.spec), skip_invalid=True
                )
            return self._figure

    def figure_dict(self) -> dict[str, Any]:
        """The figure as Plotly JSON data (``data``, ``layout``, ``config``), as the static
        copies carry it.

        Returns:
            A JSON-ready dict (numbers as JSON numbers, NaN as null).
        """
        fig = json.loads(self.figure_json)
        fig["config"] = self._config()
        return fig

    def _config(self) -> dict[str, Any]:
        fmt = self._fig_format
        return {
            "responsive": True,
            "displaylogo": False,
            "toImageButtonOptions": {"format": fmt, "filename": self.file_stem()},
        }

    def _published(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The synced traits for ``spec`` (the figure, status line, CSV link, value count)."""
        self._figure = None
        fig = {"data": spec["data"], "layout": self._layout(spec)}
        return {
            "figure_json": json.dumps(fig, cls=PlotlyJSONEncoder),
            "status_html": self._status_text(),
            "csv_href": "data:text/csv;charset=utf-8;base64,"
            + base64.b64encode(self.to_csv().encode()).decode(),
            "value_count": self.n_values(),
        }

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

    def _csv_anchor(self) -> str:
        """The bar's CSV link as HTML (the view draws the same link from the synced traits)."""
        return (
            f"<a class='diffract-panel-csv-link' download='{self.file_stem()}.csv' "
            f"href='{self.csv_href}' title='the plotted values as CSV ({self.value_count} "
            "values)'>⤓ CSV</a>"
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
                same_shape = len(spec["data"]) == len(self.spec["data"]) and all(
                    a.get("type") == b.get("type") and a.get("name") == b.get("name")
                    for a, b in zip(spec["data"], self.spec["data"], strict=True)
                )
                if same_shape:
                    self.updates += 1
                else:
                    self.rebuilds += 1
                self.spec = spec
            with self.hold_sync():
                if changed:
                    for name, value in self._published(spec).items():
                        setattr(self, name, value)
                else:
                    self.status_html = self._status_text()
            return changed

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

    def _status_text(self) -> str:
        first = self.fields[0] if self.fields else ""  # a diff panel reads no field
        what = {
            "esd": str(self.slice),
            "scatter": " vs ".join(reversed(self.fields)),
            "compare": f"{first}: "
            + (" / " if self.mode == "ratio" else " - ").join(reversed(self.models or [])),
            "evolution": f"{first} · run {self.run}",
            "diff": "fine-tune diff: " + " vs ".join(reversed(self.models or [])),
        }.get(self.kind, first)
        n = self.n_values()
        if n:
            shape = self._shape_text(n)
            values = f"{n} value{'s' * (n != 1)}"
            # the shape, then the count ("3 layers × 16 checkpoints (48 values)"); a shape that
            # is the count itself is said once ("24 eigenvalues", not "24 values (24 values)")
            alone = shape in (values, f"{n} eigenvalue{'s' * (n != 1)}")
            counted = shape if alone else f"{shape} ({values})"
            return f"<b>{html.escape(what)}</b> · {html.escape(counted)} · updated {time.strftime('%H:%M:%S')}"
        if self.kind != "esd" and (arrays := self._array_fields()):
            hint = (
                "; show one parameter's spectrum with kind='esd' and slice=UID (its uid or "
                "name): <code>FieldPanel(session, kind='esd', slice=UID)</code>, or "
                "<code>%diffract show esd --kind esd --slice UID</code>"
                if "esd" in arrays
                else ""
            )
            return (
                f"<b>{html.escape(what)}</b> · {html.escape(', '.join(arrays))} "
                f"hold{'s' * (len(arrays) == 1)} an array per slice, not a number: a "
                f"{self.kind} panel needs a scalar field{hint}"
            )
        follows = (
            f"this panel follows the store (a look every {self._poll:g} s)"
            if self._poll
            else "call <code>panel.refresh()</code> when a writer outside this kernel commits"
        )
        if self.run is not None:
            return (
                f"<b>{html.escape(what)}</b> · waiting for the tracker's first committed step "
                f"of run {html.escape(self.run)}: {follows}"
            )
        return (
            f"<b>{html.escape(what)}</b> · nothing stored yet: compute it "
            f"(<code>session.compute.apply({', '.join(repr(f) for f in self.fields)})</code>); "
            f"runs of this kernel update it as values land, and {follows}"
        )

    def _shape_text(self, n: int) -> str:
        """What the figure shows in the user's terms ("3 layers × 16 checkpoints",
        "12 layers · 2 models"), not Plotly's ("48 values · 4 traces"); the header adds the
        number of values after it."""

        def count(k: int, what: str) -> str:
            return f"{k} {what}{'s' * (k != 1)}"

        data = [d for d in self.spec["data"] if d.get("xaxis") != "x2"]
        heat = next((d for d in data if d["type"] == "heatmap"), None)
        if heat is not None:
            rows, cols = len(heat.get("y", [])), len(heat.get("x", []))
            if self.kind == "evolution":
                return f"{count(rows, 'layer')} × {count(cols, 'checkpoint')}"
            if self.kind == "heatmap":
                return f"{count(rows, 'model')} × {count(cols, 'layer')}"
            return f"{rows} × {cols} cells"
        if self.kind in ("line", "bar", "scatter", "compare", "alpha_errorbars"):
            series = [d for d in data if d.get("y") and d.get("mode") != "lines"]
            layers = max((len(d["y"]) for d in series), default=0)
            models = len({d.get("name") for d in series})
            return count(layers, "layer") + (f" · {count(models, 'model')}" if models > 1 else "")
        return count(n, "eigenvalue" if self.kind == "esd" else "value")

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

    def check_store(self) -> bool:
        """Refresh when the store gained a commit since the last look (cheap otherwise).

        Returns:
            True when the figure changed.
        """
        token = self._store_token()
        if token == self._token:
            return False
        self._token = token
        return self.refresh()

    def watch(self, interval: float = FOLLOW_S) -> None:
        """Look at the store's commits every ``interval`` seconds in a daemon thread and redraw
        on a change (stop with :meth:`stop`). Panels do this by default (``poll=``).

        Args:
            interval: seconds between two looks.
        """
        self._poll_stop.set()
        stop = self._poll_stop = threading.Event()
        self._poll = float(interval)
        ref = weakref.ref(self)  # the thread does not keep a dropped panel alive

        def loop() -> None:
            while not stop.wait(interval):
                panel = ref()
                if panel is None or panel.comm is None:
                    return
                try:
                    panel.check_store()
                except Exception:
                    continue
                finally:
                    del panel

        threading.Thread(target=loop, name="diffract-panel-follow", daemon=True).start()

    def stop(self) -> None:
        """Stop following the store and live updates."""
        stop = getattr(self, "_poll_stop", None)  # None: a panel whose construction failed
        if stop is not None:
            stop.set()
        self._poll = 0.0
        PANELS.discard(self)

    def close(self) -> None:
        """Stop following the store and close the widget."""
        self.stop()
        super().close()

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

    # --- static copies -------------------------------------------------------------------------
    def snapshot_html(self, *, with_plotlyjs: bool = False) -> str:
        """The panel as static HTML: its status line and its figure drawn by plotly.js, for
        notebooks viewed without the widget (a new kernel, nbconvert, nbviewer).

        Args:
            with_plotlyjs: include plotly.js itself (offline; once per notebook is enough: the
                other copies draw with it).

        Returns:
            HTML with the status line, the figure (its Plotly JSON, drawn when scripts run) and
            per trace its count and range (readable where scripts do not run).
        """
        fig = self.figure_dict()
        div = f"diffract-panel-{uuid.uuid4().hex}"
        parts = [
            f"<div class='diffract-snapshot' style='{SNAP_STYLE}'>"
            f"<div>{html.escape(_strip(self.status_html))}</div>"
        ]
        if with_plotlyjs:
            parts.append(_plotlyjs_script())
        if fig["data"]:
            data = json.dumps(fig, cls=PlotlyJSONEncoder).replace("</", "<\\/")
            parts.append(
                f"<div id='{div}' class='diffract-static-figure' style='width:100%;height:"
                f"{self.height}px'></div><script type='text/javascript'>(function(){{var fig="
                f"{data};var n=0;(function draw(){{var el=document.getElementById('{div}');"
                "if(!el)return;if(window.Plotly){window.Plotly.newPlot(el,fig.data,fig.layout,"
                "fig.config);}else if(n++<200){setTimeout(draw,50);}})();})();</script>"
            )
        for d in self.spec["data"]:
            if d["type"] == "heatmap":
                parts.append(
                    f"<div>{html.escape(str(d.get('name')))}: heatmap {len(d['y'])} rows × {len(d['x'])} columns</div>"
                )
                continue
            ys = [v for v in d.get("y", []) if isinstance(v, (int, float))]
            if ys:
                parts.append(
                    f"<div>{html.escape(str(d.get('name')))}: {len(ys)} points, min {min(ys):.4g}, max {max(ys):.4g}</div>"
                )
        parts.append("</div>")
        return "".join(parts)

    def _static_bundle(self, display_id: str | None = None) -> dict[str, Any]:
        """The static copy of the figure (Plotly JSON, HTML) for one output."""
        carries = display_id is not None and display_id == _PLOTLYJS_HOLDER.get("id")
        return {
            "application/vnd.plotly.v1+json": self.figure_dict(),
            "text/html": _HIDE_STATIC + self.snapshot_html(with_plotlyjs=carries),
            "text/plain": f"<FieldPanel {self.file_stem()}: static copy, {self.n_values()} values>",
        }

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return _with_static(
            anywidget.AnyWidget._repr_mimebundle_(self, **kwargs), self._static_bundle()
        )

    def _ipython_display_(self) -> None:
        """Display the widget, then its static copy under a display id: the copy is what a
        front end without the widget's model shows (a saved notebook in a new kernel,
        nbconvert), and it is updated to the panel's state after each cell
        (:func:`_flush_static`). Where the widget draws, diffract's style hides the copy."""
        from IPython.display import display

        display_id = uuid.uuid4().hex
        _PLOTLYJS_HOLDER.setdefault("id", display_id)
        self._display_ids.append(display_id)
        _DISPLAYED.add(self)
        _hook_cells()
        data, meta = _with_static(anywidget.AnyWidget._repr_mimebundle_(self), {})
        display(data, metadata=meta, raw=True)
        self._static_sent = (self.figure_json, self.status_html)
        display(self._static_bundle(display_id), raw=True, display_id=display_id)

    def update_static(self) -> bool:
        """Bring the panel up to date with the store and, when its figure changed since its
        outputs' static copies were sent, send them again (``update_display``).

        Returns:
            True when copies were sent.
        """
        with contextlib.suppress(Exception):
            self.check_store()
        key = (self.figure_json, self.status_html)
        if not self._display_ids or key == self._static_sent:
            return False
        from IPython.display import update_display

        self._static_sent = key
        for display_id in self._display_ids:
            update_display(self._static_bundle(display_id), raw=True, display_id=display_id)
        return True


#: Hides a static copy where its panel's widget draws (the output before it holds a live
#: ``.diffract-panel``), and, until it does, the widget's output ("Loading widget...", "model
#: not found": a saved notebook in a new kernel), where the copy stands in. The same rules are
#: in diffract's lab style (style/index.css).
_HIDE_STATIC = (
    "<style>.jp-OutputArea-child:has(.diffract-panel)+.jp-OutputArea-child{display:none}"
    ".jp-OutputArea-child:has(>.jp-OutputArea-output:is(.lm-Panel,[data-mime-type='application/"
    "vnd.jupyter.widget-view+json'])):not(:has(.diffract-panel)):has(+.jp-OutputArea-child "
    ":is(.diffract-snapshot,.jp-RenderedPlotly,[data-mime-type='application/vnd.plotly.v1+json']"
    ")){display:none}"
    "</style>"
)


#: the panels shown with a display id (their static copies follow them)
_DISPLAYED: weakref.WeakSet[FieldPanel] = weakref.WeakSet()
#: the display that carries plotly.js for the static copies of this kernel's panels
_PLOTLYJS_HOLDER: dict[str, str] = {}
_HOOKED: list[Any] = []


def _flush_static(*_args: Any) -> None:
    """After each cell: the displayed panels' static copies updated to their current state."""
    for panel in list(_DISPLAYED):
        with contextlib.suppress(Exception):
            panel.update_static()


def _hook_cells() -> None:
    """Register :func:`_flush_static` after each cell of this IPython kernel (once)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or shell in _HOOKED:
        return
    shell.events.register("post_run_cell", _flush_static)
    _HOOKED.append(shell)


def _with_static(bundle: Any, static: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A widget's mimebundle with the static copies added (the widget view stays first)."""
    if isinstance(bundle, tuple):
        data, meta = bundle
    else:
        data, meta = bundle, {}
    data = {**(data or {}), **static}
    return data, dict(meta or {})


def _plotly_module() -> str:
    """Plotly's cartesian bundle as an ES module (static/plotly.js, built with the widgets), or
    a module whose import fails with what to do when the bundle was not built."""
    path = STATIC / "plotly.js"
    if path.exists():
        return path.read_text(encoding="utf-8")
    return (
        "throw new Error('diffract: the widget bundle plotly.js was not built. Reinstall "
        "diffract-lab (pip install .) or run npm run build.');"
    )


def _plotlyjs_script() -> str:
    """plotly.js inline (offline), defining ``window.Plotly`` even where an AMD loader is
    present (nbconvert's page, the classic notebook)."""
    from plotly.offline import get_plotlyjs

    return (
        "<script type='text/javascript'>if(!window.Plotly){(function(define,module,exports){"
        + get_plotlyjs()
        + "}).call(window);}</script>"
    )


def _is_array(v: Any) -> bool:
    return isinstance(v, (list, tuple)) or getattr(v, "ndim", 0) > 0


def _strip(text: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "", text)

"""Widgets for any Jupyter front end (anywidget), with a static HTML fallback each.

``FilterBuilder(session_or_scope)``
    Choose models, parameter names (exact list or ``re:`` pattern), types and uids; shows the
    live count of matched slices and a preview. ``.scope`` is exactly
    ``scope.filter(...)`` for those choices; ``.filter_json`` is the engine's filter data.
``run_with_progress(scope, *fields, **apply_kwargs)``
    Runs ``scope.compute.apply`` in a worker thread and returns at once with a
    :class:`ProgressRun` shown as a progress widget. Because the cell has returned, the kernel
    receives the widget's Cancel click while the computation runs: the run stops after the
    slice or kernel in progress and keeps every finished value. ``await run`` waits (the kernel still
    handles clicks while an async cell awaits); ``run.wait()`` blocks.
``notebook_progress(fields)``
    What a plain (blocking) ``compute.apply`` shows in a notebook: the same widget. A blocking
    cell cannot receive clicks, so there Cancel is replaced by "interrupt the kernel" (finished
    chunks are kept: each is committed atomically).
``FieldPanel(session_or_scope, fields, kind=...)``
    A live Plotly ``FigureWidget`` of stored fields (see :mod:`diffract.viz` for the kinds);
    it updates in place when new values land (``refresh()``; automatically while a run of
    this kernel reports progress, or every ``poll`` seconds for other writers).
"""

from __future__ import annotations

import html
import json
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets as t

from diffract._core.filters import Filter, FilterChain
from diffract._errors import FilterError

if TYPE_CHECKING:
    from diffract.run.report import ProgressEvent, RunReport
    from diffract.session import Scope
    from diffract.widgets.panel import FieldPanel

__all__ = [
    "FieldPanel",
    "FilterBuilder",
    "ProgressRun",
    "ProgressWidget",
    "notebook_progress",
    "run_with_progress",
]

#: the built widget bundles: python/diffract/static (where the wheel's build puts them), one
#: level above this package since widgets became a package
STATIC = Path(__file__).resolve().parents[1] / "static"
_MISSING = """export default { render({ el }) {
  el.innerHTML = '<div style="color:var(--jp-warn-color1,#b36b00)">diffract: the widget bundle %s.js was not '
    + 'built. Reinstall diffract-lab (pip install .) or run <code>npm run build</code>.</div>';
} };"""


def _esm(name: str) -> Path | str:
    path = STATIC / f"{name}.js"
    return path if path.exists() else _MISSING % name


def _as_scope(source: Any) -> Scope:
    from diffract.session import Scope

    if isinstance(source, Scope):
        return source
    raise TypeError(
        f"expected a diffract Session or Scope, got {type(source).__name__}: {source!r}"
    )


def _in_kernel() -> bool:
    from diffract.session.progress import in_notebook as _in_notebook

    return _in_notebook()


def _snapshot_bundle(base: Any, widget: Any, html_text: str, kwargs: dict[str, Any]) -> Any:
    """``base``'s mimebundle of ``widget`` plus a ``text/html`` snapshot (shown where no
    kernel or widget manager is around, e.g. a saved notebook on GitHub or nbconvert)."""
    bundle = base._repr_mimebundle_(widget, **kwargs)
    if isinstance(bundle, tuple):
        data, meta = bundle
        data = dict(data or {})
        data["text/html"] = html_text
        return data, meta
    data = dict(bundle or {})
    data["text/html"] = html_text
    return data


_SNAP_STYLE = "font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;color:var(--jp-ui-font-color1,inherit)"


# ------------------------------------------------------------------------------------------
# filter builder
# ------------------------------------------------------------------------------------------


def parse_names(text: str) -> tuple[str, ...] | None:
    """The names box as a criterion.

    One ``re:`` pattern, or exact names separated by commas (or one entry per line, which
    also allows ``re:`` patterns containing commas).

    Args:
        text: the box's text.

    Returns:
        The entries, or None for an empty box (no constraint).
    """
    text = text.strip()
    if not text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) == 1:
        line = lines[0]
        if line.startswith("re:"):
            return (line,)
        return tuple(p.strip() for p in line.split(",") if p.strip()) or None
    return tuple(lines)


def format_names(names: Sequence[str] | None) -> str:
    """The names box's text for a criterion (the inverse of :func:`parse_names`).

    Args:
        names: the criterion's entries (``None``: no constraint).

    Returns:
        One entry as is, entries with commas or ``re:`` one per line, others comma-separated.
    """
    if not names:
        return ""
    if len(names) == 1:
        return names[0]
    if any("," in n or n.startswith("re:") for n in names):
        return "\n".join(names)
    return ", ".join(names)


def parse_uids(text: str) -> tuple[str, ...] | None:
    """The uids box as a criterion: uids separated by commas, spaces or new lines.

    Args:
        text: the box's text.

    Returns:
        The uids without repeats, in order, or None for an empty box (no constraint).
    """
    parts = [p for p in text.replace(",", " ").split() if p]
    return tuple(dict.fromkeys(parts)) or None


class FilterBuilder(anywidget.AnyWidget):
    """Build a filter interactively; ``.scope`` is the matching Scope (see the module doc).

    The synced traits (``model_ids``, ``names``, ``param_types``, ``uids``) are what the front
    end edits; ``count``, ``preview`` and ``filter_json`` follow them.

    Args:
        source: the session or scope the filter narrows.
        filter: a clause to start from (a Filter, its dict, or JSON).
        preview_limit: how many matching slices the preview lists.
        **kwargs: passed to ``anywidget.AnyWidget``.

    Raises:
        FilterError: ``filter`` is not a valid clause.
    """

    _esm = _esm("filter")

    available_models = t.List(t.Unicode()).tag(sync=True)
    available_types = t.List(t.Unicode()).tag(sync=True)
    model_ids = t.List(t.Unicode()).tag(sync=True)
    names = t.Unicode("").tag(sync=True)
    param_types = t.List(t.Unicode()).tag(sync=True)
    uids = t.Unicode("").tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    count = t.Int(0).tag(sync=True)
    total = t.Int(0).tag(sync=True)
    preview = t.List(t.Dict()).tag(sync=True)
    preview_limit = t.Int(50).tag(sync=True)
    filter_json = t.Unicode("[]").tag(sync=True)

    def __init__(
        self,
        source: Any,
        *,
        filter: Filter | dict | str | None = None,
        preview_limit: int = 50,
        **kwargs: Any,
    ) -> None:
        super().__init__(preview_limit=preview_limit, **kwargs)
        self._base = _as_scope(source)
        self._scope: Scope = self._base
        self.refresh_choices()
        if filter is not None:
            self.set_filter(filter)
        self.observe(
            self._on_change, names=["model_ids", "names", "param_types", "uids", "preview_limit"]
        )
        self.on_msg(self._on_msg)
        self._update()

    # --- the filter as data ------------------------------------------------------------------
    def criteria(self) -> dict[str, tuple[str, ...] | None]:
        """The choices as ``filter(...)`` keyword arguments.

        Returns:
            ``{"model_ids", "param_names", "param_types", "param_ids"}``; ``None`` means no
            constraint.
        """
        return {
            "model_ids": tuple(self.model_ids) or None,
            "param_names": parse_names(self.names),
            "param_types": tuple(self.param_types) or None,
            "param_ids": parse_uids(self.uids),
        }

    @property
    def filter(self) -> Filter:
        """The builder's own clause (raises FilterError while the input is invalid)."""
        return Filter.make(**self.criteria())

    @property
    def scope(self) -> Scope:
        """``base.filter(**criteria)``: the same Scope ``session.filter(...)`` returns."""
        if self.error:
            raise FilterError(f"the filter builder's input is invalid: {self.error}")
        return self._scope

    def set_filter(self, value: Filter | FilterChain | dict | str) -> None:
        """Load a clause into the builder (the front end shows it at once).

        Args:
            value: a Filter, its dict, or JSON of a clause or of a chain that adds one clause to
                the builder's base scope.

        Raises:
            FilterError: the value is not a valid filter, or a chain adds several clauses.
            TypeError: the value is none of the accepted kinds.
        """
        if isinstance(value, str):
            value = json.loads(value)
        if isinstance(value, list):
            value = FilterChain.from_json(value)
        if isinstance(value, FilterChain):
            base = self._base.filter_chain.clauses
            extra = (
                value.clauses[len(base) :] if value.clauses[: len(base)] == base else value.clauses
            )
            if len(extra) > 1:
                raise FilterError(
                    "the filter builder edits one clause; this chain has several beyond its base scope"
                )
            value = extra[0] if extra else Filter()
        if isinstance(value, dict):
            value = Filter.from_dict(value)
        if not isinstance(value, Filter):
            raise TypeError(
                f"set_filter expects a Filter, dict or JSON, got {type(value).__name__}"
            )
        with self.hold_trait_notifications():
            types = list(value.param_types or [])
            missing = [x for x in types if x not in self.available_types]
            if missing:
                self.available_types = [*self.available_types, *missing]
            self.model_ids = list(value.model_ids or [])
            self.names = format_names(value.param_names)
            self.param_types = types
            self.uids = "\n".join(value.param_ids or [])
        self._update()

    # --- reacting to the front end -------------------------------------------------------------
    def refresh_choices(self) -> None:
        """Re-read the models and types from the store."""
        from diffract._core.slices import ParameterType

        base = self._base
        slices = base.models.slices()
        types = [p.value for p in ParameterType.builtin()]
        for s in slices:
            if s.type.value not in types:
                types.append(s.type.value)
        for x in self.param_types:
            if x not in types:
                types.append(x)
        self.available_models = base.models.ids()
        self.available_types = types
        self.total = len(slices)

    def _on_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "refresh":
            self.refresh_choices()
            self._update()

    def _on_change(self, _change: Any) -> None:
        self._update()

    def _update(self) -> None:
        crit = self.criteria()
        try:
            scope = self._base.filter(**crit)
            slices = scope.models.slices()
        except (FilterError, ValueError) as exc:
            self.error = str(exc)
            self.count = 0
            self.preview = []
            return
        self._scope = scope
        with self.hold_sync():
            self.error = ""
            self.count = len(slices)
            self.preview = [
                {
                    "model_id": s.model_id,
                    "name": s.name,
                    "type": s.type.value,
                    "shape": "×".join(map(str, s.shape)),
                    "uid": s.uid,
                }
                for s in slices[: self.preview_limit]
            ]
            self.filter_json = scope.utils.filter_json()

    # --- static fallback -------------------------------------------------------------------------
    def snapshot_html(self) -> str:
        """A static HTML view of the filter, for notebooks viewed without a running kernel.

        Returns:
            HTML with the filter's JSON, the match count and the first 10 matches.
        """
        rows = "".join(
            f"<tr><td>{html.escape(r['model_id'])}</td><td>{html.escape(r['name'])}</td><td>{html.escape(r['type'])}</td><td>{html.escape(r['shape'])}</td></tr>"
            for r in self.preview[:10]
        )
        more = f"<div>… and {self.count - 10} more</div>" if self.count > 10 else ""
        err = f"<div style='color:#c62828'>{html.escape(self.error)}</div>" if self.error else ""
        return (
            f"<div class='diffract-snapshot' style='{_SNAP_STYLE}'><b>diffract filter</b> "
            f"<code>{html.escape(self.filter_json)}</code>: {self.count} of {self.total} slices{err}"
            f"<table><thead><tr><th>model</th><th>name</th><th>type</th><th>shape</th></tr></thead><tbody>{rows}</tbody></table>{more}</div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return _snapshot_bundle(anywidget.AnyWidget, self, self.snapshot_html(), kwargs)

    def __repr__(self) -> str:
        return f"<FilterBuilder {self.filter_json}: {self.count} of {self.total} slices>"


# ------------------------------------------------------------------------------------------
# progress
# ------------------------------------------------------------------------------------------


class ProgressWidget(anywidget.AnyWidget):
    """Progress of one ``apply``: chunks, slices, current field/parameter, time, failures.

    ``callback`` receives the engine's ProgressEvents; ``cancel_event`` is set when the user
    clicks Cancel (``cancel_requested``) or calls :meth:`cancel`.

    Args:
        fields: the fields being computed (shown in the title).
        cancel: the event the run watches; default: a new one (``cancel_event``).
        **kwargs: passed to ``anywidget.AnyWidget``.
    """

    _esm = _esm("progress")

    fields = t.List(t.Unicode()).tag(sync=True)
    status = t.Unicode("waiting").tag(sync=True)  # waiting running cancelling cancelled done error
    chunks_done = t.Int(0).tag(sync=True)
    chunks_total = t.Int(0).tag(sync=True)
    slices_done = t.Int(0).tag(sync=True)
    slices_total = t.Int(0).tag(sync=True)
    field = t.Unicode("").tag(sync=True)
    param = t.Unicode("").tag(sync=True)
    elapsed = t.Float(0.0).tag(sync=True)
    eta = t.Float(None, allow_none=True).tag(sync=True)
    failures = t.Int(0).tag(sync=True)
    message = t.Unicode("").tag(sync=True)
    cancellable = t.Bool(True).tag(sync=True)
    cancel_requested = t.Bool(False).tag(sync=True)

    #: minimum seconds between two "kernel" updates sent to the front end (chunk events always go)
    throttle = 0.0

    def __init__(
        self, fields: Sequence[str] = (), *, cancel: threading.Event | None = None, **kwargs: Any
    ) -> None:
        super().__init__(fields=list(fields), **kwargs)
        self.cancel_event = cancel or threading.Event()
        self.events = 0
        self._last_sent = 0.0
        self.observe(self._on_cancel, names="cancel_requested")

    def _on_cancel(self, change: Any) -> None:
        if change["new"]:
            self.cancel()

    def cancel(self) -> None:
        """Stop after the slice or kernel in progress (finished values stay stored)."""
        self.cancel_event.set()
        if self.status in ("waiting", "running"):
            self.status = "cancelling"
            self.message = "cancelling after the slice in progress…"

    def callback(self, ev: ProgressEvent) -> None:
        """Feed one ProgressEvent (thread-safe enough: trait sets are atomic messages).

        Args:
            ev: the engine's event; ``kernel`` events are throttled by ``throttle`` seconds.
        """
        self.events += 1
        now = time.monotonic()
        if ev.stage == "kernel" and now - self._last_sent < self.throttle:
            return
        self._last_sent = now
        with self.hold_sync():
            if ev.stage == "start" and self.status == "waiting":
                self.status = "running"
            self.chunks_done = ev.chunks_done
            self.chunks_total = ev.chunks_total
            self.slices_done = ev.slices_done
            self.slices_total = ev.slices_total
            if ev.field:
                self.field = ev.field
            if ev.param:
                self.param = ev.param
            self.elapsed = float(ev.elapsed)
            self.eta = None if ev.eta is None else float(ev.eta)
            self.failures = ev.failures
        if ev.stage in ("chunk", "done"):
            notify_panels()

    def finish(self, report: RunReport | None = None, error: BaseException | None = None) -> None:
        """Mark the run finished (done, cancelled or error).

        Args:
            report: the run's report, for its summary, failures and elapsed time.
            error: the exception the run ended with, if any.
        """
        with self.hold_sync():
            if error is not None:
                self.status = "error"
                self.message = f"{type(error).__name__}: {error}"
            elif (report is not None and report.cancelled) or self.cancel_event.is_set():
                self.status = "cancelled"
                self.message = str(report) if report is not None else "cancelled"
            else:
                self.status = "done"
                self.message = str(report) if report is not None else ""
            if report is not None:
                self.failures = len(report.failures)
                self.elapsed = float(report.elapsed)
            self.eta = None
        notify_panels(force=True)

    def snapshot_html(self) -> str:
        """A static one-line HTML summary of the run's progress, for notebooks viewed without a
        running kernel.

        Returns:
            HTML with the status, chunk and slice counts, times and failures.
        """
        eta = "" if self.eta is None else f", ETA {self.eta:.1f}s"
        return (
            f"<div class='diffract-snapshot' style='{_SNAP_STYLE}'><b>diffract {html.escape(', '.join(self.fields))}</b>: "
            f"{html.escape(self.status)}, chunks {self.chunks_done}/{self.chunks_total}, slices {self.slices_done}/{self.slices_total}, "
            f"elapsed {self.elapsed:.1f}s{eta}, failures {self.failures}"
            + (f"<div>{html.escape(self.message)}</div>" if self.message else "")
            + "</div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return _snapshot_bundle(anywidget.AnyWidget, self, self.snapshot_html(), kwargs)


def notebook_progress(
    fields: Sequence[str], cancel: threading.Event | None = None
) -> tuple[Any, Any]:
    """The ``(callback, finish)`` pair a blocking ``compute.apply`` uses in a notebook.

    Displays a :class:`ProgressWidget`; its Cancel button is enabled only when the run is
    not on the main thread (a blocking cell cannot receive the click).

    Args:
        fields: the fields being computed.
        cancel: the event that cancels the run, if it can be cancelled.

    Returns:
        ``(callback, finish)``: feed events to the first, call the second when the run ends.
    """
    from IPython.display import display

    widget = ProgressWidget(fields, cancel=cancel)
    # a blocking cell cannot receive the click; interrupting the kernel stops the run instead
    widget.cancellable = (
        cancel is not None and threading.current_thread() is not threading.main_thread()
    )
    if not widget.cancellable:
        widget.message = "Interrupt the kernel (■) to stop: finished chunks stay stored. For a Cancel button, use diffract.widgets.run_with_progress."
    display(widget)

    def finish() -> None:
        widget.finish()

    return widget.callback, finish


_RUNNING: weakref.WeakKeyDictionary[Any, ProgressRun] = weakref.WeakKeyDictionary()


class ProgressRun:
    """One computation running in a worker thread, shown as its :class:`ProgressWidget`.

    Made by :func:`run_with_progress`; ``await run`` waits without blocking the notebook.

    Args:
        scope: the scope to compute on.
        fields: the fields to compute.
        apply_kwargs: keyword arguments of ``scope.compute.apply``.
    """

    def __init__(self, scope: Scope, fields: Sequence[str], apply_kwargs: dict[str, Any]) -> None:
        self.scope = scope
        self.fields = tuple(fields)
        self.widget = ProgressWidget(fields)
        self.report: RunReport | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._futures: list[Any] = []
        self._thread = threading.Thread(
            target=self._run,
            args=(apply_kwargs,),
            name=f"diffract-apply-{'-'.join(fields)[:40]}",
            daemon=True,
        )

    def start(self) -> ProgressRun:
        """Start the run in its worker thread (the cell returns at once).

        Returns:
            This run.
        """
        self.widget.status = "running"
        self._thread.start()
        return self

    def _run(self, kwargs: dict[str, Any]) -> None:
        try:
            self.report = self.scope.compute.apply(
                *self.fields,
                progress=self.widget.callback,
                cancel=self.widget.cancel_event,
                **kwargs,
            )
        except BaseException as exc:
            self.error = exc
        finally:
            self.widget.finish(self.report, self.error)
            self._done.set()
            for loop, fut in self._futures:
                loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))

    # --- control -----------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop after the slice or kernel in progress (finished values stay stored)."""
        self.widget.cancel()

    def done(self) -> bool:
        """Whether the run has ended.

        Returns:
            True once it finished, was cancelled or failed.
        """
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> RunReport | None:
        """Block until the run ends.

        Args:
            timeout: seconds to wait at most; ``None`` waits as long as it takes.

        Returns:
            The run's report.

        Raises:
            TimeoutError: the run is still going after ``timeout`` seconds.
            BaseException: the run's own error, when it failed.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run of {self.fields} is still going after {timeout}s")
        return self.result()

    def result(self) -> RunReport | None:
        """The run's report once it has ended.

        Returns:
            The report, or None while the run is still going.

        Raises:
            BaseException: the run's own error, when it failed.
        """
        if self.error is not None:
            raise self.error
        return self.report

    def __await__(self) -> Any:
        import asyncio

        async def waiter() -> RunReport | None:
            if not self._done.is_set():
                loop = asyncio.get_running_loop()
                fut = loop.create_future()
                self._futures.append((loop, fut))
                if self._done.is_set() and not fut.done():
                    fut.set_result(None)
                await fut
            return self.result()

        return waiter().__await__()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"<ProgressRun {list(self.fields)}: {self.widget.status}>"


def run_with_progress(
    scope: Any, *fields: str, display: bool = False, **apply_kwargs: Any
) -> ProgressRun:
    """Start ``scope.compute.apply(*fields, **apply_kwargs)`` in a worker thread.

    Returns a :class:`ProgressRun` at once; as a cell's last expression it shows the progress
    widget. Do not write to the same session from other cells until the run is done
    (``run.wait()``, ``await run``, or watch the widget).

    Args:
        scope: the session or scope to compute on.
        *fields: the fields to compute.
        display: show the widget right away.
        **apply_kwargs: passed to ``scope.compute.apply``.

    Returns:
        The started run.

    Raises:
        ValueError: no field was named.
        UnknownFieldError: a field is not produced by any registered kernel.
        RuntimeError: another run is still going on this session.
    """
    scope = _as_scope(scope)
    if not fields:
        raise ValueError("run_with_progress() needs at least one field name")
    for f in fields:
        scope.session.registry.producer(f)  # unknown field: clear error now, not in the thread
    session = scope.session
    running = _RUNNING.get(session)
    if running is not None and not running.done():
        raise RuntimeError(
            f"a run of {list(running.fields)} is still going on this session; wait for it (run.wait()) or cancel it"
        )
    run = ProgressRun(scope, fields, apply_kwargs)
    _RUNNING[session] = run
    run.start()
    if display:
        from IPython.display import display as show

        show(run.widget)
    return run


# ------------------------------------------------------------------------------------------
# live panels
# ------------------------------------------------------------------------------------------

_PANELS: weakref.WeakSet[Any] = weakref.WeakSet()


def notify_panels(*, force: bool = False) -> None:
    """Ask every live panel to re-read the store (called as chunks are committed).

    Args:
        force: re-read even if the panel read the store a moment ago.
    """
    for panel in list(_PANELS):
        try:
            panel._on_store_changed(force=force)
        except Exception:
            continue


def __getattr__(name: str) -> Any:
    if name == "FieldPanel":
        from diffract.widgets.panel import FieldPanel

        return FieldPanel
    raise AttributeError(f"module 'diffract.widgets' has no attribute {name!r}")

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
    A live Plotly figure of stored fields, an AnyWidget (see :mod:`diffract.viz` for the
    kinds); it redraws when new values land: while a run of this kernel reports progress, and
    within ``poll`` seconds (default 1) of any writer's commit (a tracker, another process).
"""

from __future__ import annotations

import html
import json
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets as t

from diffract._core.filters import Filter, FilterChain
from diffract._errors import FilterError
from diffract.widgets.filter_help import SORT_COLUMNS, filter_code, sort_slices, suggestions

if TYPE_CHECKING:
    from diffract.session import Scope
    from diffract.widgets.panel import FieldPanel
    from diffract.widgets.progress import (
        ProgressRun,
        ProgressWidget,
        notebook_progress,
        run_with_progress,
    )

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


def esm_module(name: str) -> Path | str:
    path = STATIC / f"{name}.js"
    return path if path.exists() else _MISSING % name


def as_scope(source: Any) -> Scope:
    from diffract.session import Scope

    if isinstance(source, Scope):
        return source
    raise TypeError(
        f"expected a diffract Session or Scope, got {type(source).__name__}: {source!r}"
    )


def snapshot_bundle(base: Any, widget: Any, html_text: str, kwargs: dict[str, Any]) -> Any:
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


SNAP_STYLE = "font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;color:var(--jp-ui-font-color1,inherit)"


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


#: the synced traits that make up the filter (a change re-runs it)
_CRITERIA = ("model_ids", "names", "param_types", "uids")


class FilterBuilder(anywidget.AnyWidget):
    """Build a filter interactively; ``.scope`` is the matching Scope (see the module doc).

    The synced traits (``model_ids``, ``names``, ``param_types``, ``uids``) are what the front
    end edits; ``count``, ``preview`` (one page of the matches, sorted by ``sort_by``),
    ``hints`` ("did you mean" for exact names and types that match nothing), ``code`` (the
    ``.filter(...)`` line) and ``filter_json`` follow them.

    Args:
        source: the session or scope the filter narrows.
        filter: a clause to start from (a Filter, its dict, or JSON).
        preview_limit: how many matching slices one page of the preview lists.
        source_name: the variable ``source`` is held in, for ``code`` (default ``session``
            for a Session, ``scope`` for a narrower scope).
        **kwargs: passed to ``anywidget.AnyWidget``.

    Raises:
        FilterError: ``filter`` is not a valid clause.
    """

    _esm = esm_module("filter")

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
    #: the preview's sort column (``filter_help.SORT_COLUMNS``; "" keeps the store's order)
    sort_by = t.Unicode("").tag(sync=True)
    sort_desc = t.Bool(False).tag(sync=True)
    #: the preview page shown (0-based, ``preview_limit`` rows each)
    page = t.Int(0).tag(sync=True)
    hints = t.List(t.Dict()).tag(sync=True)
    code = t.Unicode("").tag(sync=True)

    def __init__(
        self,
        source: Any,
        *,
        filter: Filter | dict | str | None = None,
        preview_limit: int = 50,
        source_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        from diffract.session import Session

        super().__init__(preview_limit=preview_limit, **kwargs)
        self._base = as_scope(source)
        self._scope: Scope = self._base
        self._matches: list[Any] = []
        self.source_name = source_name or ("session" if isinstance(source, Session) else "scope")
        self.refresh_choices()
        if filter is not None:
            self.set_filter(filter)
        self.observe(self._on_change, names=[*_CRITERIA, "preview_limit"])
        self.observe(self._on_view, names=["sort_by", "sort_desc", "page"])
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
        if not isinstance(content, dict):
            return
        if content.get("type") == "refresh":
            self.refresh_choices()
            self._update()
        elif content.get("type") == "suggest":
            self.take_suggestion(
                str(content.get("kind")), str(content.get("given")), str(content.get("value"))
            )

    def take_suggestion(self, kind: str, given: str, value: str) -> None:
        """Replace the name or type ``given`` with ``value`` (a "did you mean" click).

        Args:
            kind: ``"name"`` or ``"type"``.
            given: the entry that matched nothing.
            value: what to put in its place.

        Raises:
            ValueError: an unknown ``kind``.
        """
        if kind == "name":
            names = [value if n == given else n for n in (parse_names(self.names) or ())]
            self.names = format_names(names)
        elif kind == "type":
            self.param_types = [value if x == given else x for x in self.param_types]
        else:
            raise ValueError(f"unknown suggestion kind {kind!r}: 'name' or 'type'")

    def _on_change(self, change: Any) -> None:
        if change["name"] in _CRITERIA and self.page:
            with self.hold_trait_notifications():
                self.page = 0  # new matches: back to the first page (one update, below)
        self._update()

    def _on_view(self, change: Any) -> None:
        if change["name"] != "page" and self.page:
            self.page = 0  # a new order starts at its first page (observed: shows it)
            return
        self._show_page()

    def _update(self) -> None:
        crit = self.criteria()
        try:
            scope = self._base.filter(**crit)
            slices = scope.models.slices()
        except (FilterError, ValueError, KeyError) as exc:  # KeyError: a uid not stored
            with self.hold_sync():
                self.error = str(exc)
                self.count = 0
                self.preview = []
                self.hints = []
                self._matches = []
            return
        self._scope = scope
        self._matches = slices
        with self.hold_sync():
            self.error = ""
            self.count = len(slices)
            self.hints = self._hints(crit)
            self.code = filter_code(self.source_name, crit)
            self._show_page()
            self.filter_json = scope.utils.filter_json()

    def _hints(self, crit: dict[str, Any]) -> list[dict[str, Any]]:
        """ "Did you mean" for what matches nothing, looked up in the chosen models' slices."""
        pool = self._base.filter(model_ids=crit["model_ids"]) if crit["model_ids"] else self._base
        return suggestions(pool.models.slices(), crit["param_names"], crit["param_types"])

    def _show_page(self) -> None:
        """``preview``: the page ``page`` of the matches in ``sort_by`` order."""
        if self.sort_by not in ("", *SORT_COLUMNS):
            with self.hold_trait_notifications():  # an unknown column: the store's order
                self.sort_by, self.sort_desc = "", False
            return
        limit = max(1, self.preview_limit)
        last = max(0, (len(self._matches) - 1) // limit)
        if not 0 <= self.page <= last:
            self.page = min(max(0, self.page), last)  # observed: comes back here
            return
        rows = sort_slices(self._matches, self.sort_by, self.sort_desc)
        self.preview = [
            {
                "model_id": s.model_id,
                "name": s.name,
                "type": s.type.value,
                "shape": "×".join(map(str, s.shape)),
                "uid": s.uid,
            }
            for s in rows[self.page * limit : (self.page + 1) * limit]
        ]

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
            f"<div class='diffract-snapshot' style='{SNAP_STYLE}'><b>diffract filter</b> "
            f"<code>{html.escape(self.filter_json)}</code>: {self.count} of {self.total} slices{err}"
            f"<table><thead><tr><th>model</th><th>name</th><th>type</th><th>shape</th></tr></thead><tbody>{rows}</tbody></table>{more}</div>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return snapshot_bundle(anywidget.AnyWidget, self, self.snapshot_html(), kwargs)

    def __repr__(self) -> str:
        return f"<FilterBuilder {self.filter_json}: {self.count} of {self.total} slices>"


# ------------------------------------------------------------------------------------------
# live panels
# ------------------------------------------------------------------------------------------

PANELS: weakref.WeakSet[Any] = weakref.WeakSet()


def notify_panels(*, force: bool = False) -> None:
    """Ask every live panel to re-read the store (called as chunks are committed).

    Args:
        force: re-read even if the panel read the store a moment ago.
    """
    for panel in list(PANELS):
        try:
            panel._on_store_changed(force=force)
        except Exception:
            continue


#: names that live in submodules, imported on first use (each pulls in its dependencies)
_LAZY = {
    "FieldPanel": "diffract.widgets.panel",
    "ProgressRun": "diffract.widgets.progress",
    "ProgressWidget": "diffract.widgets.progress",
    "notebook_progress": "diffract.widgets.progress",
    "run_with_progress": "diffract.widgets.progress",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'diffract.widgets' has no attribute {name!r}")

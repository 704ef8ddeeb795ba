"""Progress of a computation: :class:`ProgressWidget`, the blocking ``notebook_progress`` pair
and :func:`run_with_progress` (a run in a worker thread, cancellable from the widget).

The widget follows the engine's :class:`~diffract.run.report.ProgressEvent` stream: "start",
"kernel" events as each kernel call starts and ends, "commit" when the values finished inside
a chunk are committed (live panels re-read the store), "chunk" when a chunk is committed,
"done". It counts what the user asked for: the requested values (a field on a slice) made
out of those planned, for the fields and slices requested; the bar is the share of the
planned work (kernel steps) done, never going back; the time left is a range, and none
until enough of the run is measured (:meth:`~diffract.run.eta.EtaEstimator.bounds`). Kernel
names, their slices and the chunks are in a detail line. The final state says how the run
ended (done, cancelled with what was kept, failed, or nothing to compute) with counts taken
from the run's report; a displayed widget's static HTML (saved notebooks, nbconvert) is
updated to that final state when the run ends.
"""

from __future__ import annotations

import contextlib
import html
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anywidget
import traitlets as t

from diffract.run.eta import ETA_MIN_SHARE
from diffract.widgets import SNAP_STYLE, as_scope, esm_module, notify_panels, snapshot_bundle

if TYPE_CHECKING:
    from diffract.run.report import ProgressEvent, RunReport
    from diffract.session import Scope

__all__ = ["ProgressRun", "ProgressWidget", "notebook_progress", "run_with_progress"]

#: weight of the newest estimate in the smoothed ETA (the rest follows the previous one)
ETA_SMOOTHING = 0.3
#: seconds between two "kernel" updates of a displayed widget (a fast kernel makes hundreds
#: of calls a second: one comm message each would queue up behind the run)
SHOWN_THROTTLE = 0.1
#: the range around an ETA made from slices alone (chunks run elsewhere), as factors
SLICE_ETA_RANGE = (0.7, 1.5)
#: failures listed in the widget (the report holds all of them)
MAX_FAILURES_SHOWN = 50


class ProgressWidget(anywidget.AnyWidget):
    """Progress of one ``apply``: chunks, slices, current field/parameter, time, failures.

    ``callback`` receives the engine's ProgressEvents; ``cancel_event`` is set when the user
    clicks Cancel (``cancel_requested``) or calls :meth:`cancel`.

    Args:
        fields: the fields being computed (shown in the title).
        cancel: the event the run watches; default: a new one (``cancel_event``).
        registry: the kernel registry, to name the kernel of each failure (optional).
        **kwargs: passed to ``anywidget.AnyWidget``.
    """

    _esm = esm_module("progress")

    fields = t.List(t.Unicode()).tag(sync=True)
    status = t.Unicode("waiting").tag(sync=True)  # waiting running cancelling cancelled done error
    chunks_done = t.Int(0).tag(sync=True)
    chunks_total = t.Int(0).tag(sync=True)
    #: slices reached: the committed ones plus those the chunk in progress has started on
    slices_done = t.Int(0).tag(sync=True)
    slices_total = t.Int(0).tag(sync=True)
    #: slices whose values are committed to the store
    slices_stored = t.Int(0).tag(sync=True)
    #: kernel calls made so far (one per kernel and slice)
    kernel_calls = t.Int(0).tag(sync=True)
    #: requested values (a requested field on a slice) made, and planned
    values_done = t.Int(0).tag(sync=True)
    values_total = t.Int(0).tag(sync=True)
    #: share of the planned work done (0..1), what the bar shows; never goes back
    fraction = t.Float(0.0).tag(sync=True)
    #: the requested field in progress ("" for a step the requested fields share)
    field = t.Unicode("").tag(sync=True)
    #: the slice in progress (``model:slice``)
    param = t.Unicode("").tag(sync=True)
    #: the engine's detail: kernel in progress, its slices, steps, chunks
    detail = t.Unicode("").tag(sync=True)
    elapsed = t.Float(0.0).tag(sync=True)
    eta = t.Float(None, allow_none=True).tag(sync=True)
    #: the range of the time left (None: not known well enough to say)
    eta_low = t.Float(None, allow_none=True).tag(sync=True)
    eta_high = t.Float(None, allow_none=True).tag(sync=True)
    failures = t.Int(0).tag(sync=True)
    #: the first failures: ``{"model_id", "slice", "uid", "field", "kernel", "error"}``
    failure_list = t.List(t.Dict()).tag(sync=True)
    #: the final one-line summary (empty while running)
    outcome = t.Unicode("").tag(sync=True)
    message = t.Unicode("").tag(sync=True)
    cancellable = t.Bool(True).tag(sync=True)
    cancel_requested = t.Bool(False).tag(sync=True)

    #: minimum seconds between two "kernel" updates sent to the front end (commit, chunk and
    #: done events always go); the widgets a run shows use :data:`SHOWN_THROTTLE`
    throttle = 0.0

    def __init__(
        self,
        fields: Sequence[str] = (),
        *,
        cancel: threading.Event | None = None,
        registry: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(fields=list(fields), **kwargs)
        self.cancel_event = cancel or threading.Event()
        self.registry = registry
        self.events = 0
        self._last_sent = 0.0
        self._chunk_seen: set[str] = set()
        self._eta_at: tuple[float, float] | None = None  # (smoothed eta, elapsed when set)
        self._last_event: ProgressEvent | None = None
        self._handles: list[Any] = []  # display handles, updated with the final snapshot
        #: a display and the run's end race (the run's thread finishes while the cell shows
        #: the widget): the handle list and the final status change under this lock
        self._display_lock = threading.Lock()
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
        self._last_event = ev
        steps = ev.steps_total > 0  # the engine counts kernel steps: it says what is done
        if ev.stage in ("start", "chunk"):
            self._chunk_seen.clear()
        reached = ev.slices_done
        if ev.stage == "kernel" and not steps:
            self.kernel_calls += 1
            if ev.param:
                self._chunk_seen.add(ev.param)
            # the slice in progress is not finished: the ones before it in this chunk are
            reached = ev.slices_done + max(len(self._chunk_seen) - 1, 0)
        now = time.monotonic()
        if ev.stage == "kernel" and now - self._last_sent < self.throttle:
            return
        self._last_sent = now
        with self.hold_sync():
            if ev.stage == "start" and self.status == "waiting":
                self.status = "running"
            self.chunks_done = ev.chunks_done
            self.chunks_total = ev.chunks_total
            self.slices_total = ev.slices_total
            self.elapsed = float(ev.elapsed)
            self.failures = ev.failures
            if ev.values_total:
                self.values_total = ev.values_total
                self.values_done = max(min(ev.values_done, ev.values_total), self.values_done)
            if steps:
                self._follow_steps(ev)
            else:
                self.slices_stored = ev.slices_done
                self.slices_done = min(max(reached, self.slices_done), ev.slices_total)
                if ev.field:
                    self.field = ev.field
                if ev.param:
                    self.param = ev.param
                eta = self._smoothed_eta(float(ev.elapsed))
                self.eta = eta
                if ev.slices_total:
                    self._advance(self.slices_done / ev.slices_total)
                # slices are all the engine tells here: a wide range, once some are done
                known = eta is not None and self.fraction >= ETA_MIN_SHARE
                self.eta_low = eta * SLICE_ETA_RANGE[0] if eta is not None and known else None
                self.eta_high = eta * SLICE_ETA_RANGE[1] if eta is not None and known else None
                self.detail = f"chunk {ev.chunks_done}/{ev.chunks_total}" if ev.chunks_total else ""
        if ev.stage in ("commit", "chunk", "done"):
            notify_panels()

    def _advance(self, share: float) -> None:
        """Move the bar to ``share`` of the work (it never goes back)."""
        self.fraction = min(max(self.fraction, share), 1.0)

    def _follow_steps(self, ev: ProgressEvent) -> None:
        """The counts of an engine that reports its kernel steps: slices with every kernel
        done, those stored, steps made, the share of the work done, the requested field and
        slice in progress (the kernel and its slices in the detail), the ETA and its range."""
        self.slices_done = ev.slices_done
        self.slices_stored = ev.slices_done if ev.slices_stored is None else ev.slices_stored
        self.kernel_calls = ev.steps_done
        self._advance(ev.steps_done / ev.steps_total)
        self.eta = ev.eta
        self.eta_low, self.eta_high = ev.eta_low, ev.eta_high
        parts = [f"step {ev.steps_done}/{ev.steps_total}"]
        if ev.kernel:
            self.field = ev.field if ev.field in self.fields else ""
            self.param = ev.param or ""
            parts.insert(
                0,
                f"kernel {ev.kernel} ({ev.kernel_rank} of {ev.kernels_total}):"
                f" {ev.kernel_done}/{ev.kernel_total} slices",
            )
        if ev.chunks_total > 1:
            parts.append(f"chunk {min(ev.chunks_done + 1, ev.chunks_total)}/{ev.chunks_total}")
        self.detail = " · ".join(parts)

    def _smoothed_eta(self, elapsed: float) -> float | None:
        """Seconds left: the rate so far (in slices reached) blended with the previous estimate
        counted down, so that one slow or fast slice does not make the ETA jump."""
        done, total = self.slices_done, self.slices_total
        if done <= 0 or total <= 0 or elapsed <= 0:
            return None
        raw = elapsed / done * (total - done)
        if self._eta_at is None:
            eta = raw
        else:
            prev, at = self._eta_at
            eta = ETA_SMOOTHING * raw + (1 - ETA_SMOOTHING) * max(prev - (elapsed - at), 0.0)
        self._eta_at = (eta, elapsed)
        return eta

    def finish(self, report: RunReport | None = None, error: BaseException | None = None) -> None:
        """Mark the run finished (done, cancelled or error) with counts that add up.

        A cancelled or failed run keeps its bar where the work stopped and counts what was
        kept; a done run fills it. Every display of the widget gets the final snapshot.

        Args:
            report: the run's report, for its summary, failures and elapsed time.
            error: the exception the run ended with, if any.
        """
        last = self._last_event
        cancelled = (
            (report is not None and report.cancelled)
            or self.cancel_event.is_set()
            or (last is not None and last.cancelled)
        )
        with self.hold_sync():
            if report is not None:
                self.failures = len(report.failures)
                self.elapsed = float(report.elapsed)
                self.failure_list = [
                    self._failure_row(f) for f in report.failures[:MAX_FAILURES_SHOWN]
                ]
            if error is not None:
                self.status = "error"
                self.message = f"{type(error).__name__}: {error}"
                self.outcome = f"failed after {self.slices_stored} of {self.slices_total} slice(s)"
            elif cancelled:
                self.status = "cancelled"
                self.message = str(report) if report is not None else "cancelled"
                if report is not None and self.values_total:
                    # what is stored, not what was reached: the step in progress was not kept
                    self.values_done = min(report.computed, self.values_total)
                self.outcome = self._outcome(report, "cancelled")
            else:
                self.status = "done"
                self.message = str(report) if report is not None else ""
                self.outcome = self._outcome(report, "done")
                self.slices_done = self.slices_stored = self.slices_total
                self.values_done = self.values_total
                self.fraction = 1.0
                if self.chunks_total:
                    self.chunks_done = self.chunks_total
            if cancelled or error is not None:
                # what is stored, not what was reached: the slice in progress was not finished
                self.slices_done = self.slices_stored
            self.eta = self.eta_low = self.eta_high = None
            self.field = self.param = ""
            self.cancellable = False
        self._update_displays()
        notify_panels(force=True)

    def _outcome(self, report: RunReport | None, how: str) -> str:
        if report is None:
            if how == "done" and self.slices_total == 0 and self.events:
                return "nothing to compute: every requested value is stored"
            if how == "cancelled" and self.values_total:
                return (
                    f"cancelled: {self.slices_stored} of {self.slices_total} slice(s) complete"
                    " (finished values kept)"
                )
            return f"{how}: {self.slices_stored} of {self.slices_total} slice(s) stored"
        if how == "done" and report.computed == 0 and not report.failures and report.chunks == 0:
            return f"nothing to compute: all {report.reused} requested value(s) are stored"
        if report.cancelled or how == "cancelled":
            parts = [f"kept {report.computed} computed value(s)"]
            if report.reused:
                parts.append(f"{report.reused} were already stored")
            if report.not_applicable:
                parts.append(f"{report.not_applicable} not applicable")
            parts.append(f"{report.skipped} not computed (run again to finish)")
            if report.failures:
                parts.append(f"{len(report.failures)} failed")
            return "cancelled: " + " · ".join(parts)
        parts = [f"{report.computed} computed", f"{report.reused} already stored"]
        if report.not_applicable:
            parts.append(f"{report.not_applicable} not applicable")
        if report.failures:
            parts.append(f"{len(report.failures)} failed")
        return f"{how}: " + " · ".join(parts) + " (requested values)"

    def _failure_row(self, f: Any) -> dict[str, str]:
        kernel = f.field
        if self.registry is not None:
            with contextlib.suppress(Exception):  # a field no kernel produces now: keep its name
                kernel = self.registry.producer(f.field).name
        return {
            "model_id": f.model_id,
            "slice": f.name,
            "uid": f.uid,
            "field": f.field,
            "kernel": str(kernel),
            "error": f.error,
        }

    def request_text(self) -> str:
        """What was asked for, as the live view shows it.

        Returns:
            e.g. ``"alpha, stable_rank on 200 slices"``.
        """
        names = ", ".join(self.fields) if len(self.fields) <= 4 else f"{len(self.fields)} fields"
        n = self.slices_total
        return f"{names} on {n} slice{'s' * (n != 1)}" if n else names

    def counter_text(self) -> str:
        """The one counter: requested values made of those planned.

        Returns:
            e.g. ``"113 of 200 requested values"`` (slices when the engine does not count
            values).
        """
        if self.values_total:
            return f"{self.values_done} of {self.values_total} requested values"
        return f"{self.slices_done} of {self.slices_total} slices"

    #: the states a run ends in: its displays become the static final picture
    FINAL = ("done", "cancelled", "error")

    def snapshot_html(self) -> str:
        """A static HTML picture of the run's progress: what it was asked, a bar, the one
        counter, times, the outcome, the failures and the details, with the class names of
        the live view. Shown where no widget model is around (saved notebooks, nbconvert,
        GitHub); once the run has ended it is the final state, and it replaces the live view.

        Returns:
            HTML with the request, status, bar, counts, times, outcome and failures.
        """
        esc = html.escape
        label = {
            "waiting": "waiting",
            "running": "running",
            "cancelling": "cancelling",
            "cancelled": "cancelled: finished values kept",
            "done": "done",
            "error": "failed",
        }.get(self.status, self.status)  # the live view's labels
        colour = {"done": "#2e7d32", "cancelled": "#9e9e9e", "error": "#c62828"}.get(
            self.status, "#1976d2"
        )
        pct = 100.0 if self.status == "done" else 100.0 * self.fraction
        left = ""
        if self.status == "running" and self.eta_low is not None and self.eta_high is not None:
            left = f" · left <b class='diffract-eta'>{_fmt_range(self.eta_low, self.eta_high)}</b>"
        bar = (
            f"<div role='progressbar' aria-valuemin='0' aria-valuemax='100' aria-valuenow='{pct:.0f}'"
            f" aria-valuetext='{esc(self.counter_text(), quote=True)}'"
            " style='height:8px;background:rgba(127,127,127,.25);border-radius:4px;margin:4px 0;max-width:480px'>"
            f"<div class='diffract-snapshot-bar' style='height:8px;width:{pct:.1f}%;background:{colour};"
            "border-radius:4px'></div></div>"
        )
        counts = (
            f"<div><b class='diffract-counter'>{esc(self.counter_text())}</b>"
            f" · elapsed <b class='diffract-elapsed'>{_fmt_seconds(self.elapsed)}</b>{left}"
            f" · failures <b class='diffract-failures'>{self.failures}</b></div>"
        )
        outcome = f"<div class='diffract-outcome'>{esc(self.outcome)}</div>" if self.outcome else ""
        failures = ""
        if self.failure_list:
            rows = "".join(
                f"<tr class='diffract-failure'><td>{esc(f['model_id'])}:{esc(f['slice'])}</td>"
                f"<td>{esc(_kernel_of(f))}</td><td>{esc(f['error'])}</td></tr>"
                for f in self.failure_list
            )
            n = self.failures
            failures = (
                f"<details class='diffract-failure-list'><summary>{n} failure{'s' * (n != 1)}</summary>"
                f"<table style='text-align:left'>{rows}</table></details>"
            )
        detail = (
            "<details class='diffract-detail'><summary>details</summary>"
            f"slices complete <b class='diffract-slices'>{self.slices_done}/{self.slices_total}</b>"
            f" · kernel steps <b class='diffract-kernel-calls'>{self.kernel_calls}</b>"
            f" · chunks <b class='diffract-chunks'>{self.chunks_done}/{self.chunks_total}</b>"
            + (f" · {esc(self.detail)}" if self.detail and self.status not in self.FINAL else "")
            + "</details>"
        )
        return (
            f"<div class='diffract-snapshot diffract-progress-snapshot diffract-progress'"
            f" data-status='{esc(self.status)}' style='{SNAP_STYLE}'>"
            f"<div><b class='diffract-progress-title'>{esc(self.request_text())}</b>"
            f" · <span class='diffract-progress-status'>{esc(label)}</span></div>"
            f"{bar}{counts}{outcome}{failures}{detail}</div>"
        )

    def _final_bundle(self) -> dict[str, str]:
        """The static final picture alone: a finished run has nothing left to follow, and a
        widget view would read "model not found" in a new kernel, and nothing in nbconvert."""
        return {"text/html": self.snapshot_html(), "text/plain": self.outcome or self.status}

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        if self.status in self.FINAL:
            return self._final_bundle()
        return snapshot_bundle(anywidget.AnyWidget, self, self.snapshot_html(), kwargs)

    def _ipython_display_(self, **kwargs: Any) -> None:
        """Display with a handle, so that :meth:`finish` can replace the output (the live
        view and the static snapshot a saved notebook and nbconvert keep) with the final
        state."""
        from IPython.display import display

        shown_final = self.status in self.FINAL
        bundle = self._repr_mimebundle_()
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        handle = display(data, metadata=meta, raw=True, display_id=True)
        if handle is None or shown_final:
            return
        with self._display_lock:
            if self.status not in self.FINAL:
                self._handles.append(handle)  # finish() will update it
                return
        with contextlib.suppress(Exception):  # the run ended while it was being shown
            handle.update(self._final_bundle(), raw=True)

    def _update_displays(self) -> None:
        with self._display_lock:  # the status is final: a display from now on shows the end
            handles, self._handles = self._handles, []
        if not handles:
            return
        data = self._final_bundle()
        for handle in handles:
            with contextlib.suppress(Exception):  # no kernel around any more: nothing to update
                handle.update(data, raw=True)


def _kernel_of(f: dict[str, str]) -> str:
    """A failure's kernel column, as the live view shows it: ``"kernel (field)"``."""
    return (
        f"{f['kernel']} ({f['field']})" if f["kernel"] and f["kernel"] != f["field"] else f["field"]
    )


def _fmt_seconds(sec: float) -> str:
    sec = max(float(sec), 0.0)
    if sec < 60:
        return f"{sec:.0f}s" if sec >= 10 else f"{sec:.1f}s"
    m, s = divmod(round(sec), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _fmt_range(low: float, high: float) -> str:
    """``"about 3m10s–4m50s"``: a range of seconds left."""
    return f"about {_fmt_seconds(low)}–{_fmt_seconds(high)}"


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
    widget.throttle = SHOWN_THROTTLE
    # a blocking cell cannot receive the click; interrupting the kernel stops the run instead
    widget.cancellable = (
        cancel is not None and threading.current_thread() is not threading.main_thread()
    )
    if not widget.cancellable:
        widget.message = "Interrupt the kernel (■) to stop: the values committed so far stay stored. For a Cancel button, use diffract.widgets.run_with_progress."
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
        self.widget = ProgressWidget(fields, registry=scope.session.registry)
        self.widget.throttle = SHOWN_THROTTLE
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

    def _ipython_display_(self, **kwargs: Any) -> None:
        self.widget._ipython_display_(**kwargs)

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
    scope = as_scope(scope)
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

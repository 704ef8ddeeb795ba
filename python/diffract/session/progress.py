"""Progress for ``compute.apply``: a callback, the notebook widget, or a terminal bar."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from diffract.run.report import ProgressCallback, ProgressEvent
from diffract.session._frontends import frontend

Finish = Callable[[], None]


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython already imported, a ZMQ shell)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def progress_callback(
    progress: bool | ProgressCallback | None,
    fields: Sequence[str],
    cancel: threading.Event | None = None,
) -> tuple[ProgressCallback | None, Finish | None]:
    """The progress callback of one run and what to call when it ends.

    Args:
        progress: False (none), a callback (used as is), True (a terminal bar) or None (the
            widget in a notebook, a bar on a terminal, nothing otherwise).
        fields: the fields the run computes (the bar's label).
        cancel: the run's cancel event (the widget's Cancel button sets it).

    Returns:
        ``(callback, finish)``; either may be None.
    """
    if progress is False:
        return None, None
    if callable(progress):
        return progress, None
    if progress is None:
        if in_notebook():
            try:
                widget: tuple[ProgressCallback, Finish] = frontend("notebook_progress")(
                    fields, cancel=cancel
                )
                return widget
            except ImportError:
                pass
        if not sys.stderr.isatty():
            return None, None
    return _tqdm_progress(fields)


def _tqdm_progress(fields: Sequence[str]) -> tuple[ProgressCallback, Finish]:
    from tqdm.auto import tqdm

    bar: dict[str, Any] = {}

    def on_event(ev: ProgressEvent) -> None:
        # the bar is the work done (kernel steps, when the engine counts them); the postfix
        # counts the requested values made, then (shortened) the kernel in progress
        steps = ev.steps_total > 0
        if ev.stage == "start":
            bar["bar"] = tqdm(
                total=ev.steps_total if steps else ev.slices_total,
                desc=", ".join(fields)[:40],
                unit="step" if steps else "slice",
                leave=True,
            )
            return
        b = bar.get("bar")
        if b is None:
            return
        now = f"values {ev.values_done}/{ev.values_total}" if ev.values_total else ""
        if ev.kernel:
            now += f" · {ev.kernel} @ {ev.param or ''}"
        elif ev.param:
            now += f" · {ev.field} @ {ev.param}"
        b.set_postfix_str(now.strip(" ·")[:60], refresh=False)
        b.n = max(b.n, ev.steps_done if steps else ev.slices_done)
        b.refresh()

    def finish() -> None:
        if "bar" in bar:
            bar["bar"].close()

    return on_event, finish

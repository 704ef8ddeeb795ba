"""The analysis worker: one thread that stores snapshots and computes their fields.

It is the tracker's single writer: for each snapshot it takes from the queue it runs
``models.add`` (the weights and the step meta, one commit), ``compute.apply(fields)`` on that
checkpoint's scope under the session's memory budget (a commit per chunk), then marks the step
committed (:func:`diffract.tracking.ledger.mark_committed`). A failure is recorded and the
worker goes on with the next snapshot; the step stays incomplete in the store.

Its runs go through a :class:`RunSession`, the session with a cancel slot of its own: the
user's ``session.compute.apply`` and ``session.compute.cancel()`` while the worker runs
neither stop nor are stopped by the tracker's analysis.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from diffract._core.filters import FilterChain
from diffract._core.steps import TRACK_KEY
from diffract.tracking.ids import checkpoint_id, literal_ids
from diffract.tracking.ledger import mark_committed
from diffract.tracking.policy import SnapshotQueue
from diffract.tracking.snapshot import Snapshot


class RunSession:
    """A session as the tracker's runs see it: every attribute is the session's, read and
    written through, except ``cancel_event``, the slot where ``compute.apply`` keeps the event of
    the run in progress (the one ``compute.cancel()`` sets, cleared when the run ends).

    With its own slot, the worker's ``apply`` (which has its own cancel event) neither takes
    over the user's ``session.compute.cancel()`` nor clears the event of a user's ``apply``
    running at the same time.

    Args:
        session: the session written to.
    """

    #: the attributes kept here instead of on the session
    OWN = frozenset({"cancel_event"})

    def __init__(self, session: Any) -> None:
        object.__setattr__(self, "_target", session)
        self.cancel_event: threading.Event | None = None

    def __getattr__(self, name: str) -> Any:
        if name == "_target":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self._target, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._target, name, value)


@dataclass
class Analysis:
    """What the worker does with a checkpoint: the fields, their scope and run options.

    Attributes:
        session: the session written to.
        run: the run's name.
        fields: the fields computed on each checkpoint (may be empty: weights only).
        scope: ``{"param_names": ..., "param_types": ...}`` narrowing the slices analyzed.
        options: extra ``compute.apply`` arguments (kernel options, ``conventions``...).
    """

    session: Any
    run: str
    fields: Sequence[str]
    scope: dict[str, Any]
    options: dict[str, Any]
    #: the scope the fields are computed from: the whole store, through a RunSession
    root: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from diffract.session import Scope  # loaded already: the session made the tracker

        self.root = Scope(RunSession(self.session), FilterChain())

    def store(self, snap: Snapshot) -> str:
        """``models.add`` of a snapshot under its checkpoint id, with the step meta."""
        mid = checkpoint_id(self.run, snap.step)
        meta = {TRACK_KEY: {"run": self.run, "step": snap.step}}
        self.session.models.add(snap, model_id=mid, filter_spec=True, meta=meta)
        return mid

    def analyze(self, step: int, model_id: str, cancel: threading.Event) -> int:
        """Compute the fields on one checkpoint, then mark its step committed.

        Returns:
            The number of slice failures the run reported (the step is committed anyway:
            running it again would fail the same way).

        Raises:
            RuntimeError: the run was cancelled (the step stays incomplete).
        """
        failures = 0
        if self.fields:
            scope = self.root.filter(model_ids=literal_ids([model_id]), **self.scope)
            # failures are counted and reported at close, never raised here: a step whose
            # analysis partly failed is still committed (whatever the session's on_failure)
            options = {**self.options, "on_failure": "warn"}
            report = scope.compute.apply(*self.fields, progress=False, cancel=cancel, **options)
            if report.cancelled:
                raise RuntimeError(f"the analysis of step {step} was cancelled")
            failures = len(report.failures)
        mark_committed(self.session, self.run, step, model_id, self.fields)
        return failures


#: called after each committed step: (step, model_id)
StepCallback = Callable[[int, str], None]


class Worker(threading.Thread):
    """The thread that drains the queue (and first finishes ``resume`` checkpoints).

    Args:
        analysis: what to do with each checkpoint.
        queue: the snapshots to store.
        record: ``record(event, step, detail)``: the tracker's bookkeeping, called with
            ``"committed"`` (detail: model id), ``"finished"`` (a resumed checkpoint
            committed; detail: model id), ``"failed"`` (detail: the error text) or
            ``"failures"`` (detail: the number of slice failures of a committed step).
        resume: ``(step, model_id)`` of stored checkpoints whose fields must be finished.
        nice: how much to lower this thread's scheduling priority (Linux: per thread, and
            inherited by the run's own worker threads), so that on a busy machine the
            training thread gets the cores first; 0 leaves it as it is.
    """

    def __init__(
        self,
        analysis: Analysis,
        queue: SnapshotQueue,
        record: Callable[[str, int, Any], None],
        resume: Sequence[tuple[int, str]] = (),
        nice: int = 10,
    ) -> None:
        super().__init__(name=f"diffract-track-{analysis.run}", daemon=True)
        self.analysis = analysis
        self.queue = queue
        self.record = record
        self.resume = list(resume)
        self.nice = nice
        #: set to stop once the queue is drained
        self.stop = threading.Event()
        #: set to cancel the analysis in progress (close without draining)
        self.cancel = threading.Event()
        #: seconds spent storing and analyzing
        self.busy_seconds = 0.0
        #: set once the resumed checkpoints are finished
        self.resumed = threading.Event()

    def run(self) -> None:
        _lower_priority(self.nice)
        for step, mid in self.resume:
            if self.cancel.is_set():
                break
            self._guarded(step, functools.partial(self._finish, step, mid, "finished"))
        self.resume.clear()
        self.resumed.set()
        while True:
            snap = self.queue.take(self.stop)
            if snap is None:
                return
            try:
                self._guarded(snap.step, functools.partial(self._commit, snap))
            finally:
                del snap
                self.queue.done()

    def _guarded(self, step: int, job: Callable[[], None]) -> None:
        start = time.perf_counter()
        try:
            job()
        except Exception as exc:  # recorded; the next snapshot still gets its turn
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.record("failed", step, text)
        finally:
            self.busy_seconds += time.perf_counter() - start

    def _commit(self, snap: Snapshot) -> None:
        mid = self.analysis.store(snap)
        snap.leaves.clear()  # the store has the weights: free the host copy now
        self._finish(snap.step, mid, "committed")

    def _finish(self, step: int, mid: str, event: str) -> None:
        failures = self.analysis.analyze(step, mid, self.cancel)
        if failures:
            self.record("failures", step, failures)
        self.record(event, step, mid)


def _lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value by ``nice`` (Linux; elsewhere nothing happens)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))

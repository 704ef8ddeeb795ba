"""``session.track(run, fields=..., every=N)``: the tracker of one training run.

The training thread calls ``tracker.step(model, step=i)``; every ``every`` steps the tracker
takes a host copy of the weights (:mod:`.snapshot`) and offers it to a bounded queue
(:mod:`.policy`); one worker thread (:mod:`.worker`) stores each snapshot as the checkpoint
``<run>-s<step:09d>`` (:mod:`.ids`) with the step in its meta and computes the fields in the
background. The store records which steps are complete (:mod:`.ledger`), so a new tracker
for the same run continues the step axis after a restart or a crash.
"""

from __future__ import annotations

import atexit
import re
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from diffract._errors import (
    DuplicateModelError,
    InvalidArgumentError,
    StoreError,
    StoreLockedError,
)
from diffract.extract.lora import check_lora_options
from diffract.tracking.alerts import (
    AlertCallback,
    Alerts,
    RuleEvent,
    alert_callbacks,
    check_rules,
    rule_fields,
)
from diffract.tracking.ids import STEP_DIGITS, check_run, check_step, checkpoint_id, literal_ids
from diffract.tracking.ledger import committed_ids, drop_incomplete, mark_run, run_steps
from diffract.tracking.policy import SnapshotQueue, check_policy
from diffract.tracking.snapshot import register_snapshot_extractor, take_snapshot
from diffract.tracking.status import TrackerStatus
from diffract.tracking.worker import Analysis, StepCallback, Worker

_ON_EXISTING = ("skip", "error")
_INCOMPLETE = ("finish", "drop")
_RESERVED_OPTIONS = ("progress", "cancel")

#: the open tracker of each (store object, run) of this process: one writer per run
_OPEN: dict[tuple[int, str], weakref.ref[Tracker]] = {}
_OPEN_GUARD = threading.Lock()


def _claim_run(tracker: Tracker) -> None:
    """Register ``tracker`` as the writer of its run in its store, or refuse a second one.

    Two trackers of one run would store interleaved steps of two models under one step
    axis. The key is the store object, so a newer session on the same store (which took the
    writer lock over from the older one, whose tracker can no longer write) may track it.

    Raises:
        StoreLockedError: an open tracker of this process writes the run to this store.
    """
    key = (id(tracker.session.store), tracker.run)
    with _OPEN_GUARD:
        ref = _OPEN.get(key)
        other = ref() if ref is not None else None
        if other is not None and not other._closed:
            raise StoreLockedError(
                f"run {tracker.run!r} is tracked already by an open tracker of this session "
                f"(last step {other._last}); use that tracker, or close it first "
                "(tracker.close()) and make a new one, which continues its step axis"
            )
        _OPEN[key] = weakref.ref(tracker)


def _release_run(tracker: Tracker) -> None:
    """Forget ``tracker`` as its run's writer (it closed)."""
    key = (id(tracker.session.store), tracker.run)
    with _OPEN_GUARD:
        ref = _OPEN.get(key)
        if ref is not None and ref() in (None, tracker):
            del _OPEN[key]


def _check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise InvalidArgumentError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def _check_fields(session: Any, fields: object) -> list[str]:
    if isinstance(fields, str):
        fields = [fields]
    if not isinstance(fields, Sequence) or not all(isinstance(f, str) for f in fields):
        raise InvalidArgumentError(
            f"fields must be a list of field names, e.g. ['pl_alpha'], got {fields!r}"
        )
    for f in fields:
        session.registry.producer(f)  # an unknown field: UnknownFieldError now, not later
    return list(dict.fromkeys(fields))


class Tracker:
    """Snapshot a training run's weights every ``every`` steps; analyze them in the background.

    Made by ``session.track(run, fields, ...)``. Use it as a context manager, or call
    :meth:`close` (a tracker left open is closed, draining its queue, at interpreter exit).

    Args:
        session: the writable session the checkpoints go to.
        run: the run's name (a model id prefix: none of ``@ [ ] , /``).
        fields: the fields computed on each checkpoint, e.g. ``["pl_alpha"]`` (empty: only
            the weights are stored).
        every: snapshot the steps that are multiples of ``every``.
        max_pending: K, the most snapshots waiting for the worker.
        policy: what happens when K are waiting: ``"thin"``, ``"drop_oldest"``,
            ``"drop_new"`` or ``"block"`` (see :mod:`diffract.tracking.policy`).
        block_timeout: the longest ``"block"`` makes training wait, in seconds.
        filter_spec: which leaves to snapshot (as for ``models.add``); default: float arrays.
        param_names: only these slices are analyzed (stored weights are not narrowed).
        param_types: only slices of these types are analyzed, e.g. ``["dense", "conv"]``.
        on_existing: a step the store already has: ``"skip"`` it (counted in
            ``status.existing``) or raise (``"error"``).
        incomplete: incomplete steps found at start (a crash mid-analysis): ``"finish"``
            their fields in the worker (their weights are stored), or ``"drop"`` them.
        on_step: called in the worker after each committed step as ``on_step(step,
            model_id)`` (e.g. ``lambda *_: panel.refresh()``); a callable or a list of them.
        non_blocking: copy CUDA tensors asynchronously.
        nice: lower the worker's priority by this much (Linux), so training gets the CPU
            first on a busy machine; 0 keeps it.
        alerts: the diagnosis rules watched (``True``: every per-layer rule of
            ``diffract.kernels.diagnosis.RULES``; names: those): their ``diag_*`` fields are
            computed on each step, and a layer that turns flagged raises one
            :class:`~diffract.tracking.alerts.RuleEvent` (docs/tracking.md#alerts).
        on_alert: called with each event, in the worker thread; a callable or a list.
        warn_alerts: also emit each event as a ``DiagnosisWarning``.
        stop_on: (experimental) rules whose event sets :attr:`should_stop`, which the
            Keras, Lightning and Hugging Face callbacks act on by stopping training.
        **options: passed to every ``compute.apply`` (kernel options, ``conventions=``,
            ``memory_budget=``, ``kernel_options=``); ``workers`` defaults to 1 (one
            analysis thread beside training) instead of the session's.

    Raises:
        StoreError: the session is read-only.
        InvalidArgumentError: a bad run name, ``every``, policy or choice.
        UnknownFieldError: a field no kernel produces.
    """

    def __init__(
        self,
        session: Any,
        run: str,
        fields: Sequence[str] | str = (),
        *,
        every: int = 1,
        max_pending: int = 2,
        policy: str = "thin",
        block_timeout: float = 1.0,
        filter_spec: Any = None,
        param_names: Sequence[str] | str | None = None,
        param_types: Sequence[str] | str | None = None,
        on_existing: str = "skip",
        incomplete: str = "finish",
        on_step: StepCallback | Sequence[StepCallback] | None = None,
        non_blocking: bool = True,
        nice: int = 10,
        alerts: bool | str | Sequence[str] | None = None,
        on_alert: AlertCallback | Sequence[AlertCallback] | None = None,
        warn_alerts: bool = True,
        stop_on: str | Sequence[str] = (),
        **options: Any,
    ) -> None:
        if getattr(session, "readonly", False):
            raise StoreError("a tracker writes checkpoints: open the session with readonly=False")
        self.session = session
        self.run = check_run(run)
        self.fields = _check_fields(session, fields)
        stops = check_rules(stop_on, "stop_on")
        watched = check_rules(True if alerts is None and (on_alert or stops) else alerts, "alerts")
        watched = tuple(dict.fromkeys([*watched, *stops]))
        self._alerts = (
            Alerts(run, watched, alert_callbacks(on_alert), warn=bool(warn_alerts), stop_on=stops)
            if watched
            else None
        )
        self.fields = list(dict.fromkeys([*self.fields, *rule_fields(watched)]))
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise InvalidArgumentError(f"every must be an int >= 1, got {every!r}")
        if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
            raise InvalidArgumentError(f"nice must be an int from 0 to 19, got {nice!r}")
        check_policy(policy, max_pending, block_timeout)
        _check_choice("on_existing", on_existing, _ON_EXISTING)
        _check_choice("incomplete", incomplete, _INCOMPLETE)
        bad = [k for k in options if k in _RESERVED_OPTIONS]
        if bad:
            raise InvalidArgumentError(
                f"session.track() runs compute.apply itself; {bad} cannot be passed through"
            )
        self.every, self.policy, self.max_pending = every, policy, max_pending
        self.filter_spec, self.on_existing, self.non_blocking = (
            filter_spec,
            on_existing,
            non_blocking,
        )
        self._callbacks = _callbacks(on_step)
        self._lock = threading.Lock()
        self._counts: dict[str, Any] = {"failures": [], "skipped_steps": []}
        self._closed = True  # until the worker runs: close() has nothing to stop
        self._last: int | None = None
        _claim_run(self)  # one open tracker per run and store
        try:
            register_snapshot_extractor()
            resume = self._settle(incomplete)
            self._queue = SnapshotQueue(max_pending, policy, block_timeout)
            scope = {"param_names": param_names, "param_types": param_types}
            options.setdefault("workers", 1)
            analysis = Analysis(session, self.run, self.fields, scope, dict(options))
            self._worker = Worker(analysis, self._queue, self._record, resume, nice=nice)
            self._worker.start()
        except BaseException:
            _release_run(self)
            raise
        self._closed = False
        atexit.register(_close_at_exit, weakref.ref(self))

    def _settle(self, incomplete: str) -> list[tuple[int, str]]:
        """Mark the run as a tracker's; read its stored steps; drop or schedule its
        incomplete ones."""
        mark_run(self.session, self.run)
        found = run_steps(self.session, self.run)
        resume: list[tuple[int, str]] = []
        if incomplete == "drop":
            self._counts["dropped"] = len(drop_incomplete(self.session, self.run))
            found.incomplete.clear()
        else:
            resume = sorted(found.incomplete.items())
        self._counts["resumed"] = len(found.committed)
        #: steps stored or queued: a step is snapshotted once
        self._known: set[int] = found.stored
        self._last = found.last
        self._next = 0 if found.last is None else found.last + 1
        return resume

    # --- the training thread -------------------------------------------------------------
    def step(self, model: Any, step: int | None = None, *, lora: str = "update") -> str | None:
        """Offer the model's weights at training step ``step``; returns at once.

        Only multiples of ``every`` are snapshotted. A snapshot is a host copy taken here;
        storing and analyzing it happen in the worker.

        Args:
            model: the model being trained (PyTorch module, Equinox module, Flax params or
                NNX module, Keras model, ``{name: array}`` dict).
            step: the training step; default: one more than the previous call's (the first
                call of a resumed run continues after the largest stored step).
            lora: a PEFT / LoRA model's adapters as their scaled update ``<layer>.lora``
                (``"update"``, default) or merged into the base weights (``"merged"``), as
                ``models.add(lora=...)`` stores them.

        Returns:
            The checkpoint's model id when a snapshot was queued; None when the step is not
            a multiple of ``every``, is already stored, or the policy skipped it.

        Raises:
            StoreError: the tracker is closed.
            InvalidArgumentError: a step that is not an int >= 0.
            DuplicateModelError: the step is stored and ``on_existing="error"``.
            ExtractionError: the model has no weight leaves, or a bad ``lora`` value.
        """
        check_lora_options(lora, "peft")
        if self._closed:
            raise StoreError(f"the tracker of run {self.run!r} is closed; make a new one")
        self._check_writer()
        s = self._next if step is None else check_step(step)
        self._next = s + 1
        self._bump("calls")
        if s % self.every:
            return None
        if s in self._known:
            if self.on_existing == "error":
                raise DuplicateModelError(
                    f"step {s} of run {self.run!r} is already stored "
                    f"({checkpoint_id(self.run, s)}); the run resumes after step {self._last}"
                )
            self._bump("existing")
            return None
        if self.policy == "drop_new" and self._queue.full():
            self._skip(s)  # the policy would refuse it: do not copy the weights at all
            return None
        snap = None
        try:
            snap = take_snapshot(
                model, s, self.filter_spec, non_blocking=self.non_blocking, lora=lora
            )
            self._bump("snapshots")
            self._bump("snapshot_seconds", snap.seconds)
            skipped = self._queue.offer(snap)
            refused = any(item is snap for item in skipped)
            if not refused:
                self._accept(s)
        except BaseException:
            # interrupted (KeyboardInterrupt while "block" waits) or failed: the queue says
            # whether the snapshot was queued; a step that was not is not known, so
            # offering it again stores it
            if snap is not None and self._queue.holds(snap):
                self._accept(s)
            else:
                self._next = s
            raise
        for item in skipped:
            if item is not snap:
                self._known.discard(item.step)
            self._skip(item.step)
        return None if refused else checkpoint_id(self.run, s)

    def _accept(self, step: int) -> None:
        """Step ``step`` is queued: it is snapshotted once (only a queued step is known)."""
        self._known.add(step)
        self._last = step if self._last is None else max(self._last, step)

    def _check_writer(self) -> None:
        """Raise at once when this tracker's session can no longer write its store.

        A newer session of this process opened the same store for writing (a re-run
        ``session = Session(...)`` cell) and took the writer lock over: every later step
        would fail in the worker. The tracker closes (its waiting snapshots are skipped)
        and says how to resume.
        """
        if not self.session.store.superseded:
            return
        self.close(drain=False)
        raise StoreError(
            f"the tracker of run {self.run!r} can no longer write: a newer Session of this "
            f"process opened the store {self.session.store.path} for writing (a re-run "
            "`session = Session(...)` cell?) and took its writer lock over. Steps up to "
            f"{self._last} were offered, those still waiting are not stored. Resume with a "
            f"new tracker on the new session, `tracker = session.track({self.run!r}, ...)`: "
            "it finishes (or drops) the incomplete steps and continues after the last "
            "stored one"
        )

    def add_callback(self, on_step: StepCallback) -> None:
        """Call ``on_step(step, model_id)`` in the worker after each later committed step
        (e.g. a panel made after the tracker: ``tracker.add_callback(lambda *_: panel.refresh())``).

        Raises:
            InvalidArgumentError: ``on_step`` is not callable.
        """
        self._callbacks.extend(_callbacks(on_step))

    @property
    def next_step(self) -> int:
        """The step :meth:`step` uses when none is given (after a resume: last stored + 1)."""
        return self._next

    # --- bookkeeping ---------------------------------------------------------------------
    def _bump(self, key: str, by: float = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + by

    def _skip(self, step: int) -> None:
        with self._lock:
            self._counts["skipped"] = self._counts.get("skipped", 0) + 1
            self._counts["skipped_steps"].append(step)

    def _record(self, event: str, step: int, detail: Any) -> None:
        """The worker's report of one step (see :class:`~diffract.tracking.worker.Worker`)."""
        if event == "failed":
            with self._lock:
                self._counts["failures"].append((step, str(detail)))
            return
        if event == "failures":
            with self._lock:
                self._counts["failures"].append((step, f"{detail} slice failure(s) in the run"))
            return
        self._bump(event)  # "committed", or "finished" for a resumed checkpoint
        if self._alerts is not None:
            self._alert(step, str(detail))
        for cb in self._callbacks:
            try:
                cb(step, detail)
            except Exception as exc:  # a callback's error must not stop the worker
                with self._lock:
                    self._counts["failures"].append((step, f"on_step callback: {exc!r}"))

    def _alert(self, step: int, model_id: str) -> None:
        """Read the diagnosis of a committed step and raise its new crossings."""
        assert self._alerts is not None
        try:
            scope = self.session.filter(model_ids=literal_ids([model_id]))
            errors = self._alerts.emit(self._alerts.observe(scope, step, model_id))
        except Exception as exc:  # the alerts must not stop the worker
            errors = [f"alerts: {exc!r}"]
        if errors:
            with self._lock:
                self._counts["failures"].extend((step, e) for e in errors)

    @property
    def alerts(self) -> list[RuleEvent]:
        """The rule crossings raised so far, in order (empty without ``alerts=``)."""
        return list(self._alerts.events) if self._alerts is not None else []

    @property
    def should_stop(self) -> bool:
        """(Experimental) True once a rule of ``stop_on`` fired: the framework callbacks
        stop training at their next batch. Like WeightWatcher's early stopping, a heuristic
        from the weights alone: read :attr:`stop_reason` before trusting it."""
        return self._alerts is not None and self._alerts.stop_event is not None

    @property
    def stop_reason(self) -> RuleEvent | None:
        """(Experimental) the event that set :attr:`should_stop`, or None."""
        return self._alerts.stop_event if self._alerts is not None else None

    @property
    def status(self) -> TrackerStatus:
        """The tracker's counts now (:class:`TrackerStatus`)."""
        with self._lock:
            c = dict(self._counts)
            failures = tuple(c.pop("failures"))
            skipped_steps = tuple(c.pop("skipped_steps"))
        return TrackerStatus(
            run=self.run,
            calls=int(c.get("calls", 0)),
            snapshots=int(c.get("snapshots", 0)),
            committed=int(c.get("committed", 0)),
            pending=self._queue.pending,
            in_flight=self._queue.busy,
            skipped=int(c.get("skipped", 0)),
            skipped_steps=skipped_steps,
            existing=int(c.get("existing", 0)),
            failures=failures,
            resumed=int(c.get("resumed", 0)),
            finished=int(c.get("finished", 0)),
            dropped=int(c.get("dropped", 0)),
            last_step=self._last,
            peak_pending=self._queue.peak,
            snapshot_seconds=float(c.get("snapshot_seconds", 0.0)),
            analysis_seconds=self._worker.busy_seconds,
            closed=self._closed,
        )

    # --- reading the run -----------------------------------------------------------------
    def steps(self) -> list[int]:
        """The committed steps of the run in the store, in order (earlier sessions' too)."""
        return sorted(run_steps(self.session, self.run).committed)

    def model_ids(self) -> list[str]:
        """The model ids of the committed steps, in step order."""
        return committed_ids(self.session, self.run)

    @property
    def scope(self) -> Any:
        """The session scope of the run's checkpoints (for panels and exports)."""
        pattern = f"re:{re.escape(self.run)}-s\\d{{{STEP_DIGITS},}}"
        return self.session.filter(model_ids=[pattern])

    # --- the end -------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued snapshot is stored and analyzed.

        Args:
            timeout: the longest wait in seconds (None: no limit).

        Returns:
            True when nothing is left to do, False at the timeout.
        """
        if not self._worker.resumed.wait(timeout):
            return False
        return self._queue.join(timeout)

    def close(self, *, drain: bool = True, timeout: float | None = None) -> TrackerStatus:
        """Stop tracking: finish the queue (``drain``) or drop it, and stop the worker.

        Args:
            drain: analyze the waiting snapshots first; False skips them (counted) and
                cancels the analysis in progress (that step stays incomplete).
            timeout: the longest wait for the worker in seconds (None: no limit).

        Returns:
            The final :attr:`status`. Failures are also warned about (RuntimeWarning).
        """
        if not self._closed:
            self._closed = True
            _release_run(self)
            if not drain:
                for item in self._queue.clear():
                    self._known.discard(item.step)
                    self._skip(item.step)
                self._worker.cancel.set()
            self._queue.close()
            self._worker.stop.set()
            self._worker.join(timeout)
            failures = self.status.failures
            if failures:
                warnings.warn(
                    f"tracking run {self.run!r}: {len(failures)} failure(s), first at step "
                    f"{failures[0][0]}: {failures[0][1]}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self.status

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- adapters ------------------------------------------------------------------------
    def keras_callback(self) -> Any:
        """A Keras callback that calls :meth:`step` (see :func:`diffract.tracking.keras_callback`)."""
        from diffract.tracking.adapters import keras_callback

        return keras_callback(self)

    def lightning_callback(self) -> Any:
        """A Lightning-style callback (see :func:`diffract.tracking.lightning_callback`)."""
        from diffract.tracking.adapters import lightning_callback

        return lightning_callback(self)

    def hf_callback(self, *, merged: bool = False) -> Any:
        """A Hugging Face ``TrainerCallback`` (see :func:`diffract.tracking.hf_callback`)."""
        from diffract.tracking.adapters import hf_callback

        return hf_callback(self, merged=merged)

    def __repr__(self) -> str:
        return f"<diffract Tracker {self.status}>"


def _callbacks(on_step: Any) -> list[StepCallback]:
    if on_step is None:
        return []
    cbs = list(on_step) if isinstance(on_step, list | tuple) else [on_step]
    if not all(callable(cb) for cb in cbs):
        raise InvalidArgumentError(
            "on_step must be a callable on_step(step, model_id) or a list of them"
        )
    return cbs


def _close_at_exit(ref: Callable[[], Tracker | None]) -> None:
    tracker = ref()
    if tracker is not None and not tracker._closed:
        tracker.close()

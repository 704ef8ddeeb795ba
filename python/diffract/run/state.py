"""The state of one run, shared by its steps: settings, the report, progress and call counts;
and the markers a value carries when it could not be made."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from diffract._vocab.config import DEFAULT_MEMORY_BUDGET
from diffract.kernels.registry import KernelRegistry
from diffract.kernels.spec import Kernel
from diffract.run.report import Failure, ProgressCallback, ProgressEvent, RunReport
from diffract.store import Store

#: seconds between two commits of the values finished inside a chunk (benchmarks/
#: commit_cadence.py: a commit per kernel call costs the HDF5 store more than it gives)
COMMIT_EVERY = 2.0


class NotApplicable:
    """Marker: the value cannot exist on this slice (too few dimensions, or a kernel raised
    :class:`~diffract.kernels.spec.SliceNotApplicable`); ``reason`` says why ("" for none)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = "") -> None:
        self.reason = reason


NOT_APPLICABLE = NotApplicable()


class Failed:
    """Marker: the value could not be made; ``message`` says why."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class NonFiniteWeights(Failed):
    """Marker: the slice's weights hold NaN or Inf. Its values are stored as NaN, as the
    published Diffract does (its kernels compute NaN on them), so the slice keeps its row
    in exports; the run notes it and warns, it is not a failure."""

    __slots__ = ()


def short_error(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (the type alone when there is no message)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def normalise(v: Any) -> Any:
    """A NumPy scalar as the Python scalar the store keeps."""
    if isinstance(v, np.generic):
        return v.item()
    return v


@dataclass
class RunState:
    """Everything the steps of one ``apply`` share.

    Attributes:
        store: the store read and written.
        registry: the kernels.
        options: options for every kernel that has them.
        kernel_options: per-kernel options (kernel name -> options), applied last.
        memory_budget: bytes the chunks of this process may use together.
        workers: threads (or processes / Dask slots) for the parameter level.
        progress: called with each :class:`ProgressEvent`, or None.
        cancel: set to stop the run (finished work is kept).
        calls: kernel name -> number of slice calls, updated in place (the session's
            running total, shared by its runs).
        run_calls: the same counts for this run only (``RunReport.kernel_calls``).
        report: what the run did so far.
        t0: ``time.perf_counter()`` at the start.
        commit_every: seconds between two commits of finished values inside a chunk.
        averaged: param field -> the requested model-level fields made from it.
    """

    store: Store
    registry: KernelRegistry
    options: dict[str, Any] = field(default_factory=dict)
    kernel_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    workers: int = 1
    progress: ProgressCallback | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    calls: dict[str, int] = field(default_factory=dict)
    run_calls: dict[str, int] = field(default_factory=dict)
    report: RunReport = field(default_factory=lambda: RunReport(requested=()))
    t0: float = field(default_factory=time.perf_counter)
    #: seconds between two commits inside a chunk (0: after every kernel call); see
    #: benchmarks/commit_cadence.py
    commit_every: float = field(default_factory=lambda: COMMIT_EVERY)
    #: per-parameter field -> the requested model-level fields computed from it: a slice
    #: where it failed is reported as failed, though not asked for (the model value
    #: averages over the other slices)
    averaged: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def opts(self, k: Kernel) -> dict[str, Any]:
        """The options kernel ``k`` runs with: defaults, then ``options``, then its own."""
        opts = k.resolve_options(self.options)
        opts.update(self.kernel_options.get(k.name, {}))
        return opts

    def count(self, calls: Mapping[str, int]) -> None:
        """Add slice-call counts (kernel name -> calls) to the session's and the run's."""
        for name, n in calls.items():
            self.calls[name] = self.calls.get(name, 0) + n
            self.run_calls[name] = self.run_calls.get(name, 0) + n

    @property
    def cancelled(self) -> bool:
        """Whether the run was asked to stop."""
        return self.cancel.is_set()

    def record_failure(self, k: Kernel, fields: list[str], where: Failure) -> None:
        """A failure for each output of ``k`` that was asked for."""
        for o in k.outputs:
            if o in fields:
                self.report.failures.append(replace(where, field=o))

    def emit(
        self,
        stage: str,
        chunks_done: int,
        chunks_total: int,
        done: int,
        total: int,
        fld: str | None = None,
        param: str | None = None,
        **extra: Any,
    ) -> None:
        """Send one :class:`ProgressEvent` (no-op without a progress callback); ``extra``:
        its other fields (``eta``, ``steps_done``, ``kernel``, ...). Without an ``eta`` the
        rate of the slices done so far gives one."""
        if self.progress is None:
            return
        elapsed = time.perf_counter() - self.t0
        if "eta" not in extra:
            extra["eta"] = (elapsed / done) * (total - done) if done else None
        self.progress(
            ProgressEvent(
                stage,
                chunks_done,
                chunks_total,
                done,
                total,
                fld,
                param,
                elapsed,
                failures=len(self.report.failures),
                cancelled=self.cancel.is_set(),
                **extra,
            )
        )

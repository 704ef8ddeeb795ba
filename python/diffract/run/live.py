"""Progress and commits inside a chunk: with the default memory budget a run is often one
chunk, so its kernel calls are what progress follows and what live panels wait on.

:class:`RunProgress` counts the parameter level's kernel steps (one per planned kernel and
slice) and estimates the time left (:class:`~diffract.run.eta.EtaEstimator`);
:class:`ChunkProgress` is the :class:`~diffract.run.chunks.KernelHooks` of one chunk run in
this process: it sends a "kernel" event as each call starts, and commits the values
finished so far every ``state.commit_every`` seconds (a "commit" event), so a read-only
reader sees them while the chunk goes on. What a commit wrote stays written whatever
happens next (a cancel, a failure): the chunk's last commit only adds the rest.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from diffract._vocab.slices import SliceInfo
from diffract.kernels.spec import Kernel
from diffract.run.eta import EtaEstimator
from diffract.run.plan import SlicePlan
from diffract.run.state import RunState

__all__ = ["ChunkProgress", "RunProgress", "work_of"]

Plans = dict[str, SlicePlan]
#: the partial batch of a chunk: (values made so far, keys already handled) -> values stored
CommitPart = Callable[[set[tuple[str, str]]], int]


def work_of(s: SliceInfo) -> float:
    """Units of work of one kernel call on slice ``s`` (its bytes; at least 1)."""
    return float(max(s.nbytes, 1))


class RunProgress:
    """The kernel steps of a run's parameter level, planned and done, and its ETA.

    Args:
        state: the run's state (its clock and registry).
        chunks: the run's chunks.
        plans: uid -> the slice's plan.
    """

    def __init__(
        self,
        state: RunState,
        chunks: list[list[SliceInfo]],
        plans: Plans,
        explicit: set[str] | None = None,
    ) -> None:
        planned: dict[str, float] = {}
        names: dict[str, Kernel] = {}
        self.steps_total = 0
        #: the requested fields (None: every output counts as asked for)
        self.explicit = explicit
        #: requested values planned (a requested output of a planned kernel on a slice)
        self.values_total = 0
        self.values_done = 0
        for chunk in chunks:
            for s in chunk:
                for k in plans[s.uid].kernels:
                    planned[k.name] = planned.get(k.name, 0.0) + work_of(s)
                    names.setdefault(k.name, k)
                    self.steps_total += 1
                    self.values_total += self.asked(k)
        everything = [o for k in names.values() for o in k.outputs]
        order = [k.name for k in state.registry.closure(everything) if k.name in names]
        #: kernel name -> its place (1-based) in the run's dependency order
        self.rank = {name: i + 1 for i, name in enumerate(order)}
        self.steps_done = 0
        self.lock = threading.Lock()
        self.eta = EtaEstimator(planned, state.t0)

    def asked(self, k: Kernel) -> int:
        """How many of kernel ``k``'s outputs were asked for (per slice)."""
        if self.explicit is None:
            return len(k.outputs)
        return sum(1 for o in k.outputs if o in self.explicit)

    def step(self, k: Kernel, slices: list[SliceInfo], seconds: float, called: bool) -> None:
        """Kernel ``k`` is done with ``slices`` (``called``: in a call of ``seconds``)."""
        units = sum(work_of(s) for s in slices)
        with self.lock:
            self.steps_done += len(slices)
            self.values_done += len(slices) * self.asked(k)
            if called:
                self.eta.add(k.name, units, seconds)
            else:
                self.eta.skip(k.name, units)

    def counts(self) -> dict[str, Any]:
        """The step and value counts, and the ETA (and its range) once there is one, as
        event fields."""
        out: dict[str, Any] = {
            "steps_done": self.steps_done,
            "steps_total": self.steps_total,
            "values_done": self.values_done,
            "values_total": self.values_total,
        }
        eta, low, high = self.estimate_range()
        if eta is not None:
            out.update(eta=eta, eta_low=low, eta_high=high)
        return out

    def estimate(self) -> float | None:
        """The smoothed seconds left now (None before enough calls)."""
        with self.lock:
            return self.eta.estimate(time.perf_counter())

    def estimate_range(self) -> tuple[float | None, float | None, float | None]:
        """The smoothed seconds left and its range ``(eta, low, high)``; None where not known."""
        with self.lock:
            eta = self.eta.estimate(time.perf_counter())
            b = self.eta.bounds(eta)
        return (eta, None, None) if b is None else (eta, b[0], b[1])


class ChunkProgress:
    """The kernel hooks of one chunk run in this process: events and commits as it goes.

    Args:
        state: the run's state (``progress``, ``commit_every``).
        live: the run's :class:`RunProgress`.
        chunk: the chunk's slices.
        at: chunks done, chunks in all, slices done, slices in all (before this chunk).
        plans: uid -> the slice's plan.
        commit_part: commits the values finished so far that are not in the given set of
            keys (adding them to it); returns how many values it stored.
    """

    def __init__(
        self,
        state: RunState,
        live: RunProgress,
        chunk: list[SliceInfo],
        at: tuple[int, int, int, int],
        plans: Plans,
        commit_part: CommitPart,
    ) -> None:
        self.state, self.live, self.at = state, live, at
        self.commit_part = commit_part
        self.kept: set[tuple[str, str]] = set()
        self.left = {s.uid: len(plans[s.uid].kernels) for s in chunk}
        self.kernel_total = Counter(k.name for s in chunk for k in plans[s.uid].kernels)
        self.kernel_done: Counter[str] = Counter()
        self.complete = 0  # slices of this chunk with every planned kernel done
        self.stored = 0  # of those, the ones whose values are all committed
        self._lock = threading.Lock()
        self._commit = threading.Lock()
        self._last_commit = time.perf_counter()

    def started(self, k: Kernel, s: SliceInfo) -> None:
        """Kernel ``k`` starts a call on slice ``s``: a "kernel" event."""
        self._emit("kernel", k, s)

    def finished(self, k: Kernel, slices: list[SliceInfo], seconds: float, called: bool) -> None:
        """Kernel ``k`` is done with ``slices``: count them, commit when it is time."""
        self.live.step(k, slices, seconds, called)
        with self._lock:
            self.kernel_done[k.name] += len(slices)
            for s in slices:
                self.left[s.uid] -= 1
                self.complete += self.left[s.uid] == 0
        if called:
            self._emit("kernel", k, slices[-1])
        if time.perf_counter() - self._last_commit >= self.state.commit_every:
            self.commit()

    def commit(self) -> None:
        """Commit the values finished so far (skipped while another thread commits)."""
        if not self._commit.acquire(blocking=False):
            return
        try:
            complete = self.complete  # their values are in place: this commit stores them
            stored = self.commit_part(self.kept)
            self._last_commit = time.perf_counter()
            self.stored = complete
            if stored:
                self._emit("commit", None, None)
        finally:
            self._commit.release()

    def _emit(self, stage: str, k: Kernel | None, s: SliceInfo | None) -> None:
        if self.state.progress is None:
            return
        ci, nchunks, done, total = self.at
        live = self.live
        eta, low, high = live.estimate_range()
        extra: dict[str, Any] = {
            "steps_done": live.steps_done,
            "steps_total": live.steps_total,
            "values_done": live.values_done,
            "values_total": live.values_total,
            "slices_stored": done + self.stored,
            "eta": eta,
            "eta_low": low,
            "eta_high": high,
        }
        if k is not None:
            extra.update(
                kernel=k.name,
                kernel_rank=live.rank.get(k.name, 0),
                kernels_total=len(live.rank),
                kernel_done=self.kernel_done[k.name],
                kernel_total=self.kernel_total[k.name],
            )
        self.state.emit(
            stage,
            ci,
            nchunks,
            done + self.complete,
            total,
            k.outputs[0] if k is not None else None,
            f"{s.model_id}:{s.name}" if s is not None else None,
            **extra,
        )

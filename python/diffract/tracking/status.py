"""``tracker.status``: what a tracker did so far, as a frozen record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrackerStatus:
    """A tracker's counts at one moment.

    Attributes:
        run: the run's name.
        calls: ``tracker.step`` calls.
        snapshots: snapshots taken (host copies made).
        committed: steps this tracker committed (stored and analyzed).
        pending: snapshots waiting for the worker.
        in_flight: whether the worker is storing or analyzing one now.
        skipped: snapshots skipped by the queue policy (training outpaced analysis).
        skipped_steps: their steps, in the order they were skipped.
        existing: steps not snapshotted because the store already had them (resume).
        failures: ``(step, error)`` of the steps whose store or analysis failed (the step
            stays incomplete), and of slice failures inside a committed step's run.
        resumed: committed steps of the run found in the store when the tracker started.
        finished: incomplete steps found at start whose analysis the worker finished.
        dropped: incomplete steps found at start and removed (``incomplete="drop"``).
        last_step: the largest step stored or queued, None before the first.
        peak_pending: the most snapshots that waited at once.
        snapshot_seconds: time the training thread spent copying weights.
        analysis_seconds: time the worker spent storing and analyzing.
        closed: whether ``close()`` was called.
    """

    run: str
    calls: int = 0
    snapshots: int = 0
    committed: int = 0
    pending: int = 0
    in_flight: bool = False
    skipped: int = 0
    skipped_steps: tuple[int, ...] = ()
    existing: int = 0
    failures: tuple[tuple[int, str], ...] = ()
    resumed: int = 0
    finished: int = 0
    dropped: int = 0
    last_step: int | None = None
    peak_pending: int = 0
    snapshot_seconds: float = 0.0
    analysis_seconds: float = 0.0
    closed: bool = False

    def __str__(self) -> str:
        busy = " (+1 in flight)" if self.in_flight else ""
        return (
            f"run {self.run!r}: {self.committed} steps committed, {self.pending} pending{busy}, "
            f"{self.skipped} skipped, {self.existing} already stored, "
            f"{len(self.failures)} failures; last step {self.last_step}"
        )

"""The time left of a run, estimated from the kernel calls made so far.

The work of a run is known before it starts: one call per planned kernel and slice, of a
size (the slice's bytes). :class:`EtaEstimator` learns each kernel's cost per byte from
its calls (a kernel not seen yet costs the average of those seen), converts the busy time
left to wall time with the ratio observed so far (threads side by side, reading, commits),
and smooths the result: each new estimate moves the previous one, counted down, part of
the way. It says nothing before ``min_samples`` calls.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ETA_MIN_SAMPLES", "ETA_SMOOTHING", "EtaEstimator"]

#: weight of the newest raw estimate in the smoothed one
ETA_SMOOTHING = 0.3
#: kernel calls measured before an ETA is given
ETA_MIN_SAMPLES = 3


class EtaEstimator:
    """Seconds left of a run whose work is planned as units (bytes) per kernel.

    Args:
        planned: kernel name -> units of work planned (the sum of its slices' sizes).
        start: the clock reading (``time.perf_counter()``) when the run started.
        min_samples: calls measured before :meth:`estimate` gives a number.
        smoothing: weight of the newest raw estimate (0 < smoothing <= 1).
    """

    def __init__(
        self,
        planned: Mapping[str, float],
        start: float,
        *,
        min_samples: int = ETA_MIN_SAMPLES,
        smoothing: float = ETA_SMOOTHING,
    ) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        self.left = {k: float(v) for k, v in planned.items()}
        self.start = start
        self.min_samples = min_samples
        self.smoothing = smoothing
        self.busy: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.samples = 0
        self._eta: float | None = None
        self._at = start

    def add(self, kernel: str, units: float, seconds: float) -> None:
        """Record a call of ``kernel`` on ``units`` of work that took ``seconds``."""
        self.left[kernel] = max(self.left.get(kernel, 0.0) - units, 0.0)
        self.busy[kernel] = self.busy.get(kernel, 0.0) + max(seconds, 0.0)
        self.done[kernel] = self.done.get(kernel, 0.0) + units
        self.samples += 1

    def skip(self, kernel: str, units: float) -> None:
        """Planned work that needs no call (a slice not applicable, an input that failed)."""
        self.left[kernel] = max(self.left.get(kernel, 0.0) - units, 0.0)

    def raw(self, now: float) -> float | None:
        """The unsmoothed estimate at clock reading ``now`` (None before enough samples)."""
        busy = sum(self.busy.values())
        units = sum(self.done.values())
        if self.samples < self.min_samples or busy <= 0 or units <= 0:
            return None
        mean_rate = busy / units
        busy_left = sum(
            left * (self.busy[k] / self.done[k] if self.done.get(k) else mean_rate)
            for k, left in self.left.items()
        )
        wall_per_busy = max(now - self.start, busy * 1e-3) / busy
        return busy_left * wall_per_busy

    def estimate(self, now: float) -> float | None:
        """The smoothed seconds left at clock reading ``now`` (None before enough samples).

        Args:
            now: a ``time.perf_counter()`` reading, not before the previous one.
        """
        raw = self.raw(now)
        if raw is None:
            return None
        if self._eta is None or raw == 0:  # the first number, or nothing left to do
            eta = raw
        else:
            counted_down = max(self._eta - (now - self._at), 0.0)
            eta = self.smoothing * raw + (1 - self.smoothing) * counted_down
        self._eta, self._at = eta, now
        return eta
